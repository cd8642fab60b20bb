package main

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/solo-run/solo/internal/redistest"
)

// solo run keeps trying while Redis is down at start,
// says so in one line, and runs the program once Redis answers. Old code:
// exit 1, "solo: redis redis://127.0.0.1:PORT unreachable after 5s: …".
func TestRun_KeepsTryingWhileRedisIsDownAtStart(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill(t)
	out := filepath.Join(t.TempDir(), "out.log")
	p := startSolo(t, append(testEnv("redis://"+srv.Addr(), electionName(t), "a"), "OUT="+out),
		append([]string{"run", "--"}, script(t, out, false)...)...)
	waitFor(t, 20*time.Second, "solo to say it keeps trying", func() bool {
		return strings.Contains(p.output(), "redis unreachable; solo keeps trying in the background")
	})
	select {
	case <-p.exited:
		t.Fatalf("solo exited with Redis down:\n%s", p.output())
	default:
	}
	srv.Restart(t)
	waitLine(t, out, 30*time.Second, func(l line) bool { return l.event == "start" })
	p.signal(syscall.SIGTERM)
	if code := p.wait(20 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM:\n%s", code, p.output())
	}
}
