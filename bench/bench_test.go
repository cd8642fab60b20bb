package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain also serves as the crash-failover child when re-executed.
func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec))
	}
	goleak.VerifyTestMain(m)
}

// newTestEnv starts three redis-servers, or skips without redis-server
// unless SOLO_REQUIRE_REDIS=1 or CI=true.
func newTestEnv(t testing.TB, prof profile) *env {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("SOLO_REQUIRE_REDIS") == "1" || os.Getenv("CI") == "true" {
			t.Fatalf("redis-server not found: %v", err)
		}
		t.Skipf("redis-server not found: %v", err)
	}
	l, err := newLab("redis-server")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	})
	nodes, err := l.startN(3)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return &env{lab: l, nodes: nodes, prof: prof, self: self, log: io.Discard}
}

// TestCycleFigure runs figure 1 on the quick profile with one short run
// per placement.
func TestCycleFigure(t *testing.T) {
	prof := quickProfile()
	prof.cycleTime = 100 * time.Millisecond
	prof.runs = 1
	prof.concurrency = []int{1, 8}
	prof.costOps = 50
	e := newTestEnv(t, prof)
	fig, err := cycleFigure(t.Context(), e)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range peers() {
		for _, conc := range prof.concurrency {
			if row := fmt.Sprintf("| %d | %s | ", conc, p.name); !strings.Contains(fig.body, row) {
				t.Errorf("no row %q in:\n%s", row, fig.body)
			}
		}
	}
	if !strings.Contains(fig.body, "| solo | 1 | 1 | 1 |") {
		t.Errorf("solo does not take one round trip per operation:\n%s", fig.body)
	}
	if !strings.Contains(fig.body, "| solo-lock | 1 | — (its watchdog renews") {
		t.Errorf("solo-lock does not take one round trip per acquire and release:\n%s", fig.body)
	}
	for _, pl := range placements() {
		if !strings.Contains(fig.body, "### Placement: "+pl.name) {
			t.Errorf("no placement %s in:\n%s", pl.name, fig.body)
		}
	}
	for _, name := range costPeers {
		if !strings.Contains(fig.body, "| "+name+" | ") || !strings.Contains(fig.body, " µs | ") {
			t.Errorf("no Redis CPU row for %s in:\n%s", name, fig.body)
		}
	}
	// solo: round trips, and cycles/s at 1 goroutine (64 is not run);
	// solo-lock and solo-lock-unbatched: one in every placement measured, and
	// one more (CPU) in split.
	want := 2 + 2*(len(placements())-strings.Count(fig.body, "Not measured: "))
	if !strings.Contains(fig.body, "### Placement: split\n\nNot measured") {
		want += 2
	}
	if len(fig.targets) != want {
		t.Errorf("targets = %d, want %d", len(fig.targets), want)
	}
	// Pinning is undone: the process may use every CPU again.
	if got := runtime.GOMAXPROCS(0); got != runtime.NumCPU() {
		t.Errorf("GOMAXPROCS = %d after the figure, want %d", got, runtime.NumCPU())
	}
}

// TestHandover runs one short round of every handover peer.
func TestHandover(t *testing.T) {
	e := newTestEnv(t, quickProfile())
	tm, err := timingFor(200 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	for _, hp := range handoverPeers() {
		t.Run(hp.name, func(t *testing.T) {
			cs := dial(addrsOf(e.nodes[:1]), nil)
			defer cs.Close()
			hp.groups = 1
			r, err := handoverOnce(t.Context(), hp, cs, e.nodes[0], tm, 10*time.Millisecond, "test")
			var un *unavailableError
			if errors.As(err, &un) {
				t.Skip(err)
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.holds < handoverWaiters || len(r.wake) < handoverWaiters-1 {
				t.Errorf("holds %d, wake-ups %d: want at least one round (%d, %d)", r.holds, len(r.wake), handoverWaiters, handoverWaiters-1)
			}
			for _, w := range r.wake {
				if w <= 0 || w > 5*tm.ttl {
					t.Errorf("wake-up %s", w)
				}
			}
		})
	}
}

// TestTrials runs one handoff and one crash failover of every peer.
func TestTrials(t *testing.T) {
	e := newTestEnv(t, quickProfile())
	tm, err := timingFor(200 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range electionPeers() {
		t.Run(p.name, func(t *testing.T) {
			addrs := addrsOf(e.nodes[:p.nodes])
			a, b := dial(addrs, nil), dial(addrs, nil)
			defer a.Close()
			defer b.Close()
			d, err := handoffTrial(t.Context(), p, a, b, tm, "test-handoff-"+p.name)
			if err != nil {
				t.Fatalf("handoff: %v", err)
			}
			if d <= 0 || d > 5*tm.ttl {
				t.Errorf("handoff took %s", d)
			}
			d, err = failoverTrial(t.Context(), e.self, p, a, b, tm, "test-failover-"+p.name, tm.retry)
			if err != nil {
				t.Fatalf("failover: %v", err)
			}
			if d < -5*time.Millisecond || d > 2*tm.ttl {
				t.Errorf("failover took %s after the expiry", d)
			}
		})
	}
}

func TestSpreadAndPercentile(t *testing.T) {
	tests := []struct {
		name string
		runs []float64
		want spread
	}{
		{"none", nil, spread{}},
		{"one", []float64{3}, spread{3, 3, 3, true}},
		{"odd", []float64{5, 1, 3}, spread{3, 1, 5, true}},
		{"even", []float64{4, 1, 2, 8}, spread{3, 1, 8, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := spreadOf(tt.runs); got != tt.want {
				t.Errorf("spreadOf(%v) = %+v, want %+v", tt.runs, got, tt.want)
			}
		})
	}
	var xs []time.Duration
	for i := 100; i >= 1; i-- {
		xs = append(xs, time.Duration(i))
	}
	if p50, p99, p100 := percentile(xs, 0.5), percentile(xs, 0.99), percentile(xs, 1); p50 != 50 || p99 != 99 || p100 != 100 {
		t.Errorf("percentiles = %d %d %d, want 50 99 100", p50, p99, p100)
	}
}

func TestParseFigures(t *testing.T) {
	if got, err := parseFigures("1, 3,5"); err != nil || fmt.Sprint(got) != "[1 3 5]" {
		t.Errorf("parseFigures = %v, %v", got, err)
	}
	for _, bad := range []string{"0", "8", "x", ""} {
		if _, err := parseFigures(bad); err == nil {
			t.Errorf("parseFigures(%q): no error", bad)
		}
	}
}

// The report's header must say where and with what it was measured.
func TestRenderHeader(t *testing.T) {
	out := render(quickProfile(), []figure{{title: "X", body: "body\n", targets: []target{{what: "w", solo: "s", peer: "p", ok: true}}}}, "7.0.15", time.Minute)
	for _, want := range []string{"noisy, shared 2-core machine", "| Redis | 7.0.15", "| Go | go1.", "| date | ", "| w | s | p | ✓ |", "## X"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

// BenchmarkCycle is figure 1's cycle at one goroutine, for profiling a
// peer's client side:
//
//	go test -run '^$' -bench 'Cycle/solo-lock$' -benchmem -cpuprofile cpu.out -memprofile mem.out
func BenchmarkCycle(b *testing.B) {
	e := newTestEnv(b, quickProfile())
	tm, err := timingFor(10 * time.Second)
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range peers() {
		b.Run(p.name, func(b *testing.B) {
			cs := dial(addrsOf(e.nodes[:p.nodes]), nil)
			defer cs.Close()
			m := p.mutex(cs, "bench-profile-"+p.name, "profile", tm)
			defer closeMutex(m)
			ctx := b.Context()
			for b.Loop() {
				ok, err := m.tryAcquire(ctx)
				if err == nil && !ok {
					err = errors.New("own key held")
				}
				if err == nil {
					err = m.release(ctx)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestContend runs one short run of every peer of figure 7.
func TestContend(t *testing.T) {
	e := newTestEnv(t, quickProfile())
	tm, err := timingFor(200 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	tm.retry = contendPollRetry
	admin := dial(addrsOf(e.nodes[:1]), nil)
	defer admin.Close()
	for _, p := range contendPeers() {
		t.Run(p.name, func(t *testing.T) {
			cs := dial(addrsOf(e.nodes[:1]), nil)
			defer cs.Close()
			r, err := contendOnce(t.Context(), p, cs, admin[0], tm, 30*time.Millisecond, 0, "test")
			if err != nil {
				t.Fatal(err)
			}
			if n := r.acquisitions(); n < 2 || len(r.waits) != n || len(r.gaps) != n-1 {
				t.Errorf("acquisitions %d, waits %d, gaps %d", n, len(r.waits), len(r.gaps))
			}
			if a := r.acquiresPerAcquisition(p); a < 1 {
				t.Errorf("acquire requests per acquisition %.2f < 1: the server did not count them", a)
			}
		})
	}
}
