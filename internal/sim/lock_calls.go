package sim

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The checker's view of the application's Lock calls (Options.LockConns):
// every Lock, TryLock and LockTimeout carries a callRec in its context,
// which the stores find again in their requests' contexts, so that every
// owner the lock makes for the call (one per attempt, "CALL.N", and a
// fair grant's "CALL.0") maps to the call. Invariants:
//
//	L6 no lock held by a finished call's owner: once a call returned with
//	   an error, or its hold was unlocked, and every request of its owners
//	   landed (executed, or lost with its connection) and returned to the
//	   client, the server must not hold the lock for one of its owners
//	   (other than the hold's own term, left to expire when it was lost)
//	   longer than a settle bound, nor (fair) keep one of them queued;
//	L7 a waiter is woken: once faults stopped, a Lock call waiting for the
//	   lock sends its next attempt within a bound after the lock's expiry
//	   on the server, or after a release notice reached its process
//	   (without WithFair, a notice wakes one waiter per process, the
//	   head of the Client's queue: one call of the process must try,
//	   and a waiter is judged only when no call that may be ahead of it
//	   in the queue still waits, from when the last of them left;
//	   see procTried);
//	L8 fair order: once faults stopped, a live waiter's queue slot never
//	   lapses (it would be queued again behind later waiters);
//	L9 no starvation within a Client (without WithFair): a Lock call that
//	   begins while every earlier unfinished Lock call of its Client has
//	   waited longer than the starvation bound (1ms, as sync.Mutex), one
//	   of them in the Client's queue, goes behind them: it sends no
//	   attempt before RetryInterval has passed, unless one of them
//	   returned or the Client's subscription was confirmed again (which
//	   wakes every waiter) meanwhile. A holder that unlocks and locks
//	   again at once therefore cannot pass its Client's waiter; with L7,
//	   which holds the queue's head to trying within its bound after a
//	   release notice, a waiter first in line is served.

// Invariant names of the connection model's checks, as printed.
const (
	InvLockFinished = "L6 no lock held by a finished call's owner"
	InvLockWake     = "L7 a waiter is woken after a release or expiry"
	InvLockFair     = "L8 fair waiters keep their place"
	InvLockStarve   = "L9 a Client's waiters are not passed"
)

// starveAfter is leader/lock's starvation bound: a Lock call whose
// Client's queue head has waited longer goes behind it.
const starveAfter = time.Millisecond

// The labels a violation carries when it shows one of the ways a lock call
// could act on another attempt's hold, or a waiter could go unserved
// (LockStats.Findings).
const (
	LabelStaleRelease = "two holders: a stale release deletes an adopted lock"
	LabelLateUndo     = "two Redlock quorums: a late undo deletes a counted key"
	LabelLateAttempt  = "a finished call's earlier attempt takes the lock"
	LabelAbandonFirst = "the abandon overtakes its acquire"
	LabelFairWake     = "fair mode: waiter not woken, or re-queued at the tail"
	// LabelWaitBound: a waiter first in line not served within its bound
	// after a release (L7 without WithFair), or passed by a later call of
	// its Client (L9).
	LabelWaitBound = "a Client's waiter not served in its bound"
	// LabelLateMaster: a Redlock master that answers an attempt after the
	// attempt gave up keeps its acquisition for a TTL once the call
	// finished (the documented behaviour, which L6 refuses).
	LabelLateMaster = "a Redlock master keeps a finished call's late acquisition"
)

type callKey struct{}

// callRec is one Lock, TryLock or LockTimeout call, under w.mu.
type callRec struct {
	id     int
	proc   int
	kind   string
	wait   bool
	start  time.Time
	owners map[string]bool

	returned   bool
	returnedAt time.Time
	ok         bool   // it returned a hold
	field      string // the hold's "TERM OWNER"
	finished   bool   // returned an error, or its term's holds were all unlocked
	finishedAt time.Time
	cleanUnlk  bool // its hold ended by an Unlock whose release answered

	inflight    int       // requests of its owners not yet landed and returned
	open        int       // requests of its owners not yet returned to the client
	settledAt   time.Time // when inflight last dropped to zero
	cleanupLost bool      // a release or abandon of its owners was lost
	reported    bool

	// liveness (L7, L9)
	waiting bool // an attempt was answered "held"
	// queuedAt: when the lock first heard an attempt's "held" answer
	// (in time: a call that is not inline gives up on a reply after
	// RenewDeadline): from then on its waiter is in the Client's queue.
	queuedAt time.Time
	// behind: the calls of its Client it must not pass (L9), set when
	// it began; nil when it is not judged.
	behind     []*callRec
	inAcquire  int       // its acquires the client is waiting for
	lastSend   time.Time // its last attempt's send
	lastExec   time.Time // its last attempt's execution on the server
	lastReturn time.Time // its last request's return to the caller
	heldSent   time.Time // its last attempt answered "held": a grant's hold is timed from its send
	// heardSent, heardExec, heardReturn: the latest attempt whose answer
	// the lock heard (in time: see queuedAt), sent, executed, returned.
	heardSent, heardExec, heardReturn time.Time
}

// reqTrack is one request of a call in flight: it lands (executes or is
// lost) and returns to its caller.
type reqTrack struct {
	rec     *callRec
	left    int
	cleanup bool
}

// newCall registers a call of process proc and returns ctx carrying it.
func (lw *lockWorld) newCall(ctx context.Context, proc int, kind string, wait bool) (context.Context, *callRec) {
	w := lw.w
	w.mu.Lock()
	defer w.mu.Unlock()
	lw.callN++
	rec := &callRec{id: lw.callN, proc: proc, kind: kind, wait: wait, start: time.Now(), owners: map[string]bool{}}
	rec.behind = lw.starving(rec)
	p := lw.procs[proc]
	p.open = append(p.open, rec)
	return context.WithValue(ctx, callKey{}, rec), rec
}

// callOf returns the call of owner, registering owner for the call ctx
// carries, under w.mu. Every attempt owner of a call ("CALL.N", and a
// fair grant's "CALL.0") maps to the call's record.
func (lw *lockWorld) callOf(ctx context.Context, owner string) *callRec {
	if owner == "" {
		return nil
	}
	if rec := lw.owners[owner]; rec != nil {
		return rec
	}
	call := callOfOwner(owner)
	rec := lw.calls[call]
	if rec == nil {
		rec, _ = ctx.Value(callKey{}).(*callRec)
		if rec == nil {
			return nil
		}
		lw.calls[call] = rec
	}
	rec.owners[owner] = true
	lw.owners[owner] = rec
	return rec
}

// ownedBy reports whether owner is an attempt (or a grant) of rec's call,
// under w.mu.
func (lw *lockWorld) ownedBy(owner string, rec *callRec) bool {
	return rec.owners[owner] || lw.calls[callOfOwner(owner)] == rec
}

// sent records a request of owner's call, under w.mu.
func (lw *lockWorld) sent(ctx context.Context, owner string, o op, cleanup bool, at time.Time) *reqTrack {
	rec := lw.callOf(ctx, owner)
	if rec == nil {
		return nil
	}
	rec.inflight++
	rec.open++
	return &reqTrack{rec: rec, left: 2, cleanup: cleanup}
}

// landed records that a request executed or was lost, under w.mu.
func (lw *lockWorld) landed(tr *reqTrack, executed bool) {
	if tr == nil {
		return
	}
	if !executed && tr.cleanup {
		tr.rec.cleanupLost = true
	}
	lw.part(tr)
}

// returned records that a request's call returned to the client, under w.mu.
func (lw *lockWorld) returned(tr *reqTrack) {
	if tr != nil {
		tr.rec.open--
		tr.rec.lastReturn = maxTime(tr.rec.lastReturn, time.Now())
	}
	lw.part(tr)
}

func (lw *lockWorld) part(tr *reqTrack) {
	if tr == nil || tr.left == 0 {
		return
	}
	tr.left--
	if tr.left > 0 {
		return
	}
	rec := tr.rec
	rec.inflight--
	if rec.inflight == 0 {
		rec.settledAt = time.Now()
		lw.scheduleFinished(rec)
	}
}

// callReturned records the return of a call, under w.mu.
func (lw *lockWorld) callReturned(rec *callRec, field string, err error) {
	now := time.Now()
	lw.checkWoken(rec, now, "when the call returned")
	rec.returned, rec.returnedAt = true, now
	p := lw.procs[rec.proc]
	p.open = slices.DeleteFunc(p.open, func(o *callRec) bool { return o == rec })
	if err != nil {
		rec.finished, rec.finishedAt = true, now
		lw.scheduleFinished(rec)
		return
	}
	rec.ok, rec.field = true, field
	lw.byField[field] = append(lw.byField[field], rec)
}

// termEnded records that every hold of field was unlocked (clean: by an
// Unlock whose release answered), under w.mu.
func (lw *lockWorld) termEnded(field string, clean bool) {
	now := time.Now()
	for _, rec := range lw.byField[field] {
		if rec.finished {
			continue
		}
		rec.finished, rec.finishedAt, rec.cleanUnlk = true, now, clean
		lw.scheduleFinished(rec)
	}
}

// lockSettle is how long a finished call's owner may still hold the lock
// after everything it sent landed: the abandon or release that follows
// goes at once.
const lockSettle = 10 * time.Millisecond

func (lw *lockWorld) scheduleFinished(rec *callRec) {
	if !lw.connModel || !rec.finished || rec.inflight > 0 {
		return
	}
	at := maxTime(rec.finishedAt, rec.settledAt).Add(lockSettle)
	lw.w.at(at, func(time.Time) { lw.checkFinished(rec) })
}

// checkFinished is L6 for rec, under w.mu.
func (lw *lockWorld) checkFinished(rec *callRec) {
	w := lw.w
	if rec.reported || !rec.finished || rec.inflight > 0 || rec.cleanupLost || w.sealed {
		return
	}
	now := time.Now()
	p := lw.procs[rec.proc]
	// A frozen process, or one blocked in a log write, sends its abandon
	// when it can.
	if wk := p.wake(now); wk.After(now) {
		w.at(wk.Add(lockSettle), func(time.Time) { lw.checkFinished(rec) })
		return
	}
	if d := p.logStalled(now.Add(-lockSettle), now); d > 0 {
		w.at(now.Add(lockSettle), func(time.Time) { lw.checkFinished(rec) })
		return
	}
	for i, l := range lw.losses {
		if !l.Before(rec.start) {
			w.outOfModel("lock finished call's owner judged after " + lw.lossWhy[i])
			return
		}
	}
	if !p.closing.IsZero() {
		// Close abandons at once, best effort, so as to return within
		// RenewDeadline: an abandon may then overtake its acquire.
		return
	}
	lw.judged(InvLockFinished)
	how := "failed"
	switch {
	case rec.ok && rec.cleanUnlk:
		how = "succeeded and unlocked"
	case rec.ok:
		how = "succeeded (its hold was lost or closed)"
	}
	for ep, field := range lw.serverFields(now) {
		if field == "" || !lw.ownedBy(ownerOf(field), rec) {
			continue
		}
		if ep == 0 && field == rec.field {
			continue // the hold's own term, left to expire
		}
		if lw.redlock && !(rec.cleanUnlk || !rec.ok) {
			continue
		}
		rec.reported = true
		f := LabelAbandonFirst
		switch {
		case lw.redlock:
			f = LabelLateMaster
		case isGrant(field):
			f = ShapeGrantLeft
		case lw.twice[ownerOf(field)]:
			f = ShapeRetryHeld // its second run answered the call: held
		case rec.ok:
			f = LabelLateAttempt
		}
		srv := "the server"
		if lw.redlock {
			srv = fmt.Sprintf("master %d", ep-1)
		}
		w.violate(InvLockFinished, fmt.Sprintf("c%d: %s holds %q for call #%d (%s, %s at %s; its requests all landed by %s)",
			rec.proc, srv, field, rec.id, rec.kind, how, fmtDur(rec.finishedAt.Sub(w.start)), fmtDur(rec.settledAt.Sub(w.start))), f)
		lw.finding(f)
		return
	}
	if lw.fair != nil {
		f := LabelAbandonFirst
		if rec.ok {
			f = LabelLateAttempt
		}
		for _, e := range w.fairQueue(now) {
			if lw.calls[strings.TrimSuffix(e.entry, "!")] == rec {
				rec.reported = true
				w.violate(InvLockFinished, fmt.Sprintf("c%d: call #%d (%s, %s at %s) is still queued (fair, entry %s) after its requests all landed by %s",
					rec.proc, rec.id, rec.kind, how, fmtDur(rec.finishedAt.Sub(w.start)), e.entry, fmtDur(rec.settledAt.Sub(w.start))), f)
				lw.finding(f)
				return
			}
		}
	}
}

// serverFields returns the live lock field of every server: [0] the
// replicated server's, [1+i] Redlock master i's.
func (lw *lockWorld) serverFields(now time.Time) []string {
	if !lw.redlock {
		return []string{lw.w.lockNow(now)}
	}
	out := make([]string, 1+len(lw.masters))
	for i, m := range lw.masters {
		out[1+i] = m.liveField(lw.w, now)
	}
	return out
}

// judged counts one check of inv that could have failed.
func (lw *lockWorld) judged(inv string) {
	if lw.stats.Judged == nil {
		lw.stats.Judged = map[string]int{}
	}
	lw.stats.Judged[inv]++
}

// staleRelease is L4 for a release of field sent at sent: one that
// deletes the lock from under a live hold made from an adoption that
// executed after the release was sent (the release of an acquire
// confirmed too late, still on the wire when the same call's next
// attempt adopted the lock and held it: LabelStaleRelease), under w.mu.
//
// Only an adoption whose reply made a hold is judged. An earlier attempt
// of a call may land late and adopt the call's own hold after that
// hold's last Unlock was sent (its caller gave up on it long before, so
// nothing is held from it); the Unlock's release then rightly deletes the
// lock (seed 3014189 from base 3000000, before: "deleted by a release
// sent at 3.503993s, before an acquire of its owner adopted it at
// 3.514487s", with no hold live).
func (lw *lockWorld) staleRelease(field string, sent time.Time, res lockRes) {
	r := lw.rec(field)
	if !lw.connModel || res.deleted != field || !r.heldFrom.After(sent) || r.ctx == nil || r.ctx.Err() != nil || lw.affected(r) != "" {
		return
	}
	w := lw.w
	w.violate(InvLockCount, fmt.Sprintf("%q deleted by a release sent at %s, before the acquire of its owner whose adoption made its live hold executed at %s (a stale release of a late-confirmed attempt)",
		field, fmtDur(sent.Sub(w.start)), fmtDur(r.heldFrom.Sub(w.start))), LabelStaleRelease)
	lw.finding(LabelStaleRelease)
}

// finding records that the schedule showed finding f.
func (lw *lockWorld) finding(f string) {
	if lw.stats.Findings == nil {
		lw.stats.Findings = map[string]int{}
	}
	lw.stats.Findings[f]++
}

// starving returns the calls that rec, a call beginning now, must not
// pass (L9): every earlier unfinished Lock call of its process, when
// each began more than starveAfter ago and one of them is in the
// Client's queue (it was told to wait before now); nil when rec is not
// judged, under w.mu. Calls re-entering a carried hold are left out:
// one whose hold is gone starts waiting only after its re-entry's round
// trip, later than the checker's start.
func (lw *lockWorld) starving(rec *callRec) []*callRec {
	if lw.fair != nil || lw.redlock || !rec.wait || strings.Contains(rec.kind, "re-entry") || !lw.procs[rec.proc].closing.IsZero() {
		return nil
	}
	var olds []*callRec
	queued := false
	for _, o := range lw.procs[rec.proc].open {
		if !o.wait || !o.start.Before(rec.start) {
			continue
		}
		if strings.Contains(o.kind, "re-entry") || rec.start.Sub(o.start) <= starveAfter+time.Microsecond {
			return nil
		}
		if !o.queuedAt.IsZero() && o.queuedAt.Before(rec.start) {
			queued = true
		}
		olds = append(olds, o)
	}
	if !queued {
		return nil
	}
	return olds
}

// checkBehind is L9 at rec's first attempt, sent now, under w.mu.
func (lw *lockWorld) checkBehind(rec *callRec, now time.Time) {
	behind := rec.behind
	rec.behind = nil
	if len(behind) == 0 {
		return
	}
	p := lw.procs[rec.proc]
	if !p.closing.IsZero() || !p.resubscribed.Before(rec.start) {
		return
	}
	for _, o := range behind {
		if o.returned {
			return // it left the queue: rec may be its head now
		}
	}
	lw.judged(InvLockStarve)
	if !now.Before(rec.start.Add(lw.procs[rec.proc].cfg.RetryInterval)) {
		return
	}
	// Judged a microsecond later: a waiter ahead that leaves without the
	// lock wakes rec from its own goroutine before its call returns, and
	// rec's attempt may come first at that instant (seeds 3003439 and
	// 3028758 of the long profile, once each and not in 60 replays).
	w := lw.w
	w.at(now.Add(time.Microsecond), func(time.Time) {
		for _, o := range behind {
			if o.returned {
				return
			}
		}
		lw.passed(rec, behind[0], now)
	})
}

// passed reports L9: rec passed o at its first attempt at now, under w.mu.
func (lw *lockWorld) passed(rec, o *callRec, now time.Time) {
	w := lw.w
	w.violate(InvLockStarve, fmt.Sprintf("c%d: call #%d (%s) began at %s while call #%d (%s) of its Client had waited %s (over the %s starvation bound) and is still waiting, and tried at %s, before RetryInterval (%s) had passed: it passed the Client's waiter",
		rec.proc, rec.id, rec.kind, fmtDur(rec.start.Sub(w.start)), o.id, o.kind, rec.start.Sub(o.start), starveAfter, fmtDur(now.Sub(w.start)), lw.procs[rec.proc].cfg.RetryInterval), LabelWaitBound)
	lw.finding(LabelWaitBound)
}

// attemptSent records an acquire of rec's call (L7, L9), under w.mu.
func (lw *lockWorld) attemptSent(rec *callRec, now time.Time) {
	if rec == nil {
		return
	}
	if rec.lastSend.IsZero() {
		lw.checkBehind(rec, now)
	}
	lw.checkWoken(rec, now, "at its next attempt")
	rec.lastSend = now
	rec.inAcquire++
}

// attemptReturned records the return of an acquire sent at sent and
// executed at exec (zero: not known); held says it was told to wait,
// under w.mu.
func (lw *lockWorld) attemptReturned(rec *callRec, held bool, sent, exec time.Time) {
	if rec == nil {
		return
	}
	rec.inAcquire--
	heard := lw.inline || time.Since(sent) < lw.procs[rec.proc].cfg.RenewDeadline
	if heard && !exec.IsZero() && sent.After(rec.heardSent) {
		rec.heardSent, rec.heardExec, rec.heardReturn = sent, exec, time.Now()
	}
	if held && rec.wait {
		rec.waiting = true
		if rec.queuedAt.IsZero() && heard {
			rec.queuedAt = time.Now()
		}
	}
}

// wakeBound is how soon a waiter must try again after the lock's expiry
// or a release notice: its sleep's rounding and jitter, or RetryInterval
// plus jitter when it had no holder's time to go by, plus 35ms of slack.
// (A plain-mode waiter seen late, analysed once: seed 22879 from base
// 20000 on the code before procTried counted left, a next waiter judged
// from the notice although the head left only later. The earlier seeds,
// 11097 from base 10000 under a 15ms slack and 34323679025154, did not
// replay.)
func (lw *lockWorld) wakeBound(proc int) time.Duration {
	c := lw.procs[proc].cfg
	return c.RetryInterval*6/5 + min(c.TTL/100, 20*time.Millisecond) + time.Duration(2*c.Drift*float64(c.TTL)) + 35*time.Millisecond
}

// freed records that the lock became free on the server at t (an
// expiry), or that a release notice reached process proc at t (proc ≥
// 0), under w.mu.
func (lw *lockWorld) freed(t time.Time, proc int, why string) {
	if !lw.connModel || lw.redlock || t.Before(lw.calmAt) || !lw.ended.IsZero() {
		return
	}
	lw.frees = append(lw.frees, freeEvent{at: t, proc: proc, why: why})
}

type freeEvent struct {
	at   time.Time
	proc int // -1: the lock's expiry, for every waiter
	why  string
}

// checkWoken is L7 for waiter rec at now, under w.mu.
func (lw *lockWorld) checkWoken(rec *callRec, now time.Time, where string) {
	if !rec.waiting || rec.returned || rec.reported || rec.inAcquire > 0 || rec.open > 0 || len(lw.frees) == 0 {
		return
	}
	if !lw.ended.IsZero() && now.After(lw.ended) {
		return // judged at the schedule's end (endWaiters)
	}
	p := lw.procs[rec.proc]
	// The waiter sleeps the holder's time left from when it heard the
	// answer: the answer's way back delays its next attempt. Only an
	// answer the lock heard counts (seed 3029310 of the long profile: an
	// earlier attempt that landed late, long after its call gave up on it,
	// hid the 142ms way back of the answer the call slept on).
	lag := time.Duration(0)
	if rec.heardReturn.After(rec.heardExec) && !rec.heardExec.IsZero() {
		lag = rec.heardReturn.Sub(rec.heardExec)
	}
	for i := len(lw.frees) - 1; i >= 0; i-- {
		f := lw.frees[i]
		if !f.at.After(maxTime(rec.lastSend, rec.lastExec)) {
			break // its last attempt executed after it: it saw it
		}
		if f.proc >= 0 && f.proc != rec.proc {
			continue
		}
		from := f.at
		if f.proc >= 0 && lw.fair == nil {
			// Without WithFair a release wakes one waiter of the Client,
			// the head of its queue: another call of the process tried
			// after the notice, or an older one still waits (the head,
			// judged on its own). An older one that left since passed
			// the wake-up on to the next: rec is judged from then.
			tried, left := lw.procTried(rec, f.at)
			if tried {
				continue
			}
			from = maxTime(from, left)
		}
		if f.proc < 0 && lw.mixed {
			// A waiter sleeps the holder's time left as it heard it; a
			// later holder of a shorter TTL may expire sooner, unseen:
			// the waiter is due once the longest TTL has passed.
			from = maxTime(from, rec.lastReturn.Add(lw.cfg.TTL))
		}
		due := maxTime(from.Add(lag), rec.lastReturn).Add(lw.wakeBound(rec.proc))
		if p.logStalled(f.at, now) > 0 || p.wake(f.at) != f.at || p.wake(now) != now {
			continue
		}
		lw.judged(InvLockWake)
		if !now.After(due) {
			continue
		}
		rec.reported = true
		w := lw.w
		fnd := LabelFairWake
		if lw.fair == nil {
			fnd = LabelWaitBound
		}
		lw.finding(fnd)
		w.violate(InvLockWake, fmt.Sprintf("c%d: call #%d (%s, owners %s; last attempt sent %s, executed %s, answered %s) waits on: the lock was free by %s at %s, it was due to try again by %s (bound %s), still not %s at %s",
			rec.proc, rec.id, rec.kind, rec.describeOwners(), fmtDur(rec.lastSend.Sub(w.start)), fmtDur(rec.lastExec.Sub(w.start)), fmtDur(rec.lastReturn.Sub(w.start)),
			f.why, fmtDur(f.at.Sub(w.start)), fmtDur(due.Sub(w.start)), lw.wakeBound(rec.proc), where, fmtDur(now.Sub(w.start))), fnd)
		return
	}
}

// procTried reports whether a Lock call of rec's process other than rec
// had an attempt execute, or sent one, after t, or has one on its way
// (the woken head tries again once it returns), or may be ahead of rec in
// the Client's queue and still waits; left is when the last such call
// that was still waiting at t returned (zero: none), under w.mu.
//
// An older waiter that leaves hands the wake-up on (Client.unsubscribe):
// a head busy with an attempt on a slow path holds the notice's token,
// and the next waiter is woken only when the head's call returns. Before
// left was counted, such a next waiter was judged from the notice as
// soon as the head had returned (seed 22879 from base 20000, on the code
// before: the head's attempt on a 294ms path, its call cancelled at the
// schedule's end 77ms past the next waiter's bound). A head that took the
// lock after the notice (its attempt sent just before the notice came)
// used the notice: the next waiter waits for the next release (seed
// 3000398, long profile). The head may be a call that began after rec but
// joined the queue first, rec's first "held" being heard later (seed
// 3010152: rec's attempts timed out on a slow path for a while).
func (lw *lockWorld) procTried(rec *callRec, t time.Time) (tried bool, left time.Time) {
	// The Client's queue is in the order its waiters joined it: at the
	// call's start (when the subscription is live) or when the lock
	// heard its first "held". rec joined by queuedAt; a call that began
	// before that may be ahead of it.
	joined := rec.queuedAt
	if joined.IsZero() {
		joined = time.Now()
	}
	for _, o := range lw.calls {
		if o == rec || o.proc != rec.proc {
			continue
		}
		if o.inAcquire > 0 || maxTime(o.lastSend, o.lastExec).After(t) {
			return true, time.Time{}
		}
		if o.wait && o.start.Before(joined) {
			switch {
			case !o.returned:
				return true, time.Time{}
			case o.returnedAt.After(t) && o.ok:
				// It took the lock after the notice (the head, with an
				// attempt on its way at the notice): the notice was its;
				// the next release wakes the next waiter.
				return true, time.Time{}
			case o.returnedAt.After(t):
				left = maxTime(left, o.returnedAt)
			}
		}
	}
	return false, left
}

// endWaiters runs L7 for every call still waiting at the schedule's end,
// under w.mu.
func (lw *lockWorld) endWaiters(now time.Time, calls []*callRec) {
	lw.ended = now
	for _, rec := range calls {
		lw.checkWoken(rec, now, "at the schedule's end")
	}
}

// watchExpiry schedules the lock's expiry on the replicated server as a
// free event (L7), after an execution that set it, under w.mu.
func (lw *lockWorld) watchExpiry(now time.Time) {
	if !lw.connModel || lw.redlock {
		return
	}
	w := lw.w
	field, _ := w.lockField(now)
	if field == "" {
		return
	}
	e := w.prim.ks.m[lockHash()]
	exp := e.exp
	if exp == 0 {
		return
	}
	at := lw.fakeOf(exp)
	if at.Before(lw.calmAt) {
		return
	}
	w.at(at, func(t time.Time) {
		if e := w.prim.ks.m[lockHash()]; e != nil && e.exp == exp && len(e.fields) > 0 && e.fields[0] == field {
			lw.freed(t, -1, "the expiry of "+field)
		}
	})
}

// fakeOf converts a server time (ns) to fake time, rounded up.
func (lw *lockWorld) fakeOf(srv int64) time.Time {
	w := lw.w
	el := float64(srv-w.start.UnixNano()-int64(w.p.Offset)) / w.p.Rate
	return w.start.Add(time.Duration(el) + time.Microsecond)
}

// describeOwners is a call's owners for the log.
func (rec *callRec) describeOwners() string {
	var s []string
	for o := range rec.owners {
		s = append(s, o)
	}
	return strings.Join(s, ",")
}
