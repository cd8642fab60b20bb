package main

import (
	"bufio"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/solo-run/solo/internal/proctree"
)

// A keeper frozen (SIGSTOP) past the renew deadline and the SIGKILL time
// wakes, sends SIGTERM and SIGKILL together: the program had no grace, and
// solo says the keeper was late instead of blaming the program. A program
// that had its grace is still blamed. Time is a fake monotonic clock.
//
// Old code (solo's side reverted): `report "4900 … 0": blamed the program
// = true, want false; logs [… program ignored SIGTERM: SIGKILL before the
// lease can pass on … late 4900ms]`.
func TestKeeper_FrozenKeeperDoesNotBlameTheProgram(t *testing.T) {
	const killAfter = 400 * time.Millisecond
	for _, c := range []struct {
		name   string
		frozen time.Duration // the fake clock's jump after the deadline was set
		blame  bool
	}{
		{"frozen past the kill", 5 * time.Second, false},
		{"on time", 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			now := int64(1e12)
			k := &keeper{st: w, killAfter: int64(killAfter), deadline: now + int64(100*time.Millisecond),
				procs: proctree.FS{Root: t.TempDir()}, now: func() int64 { return now }}
			if c.frozen > 0 {
				now += int64(c.frozen) // one wake-up after the freeze
				k.timers()
			} else {
				now = k.deadline
				k.timers() // SIGTERM at the deadline
				now += int64(killAfter)
				k.timers() // SIGKILL on schedule
			}
			w.Close()
			var sigkill string
			sc := bufio.NewScanner(r)
			for sc.Scan() {
				if rest, ok := strings.CutPrefix(sc.Text(), "sigkill "); ok {
					sigkill = rest
				}
			}
			if sigkill == "" {
				t.Fatal("no sigkill report")
			}
			core, logs := observer.New(zap.InfoLevel)
			logSIGKILL(zap.New(core), sigkill, killAfter)
			blamed := logs.FilterMessageSnippet("program ignored SIGTERM").Len() > 0
			if blamed != c.blame {
				t.Fatalf("report %q: blamed the program = %v, want %v; logs %v", sigkill, blamed, c.blame, logs.All())
			}
			if !c.blame && logs.FilterMessageSnippet("keeper was late").Len() == 0 {
				t.Fatalf("report %q: no line saying the keeper was late: %v", sigkill, logs.All())
			}
		})
	}
}
