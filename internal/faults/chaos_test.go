//go:build linux

package faults_test

import (
	"testing"
	"time"

	"github.com/solo-run/solo/internal/faults"
)

// TestChaos runs 12 candidates through a random sequence of the faults
// above: leader and follower kills with restarts, pauses of the leader or
// of anyone, resigns and graceful shutdowns, link cuts in any direction,
// latency and connection resets; a third of the steps also freeze a random
// follower meanwhile. Every invariant must hold over the whole run: level 2,
// increasing terms, level 1 for every interval the lease model covers (not
// frozen ones), the failover bound after a leader kill, and a stable leader
// again after every step.
func TestChaos(t *testing.T) {
	st := report.Row("12 candidates: random kills, pauses, restarts, resigns, cuts")
	r := faults.NewRig(t, faults.RigConfig{Candidates: 12})
	r.WaitReady()
	tm := r.Cfg.Timing
	bound := tm.TTL + tm.RetryInterval + 250*time.Millisecond
	steps := 2 * profile.Iterations(8)
	randomSlot := func(not *faults.Slot) *faults.Slot {
		for {
			s := r.Slots[r.Rand.IntN(len(r.Slots))]
			if s != not && s.Alive() {
				return s
			}
		}
	}
	for range steps {
		l := r.StableLeader()
		r.Phase()
		var frozen *faults.Slot
		if r.Rand.IntN(3) == 0 {
			frozen = randomSlot(l.Slot)
			r.Pause(frozen)
		}
		from := r.H.Len()
		target := l.Slot
		if r.Rand.IntN(2) == 0 {
			target = randomSlot(frozen)
		}
		faultsHere := 1
		switch r.Rand.IntN(6) {
		case 0: // kill, restart
			leading := r.Leading(target)
			at := r.Kill(target)
			if leading {
				next, ok := r.NextStart(from, "", 3*bound)
				if !ok {
					t.Fatalf("no new leader within %s of killing the leader", 3*bound)
				}
				d := faults.Since(at, next.Mono)
				st.Failover(d)
				if d > bound {
					t.Errorf("new leader %s started %s after the kill; bound %s", next.Cand, d, bound)
				}
			}
			r.Spawn(target)
		case 1: // pause
			if target == frozen {
				break
			}
			r.Pause(target)
			r.Sleep(time.Duration(float64(tm.TTL) * (0.2 + 2.8*r.Rand.Float64())))
			r.Resume(target)
		case 2: // resign or graceful shutdown, restart
			if r.Rand.IntN(2) == 0 {
				leading := r.Leading(target)
				r.Resign(target)
				if leading {
					// Let the step-down happen before the next step reads
					// who leads.
					if _, ok := r.WaitStop(from, target.ID(), 2*tm.TTL); !ok {
						t.Fatalf("%s did not step down within %s of resigning", target.ID(), 2*tm.TTL)
					}
				}
			} else {
				r.Terminate(target)
				r.Spawn(target)
			}
		case 3: // cut
			how := []faults.Link{faults.CutBoth, faults.CutRequests, faults.CutReplies}[r.Rand.IntN(3)]
			r.Cut(target, how)
			r.Sleep(r.Between(200*time.Millisecond, 3*time.Second))
			r.Heal(target)
		case 4: // latency
			r.Latency(target, r.Between(20*time.Millisecond, 400*time.Millisecond))
			r.Sleep(r.Between(500*time.Millisecond, 2*time.Second))
			r.Heal(target)
		case 5: // resets
			for range 1 + r.Rand.IntN(8) {
				r.ResetLinks(target)
				r.Sleep(r.Between(50*time.Millisecond, 300*time.Millisecond))
			}
			r.Heal(target)
		}
		if frozen != nil {
			r.Resume(frozen)
			faultsHere++
		}
		st.Iteration(faultsHere)
	}
	r.StableLeader()
	res := r.Finish()
	r.RequireSafety(res, st)
	paused := faults.PausedDuring(res.Events)
	r.RequireNoOverlap(res, func(o faults.Overlap) bool { return paused(o.A) || paused(o.B) })
}
