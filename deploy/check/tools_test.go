package check

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// repoRoot is the repository's top directory, two levels up.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cmd", "solo")); err != nil {
		t.Fatalf("repository root not found at %s: %v", dir, err)
	}
	return dir
}

// required reports whether a missing tool must fail a test instead of
// skipping it.
func required() bool {
	return os.Getenv("CI") == "true" || os.Getenv("SOLO_REQUIRE_TOOLS") == "1"
}

// tool returns the path of the executable name; it skips the test when the
// tool is missing, or fails it when required.
func tool(t *testing.T, name, debianPackage string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if required() {
			t.Fatalf("%s not found (CI=true or SOLO_REQUIRE_TOOLS=1): apt-get install %s", name, debianPackage)
		}
		t.Skipf("%s not found (apt-get install %s)", name, debianPackage)
	}
	return path
}

var (
	buildOnce sync.Once
	soloBin   string
	buildErr  error
)

// buildSolo builds cmd/solo once per test binary and returns its path.
func buildSolo(t *testing.T) string {
	t.Helper()
	root := repoRoot(t)
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "solo-check-")
		if err != nil {
			buildErr = err
			return
		}
		soloBin = filepath.Join(dir, "solo")
		cmd := exec.Command("go", "build", "-o", soloBin, "./cmd/solo")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/solo: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return soloBin
}

// TestMain removes the solo binary built for the tests and checks that no
// goroutine outlived them (each process's waiter ends in its cleanup).
func TestMain(m *testing.M) {
	code := m.Run()
	if soloBin != "" {
		_ = os.RemoveAll(filepath.Dir(soloBin))
	}
	http.DefaultClient.CloseIdleConnections()
	if err := goleak.Find(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, "goleak:", err)
		code = 1
	}
	os.Exit(code)
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// proc is a process a test started, killed (with its process group) in
// t.Cleanup; its output goes to a file printed when the test failed.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func startProc(t *testing.T, name string, env []string, argv ...string) *proc {
	t.Helper()
	log := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	_ = f.Close()
	p := &proc{name: name, cmd: cmd, log: log, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		if t.Failed() {
			b, _ := os.ReadFile(log)
			t.Logf("%s output:\n%s", name, tail(string(b), 40))
		}
	})
	return p
}

// signal sends sig to the process's group.
func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil {
		t.Fatalf("signal %v to %s: %v", sig, p.name, err)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// startRedis starts a redis-server without persistence on a free loopback
// port and returns it and its address once it answers PING.
func startRedis(t *testing.T) (*proc, string) {
	t.Helper()
	bin := tool(t, "redis-server", "redis-server")
	port := freePort(t)
	p := startProc(t, "redis", nil, bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir())
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	waitFor(t, 10*time.Second, "redis-server to answer PING", func() error {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(time.Second))
		if _, err := conn.Write([]byte("PING\r\n")); err != nil {
			return err
		}
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "+PONG") {
			return fmt.Errorf("PING: %q %v", line, err)
		}
		return nil
	})
	return p, addr
}

// waitFor calls f until it returns nil, failing the test after limit.
func waitFor(t *testing.T, limit time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s: %v", limit, what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// httpGet returns the body of a GET of url, or an error for a status
// other than 200.
func httpGet(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), nil
}
