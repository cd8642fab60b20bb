package sim

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/solo-run/solo/internal/lockseam"
)

// The fair lock (WithFair) on the simulated server: fair_acquire.lua and
// fair_abandon.lua over the lock's hash (lockData) and a FIFO queue of
// owners with a slot timeout each (server milliseconds). The queue lives
// on the primary only: a failover keeps it, a data loss wipes it.

// fairQueue is the fair lock's queue and slot timeouts.
type fairQueue struct {
	queue []string
	to    map[string]int64     // owner → server ms after which its slot lapses
	set   map[string]time.Time // owner → when it joined the queue
	fresh map[string]time.Time // owner → when its slot was last refreshed
}

func newFairQueue() *fairQueue {
	return &fairQueue{to: map[string]int64{}, set: map[string]time.Time{}, fresh: map[string]time.Time{}}
}

func (q *fairQueue) remove(owner string) {
	q.queue = slices.DeleteFunc(q.queue, func(o string) bool { return o == owner })
	delete(q.to, owner)
}

// execLockFairAcquire is fair_acquire.lua; slot is a waiter's slot
// lifetime.
func (w *world) execLockFairAcquire(now time.Time, owner, reenter string, ttl time.Duration, wait bool, slot time.Duration) lockRes {
	lw := w.lk
	q := lw.fair
	if reenter != "" {
		return w.execLockAcquire(now, owner, reenter, ttl)
	}
	srv := w.srvNs(now)
	ms := srv / int64(time.Millisecond)
	d := &w.prim.lk
	d.expire(srv)
	res := lockRes{epoch: w.epoch}
	for len(q.queue) > 0 {
		head := q.queue[0]
		if to, ok := q.to[head]; ok && to > ms {
			break
		}
		lw.fairDropped(now, head, q.set[head], q.fresh[head])
		q.queue = q.queue[1:]
		delete(q.to, head)
	}
	head := ""
	if len(q.queue) > 0 {
		head = q.queue[0]
	}
	if d.field != "" && ownerOf(d.field) == owner {
		return w.execLockAcquire(now, owner, "", ttl) // adopt
	}
	if d.field == "" && (head == "" || head == owner) {
		if head != "" {
			q.queue = q.queue[1:]
			delete(q.to, head)
		}
		return w.execLockAcquire(now, owner, "", ttl) // mint
	}
	if wait {
		if now.After(lw.calmAt) {
			lw.judged(InvLockFair) // a waiter's slot set once faults stopped
		}
		if _, ok := q.to[owner]; !ok {
			q.queue = append(q.queue, owner)
			q.set[owner] = now
		}
		q.to[owner] = ms + slot.Milliseconds()
		q.fresh[owner] = now
	}
	if d.field != "" {
		res.rep = lockseam.AcquireReply{Code: lockseam.CodeHeld, Holder: d.field,
			PTTL: time.Duration((d.exp-srv)/int64(time.Millisecond)) * time.Millisecond}
		return res
	}
	hto, ok := q.to[head]
	if !ok {
		hto = ms
	}
	res.rep = lockseam.AcquireReply{Code: lockseam.CodeHeld, PTTL: time.Duration(max(hto-ms, 1)) * time.Millisecond}
	return res
}

// execLockFairAbandon is fair_abandon.lua.
func (w *world) execLockFairAbandon(now time.Time, owner, channel string) lockRes {
	q := w.lk.fair
	q.remove(owner)
	res := w.execLockAbandon(now, owner, channel)
	if res.n == 0 && w.prim.lk.field == "" {
		w.lockPublish(now, channel, "left "+owner)
	}
	return res
}

// fairDropped is L8: a waiter's slot lapsed; in the calm phase, a live
// waiter's never does.
func (lw *lockWorld) fairDropped(now time.Time, owner string, queued, fresh time.Time) {
	w := lw.w
	rec := lw.owners[owner]
	w.event(-1, evNote, 0, 0, 0, 0, "fair: slot of "+owner+" lapsed; dropped from the queue")
	if rec == nil || rec.returned || rec.reported || !rec.waiting || fresh.Before(lw.calmAt) {
		return
	}
	p := lw.procs[rec.proc]
	if p.logStalled(fresh, now) > 0 || p.wake(now) != now {
		return
	}
	rec.reported = true
	w.violate(InvLockFair, fmt.Sprintf("c%d: the slot of call #%d (%s, queued at %s, slot last refreshed at %s, last attempt sent at %s) lapsed while it waited: it goes to the back of the queue",
		rec.proc, rec.id, rec.kind, fmtDur(queued.Sub(w.start)), fmtDur(fresh.Sub(w.start)), fmtDur(rec.lastSend.Sub(w.start))), Finding6)
	lw.finding(Finding6)
}

// fairSlot is a fair waiter's slot lifetime (redisStore's slot).
func fairSlot(ttl, retry time.Duration) time.Duration { return 2*ttl + retry }

// fairState describes the queue for the log.
func (q *fairQueue) String() string {
	var b strings.Builder
	for i, o := range q.queue {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(o + "@" + strconv.FormatInt(q.to[o], 10))
	}
	return b.String()
}
