// Package pgtest starts a throwaway PostgreSQL server for tests.
//
// Start runs initdb and postgres from the local installation (found through
// initdb on PATH, pg_config --bindir, or /usr/lib/postgresql/*/bin) in a
// fresh data directory, listening only on 127.0.0.1 at a free port with
// trust authentication and fsync off. The server is stopped and its files
// removed in t.Cleanup; it is killed with the test binary if that dies first.
// When no installation is found the test is skipped, or fails when the
// environment sets SOLO_REQUIRE_POSTGRES=1.
//
// PostgreSQL refuses to run as root. When the test runs as root, the server
// runs as the postgres system user (or nobody when there is none).
package pgtest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	// Registers the "pgx" database/sql driver.
	_ "github.com/jackc/pgx/v5/stdlib"
)

// RequireEnv is the environment variable that turns a missing PostgreSQL
// installation from a skip into a failure when set to 1.
const RequireEnv = "SOLO_REQUIRE_POSTGRES"

const (
	// readyTimeout bounds the wait for the server to accept connections.
	readyTimeout = 20 * time.Second
	// stopTimeout bounds the wait for a graceful stop before SIGKILL.
	stopTimeout = 10 * time.Second
	// attempts is how many ports Start tries: the free port it picks may be
	// taken by someone else before the server binds it.
	attempts = 3
)

// Server is a running PostgreSQL server owned by one test.
type Server struct {
	dsn     string
	port    int
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd has been waited for
	waitErr error         // cmd.Wait's result, valid after exited is closed
}

// Start starts a PostgreSQL server for t and stops it in t.Cleanup. It
// returns once the server accepts connections. It skips t (or fails it, see
// RequireEnv) when PostgreSQL is not installed, and fails t when the server
// does not start.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := binDir()
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("pgtest: %v (%s=1)", err, RequireEnv)
		}
		t.Skipf("pgtest: %v", err)
	}
	cred, err := credential()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	dir, err := makeDir(cred)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })

	data := filepath.Join(dir, "data")
	initLog := filepath.Join(dir, "initdb.log")
	if err := run(dir, cred, initLog, filepath.Join(bin, "initdb"),
		"-D", data, "--auth=trust", "-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		t.Fatalf("pgtest: initdb: %v\n%s", err, tail(initLog, 4096))
	}

	var s *Server
	for i := range attempts {
		s, err = start(bin, dir, data, cred, i)
		if err == nil {
			break
		}
		t.Logf("pgtest: attempt %d: %v", i+1, err)
	}
	if err != nil {
		t.Fatalf("pgtest: postgres did not start: %v", err)
	}
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("pgtest: stop: %v", err)
		}
		if t.Failed() {
			t.Logf("pgtest: tail of %s:\n%s", s.logPath, tail(s.logPath, 8192))
		}
	})
	return s
}

// DSN returns the server's connection string: user postgres, database
// postgres, no password, no TLS.
func (s *Server) DSN() string { return s.dsn }

// Port returns the TCP port the server listens on at 127.0.0.1.
func (s *Server) Port() int { return s.port }

// DB opens a database/sql handle (pgx stdlib driver) to the server and
// closes it in t.Cleanup.
func (s *Server) DB(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", s.dsn)
	if err != nil {
		t.Fatalf("pgtest: open: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// start launches postgres on a free port and waits until it accepts
// connections; on failure it leaves no process behind.
func start(bin, dir, data string, cred *syscall.Credential, attempt int) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, fmt.Sprintf("postgres-%d.log", attempt))
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer func() { _ = logf.Close() }() // the child has its own copy
	cmd := exec.Command(filepath.Join(bin, "postgres"),
		"-D", data,
		"-p", strconv.Itoa(port),
		"-k", dir,
		"-F", // fsync off
		"-c", "listen_addresses=127.0.0.1",
		"-c", "full_page_writes=off",
		"-c", "synchronous_commit=off",
		"-c", "max_connections=100",
	)
	cmd.Dir = dir
	cmd.Env = []string{"LC_ALL=C", "PATH=/usr/bin:/bin"}
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	s := &Server{
		dsn:     fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port),
		port:    port,
		logPath: logPath,
		cmd:     cmd,
		exited:  make(chan struct{}),
	}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.exited)
	}()
	if err := s.waitReady(); err != nil {
		_ = s.stop()
		return nil, fmt.Errorf("%w\n%s", err, tail(logPath, 4096))
	}
	return s, nil
}

// waitReady polls with real connections until the server answers a query,
// the process exits, or readyTimeout passes.
func (s *Server) waitReady() error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	db, err := sql.Open("pgx", s.dsn+"&connect_timeout=2")
	if err != nil {
		return err
	}
	defer func() { _ = db.Close() }()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		err = db.PingContext(pctx)
		pcancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("postgres exited: %v", s.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("not ready after %v: %w", readyTimeout, err)
		case <-tick.C:
		}
	}
}

// stop asks for a fast shutdown (SIGINT: roll back, disconnect, exit) and
// waits, escalating to SIGKILL after stopTimeout.
func (s *Server) stop() error {
	select {
	case <-s.exited:
		return nil
	default:
	}
	if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-s.exited:
		return nil
	case <-timer.C:
		_ = s.cmd.Process.Kill()
		<-s.exited
		return fmt.Errorf("postgres ignored SIGINT for %v; killed", stopTimeout)
	}
}

// binDir finds the directory holding initdb and postgres.
func binDir() (string, error) {
	ok := func(dir string) bool {
		for _, name := range []string{"initdb", "postgres"} {
			if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.IsDir() {
				return false
			}
		}
		return true
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil && ok(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if dir := strings.TrimSpace(string(out)); ok(dir) {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	// Newest major version first.
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, dir := range dirs {
		if ok(dir) {
			return dir, nil
		}
	}
	return "", errors.New("initdb not found (PATH, pg_config --bindir, /usr/lib/postgresql/*/bin)")
}

// version extracts N from /usr/lib/postgresql/N/bin.
func version(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

// credential returns the user to run PostgreSQL as: nil (ourselves) unless
// we are root, then postgres, else nobody.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	var errs []error
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err := errors.Join(err1, err2); err != nil {
			errs = append(errs, fmt.Errorf("user %s: %w", name, err))
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
	}
	return nil, fmt.Errorf("running as root and no user to run postgres as: %w", errors.Join(errs...))
}

// makeDir creates a private directory owned by cred's user, under a parent
// that user can traverse: os.TempDir() when every ancestor is searchable by
// others, else /tmp.
func makeDir(cred *syscall.Credential) (string, error) {
	parent := os.TempDir()
	if cred != nil && !traversable(parent) {
		parent = "/tmp"
	}
	dir, err := os.MkdirTemp(parent, "pgtest-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return "", errors.Join(err, os.RemoveAll(dir))
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return "", errors.Join(err, os.RemoveAll(dir))
		}
	}
	return dir, nil
}

// traversable reports whether dir and all its ancestors have the
// search bit set for others.
func traversable(dir string) bool {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	for {
		fi, err := os.Stat(dir)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return true
		}
		dir = parent
	}
}

// run runs a command as cred in dir, appending its output to logPath.
func run(dir string, cred *syscall.Credential, logPath, name string, args ...string) error {
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer func() { _ = logf.Close() }()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = []string{"LC_ALL=C", "PATH=/usr/bin:/bin"}
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	return cmd.Run()
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// tail returns up to the last n bytes of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	if len(b) > n {
		b = b[len(b)-n:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}
