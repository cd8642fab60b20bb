package redistest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// readyTimeout bounds every wait for a server to answer PING.
	readyTimeout = 10 * time.Second
	// pollInterval is the pause between readiness probes.
	pollInterval = 15 * time.Millisecond
	// startAttempts is how often a start is retried when its port is taken.
	startAttempts = 5
	// exitTimeout bounds the wait for a killed process to be reaped.
	exitTimeout = 10 * time.Second
	// logTailLines is how much of each server log a failed test prints.
	logTailLines = 30
	// logMarker starts the line written before every launch into the log.
	logMarker = "=== redistest launch "
)

// errAddrInUse marks a launch that died because its port was taken.
var errAddrInUse = errors.New("address already in use")

// mode selects the flags a server is launched with.
type mode int

const (
	modePlain mode = iota
	modeCluster
	modeSentinel
)

// String names the kind of server in log lines.
func (m mode) String() string {
	switch m {
	case modeCluster:
		return "redis cluster node"
	case modeSentinel:
		return "redis sentinel"
	default:
		return "redis"
	}
}

// Server is one redis-server process on 127.0.0.1. Its methods are safe for
// concurrent use.
type Server struct {
	bin   string
	dir   string
	log   string
	mode  mode
	conf  string // sentinel config file; empty for other modes
	extra []string

	mu      sync.Mutex
	port    int
	busPort int // cluster bus port; zero unless mode is modeCluster
	tlsPort int // TLS port; zero unless started by StartTLS
	proc    *process
}

// process is one launch of a Server; done closes once Wait has returned.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // Wait's result, valid once done is closed
}

// Required reports whether a missing redis-server must fail the test instead
// of skipping it: true when SOLO_REQUIRE_REDIS=1 or CI=true.
func Required() bool {
	return os.Getenv("SOLO_REQUIRE_REDIS") == "1" || os.Getenv("CI") == "true"
}

// Start launches redis-server on 127.0.0.1 at a free port, without
// persistence, in a directory of its own under t.TempDir(), and returns once
// the server answers PING (bounded by 10s). args are passed through to
// redis-server after the defaults, so they may override them, for example
// Start(t, "--maxmemory", "1mb"). The server is killed in t.Cleanup; when the
// test has failed by then, the tail of its log is printed with t.Log.
//
// A missing redis-server skips the test, or fails it when Required.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	return start(t, modePlain, args, nil)
}

// Addr returns the server's address, "127.0.0.1:port".
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port()))
}

// Port returns the server's TCP port. It stays the same across Restart.
func (s *Server) Port() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.port
}

// Pid returns the process ID of the running server, or 0 after Kill.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Client returns a go-redis client for the server, closed in t.Cleanup. opts
// adjust the options before the client is built.
func (s *Server) Client(t testing.TB, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: s.Addr()}
	for _, opt := range opts {
		opt(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// ACLUser and ACLPassword are the credentials of the user SetACLUser makes.
const (
	ACLUser     = "solo"
	ACLPassword = "pw"
)

// SetACLUser creates (or resets) the ACL user ACLUser with ACLPassword and
// exactly rules.
func (s *Server) SetACLUser(t testing.TB, rules ...string) {
	t.Helper()
	args := []any{"ACL", "SETUSER", ACLUser, "reset", "on", ">" + ACLPassword}
	for _, r := range rules {
		args = append(args, r)
	}
	if err := s.Client(t).Do(context.Background(), args...).Err(); err != nil {
		t.Fatal(err)
	}
}

// ACLClient makes the ACL user with rules (SetACLUser) and returns a
// client logged in as it, with ContextTimeoutEnabled, closed at the end
// of the test.
func (s *Server) ACLClient(t testing.TB, rules ...string) *redis.Client {
	t.Helper()
	s.SetACLUser(t, rules...)
	return s.Client(t, func(o *redis.Options) {
		o.Username, o.Password, o.ContextTimeoutEnabled = ACLUser, ACLPassword, true
	})
}

// Kill sends SIGKILL to the server's process group and waits until the
// process has exited. Killing a server that is not running does nothing.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.killLocked(); err != nil {
		t.Fatal(err)
	}
}

// Restart kills the server and starts it again on the same port. Data is
// lost: any RDB file left by replication is removed first, and persistence
// stays off. It returns once the server answers PING.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.killLocked(); err != nil {
		t.Fatal(err)
	}
	// A replica stores the RDB it received as dump.rdb, and redis-server
	// loads that at start even with saving disabled.
	rdbs, _ := filepath.Glob(filepath.Join(s.dir, "*.rdb"))
	for _, f := range rdbs {
		if err := os.Remove(f); err != nil {
			t.Fatalf("restart redis on port %d: %v", s.port, err)
		}
	}
	var err error
	for attempt := 1; ; attempt++ {
		err = s.launchLocked()
		if !errors.Is(err, errAddrInUse) || attempt == startAttempts {
			break
		}
		// The port must stay the same, so wait for whoever took it in the
		// meantime to let go.
		time.Sleep(time.Duration(attempt) * 100 * time.Millisecond)
	}
	if err != nil {
		// The cleanup prints the log tail.
		t.Fatalf("restart: %v", err)
	}
}

// Stop freezes the server with SIGSTOP: connections stay open but nothing is
// answered until Cont.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if err := s.signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
}

// Cont resumes a server frozen by Stop.
func (s *Server) Cont(t testing.TB) {
	t.Helper()
	if err := s.signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

// start creates a Server of mode m and launches it, retrying with new ports
// when a port turns out to be taken. prepare, if not nil, runs before every
// attempt, after the ports are chosen.
func start(t testing.TB, m mode, extra []string, prepare func(*Server) error) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if Required() {
			t.Fatalf("redis-server not found (SOLO_REQUIRE_REDIS=1 or CI=true): %v", err)
		}
		t.Skipf("redis-server not found: %v", err)
	}
	dir := t.TempDir()
	s := &Server{
		bin:   bin,
		dir:   dir,
		log:   filepath.Join(dir, "redis.log"),
		mode:  m,
		extra: append([]string(nil), extra...),
	}
	// Registered after TempDir, so it runs before the directory is removed.
	t.Cleanup(func() {
		s.mu.Lock()
		err := s.killLocked()
		s.mu.Unlock()
		if err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("%s on port %d, last log lines:\n%s", m, s.Port(), s.tail())
		}
	})

	s.mu.Lock()
	defer s.mu.Unlock()
	for attempt := range startAttempts {
		if s.port, err = freePort(); err != nil {
			t.Fatal(err)
		}
		if m == modeCluster {
			if s.busPort, err = freePort(); err != nil {
				t.Fatal(err)
			}
			// A bus bind failure can leave a nodes.conf naming old ports.
			_ = os.Remove(filepath.Join(dir, "nodes.conf"))
		}
		if prepare != nil {
			if err := prepare(s); err != nil {
				t.Fatal(err)
			}
		}
		if err = s.launchLocked(); err == nil {
			return s
		}
		if !errors.Is(err, errAddrInUse) || attempt == startAttempts-1 {
			break
		}
	}
	// The cleanup prints the log tail.
	t.Fatalf("%v", err)
	return nil
}

// argv returns the command-line arguments for the current ports.
func (s *Server) argv() []string {
	var a []string
	if s.mode == modeSentinel {
		a = append(a, s.conf, "--sentinel")
	}
	a = append(a,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--daemonize", "no",
	)
	if s.mode != modeSentinel {
		a = append(a, "--save", "", "--appendonly", "no")
	}
	if s.mode == modeCluster {
		a = append(a,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(s.dir, "nodes.conf"),
			"--cluster-port", strconv.Itoa(s.busPort),
		)
	}
	if s.tlsPort != 0 {
		a = append(a, "--tls-port", strconv.Itoa(s.tlsPort))
	}
	return append(a, s.extra...)
}

// launchLocked starts the process and waits until it answers PING. On error
// the process is gone; the error wraps errAddrInUse when a port was taken.
// The caller holds s.mu.
func (s *Server) launchLocked() error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	args := s.argv()
	f, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("start redis on %s: %w", addr, err)
	}
	fmt.Fprintf(f, "%s%s: %s %q\n", logMarker, time.Now().Format(time.RFC3339Nano), s.bin, args)
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	// An *os.File is handed to the child as is, so no copying goroutines.
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	_ = f.Close()
	if err != nil {
		return fmt.Errorf("start redis on %s: %w", addr, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	s.proc = p

	if err := waitReady(addr, p); err != nil {
		kerr := s.killLocked()
		if strings.Contains(s.lastRun(), "Address already in use") {
			err = fmt.Errorf("%w: %w", errAddrInUse, err)
		}
		return errors.Join(err, kerr)
	}
	return nil
}

// killLocked kills the process group and reaps the process. The caller holds
// s.mu.
func (s *Server) killLocked() error {
	p := s.proc
	if p == nil {
		return nil
	}
	s.proc = nil
	select {
	case <-p.done:
		// Already reaped; the pid may belong to someone else now.
		return nil
	default:
	}
	pid := p.cmd.Process.Pid
	// The group is the server's own (Setpgid), and it may include a child
	// forked for replication.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	timer := time.NewTimer(exitTimeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
		return fmt.Errorf("kill redis on port %d (pid %d): still running after %v", s.port, pid, exitTimeout)
	}
}

// signal sends sig to the running server's process group.
func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return fmt.Errorf("signal %v to redis on port %d: not running", sig, s.port)
	}
	if err := syscall.Kill(-s.proc.cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("signal %v to redis on port %d: %w", sig, s.port, err)
	}
	return nil
}

// lastRun returns the log written since the latest launch.
func (s *Server) lastRun() string {
	b, err := os.ReadFile(s.log)
	if err != nil {
		return ""
	}
	if i := bytes.LastIndex(b, []byte(logMarker)); i >= 0 {
		b = b[i:]
	}
	return string(b)
}

// tail returns the last logTailLines lines of the server log.
func (s *Server) tail() string {
	b, err := os.ReadFile(s.log)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return strings.Join(lines, "\n")
}

// waitReady polls addr with PING until it answers, p exits, or readyTimeout
// passes.
func waitReady(addr string, p *process) error {
	deadline := time.Now().Add(readyTimeout)
	timer := time.NewTimer(0)
	defer timer.Stop()
	var err error
	for {
		select {
		case <-p.done:
			return fmt.Errorf("redis on %s exited before ready: %v", addr, p.err)
		case <-timer.C:
		}
		if err = ping(addr); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis on %s not ready after %v: %w", addr, readyTimeout, err)
		}
		timer.Reset(pollInterval)
	}
}

// ping sends one inline PING on a fresh connection and expects +PONG.
func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(time.Second)); err != nil {
		return err
	}
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("ping %s: unexpected reply %q", addr, strings.TrimSpace(line))
	}
	return nil
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick free port: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		return 0, fmt.Errorf("pick free port: %w", err)
	}
	return port, nil
}

// infoField returns the value of key in the output of INFO or CLUSTER INFO.
func infoField(info, key string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+":"); ok {
			return v
		}
	}
	return ""
}
