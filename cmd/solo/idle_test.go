package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/solo-run/solo/internal/redistest"
)

// An idle solo run sleeps: a leader running sleep (solo and its keeper)
// and a follower each wake well under 200 times a second. The bound is
// loose on purpose (a shared machine); docs/bench.md has the figures
// (bench -idle: about 15, 5 and 3).
//
// Old code: "leader solo: 537 wake-ups/s idle, want < 200", follower 471
// (a 10ms poll of the configuration error, a walk of /proc every second).
func TestRun_IdleSleeps(t *testing.T) {
	srv := redistest.Start(t)
	name := electionName(t)
	leader := startSolo(t, testEnv("redis://"+srv.Addr(), name, "a"), "run", "--", "sleep", "1000")
	var keeper int
	waitFor(t, 10*time.Second, "the keeper", func() bool {
		keeper = childPID(leader.cmd.Process.Pid)
		return keeper != 0
	})
	follower := startSolo(t, testEnv("redis://"+srv.Addr(), name, "b"), "run", "--", "sleep", "1000")
	time.Sleep(time.Second)
	procs := map[string]int{"leader solo": leader.cmd.Process.Pid, "keeper": keeper, "follower solo": follower.cmd.Process.Pid}
	before := map[string]int{}
	for who, pid := range procs {
		before[who] = contextSwitches(t, pid)
	}
	start := time.Now()
	time.Sleep(2 * time.Second)
	secs := time.Since(start).Seconds()
	for who, pid := range procs {
		if rate := float64(contextSwitches(t, pid)-before[who]) / secs; rate >= 200 {
			t.Errorf("%s: %.0f wake-ups/s idle, want < 200", who, rate)
		}
	}
}

// childPID returns a child of pid, 0 when it has none.
func childPID(pid int) int {
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if fs := strings.Fields(string(b)); len(fs) > 0 {
			n, _ := strconv.Atoi(fs[0])
			return n
		}
	}
	return 0
}

// contextSwitches sums the voluntary and involuntary context switches of
// pid's threads: how often they woke.
func contextSwitches(t *testing.T, pid int) int {
	t.Helper()
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	if len(files) == 0 {
		t.Fatalf("no threads of %d", pid)
	}
	n := 0
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, _ := strings.Cut(l, ":"); k == "voluntary_ctxt_switches" || k == "nonvoluntary_ctxt_switches" {
				c, _ := strconv.Atoi(strings.TrimSpace(v))
				n += c
			}
		}
	}
	return n
}
