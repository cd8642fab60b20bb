package lock

import (
	"context"
	"time"
)

// releaseLast deletes the lock for the term's last hold and stops the
// watchdog. The release is sent even when ctx is cancelled or its
// deadline has passed (go-redis writes no request on a done context):
// when ctx's deadline is less than RenewDeadline away, the release runs on
// a goroutine of the Client bounded by RenewDeadline, and releaseLast
// returns by ctx's deadline (context.DeadlineExceeded when the release
// has not answered by then).
func (l *lease) releaseLast(ctx context.Context) (int64, error) {
	l.end(ErrUnlocked) // every hold of the term ends before the lock can pass on
	dl, ok := ctx.Deadline()
	if !ok || time.Until(dl) >= l.m.cfg.RenewDeadline {
		ctx, cancel := uncancelled(ctx)
		defer cancel()
		n, err := l.m.release(ctx, l.field, true)
		l.finish(n, err)
		return n, err
	}
	type result struct {
		n   int64
		err error
	}
	ch := make(chan result, 1)
	ctx = context.WithoutCancel(ctx)
	send := func() (int64, error) {
		// Bounded by RenewDeadline in every mode (as an abandon is), also
		// with a client that ignores deadlines: Close waits for it.
		n, err := call(ctx, l.m.cfg.RenewDeadline, l.m.settle, func(ctx context.Context) (int64, error) {
			return l.m.st.release(ctx, l.field, true)
		})
		l.finish(n, err)
		return n, err
	}
	if !l.m.c.spawn(func() {
		n, err := send()
		ch <- result{n, err}
	}) {
		return send() // closed: at once, best effort
	}
	t := time.NewTimer(time.Until(dl))
	defer t.Stop()
	select {
	case r := <-ch:
		return r.n, r.err
	case <-t.C:
		return 0, context.DeadlineExceeded
	}
}

// uncancelled returns ctx without its cancellation but with its deadline
// and values: a release is sent even when ctx was cancelled (Unlock with
// the hold's own context), and ctx's deadline still bounds it. cancel is
// never nil.
func uncancelled(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Done() == nil {
		return ctx, func() {}
	}
	u := context.WithoutCancel(ctx)
	if dl, ok := ctx.Deadline(); ok {
		return context.WithDeadline(u, dl)
	}
	return u, func() {}
}
