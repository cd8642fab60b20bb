package lock

import (
	"context"
	"errors"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/solo-run/solo/internal/hooks"
	"github.com/solo-run/solo/leader"
)

// call runs f in a goroutine of its own, bounded by a local deadline of
// RenewDeadline and by ctx, whatever the Redis client's timeouts: the
// goroutine reports into a one-slot channel, so it never blocks and ends
// when the client returns, even after call gave up on it. The bound's
// context is the one timer: its Done ends the wait at the bound or when
// ctx ends; only the caller cancels it, so a result never races its own
// cancel.
//
// settle is the simulator's (hooks.Hooks.Settle), nil otherwise: with it,
// a reply that comes at the instant the bound passes, or ctx ends, is
// taken.
func call[T any](ctx context.Context, bound time.Duration, settle func(key string), f func(ctx context.Context) (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	cctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	ch := make(chan result, 1)
	go func() {
		v, err := f(cctx)
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		if settle != nil {
			settle(settleKeyCall) // on every path: the instant's other goroutines have run
		}
		return r.v, r.err
	case <-cctx.Done():
		if settle != nil {
			settle(settleKeyCall)
			select {
			case r := <-ch:
				return r.v, r.err
			default:
			}
		}
		var zero T
		err := errCallBound
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		// The request may still go out until f returns: its outcome is
		// unknown.
		return zero, err
	}
}

// inlineCtx returns the context of an inline call: ctx with a deadline
// at RenewDeadline from now when the client honours deadlines and ctx has
// none as early. cancel is never nil.
func (m *Mutex) inlineCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if m.ctxBound {
		d := time.Now().Add(m.cfg.RenewDeadline)
		if dl, ok := ctx.Deadline(); !ok || dl.After(d) {
			return context.WithDeadline(ctx, d)
		}
	}
	return ctx, func() {}
}

// The store calls of Lock, TryLock and Unlock: inline (no goroutine, no
// closure), or on a goroutine of their own bounded by RenewDeadline.

func (m *Mutex) acquire(ctx context.Context, owner string, adopt []string, wait bool) (hooks.AcquireReply, error) {
	if m.inline {
		cctx, cancel := m.inlineCtx(ctx)
		defer cancel()
		return m.st.Acquire(cctx, owner, adopt, "", wait)
	}
	return call(ctx, m.cfg.RenewDeadline, m.hooks.Settle, func(ctx context.Context) (hooks.AcquireReply, error) {
		return m.st.Acquire(ctx, owner, adopt, "", wait)
	})
}

func (m *Mutex) reacquire(ctx context.Context, field string) (hooks.AcquireReply, error) {
	if m.inline {
		cctx, cancel := m.inlineCtx(ctx)
		defer cancel()
		return m.st.Acquire(cctx, "", nil, field, false)
	}
	return call(ctx, m.cfg.RenewDeadline, m.hooks.Settle, func(ctx context.Context) (hooks.AcquireReply, error) {
		return m.st.Acquire(ctx, "", nil, field, false)
	})
}

func (m *Mutex) release(ctx context.Context, field string, last bool) (int64, error) {
	if m.inline {
		sent := time.Now()
		cctx, cancel := m.inlineCtx(ctx)
		defer cancel()
		n, err := m.st.Release(cctx, field, last)
		if err == nil && n < 0 && last && time.Since(sent) > m.cfg.RenewDeadline {
			// "Not held", answered after the bound a call on a goroutine
			// has (a client that ignores deadlines): a second run of the
			// release landing after its first run's mark lapsed (a TTL)
			// answers so too. Its outcome is unknown, as there.
			return 0, errCallBound
		}
		return n, err
	}
	return call(ctx, m.cfg.RenewDeadline, m.hooks.Settle, func(ctx context.Context) (int64, error) {
		return m.st.Release(ctx, field, last)
	})
}

// makeField returns "TERM OWNER", built in one allocation.
func makeField(term uint64, owner string) string {
	var buf [96]byte
	b := strconv.AppendUint(buf[:0], term, 10)
	b = append(b, ' ')
	b = append(b, owner...)
	return string(b)
}

// releaseField hands back a lock this process will not hold, within
// RenewDeadline.
func (m *Mutex) releaseField(ctx context.Context, field string) {
	_, err := call(context.WithoutCancel(ctx), m.cfg.RenewDeadline, m.hooks.Settle, func(ctx context.Context) (int64, error) {
		return m.st.Release(ctx, field, true)
	})
	if err != nil {
		m.log.Debug("release of a lock not held on", zap.Error(err))
	}
}

// abandon ends the attempts owners of call, which may still land (see
// endCall), within RenewDeadline.
func (m *Mutex) abandon(ctx context.Context, id string, owners []string) {
	_, err := call(ctx, m.cfg.RenewDeadline, m.hooks.Settle, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, m.st.Abandon(ctx, id, owners)
	})
	if ce := leader.RedisConfig(err); errors.Is(ce, leader.ErrRedisConfig) {
		// Not an outage: no retry cures it (the entries lapse on their
		// own). Asynchronous, so logged rather than returned.
		m.log.Error("abandon refused by redis: a configuration error, retrying will not cure it; fix it", zap.Error(ce))
	} else if err != nil {
		m.log.Debug("abandon of attempts whose outcome is unknown", zap.Error(err))
	}
}
