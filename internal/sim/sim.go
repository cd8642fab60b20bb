package sim

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Result is what one schedule found.
type Result struct {
	Seed       uint64
	Plan       Plan
	Violations []Violation
	Stats      Stats
	Lock       *LockStats   // lock schedules (RunLock) only
	Spread     *SpreadStats // spread schedules (RunSpread) only
	log        []event
	// ids rewrites the random part of the lock's owner IDs in the log
	// (lockIDs); nil: none.
	ids func(string) string
}

// Failed reports whether an invariant broke.
func (r *Result) Failed() bool { return len(r.Violations) > 0 }

// Log renders the schedule's event log, the last max events (all when
// max <= 0).
func (r *Result) Log(max int) string {
	s := formatLog(r.log, max)
	if r.ids != nil {
		s = r.ids(s)
	}
	return s
}

// Report is a failure report: the seed, the broken invariants, the plan
// and the event log.
func (r *Result) Report(max int) string {
	var b strings.Builder
	test := "TestSim"
	if r.Lock != nil {
		test = "'TestSim_Lock$'"
	}
	if r.Spread != nil {
		test = "'TestSim_Spread$'"
	}
	fmt.Fprintf(&b, "seed %d: %d violation(s); replay: SOLO_SIM_SEED=%d go test ./internal/sim -run %s\n", r.Seed, len(r.Violations), r.Seed, test)
	for _, v := range r.Violations {
		b.WriteString("  " + v.String() + "\n")
	}
	if r.Spread != nil {
		b.WriteString(r.Spread.Plan.String())
	} else {
		b.WriteString(r.Plan.String())
	}
	b.WriteString(r.Log(max))
	return b.String()
}

// Run simulates the schedule of seed. It must be called inside a
// testing/synctest bubble (synctest.Test): the simulation runs on the
// bubble's fake clock and waits for every goroutine it started.
func Run(seed uint64, o Options) *Result {
	p := NewPlan(seed, o)
	w := newWorld(p, time.Now())
	for i := range p.Cands {
		c, err := newCandidate(w, i)
		if err != nil {
			panic(fmt.Sprintf("sim: seed %d: candidate %d: %v", seed, i, err))
		}
		w.cands = append(w.cands, c)
	}

	go w.loop()
	end := make(chan struct{})
	var drivers sync.WaitGroup
	for _, c := range w.cands {
		drivers.Go(func() { c.drive(end) })
	}
	faultsDone := make(chan struct{})
	var faults sync.WaitGroup
	faults.Go(func() { w.injectServerFaults(faultsDone) })

	// The calm phase begins once faults stopped and settled (world.settle);
	// it lasts the failover bound plus one TTL, then everything stops.
	cfg := p.Cfg
	limit := time.NewTimer(time.Until(w.faultEnd.Add(8*cfg.TTL + 2*cfg.ShutdownTimeout + 12*time.Second)))
wait:
	for {
		w.mu.Lock()
		w.settle()
		target := w.calmFrom()
		w.mu.Unlock()
		if !target.After(time.Now()) {
			target = time.Now().Add(cfg.TTL / 4)
		}
		t := time.NewTimer(time.Until(target))
		select {
		case <-w.settled:
			t.Stop()
			w.mu.Lock()
			stopAt := w.settleAt.Add(w.calmBound() + cfg.TTL)
			w.mu.Unlock()
			sleepFake(stopAt, w.abort)
			break wait
		case <-t.C:
		case <-limit.C:
			t.Stop()
			break wait
		case <-w.abort:
			t.Stop()
			break wait
		}
	}
	limit.Stop()
	close(end)

	// Every Run must return within its bound (the drivers check it); a Run
	// stuck in a call that never returns is released by the teardown.
	running := make(chan struct{})
	go func() { drivers.Wait(); close(running) }()
	grace := time.NewTimer(cfg.ShutdownTimeout + cfg.RenewDeadline + time.Second)
	select {
	case <-running:
	case <-grace.C:
	}
	grace.Stop()
	w.mu.Lock()
	w.finish(time.Now())
	// The teardown (calls failing with errClosed, retried at one instant
	// as often as the scheduler lets them) is not logged; violations are
	// still judged.
	w.muted = true
	w.mu.Unlock()
	close(w.stop)
	<-running
	close(faultsDone)
	faults.Wait()
	// Jobs that ignore cancellation outlive Run; wait for them (on the
	// fake clock) so the bubble ends with no goroutine of ours.
	for range 10_000 {
		w.mu.Lock()
		busy := 0
		for _, f := range w.fns {
			busy += max(f.jobs, 0)
		}
		w.mu.Unlock()
		if busy == 0 {
			break
		}
		time.Sleep(cfg.TTL / 10)
	}
	<-w.loopDone
	for _, c := range w.cands {
		_ = c.cl.rdb.Close()
	}
	w.mu.Lock()
	w.sealed = true
	w.mu.Unlock()
	// Goroutines nothing waits for (a lock call's, a call still in its
	// keyed send delay) may still be finishing: the bubble must not end
	// before they do, nor before the settler.
	time.Sleep(time.Millisecond)
	w.stopSettler()
	w.mu.Lock()
	w.closeVM()
	res := &Result{Seed: seed, Plan: p, Violations: w.viol, Stats: w.stats, log: w.ev}
	w.mu.Unlock()
	return res
}

// injectServerFaults applies the plan's data losses and failovers at
// their times.
func (w *world) injectServerFaults(stop <-chan struct{}) {
	type ev struct {
		at   time.Duration
		kind int // 0 failover, 1 data loss, 2 eviction
	}
	var evs []ev
	for _, d := range w.p.DataLoss {
		evs = append(evs, ev{d, 1})
	}
	for _, d := range w.p.Failovers {
		evs = append(evs, ev{d, 0})
	}
	if w.lk == nil || w.evictLocks {
		for _, d := range w.p.Evictions {
			evs = append(evs, ev{d, 2})
		}
	}
	for _, s := range w.p.Stalls {
		w.mu.Lock()
		w.event(-1, evNote, 0, 0, 0, 0, fmt.Sprintf("(plan) redis stalls from %s to %s", fmtDur(s.From), fmtDur(s.To)))
		w.mu.Unlock()
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at < evs[j].at })
	for n, e := range evs {
		t := time.NewTimer(time.Until(w.start.Add(e.at)))
		select {
		case <-t.C:
		case <-stop:
			t.Stop()
			return
		case <-w.abort:
			t.Stop()
			return
		}
		w.mu.Lock()
		switch e.kind {
		case 1:
			w.dataLoss(time.Now())
		case 2:
			w.evict(time.Now(), uint64(n))
		default:
			w.failover(time.Now())
		}
		w.mu.Unlock()
	}
	<-stop
}

func sleepFake(until time.Time, abort <-chan struct{}) {
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	select {
	case <-t.C:
	case <-abort:
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
