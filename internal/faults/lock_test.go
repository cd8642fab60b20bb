//go:build linux

package faults_test

import (
	"strings"
	"testing"
	"time"

	"github.com/solo-run/solo/internal/faults"
	"github.com/solo-run/solo/leader/lock"
)

// Rows about package leader/lock: candidates in LOCK mode loop
// Lock, a fenced hold of 400ms–1.5s, Unlock, on one lock whose name is also
// the fence's election; the fence's holder is Hold.Holder. Level 1: no two
// holds at once where the lease model covers the fault; level 2: no stale
// write accepted, in every row. Timing: faults.LockTiming (TTL 1s, stop
// budget 300ms).

// lockRig starts n LOCK-mode candidates.
func lockRig(t *testing.T, n int) *faults.Rig {
	return faults.NewRig(t, faults.RigConfig{Candidates: n, Timing: faults.LockTiming(), Lock: faults.DefaultLockMode()})
}

// handovers records the gap from each hold that ended by itself (stop,
// then Unlock: the release notice wakes a waiter) to the next hold of
// another candidate.
func handovers(res faults.Result, st *faults.RowStats) {
	for i := 1; i < len(res.Intervals); i++ {
		a, b := res.Intervals[i-1], res.Intervals[i]
		if a.Ended == "stop" && a.Cause == "" && a.Cand != b.Cand && b.Start >= a.Stop {
			st.Handover(time.Duration(b.Start - a.Stop))
		}
	}
}

// maxMisses bounds the tries at landing a fault on a hold: holds end by
// themselves, so a fault may come just after an Unlock; such a try is not
// counted, and this many of them in a row fail the test.
const maxMisses = 20

// TestLockHolderKill: SIGKILL the holder at a random point of its hold.
// No overlap; the next hold starts within TTL + retry + 250ms of the kill
// (the waiters sleep until the dead holder's PTTL runs out). The handover
// after a voluntary Unlock (the release notice wakes a waiter) is measured
// too.
func TestLockHolderKill(t *testing.T) {
	st := report.Row("lock: holder SIGKILL")
	r := lockRig(t, 3)
	tm := r.Cfg.Timing
	bound := tm.TTL + tm.RetryInterval + 250*time.Millisecond
	for done, misses := 0, 0; done < profile.Iterations(3); {
		l := r.Holder()
		id := l.Slot.ID()
		r.Sleep(r.Between(0, 300*time.Millisecond))
		from := r.H.Len()
		killed := r.Kill(l.Slot)
		if !r.HeldAt(l.Index, id, killed) {
			r.Spawn(l.Slot)
			if misses++; misses > maxMisses {
				t.Fatalf("%d kills in a row came after the hold ended", misses)
			}
			continue
		}
		done, misses = done+1, 0
		ev, ok := r.NextStart(from, "", 3*bound)
		if !ok {
			t.Fatalf("no new hold within %s of killing the holder", 3*bound)
		}
		d := faults.Since(killed, ev.Mono)
		st.Iteration(1)
		st.Failover(d)
		if d > bound {
			t.Errorf("new hold of %s started %s after the kill; bound TTL + retry + 250ms = %s", ev.Cand, d, bound)
		}
		r.Spawn(l.Slot)
	}
	res := r.Finish()
	r.RequireSafety(res, st)
	handovers(res, st)
	r.RequireNoOverlap(res, nil)
}

// TestLockHolderPause: SIGSTOP the holder for 2×TTL (past the stop budget
// and the TTL), then SIGCONT; holds here last 3–4 TTL, longer than the
// pause. Another candidate takes the lock meanwhile; on resume the stale
// hold's context is cancelled at once (within 250ms, by the renew deadline
// or a renewal that finds the lock gone)
// and every write it still attempts is refused by the fence. The paused
// hold overlaps the next one: the lease model cannot cover a pause, so
// level 1 is not asked of paused intervals, level 2 is.
func TestLockHolderPause(t *testing.T) {
	st := report.Row("lock: holder SIGSTOP 2.0×TTL")
	// Holds of 3–4 TTL: every hold outlasts the pause, so on SIGCONT only
	// the hold's context, cancelled by the renew deadline, can stop it.
	tm := faults.LockTiming()
	r := faults.NewRig(t, faults.RigConfig{Candidates: 3, Timing: tm,
		Lock: &faults.LockMode{HoldMin: 3 * tm.TTL, HoldMax: 4 * tm.TTL, GapMax: 100 * time.Millisecond}})
	pause := 2 * tm.TTL
	staleAttempts := 0
	for done, misses := 0, 0; done < profile.Iterations(2); {
		l := r.Holder()
		id := l.Slot.ID()
		r.Sleep(r.Between(0, 300*time.Millisecond))
		if !r.Leading(l.Slot) || r.PlannedEnd(l) < faults.Mono()+int64(pause+250*time.Millisecond) {
			// Ended, or would end by itself before SIGCONT + 250ms: the
			// pause would prove nothing about the cancellation.
			r.WaitStop(l.Index, id, 5*tm.TTL)
			if misses++; misses > maxMisses {
				t.Fatalf("%d holds in a row ended or too short for the pause", misses)
			}
			continue
		}
		from := r.H.Len()
		paused := r.Pause(l.Slot)
		r.Sleep(pause)
		resumed := r.Resume(l.Slot)
		stop, ok := r.WaitStop(l.Index, id, 2*tm.TTL)
		if !ok {
			t.Fatalf("stale hold of %s still running %s after SIGCONT", id, 2*tm.TTL)
		}
		if stop.Mono < paused {
			if misses++; misses > maxMisses {
				t.Fatalf("%d pauses in a row came after the hold ended", misses)
			}
			continue
		}
		done, misses = done+1, 0
		st.Iteration(1)
		next, ok := r.NextStart(from, id, tm.TTL)
		if !ok {
			t.Fatalf("no other hold within TTL of resuming from a %s pause", pause)
		}
		st.Failover(faults.Since(paused, next.Mono))
		late := faults.Since(resumed, stop.Mono)
		st.Measure("stale hold stopped after SIGCONT", late)
		if late > 250*time.Millisecond {
			t.Errorf("stale hold of %s stopped %s after SIGCONT; want at once (≤ 250ms)", id, late)
		}
		if !strings.Contains(stop.Detail, lock.ErrRenewDeadline.Error()) && !strings.Contains(stop.Detail, lock.ErrLockLost.Error()) {
			t.Errorf("stale hold of %s ended by %q; want its renew deadline or the lock lost", id, stop.Detail)
		}
		staleAttempts += r.Count(from, func(ev faults.Event) bool {
			return ev.Cand == id && ev.Kind == faults.KindWrite && ev.Term == l.Term && ev.Mono+ev.Dur >= resumed
		})
	}
	res := r.Finish()
	r.RequireSafety(res, st)
	handovers(res, st)
	paused := faults.PausedDuring(res.Events)
	r.RequireNoOverlap(res, func(o faults.Overlap) bool { return paused(o.A) || paused(o.B) })
	st.Count("writes attempted by the stale hold after SIGCONT", staleAttempts)
	t.Logf("%d writes attempted by stale holds after SIGCONT, %d refused as stale", staleAttempts, res.StaleRefused)
	if profile.Name == "long" && staleAttempts == 0 {
		t.Errorf("no stale hold attempted a write after SIGCONT: the fault never bit")
	}
}

// TestLockLinkCut cuts the holder's link (both ways, or replies only),
// short and long cuts alternating.
//
// Short cuts (100–250ms) must not end the hold: the bound a cut of any
// phase is sure to survive is RenewDeadline − RenewInterval − the retry
// back-off (RenewInterval/4), 325ms here. Long cuts (2–2.5×TTL) must
// cancel the hold's context (cause ErrRenewDeadline) before the lock can
// pass: no overlap; the failover time (cut to the next hold) is measured.
// A long cut is made only on a hold planned to outlast its deadline.
func TestLockLinkCut(t *testing.T) {
	for _, how := range []faults.Link{faults.CutBoth, faults.CutReplies} {
		t.Run(string(how), func(t *testing.T) {
			st := report.Row("lock: holder link cut " + string(how))
			r := lockRig(t, 3)
			tm := r.Cfg.Timing
			for i, misses := 0, 0; i < 2*profile.Iterations(1); {
				l := r.Holder()
				id := l.Slot.ID()
				r.Sleep(r.Between(0, 300*time.Millisecond))
				if !r.Leading(l.Slot) {
					if misses++; misses > maxMisses {
						t.Fatalf("%d cuts in a row came after the hold ended", misses)
					}
					continue
				}
				from := r.H.Len()
				if i%2 == 0 {
					d := r.Between(100*time.Millisecond, 250*time.Millisecond)
					cut := r.Cut(l.Slot, how)
					r.Sleep(d)
					r.Heal(l.Slot)
					stop, ok := r.WaitStop(l.Index, id, tm.TTL+faults.DefaultLockMode().HoldMax)
					if !ok {
						t.Fatalf("hold of %s never ended", id)
					}
					if !r.HeldAt(l.Index, id, cut) {
						continue // ended before the cut
					}
					i, misses = i+1, 0
					st.Iteration(1)
					if stop.Detail != "" {
						st.FalseFailover()
						t.Errorf("hold of %s (term %d) lost after a %s cut: %s", id, l.Term, d, stop.Detail)
					}
					continue
				}
				d := r.Between(2*tm.TTL, 5*tm.TTL/2)
				if r.PlannedEnd(l) < faults.Mono()+int64(tm.RenewDeadline+50*time.Millisecond) {
					// The hold would end by itself before the deadline
					// could end it: the cut would prove nothing. Wait for
					// the next hold.
					r.WaitStop(l.Index, id, 2*tm.TTL)
					if misses++; misses > maxMisses {
						t.Fatalf("%d holds in a row too short for a long cut", misses)
					}
					continue
				}
				cut := r.Cut(l.Slot, how)
				stop, ok := r.WaitStop(l.Index, id, d)
				if !ok {
					t.Errorf("%s still holds %s into a cut of its link", id, d)
				}
				r.Sleep(d - faults.Since(cut, faults.Mono()))
				r.Heal(l.Slot)
				i, misses = i+1, 0
				st.Iteration(1)
				if ok && !strings.Contains(stop.Detail, lock.ErrRenewDeadline.Error()) {
					t.Errorf("hold of %s ended %s into the cut by %q; want its renew deadline (its planned end was %s later)",
						id, faults.Since(cut, stop.Mono), stop.Detail, faults.Since(cut, r.PlannedEnd(l)))
				}
				if next, found := r.NextStart(from, id, 2*tm.TTL); found {
					st.Failover(faults.Since(cut, next.Mono))
				} else {
					t.Errorf("no other hold within 2 TTL of the end of a %s cut", d)
				}
			}
			res := r.Finish()
			r.RequireSafety(res, st)
			handovers(res, st)
			r.RequireNoOverlap(res, nil)
		})
	}
}

// TestLockRedisRestart kills redis-server and starts it again without its
// data, while a hold runs. The holder learns it lost the lock at its next
// renewal (or ends its hold first); that renewal may fail on the dropped
// connection and be retried after RenewInterval/4; so an overlap with the
// next hold is bounded by the renew interval plus that back-off plus a
// round trip (the client timeout, 250ms) plus 100ms: 725ms. The next
// hold's term is above the lost one's (the term's floor is the server
// clock); no stale write is accepted.
func TestLockRedisRestart(t *testing.T) {
	st := report.Row("lock: redis-server SIGKILL + restart without persistence")
	r := lockRig(t, 3)
	tm := r.Cfg.Timing
	bound := tm.RenewInterval + tm.RenewInterval/4 + tm.RedisTimeout + 100*time.Millisecond
	var old []string
	for done, misses := 0, 0; done < profile.Iterations(3); {
		l := r.Holder()
		id := l.Slot.ID()
		r.Sleep(r.Between(0, 300*time.Millisecond))
		if !r.Leading(l.Slot) {
			if misses++; misses > maxMisses {
				t.Fatalf("%d restarts in a row came after the hold ended", misses)
			}
			continue
		}
		from := r.H.Len()
		at := r.H.Note(faults.KindFault, faults.TestCand, "redis-server SIGKILL + restart")
		r.Redis.Restart(t)
		r.H.Note(faults.KindHeal, faults.TestCand, "redis-server up, empty")
		done, misses = done+1, 0
		st.Iteration(1)
		stop, ok := r.WaitStop(l.Index, id, 2*tm.TTL+faults.DefaultLockMode().HoldMax)
		if !ok {
			t.Fatalf("hold of %s still runs %s after Redis lost its lock", id, 2*tm.TTL)
		}
		next, ok := r.NextStart(from, id, 3*tm.TTL)
		if !ok {
			t.Fatalf("no new hold within %s of the restart", 3*tm.TTL)
		}
		st.Failover(faults.Since(at, next.Mono))
		if next.Term <= l.Term {
			t.Errorf("term %d after the restart is not above %d from before", next.Term, l.Term)
		}
		if stop.Detail != "" {
			st.Count("holds ended by "+stop.Detail, 1)
		}
		old = append(old, id)
		if ov := faults.Since(next.Mono, stop.Mono); ov > 0 {
			st.Measure("overlap old/new hold", ov)
			if ov > bound {
				t.Errorf("old holder %s ran %s beside new holder %s; bound renew interval + retry back-off + client timeout + 100ms = %s", id, ov, next.Cand, bound)
			}
		}
	}
	res := r.Finish()
	r.RequireSafety(res, st)
	handovers(res, st)
	r.RequireNoOverlap(res, func(o faults.Overlap) bool {
		for _, id := range old {
			if o.A.Cand == id && o.Dur() <= bound {
				return true // checked above against its bound
			}
		}
		return false
	})
}

// TestLockChaos runs 6 LOCK-mode candidates through a random sequence of
// faults: kills of the holder or anyone (with restarts), pauses of
// 0.2–3×TTL, link cuts in any direction, latency, connection resets; a
// third of the steps also freeze a random other candidate meanwhile.
// Level 2 over the whole run, increasing terms, level 1 for every interval
// not frozen, and a holder with an accepted write again after every step.
func TestLockChaos(t *testing.T) {
	st := report.Row("lock: 6 candidates, random kills, pauses, cuts, latency, resets")
	r := lockRig(t, 6)
	r.WaitReady()
	tm := r.Cfg.Timing
	randomSlot := func(not *faults.Slot) *faults.Slot {
		for {
			s := r.Slots[r.Rand.IntN(len(r.Slots))]
			if s != not && s.Alive() {
				return s
			}
		}
	}
	for range profile.Iterations(8) {
		l := r.Holder()
		var frozen *faults.Slot
		if r.Rand.IntN(3) == 0 {
			frozen = randomSlot(l.Slot)
			r.Pause(frozen)
		}
		target := l.Slot
		if r.Rand.IntN(2) == 0 {
			target = randomSlot(frozen)
		}
		n := 1
		switch r.Rand.IntN(5) {
		case 0:
			r.Kill(target)
			r.Spawn(target)
		case 1:
			if target == frozen {
				break
			}
			r.Pause(target)
			r.Sleep(time.Duration(float64(tm.TTL) * (0.2 + 2.8*r.Rand.Float64())))
			r.Resume(target)
		case 2:
			how := []faults.Link{faults.CutBoth, faults.CutRequests, faults.CutReplies}[r.Rand.IntN(3)]
			r.Cut(target, how)
			r.Sleep(r.Between(100*time.Millisecond, 2*tm.TTL))
			r.Heal(target)
		case 3:
			r.Latency(target, r.Between(20*time.Millisecond, 300*time.Millisecond))
			r.Sleep(r.Between(300*time.Millisecond, tm.TTL))
			r.Heal(target)
		case 4:
			for range 1 + r.Rand.IntN(6) {
				r.ResetLinks(target)
				r.Sleep(r.Between(50*time.Millisecond, 200*time.Millisecond))
			}
			r.Heal(target)
		}
		if frozen != nil {
			r.Resume(frozen)
			n++
		}
		st.Iteration(n)
	}
	r.Holder()
	res := r.Finish()
	r.RequireSafety(res, st)
	handovers(res, st)
	paused := faults.PausedDuring(res.Events)
	r.RequireNoOverlap(res, func(o faults.Overlap) bool { return paused(o.A) || paused(o.B) })
}
