package proctest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	// buildTimeout bounds one go build (a cold -race build of the SQLite
	// driver takes a while on a small machine).
	buildTimeout = 5 * time.Minute
	// exitTimeout bounds the wait for a killed process to be reaped.
	exitTimeout = 10 * time.Second
	// tailLines is how much output of each process a failed test prints.
	tailLines = 60
)

// Build compiles the main package pkg (a path as go build takes it, "." for
// the package under test) into a directory of the test and returns the
// binary's path. With -race the binary is built with -race as well.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go command not found: %v", err)
	}
	abs, err := filepath.Abs(pkg)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), filepath.Base(abs))
	args := []string{"build", "-o", out}
	if raceEnabled {
		args = append(args, "-race")
	}
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, append(args, pkg)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s %s: %v\n%s", strings.Join(args, " "), pkg, err, b)
	}
	return out
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Proc is one running program whose standard output and error are captured
// together, line by line. Its methods are safe for concurrent use.
type Proc struct {
	// Name identifies the process in failure messages.
	Name string

	cmd  *exec.Cmd
	out  *lineBuffer
	done chan struct{} // closed once Wait returned
	err  error         // cmd.Wait's result, valid once done is closed
}

// Start runs bin with args. The environment is the test's own without its
// SOLO_ variables (so a developer's settings do not leak in), plus env
// (KEY=VALUE strings). The process is killed, and its output printed if the
// test failed, in t.Cleanup.
func Start(t testing.TB, name, bin string, env []string, args ...string) *Proc {
	t.Helper()
	p := &Proc{Name: name, out: newLineBuffer(), done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SOLO_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Env = append(p.cmd.Env, env...)
	// One writer for both streams: exec.Cmd then copies them with one
	// goroutine, which Wait waits for.
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = sysProcAttr()
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.Exited() {
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			if _, err := p.Wait(exitTimeout); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
		if t.Failed() {
			t.Logf("%s (pid %d), last output lines:\n%s", name, p.Pid(), p.Tail(tailLines))
		}
	})
	return p
}

// Pid returns the process ID.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Signal sends sig to the process.
func (p *Proc) Signal(sig syscall.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %v to %s: %w", sig, p.Name, err)
	}
	return nil
}

// Exited reports whether the process has exited (and been reaped).
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Wait waits up to timeout for the process to exit and returns its exit
// code, −1 if a signal killed it.
func (p *Proc) Wait(timeout time.Duration) (int, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		return 0, fmt.Errorf("%s (pid %d) still running after %v", p.Name, p.Pid(), timeout)
	}
	var ee *exec.ExitError
	if p.err != nil && !errors.As(p.err, &ee) {
		return 0, fmt.Errorf("%s: %w", p.Name, p.err)
	}
	return p.cmd.ProcessState.ExitCode(), nil
}

// Mark returns the number of lines written so far: pass it to Await to
// consider only later lines.
func (p *Proc) Mark() int { return p.out.len() }

// Lines returns a copy of the lines written so far.
func (p *Proc) Lines() []string { return p.out.snapshot(0) }

// Tail returns the last n lines, joined.
func (p *Proc) Tail(n int) string {
	lines := p.out.snapshot(0)
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Await waits up to timeout for a line at index from or later that match
// accepts, and returns it and its index. It fails early when the process
// exits without having written one.
func (p *Proc) Await(from int, timeout time.Duration, match func(line string) bool) (string, int, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		lines, changed := p.out.since(from)
		for i, l := range lines {
			if match(l) {
				return l, from + i, nil
			}
		}
		from += len(lines)
		select {
		case <-changed:
		case <-p.done:
			// The copying goroutine has finished: no more lines come.
			if rest, _ := p.out.since(from); len(rest) > 0 {
				continue
			}
			return "", 0, fmt.Errorf("%s exited (%v) before writing the awaited line", p.Name, p.err)
		case <-deadline.C:
			return "", 0, fmt.Errorf("%s wrote no awaited line within %v", p.Name, timeout)
		}
	}
}

// Count returns how many lines match accepts.
func (p *Proc) Count(match func(line string) bool) int {
	n := 0
	for _, l := range p.out.snapshot(0) {
		if match(l) {
			n++
		}
	}
	return n
}

// Contains matches lines containing s.
func Contains(s string) func(string) bool {
	return func(line string) bool { return strings.Contains(line, s) }
}

// Msg matches JSON log lines (zap's production format) whose "msg" is msg.
func Msg(msg string) func(string) bool {
	return func(line string) bool {
		if !strings.Contains(line, msg) {
			return false
		}
		m, ok := JSON(line)
		return ok && m["msg"] == msg
	}
}

// JSON decodes a JSON log line; ok is false for other lines.
func JSON(line string) (map[string]any, bool) {
	if !strings.HasPrefix(line, "{") {
		return nil, false
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		return nil, false
	}
	return m, true
}

// lineBuffer collects written bytes as lines and wakes waiters on each one.
type lineBuffer struct {
	mu      sync.Mutex
	partial []byte
	lines   []string
	changed chan struct{} // closed and replaced when lines grow
}

func newLineBuffer() *lineBuffer { return &lineBuffer{changed: make(chan struct{})} }

// Write implements io.Writer.
func (b *lineBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.partial = append(b.partial, p...)
	grew := false
	for {
		i := bytes.IndexByte(b.partial, '\n')
		if i < 0 {
			break
		}
		b.lines = append(b.lines, string(b.partial[:i]))
		b.partial = b.partial[i+1:]
		grew = true
	}
	if grew {
		close(b.changed)
		b.changed = make(chan struct{})
	}
	return len(p), nil
}

func (b *lineBuffer) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.lines)
}

func (b *lineBuffer) snapshot(from int) []string {
	lines, _ := b.since(from)
	return lines
}

// since returns a copy of the lines from index from on, and a channel closed
// when more arrive.
func (b *lineBuffer) since(from int) ([]string, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if from > len(b.lines) {
		from = len(b.lines)
	}
	return append([]string(nil), b.lines[from:]...), b.changed
}
