package leader

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/solo-run/solo/internal/liveness"
)

// renewResult is the outcome of one renew round trip.
type renewResult struct {
	sent time.Time
	took time.Duration
	err  error
}

// startRenew sends one renew in its own goroutine, bounded by the time left
// until the deadline (go-redis honours it with ContextTimeoutEnabled; the
// deadline timer does not depend on it either way). The goroutine reports
// into renewCh, which has room for its one answer, so it never blocks and
// ends when the client call returns, even after the term ended.
func (t *term) startRenew(ctx context.Context) {
	if t.renewing || t.lost {
		return
	}
	e := t.c.e
	now := time.Now()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.live.Left(now))
	t.renewing, t.renewStop = true, cancel
	e.beat(now, true)
	ch := t.renewCh
	go func() {
		err := RedisConfig(e.lock.Renew(rctx, t.lease, e.cfg.TTL))
		took := time.Since(now)
		e.metrics.Renew(took, err)
		ch <- renewResult{sent: now, took: took, err: err}
		refreshEviction(ctx, e.lock, e.cfg.RenewDeadline) // after the answer: never delays a renewal
	}()
}

// renewed handles a renew result.
func (t *term) renewed(res renewResult) {
	e := t.c.e
	t.renewing = false
	t.renewStop()
	e.beat(time.Now(), false)
	if res.err == nil || errors.Is(res.err, ErrLeaseLost) {
		e.redisAnswered(nil)
	} else {
		e.redisAnswered(res.err)
	}
	if t.lost {
		return
	}
	switch t.live.Classify(res.err) {
	case liveness.Late:
		// Answered after the deadline cancelled the term: the term is over
		// (t.passed reports it), however fresh this renewal is.
	case liveness.Renewed:
		t.c.configFailing = false
		if t.live.Recovered() {
			t.log.Info("renew succeeded again")
		}
		t.c.checkWatch()
		t.log.Debug("renewed", zap.Duration("took", res.took))
		e.renewed(res.sent)
		t.live.Renewed(res.sent)
	case liveness.Lost:
		t.end(res.err, true)
	case liveness.Refused:
		// Refused, and every renewal until the deadline would be too:
		// step down now rather than at the deadline. The lease stays ours
		// until it expires; the loop keeps renewing while the function
		// drains (in case the configuration is fixed meanwhile), and the
		// deadline timer still ends the term at lastOK + RenewDeadline.
		t.live.Failing()
		t.c.configRefused("renew", res.err)
		t.end(res.err, false)
		t.live.Retry()
	default:
		if t.live.Failing() {
			t.log.Warn("renew failed; retrying until the renew deadline", zap.Error(res.err),
				zap.Time("deadline", t.live.DeadlineAt()))
		} else {
			t.log.Debug("renew failed", zap.Error(res.err))
		}
		t.live.Retry()
	}
}

// stopRenew cancels an in-flight renew without waiting for it: a client
// that ignores cancellation must not hold up a step-down or shutdown. The
// renew's answer, when it comes, goes unread; a late renew is harmless, as
// it only extends a lease that is still exactly ours.
func (t *term) stopRenew() {
	if t.renewing {
		t.renewStop()
		t.renewing = false
	}
}
