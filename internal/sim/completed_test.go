package sim

import (
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
)

// tickWorld is a world with two candidates and no network, for driving
// invariant 5's checker by hand: the server runs the shipped checkpoint
// script, the test says who holds the lease and when a tick's run starts.
type tickWorld struct {
	t *testing.T
	w *world
}

func newTickWorld(t *testing.T, delivery worker.Delivery) *tickWorld {
	p := NewPlan(1, Options{})
	p.Crons = []CronPlan{{Name: "j", Spec: "* * * * * *", Misfire: "run-once", Delivery: delivery}}
	w := newWorld(p, time.Now())
	t.Cleanup(w.stopSettler)
	w.cands = []*candidate{{w: w, idx: 0, id: "c0"}, {w: w, idx: 1, id: "c1"}}
	return &tickWorld{t: t, w: w}
}

// lead makes cand's lease of term the server's.
func (tw *tickWorld) lead(cand int, term uint64) leader.Lease {
	l := leader.Lease{Term: term, ID: tw.w.cands[cand].id}
	c := &cmdCtx{ks: &tw.w.prim.ks, srv: tw.w.srvNs(time.Now())}
	if _, err := c.do([]string{"SET", tw.w.p.Cfg.LeaseKey(), l.String()}); err != nil {
		tw.t.Fatal(err)
	}
	return l
}

// checkpoint runs checkpoint.lua for key under lease l, as the worker's
// elector sends it, and wants reply 1.
func (tw *tickWorld) checkpoint(l leader.Lease, key string, n int64) {
	sc := scripts().get("leader/checkpoint.lua")
	cfg := tw.w.p.Cfg
	r := tw.w.exec(time.Now(), 0, []string{"EVAL", sc.src, "2", cfg.LeaseKey(), cfg.Key("cp:" + key), l.String(), strconv.FormatInt(n, 10)}, &execResult{})
	if r != int64(1) {
		tw.t.Fatalf("checkpoint %s %d = %v, want 1", key, n, r)
	}
}

// fire records that cand's run of tick starts, its lease of term the
// server's (the lease, as a loss left it, is not the point here).
func (tw *tickWorld) fire(cand int, term uint64, tick time.Time) {
	tw.lead(cand, term)
	tw.w.fired(cand, term, "j", tick)
}

// fireAgain has cand's term, a second later, record tick as fired and
// run it: the at-most-once path of a term that found no record of it.
func (tw *tickWorld) fireAgain(cand int, term uint64, tick time.Time) {
	time.Sleep(time.Second)
	tw.checkpoint(tw.lead(cand, term), "cron:j", tick.UnixMilli())
	tw.w.fired(cand, term, "j", tick)
}

// wantExcused wants no violation of invariant 5 and one out-of-model
// event for reason.
func (tw *tickWorld) wantExcused(reason string) {
	tw.t.Helper()
	for _, v := range tw.w.viol {
		tw.t.Errorf("violation: %v", v)
	}
	if tw.w.stats.OutOfModel[reason] != 1 {
		tw.t.Errorf("out of model %v, want one %q", tw.w.stats.OutOfModel, reason)
	}
}

// A tick's fired record reaches the server, the server loses it (a data
// loss; the old master's window after a failover without MinReplicas
// ends) while the reply, or the completed-tick read of an at-least-once
// run, is on its way, and the run starts after the loss. A later term
// that finds no record fires the tick again (at most once), or completes
// a later tick past it (at least once): out of the model, as any loss of
// the records. Judged by the run's start instead of the record's write,
// both were violations (seeds 73919118828597, 213634314665480 and
// 213634314663835):
//
//	invariant 5 cron ticks at 6.951029s: cron cron0 tick 00:00:05.000 fired twice: by c2 term 946685145812070 at 5.707801s and by c0 term 946685147470879
//	invariant 5 cron ticks at 29.569850s: at-least-once cron0 tick 00:00:04.000 fired (first by c3 term 946687907756224 at 6.259180s) and never completed, but the completion record moved past it to 00:00:28.000: no term runs it again [owed-tick-lost]
func TestCheckTicks_RecordLostBeforeTheRun(t *testing.T) {
	tick := time.UnixMilli(946684805000).UTC()
	// Each records the tick as fired for c0's term 10, on a server that
	// then loses the record.
	losses := []struct {
		name          string
		recordAndLose func(tw *tickWorld)
	}{
		{"data loss", func(tw *tickWorld) {
			tw.checkpoint(tw.lead(0, 10), "cron:j", tick.UnixMilli())
			time.Sleep(time.Millisecond)
			tw.w.dataLoss(time.Now())
		}},
		{"recorded on the old master", func(tw *tickWorld) {
			w := tw.w
			w.p.Cfg.MinReplicas, w.p.Promote = 0, 50*time.Millisecond
			l := tw.lead(0, 10)
			w.failover(time.Now())
			if !time.Now().Before(w.oldUntil[0]) {
				tw.t.Fatalf("c0 talks to the old master until %v: want a window", w.oldUntil[0])
			}
			w.onOldMaster(0, time.Now(), func() { tw.checkpoint(l, "cron:j", tick.UnixMilli()) })
		}},
	}
	for _, tc := range losses {
		t.Run("fired twice, "+tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tw := newTickWorld(t, worker.AtMostOnce)
				tc.recordAndLose(tw)
				time.Sleep(700 * time.Millisecond) // the reply, slow: past every window
				tw.fire(0, 10, tick)
				tw.fireAgain(1, 11, tick)
				tw.wantExcused("cron tick fired again after data loss or a failover without min_replicas")
			})
		})
	}
	t.Run("fired twice, the run on the lost record last", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			tw := newTickWorld(t, worker.AtMostOnce)
			losses[0].recordAndLose(tw)
			tw.fireAgain(1, 11, tick)
			time.Sleep(700 * time.Millisecond) // c0's reply, slower still
			tw.fire(0, 10, tick)
			tw.wantExcused("cron tick fired again after data loss or a failover without min_replicas")
		})
	})
	t.Run("fired twice, no loss", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			tw := newTickWorld(t, worker.AtMostOnce)
			tw.checkpoint(tw.lead(0, 10), "cron:j", tick.UnixMilli())
			time.Sleep(700 * time.Millisecond)
			tw.fire(0, 10, tick)
			c := &cmdCtx{ks: &tw.w.prim.ks, srv: tw.w.srvNs(time.Now())}
			if _, err := c.do([]string{"DEL", tw.w.p.Cfg.Key("cp:cron:j")}); err != nil {
				t.Fatal(err) // (what a broken script might do; no loss)
			}
			tw.fireAgain(1, 11, tick)
			if tw.w.violN[InvTicks] != 1 {
				t.Errorf("violations %v, want one of invariant 5", tw.w.viol)
			}
		})
	})
	t.Run("owed tick lost", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			tw := newTickWorld(t, worker.AtLeastOnce)
			w := tw.w
			losses[0].recordAndLose(tw)
			time.Sleep(800 * time.Millisecond) // the completed-tick read, slow
			tw.fire(0, 10, tick)               // its run fails: never completed
			later := tick.Add(20 * time.Second)
			tw.fireAgain(1, 11, later)
			w.completed[tickKey{"j", later.UnixMilli()}] = true
			tw.checkpoint(tw.lead(1, 11), "cron-done:j", later.UnixMilli())
			w.checkCompleted(time.Now())
			tw.wantExcused("an at-least-once tick's records lost to data loss, a failover without min_replicas or an eviction")
		})
	})
}
