package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/solo-run/solo/internal/proctree"
	"github.com/solo-run/solo/internal/redistest"
)

// Without /proc (an empty tmpfs over it, in a mount namespace of its own)
// the real solo run still runs its program, and stops what the program
// left in its process group. Skipped where unshare cannot make the
// namespace (no user namespaces for this user).
//
// Old code: "solo run without /proc: exit status 1 … job failed; restart
// policy never … start sh: fork/exec /proc/self/exe: no such file or
// directory" — the program never ran; with --restart always every term
// failed that way, the instance resigned, and won again.
func TestRun_WithoutProc(t *testing.T) {
	if err := exec.Command("unshare", "-rm", "sh", "-c", "mount -t tmpfs none /proc").Run(); err != nil {
		t.Skipf("unshare -rm with a tmpfs on /proc unavailable: %v", err)
	}
	srv := redistest.Start(t)
	out := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command("unshare", "-rm", "sh", "-c", `mount -t tmpfs none /proc && exec "$@"`, "sh",
		soloBin, "run", "--restart", "never", "--", "sh", "-c", `sleep 30 & echo "ran $!" >> "$OUT"`)
	cmd.Env = append(testEnv("redis://"+srv.Addr(), electionName(t), "a"), "OUT="+out)
	log := runToEnd(t, cmd, 8*time.Second)
	var bg int
	if _, err := fmt.Sscanf(mustRead(out), "ran %d", &bg); err != nil {
		t.Fatalf("the program did not run: %q\n%s", mustRead(out), log)
	}
	if alive(bg) {
		_ = syscall.Kill(bg, syscall.SIGKILL)
		t.Errorf("the program's background child %d outlived solo run", bg)
	}
	if !strings.Contains(log, "no proc filesystem") {
		t.Errorf("no warning about the missing /proc:\n%s", log)
	}
}

// keeperExecutable falls back from ROOT/self/exe to the executable the
// process started from.
func TestKeeperExecutable_WithoutProc(t *testing.T) {
	got, err := keeperExecutable(proctree.FS{Root: t.TempDir()})
	self, _ := os.Executable()
	if err != nil || got != self {
		t.Fatalf("keeperExecutable without proc = %q, %v; want %q", got, err, self)
	}
	if got, err := keeperExecutable(proctree.Host); err != nil || got != "/proc/self/exe" {
		t.Fatalf("keeperExecutable = %q, %v; want /proc/self/exe", got, err)
	}
}
