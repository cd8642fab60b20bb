package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/solo-run/solo/internal/faultproxy"
	"github.com/solo-run/solo/internal/redistest"
)

// TestSupervise_Table measures, for each way solo can go away, when the
// program tree (a shell and its child) stopped and when the lease passed
// (the other instance's program started), from the event. It prints the
// table of docs/faults.md ("solo run: the program tree against the
// lease"). SOLO_SUPERVISION_TABLE=N runs N iterations per row; unset, it
// skips.
func TestSupervise_Table(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SOLO_SUPERVISION_TABLE"))
	if n <= 0 {
		t.Skip("SOLO_SUPERVISION_TABLE=N measures the table")
	}
	srv := redistest.Start(t)
	type result struct {
		ticks, stopped, passed, margin []time.Duration
		survived, stayed               int
	}
	rows := []struct {
		name string
		act  func(t *testing.T, a *proc, keeper int, cut func(), stall func(), closeErr func())
	}{
		{"graceful stop (SIGTERM)", func(t *testing.T, a *proc, _ int, _, _, _ func()) { a.signal(syscall.SIGTERM) }},
		{"crash (SIGABRT: Go crash, exit 2)", func(t *testing.T, a *proc, _ int, _, _, _ func()) { a.signal(syscall.SIGABRT) }},
		{"kill -9 of solo", func(t *testing.T, a *proc, _ int, _, _, _ func()) { a.signal(syscall.SIGKILL) }},
		{"SIGSTOP of solo alone", func(t *testing.T, a *proc, _ int, _, _, _ func()) { a.signal(syscall.SIGSTOP) }},
		{"Ctrl-Z (SIGTSTP)", func(t *testing.T, a *proc, _ int, _, _, _ func()) { a.signal(syscall.SIGTSTP) }},
		{"stderr blocked, then Redis link cut", func(t *testing.T, a *proc, _ int, cut, stall, _ func()) {
			stall()
			time.Sleep(50 * time.Millisecond)
			cut()
		}},
		{"stderr closed (solo keeps leading)", func(t *testing.T, a *proc, _ int, _, _, closeErr func()) { closeErr() }},
		{"SIGSTOP of solo and its keeper", func(t *testing.T, a *proc, k int, _, _, _ func()) {
			a.signal(syscall.SIGSTOP)
			_ = syscall.Kill(k, syscall.SIGSTOP)
		}},
		{"kill -9 of solo and its keeper", func(t *testing.T, a *proc, k int, _, _, _ func()) {
			a.signal(syscall.SIGKILL)
			_ = syscall.Kill(k, syscall.SIGKILL)
		}},
	}
	results := make([]result, len(rows))
	for i, row := range rows {
		for it := 0; it < n; it++ {
			t.Run(fmt.Sprintf("%d-%d", i, it), func(t *testing.T) {
				proxy, err := faultproxy.New(srv.Addr())
				if err != nil {
					t.Fatal(err)
				}
				defer proxy.Close()
				out := filepath.Join(t.TempDir(), "out.log")
				name := electionName(t)
				argv := prog{child: "bg"}.argv(t, out)
				pipe := newStallablePipe(t, filepath.Join(t.TempDir(), "a.stderr"))
				a := soloWith(t, append(testEnv("redis://"+proxy.Addr(), name, "a"), "OUT="+out), pipe.w, append([]string{"run", "--"}, argv...)...)
				waitLine(t, out, 10*time.Second, func(l line) bool { return l.event == "start" })
				child := waitLine(t, out, 5*time.Second, func(l line) bool { return l.event == "cstart" })
				b := startSolo(t, append(testEnv("redis://"+srv.Addr(), name, "b"), "OUT="+out), append([]string{"run", "--"}, argv...)...)
				waitFor(t, 5*time.Second, "b to follow", func() bool { return strings.Contains(b.output(), `"leader observed"`) })
				keeper := 0
				for _, p := range descendantsOf(t, a.cmd.Process.Pid) {
					if p.ppid == a.cmd.Process.Pid {
						keeper = p.pid
					}
				}
				time.Sleep(time.Duration(it%7) * 90 * time.Millisecond) // vary the phase against the renewals
				at := time.Now()
				row.act(t, a, keeper, func() { proxy.Blackhole(true) }, pipe.stall, func() { _ = pipe.r.Close() })
				t.Cleanup(func() { _ = syscall.Kill(keeper, syscall.SIGKILL) })
				var bStart line
				deadline := time.Now().Add(6 * time.Second)
				for time.Now().Before(deadline) && bStart.at.IsZero() {
					bStart = lastOf(readLines(t, out), "b", func(l line) bool { return l.event == "start" })
					time.Sleep(20 * time.Millisecond)
				}
				time.Sleep(500 * time.Millisecond)
				r := &results[i]
				if bStart.at.IsZero() {
					r.stayed++ // solo still leads: nothing to compare
					return
				}
				lines := readLines(t, out)
				aLast := lastOf(lines, "a", anyEvent)
				lastTick := lastOf(lines, "a", func(l line) bool { return l.event == "tick" || l.event == "ctick" })
				r.passed = append(r.passed, bStart.at.Sub(at))
				if alive(child.pid) && aLast.at.After(bStart.at) {
					r.survived++ // still running beside b's: no stop time
					return
				}
				r.ticks = append(r.ticks, lastTick.at.Sub(at))
				r.stopped = append(r.stopped, aLast.at.Sub(at))
				r.margin = append(r.margin, bStart.at.Sub(aLast.at))
			})
		}
	}
	f := func(ds []time.Duration) string {
		if len(ds) == 0 {
			return "–"
		}
		slices.Sort(ds)
		r := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
		return r(ds[len(ds)/2]) + " / " + r(ds[0]) + " / " + r(ds[len(ds)-1])
	}
	var b strings.Builder
	b.WriteString("| how solo goes away | n | last tick (p50 / min / max) | tree gone (p50 / min / max) | lease passed (p50 / min / max) | lease passed − tree gone (p50 / min / max) | tree outlived the handover |\n| --- | ---: | --- | --- | --- | --- | ---: |\n")
	for i, row := range rows {
		r := results[i]
		if r.stayed > 0 && len(r.passed) == 0 {
			fmt.Fprintf(&b, "| %s | %d | runs on: solo still leads | – | no handover | – | 0 |\n", row.name, r.stayed)
			continue
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %d of %d |\n", row.name, len(r.passed), f(r.ticks), f(r.stopped), f(r.passed), f(r.margin), r.survived, len(r.passed))
	}
	t.Logf("\n%s", b.String())
}
