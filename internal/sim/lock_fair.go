package sim

import (
	"fmt"
	"strings"
	"time"
)

// The fair lock (WithFair) on the simulated server: the shipped
// fair_acquire.lua, fair_release.lua and fair_abandon.lua over the lock's
// hash and a FIFO queue of calls ("CALL!") with a slot timeout each
// (server milliseconds), on the primary's keyspace (lock_server.go). The
// checker reads the queue before and after every script run: an entry
// whose slot had lapsed and that the run took out was dropped (L8).

// fairTrack is the checker's view of the fair queue's entries, by entry.
type fairTrack struct {
	set   map[string]time.Time // when the entry joined the queue
	fresh map[string]time.Time // when its slot was last refreshed
}

func newFairTrack() *fairTrack {
	return &fairTrack{set: map[string]time.Time{}, fresh: map[string]time.Time{}}
}

// fairRan records one run of a fair script at now that turned the queue
// before into after; entry is the running attempt's call entry when it
// may queue (wait), under w.mu.
func (lw *lockWorld) fairRan(now time.Time, before, after []qEntry, entry string, wait bool) {
	q := lw.fair
	if q == nil {
		return
	}
	ms := lw.w.srvNs(now) / int64(time.Millisecond)
	in := make(map[string]bool, len(after))
	for _, e := range after {
		in[e.entry] = true
	}
	was := false
	for _, e := range before {
		if e.entry == entry {
			was = true
		}
		if in[e.entry] {
			continue
		}
		if e.to <= ms {
			lw.fairDropped(now, e.entry, q.set[e.entry], q.fresh[e.entry])
		}
		delete(q.set, e.entry)
		delete(q.fresh, e.entry)
	}
	if entry == "" || !wait || !in[entry] {
		return
	}
	if now.After(lw.calmAt) {
		lw.judged(InvLockFair) // a waiter's slot set once faults stopped
	}
	if !was {
		q.set[entry] = now
	}
	q.fresh[entry] = now
}

// fairDropped is L8: a waiter's slot lapsed; in the calm phase, a live
// waiter's never does.
func (lw *lockWorld) fairDropped(now time.Time, entry string, queued, fresh time.Time) {
	w := lw.w
	rec := lw.calls[strings.TrimSuffix(entry, "!")]
	w.event(-1, evNote, 0, 0, 0, 0, "fair: slot of "+entry+" lapsed; dropped from the queue")
	if rec == nil || rec.returned || rec.reported || !rec.waiting || fresh.Before(lw.calmAt) {
		return
	}
	p := lw.procs[rec.proc]
	if p.logStalled(fresh, now) > 0 || p.wake(now) != now {
		return
	}
	c := p.cfg
	if rec.lastSend.After(fresh) || lw.mixed && (rec.inAcquire > 0 || !rec.lastReturn.Add(c.TTL+c.RetryInterval*6/5).Before(fresh.Add(fairSlot(c.TTL, c.RetryInterval)))) {
		// The waiter sent its next attempt in time, but the attempt was
		// still on its way when the slot lapsed (a slow path longer than
		// the slot's slack), or (Mutexes of timings of their own: a slot
		// shorter than the plan's slow paths) its last answer was, too
		// long to leave it its sleep: the network's, not the waiter's.
		return
	}
	rec.reported = true
	w.violate(InvLockFair, fmt.Sprintf("c%d: the slot of call #%d (%s, queued at %s, slot last refreshed at %s, last attempt sent at %s) lapsed while it waited: it goes to the back of the queue",
		rec.proc, rec.id, rec.kind, fmtDur(queued.Sub(w.start)), fmtDur(fresh.Sub(w.start)), fmtDur(rec.lastSend.Sub(w.start))), LabelFairWake)
	lw.finding(LabelFairWake)
}

// fairSlot is a fair waiter's slot lifetime (redisStore's slot).
func fairSlot(ttl, retry time.Duration) time.Duration { return 2*ttl + retry }
