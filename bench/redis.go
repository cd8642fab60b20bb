package main

import (
	"bufio"
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
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// readyTimeout bounds the wait for a new server to answer PING.
	readyTimeout = 10 * time.Second
	// startAttempts is how often a start is retried when its port is taken.
	startAttempts = 5
	// exitTimeout bounds the wait for a killed server to be reaped.
	exitTimeout = 10 * time.Second
)

// lab owns the redis-server processes of one bench run and the directory
// they live in. Close kills every server it started and removes the
// directory; servers may also be closed earlier, one by one.
type lab struct {
	bin string
	dir string

	mu      sync.Mutex // guards servers and n
	servers []*server
	n       int
}

// server is one redis-server on 127.0.0.1 without persistence, in its own
// process group. It owns one goroutine, the reaper, which closes done when
// the process has exited.
type server struct {
	addr string
	cmd  *exec.Cmd
	done chan struct{}
	once sync.Once
}

// newLab checks that bin runs and makes the lab's directory.
func newLab(bin string) (*lab, error) {
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("redis-server: %w", err)
	}
	dir, err := os.MkdirTemp("", "solo-bench-")
	if err != nil {
		return nil, err
	}
	return &lab{bin: path, dir: dir}, nil
}

// start launches a redis-server on a free loopback port with `--save ""
// --appendonly no` and extra, and returns once it answers PING.
func (l *lab) start(extra ...string) (*server, error) {
	l.mu.Lock()
	l.n++
	dir := filepath.Join(l.dir, strconv.Itoa(l.n))
	l.mu.Unlock()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var err error
	for range startAttempts {
		var s *server
		s, err = launch(l.bin, dir, extra)
		if err == nil {
			l.mu.Lock()
			l.servers = append(l.servers, s)
			l.mu.Unlock()
			return s, nil
		}
		if !errors.Is(err, errAddrInUse) {
			break
		}
	}
	return nil, err
}

// startN starts n servers with the same arguments.
func (l *lab) startN(n int, extra ...string) ([]*server, error) {
	var out []*server
	for range n {
		s, err := l.start(extra...)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// Close kills every server and removes the lab's directory.
func (l *lab) Close() error {
	l.mu.Lock()
	servers := l.servers
	l.servers = nil
	l.mu.Unlock()
	var errs []error
	for _, s := range servers {
		errs = append(errs, s.Close())
	}
	errs = append(errs, os.RemoveAll(l.dir))
	return errors.Join(errs...)
}

var errAddrInUse = errors.New("address already in use")

func launch(bin, dir string, extra []string) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	args := append([]string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", dir,
		"--daemonize", "no",
		"--save", "",
		"--appendonly", "no",
		"--logfile", "redis.log",
	}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	// Its own process group, and killed with us should we die first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis on %s: %w", addr, err)
	}
	s := &server{addr: addr, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(s.done)
	}()
	if err := s.waitReady(); err != nil {
		_ = s.Close()
		if b, _ := os.ReadFile(filepath.Join(dir, "redis.log")); strings.Contains(string(b), "Address already in use") {
			err = fmt.Errorf("%w: %w", errAddrInUse, err)
		}
		return nil, err
	}
	return s, nil
}

// Close kills the server's process group and waits until it is reaped.
func (s *server) Close() error {
	var err error
	s.once.Do(func() {
		select {
		case <-s.done:
			return // reaped already; the pid may be someone else's now
		default:
		}
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		t := time.NewTimer(exitTimeout)
		defer t.Stop()
		select {
		case <-s.done:
		case <-t.C:
			err = fmt.Errorf("redis on %s: still running after SIGKILL", s.addr)
		}
	})
	return err
}

// pid returns the server's process ID.
func (s *server) pid() int { return s.cmd.Process.Pid }

// cpu returns the user+system CPU time the server has used so far.
func (s *server) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.pid()))
	if err != nil {
		return 0, err
	}
	// Fields after the parenthesised command name; utime and stime are
	// fields 14 and 15 of the whole line, in clock ticks (100 per second
	// on Linux).
	rest := string(b)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+1:]
	}
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", s.pid())
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// mainThreadCPU returns the time the server's main thread (the one that
// runs every command) has spent on a CPU, from its schedstat, in ns.
func (s *server) mainThreadCPU() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/schedstat", s.pid(), s.pid()))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("empty schedstat of %d", s.pid())
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	return time.Duration(ns), err
}

func (s *server) waitReady() error {
	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-s.done:
			return fmt.Errorf("redis on %s exited before ready", s.addr)
		default:
		}
		err := ping(s.addr)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis on %s not ready after %v: %w", s.addr, readyTimeout, err)
		}
		time.Sleep(10 * time.Millisecond)
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

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick free port: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	return port, ln.Close()
}

func addrsOf(servers []*server) []string {
	out := make([]string, len(servers))
	for i, s := range servers {
		out[i] = s.addr
	}
	return out
}

// counter is a go-redis hook counting round trips (one per Process or
// ProcessPipeline call) and the commands they carry. Pub/sub traffic does
// not pass through hooks.
type counter struct {
	trips atomic.Int64
	cmds  atomic.Int64
}

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.trips.Add(1)
		c.cmds.Add(1)
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.trips.Add(1)
		c.cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// clients is one client per Redis node, every one with the same options
// and, when counting, the same counter.
type clients []*redis.Client

// dial returns a client per address with go-redis's default options and
// ContextTimeoutEnabled (what solo's docs ask of a client: context
// deadlines bound its calls; solo's lock then calls Redis inline). A
// non-nil counter is added to each as a hook.
func dial(addrs []string, c *counter) clients {
	out := make(clients, len(addrs))
	for i, a := range addrs {
		out[i] = redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true})
		if c != nil {
			out[i].AddHook(c)
		}
	}
	return out
}

// dialNamed is dial without a counter, with every connection named name
// (CLIENT SETNAME), pub/sub connections included.
func dialNamed(addrs []string, name string) clients {
	out := make(clients, len(addrs))
	for i, a := range addrs {
		out[i] = redis.NewClient(&redis.Options{Addr: a, ClientName: name, ContextTimeoutEnabled: true})
	}
	return out
}

// Close closes every client.
func (cs clients) Close() error {
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// infoField returns the value of key in INFO output.
func infoField(info, key string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+":"); ok {
			return v
		}
	}
	return ""
}

// connectedClients returns INFO clients connected_clients.
func connectedClients(ctx context.Context, c *redis.Client) (int, error) {
	info, err := c.Info(ctx, "clients").Result()
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(infoField(info, "connected_clients"))
}
