package sim

import (
	"fmt"
	"sort"
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
			if w.lostAfter(first.at) {
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
