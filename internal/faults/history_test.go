//go:build linux

package faults_test

import (
	"strings"
	"testing"
	"time"

	"github.com/solo-run/solo/internal/faults"
)

// Unit tests of the invariant checks: they decide what the fault rows
// report, so they are checked on hand-made histories first.

func ev(mono int64, cand string, kind faults.Kind, term uint64) faults.Event {
	return faults.Event{Mono: mono * int64(time.Millisecond), Cand: cand, Kind: kind, Term: term}
}

func TestIntervalsAndOverlaps(t *testing.T) {
	evs := []faults.Event{
		ev(0, "a", faults.KindStart, 1),
		ev(100, "a", faults.KindStop, 1),
		ev(100, "b", faults.KindStart, 2),  // starts as a stops: no overlap
		ev(150, "b", faults.KindReaped, 0), // killed while running
		ev(140, "c", faults.KindStart, 3),  // before b was reaped: 10ms overlap
		ev(300, "a", faults.KindStart, 4),  // a again, beside c (still running)
		ev(320, "a", faults.KindStop, 4),
	}
	ivs := faults.Intervals(evs, int64(400*time.Millisecond))
	if len(ivs) != 4 {
		t.Fatalf("got %d intervals, want 4: %+v", len(ivs), ivs)
	}
	want := []struct {
		cand  string
		dur   time.Duration
		ended string
	}{
		{"a", 100 * time.Millisecond, "stop"},
		{"b", 50 * time.Millisecond, "reaped"},
		{"c", 260 * time.Millisecond, "open"},
		{"a", 20 * time.Millisecond, "stop"},
	}
	for i, w := range want {
		if iv := ivs[i]; iv.Cand != w.cand || iv.Dur() != w.dur || iv.Ended != w.ended {
			t.Errorf("interval %d = %s %s %s, want %s %s %s", i, iv.Cand, iv.Dur(), iv.Ended, w.cand, w.dur, w.ended)
		}
	}
	ovs := faults.Overlaps(ivs)
	if len(ovs) != 2 {
		t.Fatalf("got %d overlaps, want 2: %v", len(ovs), ovs)
	}
	if o := ovs[0]; o.A.Cand != "b" || o.B.Cand != "c" || o.Dur() != 10*time.Millisecond {
		t.Errorf("first overlap %v, want b and c for 10ms", o)
	}
	if o := ovs[1]; o.A.Cand != "c" || o.B.Cand != "a" || o.Dur() != 20*time.Millisecond {
		t.Errorf("second overlap %v, want c and a for 20ms", o)
	}
}

func TestCheckWitness(t *testing.T) {
	rows := []faults.WitnessRow{
		{Seq: 1, Kind: "claim", Term: 10},
		{Seq: 2, Kind: "write", Term: 10, Cand: "a", N: 1},
		{Seq: 3, Kind: "claim", Term: 20},
		{Seq: 4, Kind: "write", Term: 20, Cand: "b", N: 1},
		{Seq: 5, Kind: "write", Term: 10, Cand: "a", N: 2}, // after the claim of 20
		{Seq: 6, Kind: "write", Term: 30, Cand: "c", N: 1}, // never claimed
	}
	accepted := func(cand string, n int64, term uint64) faults.Event {
		return faults.Event{Cand: cand, Kind: faults.KindWrite, N: n, Term: term, Result: faults.ResultAccepted}
	}
	evs := []faults.Event{accepted("a", 1, 10), accepted("b", 1, 20), accepted("b", 2, 20)}
	w := faults.CheckWitness(rows, evs)
	if w.Claims != 2 || w.Writes != 4 {
		t.Errorf("claims %d, writes %d; want 2, 4", w.Claims, w.Writes)
	}
	if len(w.Stale) != 1 || w.Stale[0].Seq != 5 {
		t.Errorf("stale = %+v, want row 5", w.Stale)
	}
	if len(w.Unclaimed) != 1 || w.Unclaimed[0].Seq != 6 {
		t.Errorf("unclaimed = %+v, want row 6", w.Unclaimed)
	}
	if len(w.Missing) != 1 || w.Missing[0].Cand != "b" || w.Missing[0].N != 2 {
		t.Errorf("missing = %+v, want b's write 2", w.Missing)
	}
	if v := w.Violations(); len(v) != 3 || !strings.Contains(v[0], "stale write accepted") {
		t.Errorf("violations = %q", v)
	}
}

func TestTermsIncrease(t *testing.T) {
	acq := func(mono, dur int64, cand string, term uint64) faults.Event {
		return faults.Event{Mono: mono, Dur: dur, Cand: cand, Kind: faults.KindAcquire, Term: term, Result: "acquired"}
	}
	for _, tc := range []struct {
		name string
		evs  []faults.Event
		bad  int
	}{
		{"increasing", []faults.Event{acq(0, 5, "a", 1), acq(10, 5, "b", 2), acq(20, 5, "a", 3)}, 0},
		{"repeated after a data loss", []faults.Event{acq(0, 5, "a", 7), acq(10, 5, "b", 7)}, 1},
		{"backwards", []faults.Event{acq(0, 5, "a", 7), acq(10, 5, "b", 3), acq(20, 5, "c", 8)}, 1},
		// Round trips that overlap: their order is unknown, so no verdict.
		{"concurrent round trips", []faults.Event{acq(0, 50, "a", 9), acq(10, 5, "b", 8)}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if bad := faults.TermsIncrease(tc.evs); len(bad) != tc.bad {
				t.Fatalf("violations %q, want %d", bad, tc.bad)
			}
		})
	}
}

func TestPausedDuring(t *testing.T) {
	pause := func(mono int64, kind faults.Kind, cand string) faults.Event {
		return faults.Event{Mono: mono, Cand: faults.TestCand, Kind: kind, Detail: cand}
	}
	paused := faults.PausedDuring([]faults.Event{
		pause(100, faults.KindPause, "a"),
		pause(200, faults.KindResume, "a"),
		pause(500, faults.KindPause, "b"), // never resumed
	})
	for _, tc := range []struct {
		iv   faults.Interval
		want bool
	}{
		{faults.Interval{Cand: "a", Start: 0, Stop: 150}, true},
		{faults.Interval{Cand: "a", Start: 150, Stop: 300}, true},
		{faults.Interval{Cand: "a", Start: 200, Stop: 300}, false},
		{faults.Interval{Cand: "a", Start: 0, Stop: 100}, false},
		{faults.Interval{Cand: "b", Start: 600, Stop: 700}, true},
		{faults.Interval{Cand: "c", Start: 0, Stop: 1000}, false},
	} {
		if got := paused(tc.iv); got != tc.want {
			t.Errorf("paused(%+v) = %v, want %v", tc.iv, got, tc.want)
		}
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i))
	}
	if p := faults.Percentile(ds, 50); p != 50 {
		t.Errorf("p50 = %d", p)
	}
	if p := faults.Percentile(ds, 99); p != 99 {
		t.Errorf("p99 = %d", p)
	}
	if p := faults.Percentile(ds[:3], 99); p != 3 {
		t.Errorf("p99 of 3 = %d", p)
	}
}
