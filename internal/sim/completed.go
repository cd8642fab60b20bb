package sim

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/solo-run/solo/worker"
)

// checkCompleted is invariant 5's at-least-once counterpart, at the
// schedule's end: an at-least-once tick that fired is eventually run to
// completion; in particular no completion recorded past it (the job's
// cron-done checkpoint) while it never completed, for then no later term
// runs it: it is lost for good. A loss of the server's data after it
// fired (data loss, a failover without MinReplicas, an eviction) is out of
// the model.
func (w *world) checkCompleted(end time.Time) {
	for _, cp := range w.p.Crons {
		if cp.Delivery != worker.AtLeastOnce {
			continue
		}
		done, ok := w.checkpointNow(end, "cron-done:"+cp.Name)
		if !ok {
			continue
		}
		var lost []tickKey
		for k := range w.ticks {
			if k.job == cp.Name && k.ms <= done && !w.completed[k] {
				lost = append(lost, k)
			}
		}
		sort.Slice(lost, func(i, j int) bool { return lost[i].ms < lost[j].ms })
		for _, k := range lost {
			first := w.ticks[k][0]
			if w.lostAfter(w.recordedAt(k, first)) {
				w.outOfModel("an at-least-once tick's records lost to data loss, a failover without min_replicas or an eviction")
				continue
			}
			w.violate(InvTicks, fmt.Sprintf("at-least-once %s tick %s fired (first by c%d term %d at %s) and never completed, but the completion record moved past it to %s: no term runs it again",
				cp.Name, time.UnixMilli(k.ms).UTC().Format("15:04:05.000"), first.cand, first.term, fmtDur(first.at.Sub(w.start)),
				time.UnixMilli(done).UTC().Format("15:04:05.000")), "owed-tick-lost")
			break
		}
	}
}

// lostAfter reports whether the server lost data (a data loss, a failover
// without MinReplicas, an eviction) after t.
func (w *world) lostAfter(t time.Time) bool {
	for _, l := range append(append([]time.Time(nil), w.losses...), w.evictions...) {
		if !l.Before(t) {
			return true
		}
	}
	return false
}

// recordedAt is when fire's run got its tick's fired record
// (cp:cron:JOB: what keeps another term from firing the tick again, and
// what tells the next at-least-once term that it is owed): the last
// record its own term made by the run's start, else (an owed tick, which
// an earlier term recorded) the last any term made by then, else the
// run's start. A loss of the server's data counts against the run from
// then: the record is written a reply (and, at least once, the
// completed-tick read) before the run, either of which may be slow, so a
// loss in between takes it; and a record the old master took after a
// failover is lost when its window ends, however late the run starts.
func (w *world) recordedAt(k tickKey, fire tickFire) time.Time {
	var anyTerm time.Time
	for _, r := range slices.Backward(w.recorded[k]) {
		switch {
		case r.at.After(fire.at):
		case r.term == fire.term:
			return r.at
		case anyTerm.IsZero():
			anyTerm = r.at
		}
	}
	if anyTerm.IsZero() {
		return fire.at
	}
	return anyTerm
}

// postCheckpoint notes each time a server (the primary, or the old master
// after a failover) took a cron tick's fired record: a checkpoint script
// on cp:cron:JOB that answered 1 (once per tick, unless a loss took the
// record or a request was run twice).
func (w *world) postCheckpoint(now time.Time, sc *script, keys, argv []string, r any) {
	if sc.name != "leader/checkpoint.lua" || r != int64(1) || len(keys) < 2 || len(argv) < 2 {
		return
	}
	job, ok := strings.CutPrefix(keys[1], w.p.Cfg.Key("")+"cp:cron:")
	l, lok := parseLease(argv[0])
	ms, err := strconv.ParseInt(argv[1], 10, 64)
	if !ok || !lok || err != nil {
		return
	}
	k := tickKey{job, ms}
	w.recorded[k] = append(w.recorded[k], tickFire{term: l.Term, at: now})
}
