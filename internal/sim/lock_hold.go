package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/solo-run/solo/leader/lock"
)

// fieldOf is a hold's "TERM OWNER".
func fieldOf(h *lock.Hold) string { return fmt.Sprintf("%d %s", h.Term(), h.Holder()) }

// handed records a hold returned by Lock, TryLock or LockTimeout: L1, L2
// and L4's "a different context never re-enters". carried is the hold the
// call's context carried, or nil.
func (p *lockProc) handed(h *lock.Hold, carried *lock.Hold) {
	lw, w := p.lw, p.w
	field := fieldOf(h)
	w.mu.Lock()
	defer w.mu.Unlock()
	r := lw.rec(field)
	first := !r.started
	w.event(p.idx, evElected, 0, 0, int64(h.Term()), 0, fmt.Sprintf("hold of %q (first %v, re-entry of a carried hold %v)", field, first, carried != nil))
	switch {
	case carried == nil && !first:
		w.violate(InvLockCount, fmt.Sprintf("c%d: a context without the hold got a hold of term %d, which was handed out before", p.idx, h.Term()))
	case carried != nil && carried.Term() != h.Term() && !first:
		w.violate(InvLockCount, fmt.Sprintf("c%d: a context carrying term %d got a hold of the older term %d", p.idx, carried.Term(), h.Term()))
	case carried != nil && carried.Term() != h.Term():
		if cr := lw.tracks[fieldOf(carried)]; cr != nil && cr.app > 0 && cr.ctx.Err() == nil {
			w.violate(InvLockCount, fmt.Sprintf("c%d: a context carrying live term %d (%d holds) took the new term %d instead of re-entering", p.idx, carried.Term(), cr.app, h.Term()))
		}
	}
	r.app++
	if first && lw.redlock {
		r.acqSent = lw.rlSent[h.Holder()]
	}
	if rec := lw.calls[callOfOwner(h.Holder())]; first && r.acqSent.IsZero() && rec != nil && h.Holder() == callOfOwner(h.Holder())+".0" {
		// A fair release's grant, held without another attempt: timed
		// from the call's last attempt answered "held" (Mutex.granted).
		r.acqSent = rec.heldSent
	}
	if first {
		r.started, r.proc, r.ctx, r.heldFrom = true, p.idx, h.Context(), r.adoptHeard
		lw.stats.Holds++
		aff := lw.affected(r)
		if h.Context().Err() == nil {
			for _, o := range lw.tracks {
				if o == r || !o.started || o.ctx.Err() != nil {
					continue
				}
				oa := lw.affected(o)
				switch {
				case (aff != "" || oa != "") && r.term > o.term:
					w.outOfModel("lock holds overlap after " + aff + oa + " (the newer term fences the older)")
				case aff != "" || oa != "":
					w.violate(InvLockExcl, fmt.Sprintf("c%d's hold of term %d starts while c%d's hold of the newer term %d is live (after %s): the fence would take the older one", p.idx, r.term, o.proc, o.term, aff+oa))
				case lw.redlock:
					w.violate(InvLockExcl, fmt.Sprintf("c%d's Redlock hold of term %d starts while c%d's hold of term %d is live", p.idx, r.term, o.proc, o.term), LabelLateUndo)
					lw.finding(LabelLateUndo)
				default:
					w.violate(InvLockExcl, fmt.Sprintf("c%d's hold of term %d starts while c%d's hold of term %d is live", p.idx, r.term, o.proc, o.term), lw.grantShape(o, r)...)
				}
			}
			lw.checkServer(p.idx, r, "at its start")
		}
		if r.term <= lw.maxStarted {
			if aff != "" {
				w.outOfModel("lock term handed out after a newer one, after " + aff)
			} else {
				w.violate(InvLockTerms, fmt.Sprintf("c%d's hold of term %d starts after term %d was handed out", p.idx, r.term, lw.maxStarted))
			}
		}
		lw.maxStarted = max(lw.maxStarted, r.term)
		// The fence: a new holder claims its term; an older one is refused.
		if r.term >= lw.fenceTerm {
			lw.fenceTerm, lw.fenceBy = r.term, field
		} else {
			lw.stats.StaleRefused++
		}
		rd := p.cfg.RenewDeadline
		context.AfterFunc(h.Context(), func() { lw.cancelled(p.idx, r, rd) })
	} else {
		lw.stats.Reentries++
	}
}

// checkServer is L1's second half: a live hold's field is the server's
// unexpired lock, under w.mu.
func (lw *lockWorld) checkServer(c int, r *leaseRec, where string) {
	if lw.redlock {
		lw.checkQuorum(c, r, where)
		return
	}
	w := lw.w
	lw.checkLockDeadline(c, r, where)
	got := w.lockNow(time.Now())
	if got == r.field || r.ctx.Err() != nil {
		return
	}
	if a := lw.affected(r); a != "" {
		w.outOfModel("lock hold live but gone from the server after " + a)
		return
	}
	w.violate(InvLockExcl, fmt.Sprintf("c%d's hold of term %d is live (%s) but the server holds %s", c, r.term, where, quoteVal(got)), lw.grantShape(r, nil)...)
}

// cancelled is L3: a term's holds end no later than the last successful
// renewal's send time (or the acquire's) + RenewDeadline.
func (lw *lockWorld) cancelled(c int, r *leaseRec, rd time.Duration) {
	w := lw.w
	now := time.Now()
	cause := context.Cause(r.ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	r.cancelAt = now
	w.event(c, evCancelled, 0, 0, int64(r.term), 0, fmt.Sprint(cause))
	if !errors.Is(cause, lock.ErrUnlocked) {
		if lw.stats.Lost == nil {
			lw.stats.Lost = map[string]int{}
		}
		lw.stats.Lost[fmt.Sprint(cause)]++
	}
	last := maxTime(r.acqSent, r.renewOK)
	if lw.redlock {
		last = maxTime(last, lw.rlRenew[ownerOf(r.field)])
	}
	if last.IsZero() {
		w.violate(InvLockDeadline, fmt.Sprintf("c%d's term %d: no acquire send time recorded", c, r.term))
		return
	}
	if late := now.Sub(last.Add(rd)); late > 0 {
		w.violate(InvLockDeadline, fmt.Sprintf("c%d's hold of term %d cancelled (%v) %s after last successful renewal's send time %s + RenewDeadline %s",
			c, r.term, cause, late, fmtDur(last.Sub(w.start)), rd))
	}
}

// write is a fenced write under hold h: accepted only with the highest
// term claimed; a live hold must be the server's.
func (p *lockProc) write(h *lock.Hold) {
	lw, w := p.lw, p.w
	w.mu.Lock()
	defer w.mu.Unlock()
	r := lw.rec(fieldOf(h))
	if h.Context().Err() != nil {
		return
	}
	lw.stats.Writes++
	ok := r.term == lw.fenceTerm
	w.event(p.idx, evWrite, 0, 0, int64(r.term), b2i(ok), "")
	switch {
	case ok && lw.fenceBy != r.field:
		w.violate(InvLockExcl, fmt.Sprintf("c%d's write with term %d accepted although %q claimed that term", p.idx, r.term, lw.fenceBy))
	case !ok:
		lw.stats.StaleRefused++
	}
	lw.checkServer(p.idx, r, "at a fenced write")
}

// unlocking records that the application gave up hold h (before Unlock
// sends anything).
func (p *lockProc) unlocking(h *lock.Hold) {
	p.w.mu.Lock()
	p.lw.rec(fieldOf(h)).app--
	p.w.mu.Unlock()
}
