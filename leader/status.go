package leader

import (
	"errors"
	"time"
)

func (e *Elector) beginTerm(l Lease, sent time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.status.Leading = true
	e.status.Term = l.Term
	e.status.Since = sent
	e.status.LastRenew = sent
	e.status.Holder = l
	e.loopBeat, e.renewBusy = sent, false
	e.openTerm, e.expiredAt = l.Term, time.Time{}
	e.termDone = make(chan struct{})
}

// redisAnswered records the outcome of a Redis call: nil when Redis
// answered, else the error; and tells the metrics if they listen.
func (e *Elector) redisAnswered(err error) {
	config := errors.Is(err, ErrRedisConfig) // an answer: a refusal
	e.mu.Lock()
	switch {
	case config:
		e.status.RedisErr, e.status.ConfigErr, e.status.Reached = nil, err, true
	case err == nil:
		e.status.RedisErr, e.status.ConfigErr, e.status.Reached = nil, nil, true
	default:
		e.status.RedisErr = err
	}
	e.mu.Unlock()
	if config {
		e.metrics.Redis(nil)
		e.metrics.RedisConfigError(err)
	} else {
		e.metrics.Redis(err)
	}
	e.noteEviction()
}

// protocolRefused records that acquires are refused for version skew
// (err a *ProtocolError), or no longer (nil), and tells the metrics.
func (e *Elector) protocolRefused(err error) {
	e.mu.Lock()
	e.status.ProtocolErr = err
	e.mu.Unlock()
	e.metrics.ProtocolRefused(err != nil)
}

// beat records that the term loop started a renewal (busy) or handled one.
func (e *Elector) beat(now time.Time, busy bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.loopBeat, e.renewBusy = now, busy
}

func (e *Elector) renewed(sent time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.status.LastRenew = sent
}

func (e *Elector) endLeading() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.status.Leading = false
	e.status.Term = 0
}

// endLeadingExpired is endLeading for the deadline timer: it also notes
// when, for Healthy, until the loop handles it.
//
// A timer that fired as its term ended runs after the loop ended that
// term, perhaps after the next term began: it then changes nothing, or it
// would show a live later term as not leading.
func (e *Elector) endLeadingExpired(term uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.openTerm != term {
		return
	}
	e.status.Leading = false
	e.status.Term = 0
	e.expiredAt = time.Now()
}

// expiryHandled tells Healthy that the loop handled the deadline.
func (e *Elector) expiryHandled() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.expiredAt = time.Time{}
}

func (e *Elector) endTerm(waiters []*resignRequest) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.status.Leading = false
	e.status.Term = 0
	e.expiredAt, e.openTerm = time.Time{}, 0
	if e.termDone != nil {
		close(e.termDone)
		e.termDone = nil
	}
	for _, w := range waiters {
		close(w.done)
	}
}
