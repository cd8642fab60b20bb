package proctree

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	p, err := parseStat(42, []byte("42 (a (b) c) S 7 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 12345 0 0"))
	if err != nil || p.PPID != 7 || p.State != 'S' || p.Start != 12345 {
		t.Fatalf("parseStat = %+v, %v", p, err)
	}
}

// A setsid'd grandchild is still a descendant; signalling a stale snapshot
// (other start time) does nothing.
func TestDescendantsAcrossSessions(t *testing.T) {
	cmd := exec.Command("sh", "-c", "setsid sleep 30 & echo $!; wait")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	buf := make([]byte, 32)
	n, _ := out.Read(buf)
	grandchild, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err != nil {
		t.Fatal(err)
	}
	var found Proc
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && found.PID == 0; time.Sleep(10 * time.Millisecond) {
		ds, err := Descendants(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.PID == grandchild {
				found = d
			}
		}
	}
	if found.PID == 0 {
		t.Fatal("setsid grandchild not among the descendants")
	}
	stale := found
	stale.Start++
	if err := Signal(stale, syscall.SIGKILL); err != nil || syscall.Kill(grandchild, 0) != nil {
		t.Fatalf("a stale snapshot was signalled: %v", err)
	}
	if err := Signal(found, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if p, err := Stat(grandchild); err != nil || p.State == 'Z' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("grandchild survived SIGKILL")
		}
	}
}

func TestMonotonicAdvances(t *testing.T) {
	a := Monotonic()
	time.Sleep(10 * time.Millisecond)
	if d := Monotonic() - a; d < int64(5*time.Millisecond) {
		t.Fatalf("CLOCK_MONOTONIC advanced %dns over 10ms", d)
	}
}

// An empty directory, or a missing one, is no proc filesystem: walking it
// is an error, never an empty tree.
func TestFS_NotMounted(t *testing.T) {
	for _, root := range []string{t.TempDir(), "/nonexistent"} {
		f := FS{Root: root}
		if f.Available() {
			t.Errorf("%s: Available", root)
		}
		if ds, err := f.Descendants(os.Getpid()); err == nil {
			t.Errorf("%s: Descendants = %v, nil error", root, ds)
		}
	}
	if !Host.Available() {
		t.Error("/proc not Available")
	}
	if _, err := Host.Children(os.Getpid()); err != nil {
		t.Error(err)
	}
}
