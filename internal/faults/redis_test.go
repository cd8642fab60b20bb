//go:build linux

package faults_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/faults"
	"github.com/solo-run/solo/leader"
)

// Rows about Redis itself: stalled, restarted without its data, failed
// over to a replica that missed the lease, or its lease deleted behind the
// leader's back.

// TestRedisStall freezes Redis for 0.5 or 2 TTL, with CLIENT PAUSE (the
// server answers nobody) or SIGSTOP (the process is frozen). No overlap;
// if the leader stepped down, the next leader starts within TTL + retry +
// 250ms of the end of the stall.
func TestRedisStall(t *testing.T) {
	for _, how := range []string{"CLIENT PAUSE", "SIGSTOP"} {
		for _, mult := range []float64{0.5, 2} {
			t.Run(fmt.Sprintf("%s/%.1fxTTL", how, mult), func(t *testing.T) {
				st := report.Row(fmt.Sprintf("Redis stalled (%s) %.1f×TTL", how, mult))
				r := faults.NewRig(t, faults.RigConfig{Candidates: 3})
				tm := r.Cfg.Timing
				bound := tm.TTL + tm.RetryInterval + 250*time.Millisecond
				direct := r.Direct()
				stall := time.Duration(mult * float64(tm.TTL))
				for range profile.Iterations(2) {
					l := r.StableLeader()
					id := l.Slot.ID()
					r.Phase()
					from := r.H.Len()
					begin := r.H.Note(faults.KindFault, faults.TestCand, "Redis stalled: "+how)
					if how == "SIGSTOP" {
						r.Redis.Stop(t)
						r.Sleep(stall)
						r.Redis.Cont(t)
					} else {
						if err := direct.Do(context.Background(), "CLIENT", "PAUSE", stall.Milliseconds(), "ALL").Err(); err != nil {
							t.Fatalf("CLIENT PAUSE: %v", err)
						}
						r.Sleep(stall)
					}
					end := r.H.Note(faults.KindHeal, faults.TestCand, "stall over")
					st.Iteration(1)
					// The leader steps down by begin + RenewDeadline at the
					// latest if it is going to.
					r.Sleep(max(0, tm.RenewDeadline-faults.Since(begin, faults.Mono())) + 100*time.Millisecond)
					if _, ok := r.Find(from, func(ev faults.Event) bool { return ev.Cand == id && ev.Kind == faults.KindStop }); !ok {
						continue
					}
					st.Count("leader stepped down", 1)
					next, ok := r.NextStart(from, "", bound)
					if !ok {
						t.Errorf("the leader stepped down and no leader started within %s of the stall's end", bound)
						continue
					}
					d := faults.Since(end, next.Mono)
					st.Failover(faults.Since(begin, next.Mono))
					st.Measure("new leader after the stall's end", d)
					if d > bound {
						t.Errorf("new leader %s started %s after the stall; bound TTL + retry + 250ms = %s", next.Cand, d, bound)
					}
				}
				res := r.Finish()
				r.RequireSafety(res, st)
				r.RequireNoOverlap(res, nil)
			})
		}
	}
}

// TestRedisRestart kills redis-server and starts it again without its data.
// The old leader learns it lost the lease at its next renewal, so an
// overlap with a new leader is bounded by the renew interval plus that
// renewal's round trip (and the job's reaction to cancellation, allowed
// 100ms); no stale write is accepted, and terms still increase.
func TestRedisRestart(t *testing.T) {
	st := report.Row("redis-server SIGKILL + restart without persistence")
	r := faults.NewRig(t, faults.RigConfig{Candidates: 3})
	tm := r.Cfg.Timing
	type window struct {
		old   string
		bound time.Duration
	}
	var allowed []window
	for range profile.Iterations(3) {
		l := r.StableLeader()
		id := l.Slot.ID()
		r.Phase()
		from := r.H.Len()
		at := r.H.Note(faults.KindFault, faults.TestCand, "redis-server SIGKILL + restart")
		r.Redis.Restart(t)
		r.H.Note(faults.KindHeal, faults.TestCand, "redis-server up, empty")
		st.Iteration(1)
		stop, ok := r.WaitStop(from, id, 2*tm.TTL)
		if !ok {
			t.Fatalf("%s still leads %s after Redis lost its lease", id, 2*tm.TTL)
		}
		next, ok := r.NextStart(from, "", 3*tm.TTL) // any new term, the old leader's too
		if !ok {
			t.Fatalf("no new leader within %s of the restart", 3*tm.TTL)
		}
		st.Failover(faults.Since(at, next.Mono))
		if next.Term <= l.Term {
			t.Errorf("term %d after the restart is not above %d from before", next.Term, l.Term)
		}
		lost, ok := r.Find(from, func(ev faults.Event) bool {
			return ev.Cand == id && ev.Kind == faults.KindRenew && ev.Term == l.Term && ev.Result == faults.ResultLost
		})
		if !ok {
			t.Errorf("%s stopped (%s) without a renewal finding the lease lost", id, stop.Detail)
			continue
		}
		bound := tm.RenewInterval + time.Duration(lost.Dur) + 100*time.Millisecond
		allowed = append(allowed, window{old: id, bound: bound})
		if ov := faults.Since(next.Mono, stop.Mono); ov > 0 {
			st.Measure("overlap old/new leader", ov)
			if ov > bound {
				t.Errorf("old leader %s ran %s beside new leader %s; bound renew interval + renew RTT (%s) + 100ms = %s",
					id, ov, next.Cand, time.Duration(lost.Dur), bound)
			}
		}
	}
	res := r.Finish()
	r.RequireSafety(res, st)
	r.RequireNoOverlap(res, func(o faults.Overlap) bool {
		for _, w := range allowed {
			if o.A.Cand == w.old && strings.Contains(o.A.Cause, leader.ErrLeaseLost.Error()) && o.Dur() <= w.bound {
				return true // checked above against its bound
			}
		}
		return false
	})
}

// TestSentinelFailover fails Sentinel over to a replica that missed the
// current lease: the replica is pointed at a dead address (its data stays,
// no more writes reach it), the leader resigns so that a fresh lease is
// taken on the primary, then the replica is promoted.
//
// With MinReplicas=1 the fresh acquire is refused (nobody leads until the
// failover) and there is no overlap. Without it the new lease is lost in the
// failover (the test waits a TTL first, so the replica's older copy has
// expired too): a follower may start on the new primary while the leader of
// the lost lease runs on until its next renewal finds the lease gone; the
// fence refuses that leader's writes from the new leader's claim on.
func TestSentinelFailover(t *testing.T) {
	for _, minReplicas := range []int{1, 0} {
		name := "with MinReplicas=1"
		if minReplicas == 0 {
			name = "without MinReplicas"
		}
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			st := report.Row("Sentinel failover to a replica that missed the lease, " + name)
			r := faults.NewRig(t, faults.RigConfig{Candidates: 3, Sentinel: true, MinReplicas: minReplicas})
			tm := r.Cfg.Timing
			ctx := context.Background()
			for range profile.Iterations(2) {
				l := r.StableLeader()
				replica := r.Sentinel.Replica()
				rc := replica.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
				if err := rc.ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(deadPort(t))).Err(); err != nil {
					t.Fatalf("cut replication to %s: %v", replica.Addr(), err)
				}
				from := r.H.Len()
				r.H.Note(faults.KindFault, faults.TestCand, "replica "+replica.Addr()+" cut off from its primary")
				r.Resign(l.Slot)
				if minReplicas > 0 {
					if _, _, ok := r.H.Wait(2*tm.TTL, from, func(ev faults.Event) bool {
						return ev.Kind == faults.KindAcquire && ev.Result == faults.ResultNotReplicated
					}); !ok {
						t.Errorf("no acquire refused for want of a replica within %s", 2*tm.TTL)
					}
				} else {
					// Anyone's, the resigned candidate's too once its
					// cooldown is over: a follower whose subscription sits on
					// the cut-off replica misses the release notice and waits
					// for the lease's expiry.
					next, ok := r.NextStart(from, "", 2*tm.TTL)
					if !ok {
						t.Fatalf("no new lease on the primary within %s", 2*tm.TTL)
					}
					// Let the replica's copy of the lease from before the cut
					// expire, so that the promoted replica has no lease at
					// all and a follower may take over at once, while the
					// leader of the lost lease runs on to its next renewal.
					r.Sleep(tm.TTL)
					v, err := rc.Get(ctx, r.LeaderConfig().LeaseKey()).Result()
					if err == nil && v == (leader.Lease{Term: next.Term, ID: next.Cand}).String() {
						t.Errorf("the replica has the fresh lease %q: the scenario did not happen", v)
					} else {
						st.Count("fresh lease missing on the promoted replica", 1)
					}
				}
				beganIdx := r.H.Len()
				began := r.H.Note(faults.KindFault, faults.TestCand, "SENTINEL FAILOVER to "+replica.Addr())
				if minReplicas > 0 {
					// Until the failover begins the replica acknowledges
					// nothing; from then on the promoted replica's own
					// replica (the old primary, made one by Failover) may.
					for _, ev := range r.H.Events(from) {
						if ev.Kind == faults.KindStart && ev.Mono < began {
							t.Errorf("%s started term %d on a lease no replica acknowledged", ev.Cand, ev.Term)
						}
					}
				}
				r.Sentinel.Failover(t)
				done := r.H.Note(faults.KindHeal, faults.TestCand, "failover done")
				st.Iteration(1)
				next, ok := r.NextStart(beganIdx, "", 3*tm.TTL)
				if !ok {
					t.Fatalf("no leader within %s of the failover", 3*tm.TTL)
				}
				st.Failover(faults.Since(began, next.Mono))
				st.Measure("new leader after Failover returned (negative: before)", faults.Since(done, next.Mono))
			}
			res := r.Finish()
			r.RequireSafety(res, st)
			if minReplicas > 0 {
				r.RequireNoOverlap(res, nil)
			}
		})
	}
}

// deadPort returns a loopback port nobody listens on (a moment ago).
func deadPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	return port
}

// TestLeaseChaos deletes the lease, or makes it expire at once, behind the
// leader's back. The leader stops at its next renewal, which finds the lease
// gone and does not re-create it; no stale write is accepted. (Overlaps are
// possible — a follower may find the key gone first — and are reported.)
func TestLeaseChaos(t *testing.T) {
	for _, how := range []string{"DEL", "PEXPIRE 1ms"} {
		t.Run(strings.Fields(how)[0], func(t *testing.T) {
			st := report.Row("lease " + map[string]string{"DEL": "deleted", "PEXPIRE 1ms": "expired early"}[how] + " by a chaos client")
			r := faults.NewRig(t, faults.RigConfig{Candidates: 3})
			tm := r.Cfg.Timing
			direct := r.Direct()
			key := r.LeaderConfig().LeaseKey()
			for range profile.Iterations(3) {
				l := r.StableLeader()
				id := l.Slot.ID()
				value := leader.Lease{Term: l.Term, ID: id}.String()
				r.Phase()
				w := r.WatchLease(value)
				from := r.H.Len()
				at := r.H.Note(faults.KindFault, faults.TestCand, "chaos client: "+how)
				var err error
				if how == "DEL" {
					err = direct.Del(context.Background(), key).Err()
				} else {
					err = direct.PExpire(context.Background(), key, time.Millisecond).Err()
				}
				if err != nil {
					t.Fatal(err)
				}
				// The removal ran on the server before this point, and a
				// PEXPIRE 1ms key lives up to 1ms more: a renewal sent
				// later must find it gone. One sent between the note and
				// here may have run before the removal (the test goroutine
				// can be descheduled between the two) and succeed.
				removed := faults.Mono()
				if how != "DEL" {
					removed += int64(time.Millisecond)
				}
				st.Iteration(1)
				stop, ok := r.WaitStop(from, id, 2*tm.TTL)
				if !ok {
					t.Fatalf("%s still leads %s after its lease was removed", id, 2*tm.TTL)
				}
				st.Measure("leader stopped after the removal", faults.Since(at, stop.Mono))
				if ev, found := r.Find(from, func(ev faults.Event) bool {
					return ev.Cand == id && ev.Kind == faults.KindRenew && ev.Term == l.Term && ev.Result == faults.ResultOK && ev.Mono > removed
				}); found {
					t.Errorf("%s renewed term %d (sent at %.1fms), after its lease was removed (by %.1fms)", id, l.Term, ms(ev.Mono-r.Origin), ms(removed-r.Origin))
				}
				lost, ok := r.Find(from, func(ev faults.Event) bool {
					return ev.Cand == id && ev.Kind == faults.KindRenew && ev.Term == l.Term && ev.Result == faults.ResultLost
				})
				switch {
				case !ok:
					t.Errorf("%s stopped (%s) without a renewal finding the lease gone", id, stop.Detail)
				case lost.Mono > at+int64(tm.RenewInterval+100*time.Millisecond):
					t.Errorf("the renewal that found the lease gone came %s after the removal; want the next one (≤ renew interval %s)",
						faults.Since(at, lost.Mono), tm.RenewInterval)
				case stop.Mono > lost.Mono+lost.Dur+int64(100*time.Millisecond):
					t.Errorf("%s stopped %s after its renewal found the lease gone", id, faults.Since(lost.Mono+lost.Dur, stop.Mono))
				}
				r.Sleep(100 * time.Millisecond)
				_, seen := w.Stop()
				gone := false
				for _, v := range seen {
					if v != value {
						gone = true
					} else if gone {
						t.Errorf("lease %q re-created after its removal (values seen: %q)", value, seen)
						break
					}
				}
			}
			res := r.Finish()
			r.RequireSafety(res, st)
		})
	}
}

// TestSentinelPlannedFailover runs planned failovers (SENTINEL FAILOVER,
// redistest's Failover) one after another under a leader, on a real
// Sentinel group of a primary, three replicas and three sentinels, with the
// fence store as the outside witness.
//
// SENTINEL FAILOVER does not stop the old master: the leading sentinel
// sends the chosen replica REPLICAOF NO ONE, points the two other replicas
// at it one by one (parallel-syncs 1) and only then announces it
// (+switch-master), 2–3.5s later here. The candidates listen to that
// sentinel only, so they are the last to follow (a client that happens to
// dial meanwhile asks the sentinel and follows at once). The leader's
// renewals in that window land on the old master and never reach the new
// one, whose copy of the lease runs out at the last replicated renewal +
// TTL. The lease survives when the first renewal on the new master comes
// before that, which TTL − 2 × RenewInterval > window guarantees
// (docs/operations.md, "Redis failed over (Sentinel)").
//
// "renew every 1s": TTL 10s and RenewInterval 1s tolerate an 8s window;
// every failover must keep the lease: one term in the history, one claim in
// the store, no overlap, no renewal finding the lease lost. "TTL 1s": the
// window is longer than the TTL, so a failover costs the lease (a renewal
// answered "lost" on the new master) unless the leader's client dialed
// early; at least one of three must; level 2 holds as ever.
func TestSentinelPlannedFailover(t *testing.T) {
	for _, c := range []struct {
		name      string
		timing    faults.Timing
		failovers int
		keep      bool // the lease must survive every failover, else none does
	}{
		{"renew every 1s", faults.Timing{TTL: 10 * time.Second, RenewInterval: time.Second, RenewDeadline: 6 * time.Second,
			RetryInterval: 2 * time.Second, RedisTimeout: 500 * time.Millisecond, WriteMin: 20 * time.Millisecond, WriteMax: 50 * time.Millisecond},
			profile.Iterations(6), true},
		{"TTL 1s", faults.Timing{TTL: time.Second, RenewInterval: 300 * time.Millisecond, RenewDeadline: 650 * time.Millisecond,
			RetryInterval: 200 * time.Millisecond, RedisTimeout: 300 * time.Millisecond, WriteMin: 20 * time.Millisecond, WriteMax: 50 * time.Millisecond},
			profile.Iterations(3), false},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			st := report.Row("Sentinel planned failovers in a row, " + c.name)
			r := faults.NewRig(t, faults.RigConfig{Candidates: 3, Sentinel: true, SentinelReplicas: 3,
				FollowFailoverSentinel: true, Timing: c.timing})
			tm := r.Cfg.Timing
			l := r.StableLeader()
			first := l.Term
			id := l.Slot.ID()
			lostAt := 0
			for i := range c.failovers {
				from := r.H.Len()
				began := r.H.Note(faults.KindFault, faults.TestCand, fmt.Sprintf("SENTINEL FAILOVER %d to %s", i, r.Sentinel.Replica().Addr()))
				r.Sentinel.Failover(t)
				done := r.H.Note(faults.KindHeal, faults.TestCand, "failover done")
				st.Iteration(1)
				// The leading sentinel reports the new master last: about
				// when the candidates follow it.
				st.Measure("SENTINEL FAILOVER to all sentinels on the new master", faults.Since(began, done))
				// A renewal that found the lease gone since the failover began,
				// or else the leader's first renewal that succeeded after it,
				// tells whether the lease survived on the new master (on the
				// old master, a replica by then, a renewal fails with
				// READONLY: an error, retried). A leader that stepped down
				// for another reason (a renew deadline missed under load)
				// is neither.
				bound := tm.TTL + 2*tm.RenewDeadline
				ev, _, ok := r.H.Wait(bound, from, func(ev faults.Event) bool {
					return ev.Cand == id && (ev.Kind == faults.KindStop ||
						ev.Kind == faults.KindRenew && (ev.Result == faults.ResultLost || ev.Result == faults.ResultOK && ev.Mono > done))
				})
				switch {
				case !ok:
					t.Fatalf("failover %d: the leader %s neither renewed nor stopped within %s", i, id, bound)
				case ev.Kind == faults.KindRenew && ev.Result == faults.ResultOK:
					continue
				case ev.Kind == faults.KindRenew:
					lostAt++
				case c.keep:
					t.Errorf("failover %d: the leader %s stopped: %s", i, id, ev.Detail)
				default:
					st.Count("leaders stopped for another cause", 1)
				}
				// The next term, then its leader once it renewed.
				if _, ok := r.NextStart(from, "", 2*tm.TTL); !ok {
					t.Fatalf("failover %d: no leader within %s of the lost lease", i, 2*tm.TTL)
				}
				l = r.StableLeader()
				id = l.Slot.ID()
			}
			st.Count("failovers that cost the lease", lostAt)
			res := r.Finish()
			r.RequireSafety(res, st)
			if !c.keep {
				if lostAt == 0 {
					t.Errorf("none of %d failovers cost the lease with TTL %s: no renewal landed on the old master after the promotion", c.failovers, tm.TTL)
				}
				return
			}
			r.RequireNoOverlap(res, nil)
			for _, ev := range res.Events {
				if ev.Kind == faults.KindStart && ev.Term != first {
					t.Errorf("%s started term %d after %d planned failovers: the lease of term %d was lost", ev.Cand, ev.Term, c.failovers, first)
				}
				if ev.Kind == faults.KindRenew && ev.Result == faults.ResultLost {
					t.Errorf("%s's renewal of term %d found the lease lost", ev.Cand, ev.Term)
				}
			}
			if res.Witness.Claims != 1 {
				t.Errorf("the store saw %d claims, want the one of term %d", res.Witness.Claims, first)
			}
		})
	}
}
