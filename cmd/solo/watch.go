package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/solo-run/solo/leader"
)

// errRedisConfig stops solo run on a configuration error of Redis.
var errRedisConfig = errors.New("redis configuration error")

// configWatch stops solo run --once at the first configuration error of
// Redis (leader.ErrRedisConfig) that configErr reports (without --once solo
// run stays up, not ready, through them). It owns one goroutine,
// ended by stop or by the end of the context it was started with.
type configWatch struct {
	found atomic.Pointer[error]
	stopW context.CancelFunc
	done  chan struct{}
}

// configSignal is the elector's leader.Metrics with a signal: it passes
// every measurement on, and each configuration error also wakes C, so a
// watch waits for one instead of polling the status.
type configSignal struct {
	leader.Metrics
	c chan struct{}
}

func newConfigSignal(m leader.Metrics) *configSignal {
	return &configSignal{Metrics: m, c: make(chan struct{}, 1)}
}

// RedisConfigError passes err on, then wakes C (never blocking: one
// pending wake-up stands for any number).
func (s *configSignal) RedisConfigError(err error) {
	s.Metrics.RedisConfigError(err)
	select {
	case s.c <- struct{}{}:
	default:
	}
}

// watchConfig starts a configWatch on ctx: on an error it records it and
// cancels solo (cancel) with errRedisConfig. It reads configErr at once
// and then each time wake fires: a configSignal's C, or a ticker where
// no signal exists (a spread group), never faster than the renewals. An eviction
// policy that appeared after the start (leader.ErrEvictionPolicy) does not
// stop solo: a server-side change must not take every instance down at
// once; the instance stays up, not ready, and recovers once it is fixed.
func watchConfig[T any](ctx context.Context, cancel context.CancelCauseFunc, configErr func() error, wake <-chan T) *configWatch {
	wctx, stop := context.WithCancel(ctx)
	cw := &configWatch{stopW: stop, done: make(chan struct{})}
	go func() {
		defer close(cw.done)
		for {
			if err := configErr(); err != nil && !errors.Is(err, leader.ErrEvictionPolicy) {
				cw.found.Store(&err)
				cancel(errRedisConfig)
				return
			}
			select {
			case <-wctx.Done():
				return
			case <-wake:
			}
		}
	}()
	return cw
}

// stop ends the watch and returns the configuration error it found, if any.
func (cw *configWatch) stop() error {
	cw.stopW()
	<-cw.done
	if p := cw.found.Load(); p != nil {
		return *p
	}
	return nil
}

// errNotAcquired stops solo run when --once or --try gives up the lease.
var errNotAcquired = errors.New("lease not acquired")

// watchAcquire watches e until it leads, and says whether to stop first:
// with once (and no try), as soon as another instance is seen holding the
// lease (a codeError with exit 0); with try, when try passed without leading (an
// error, exit 1).
func watchAcquire(ctx context.Context, e *leader.Elector, once bool, try time.Duration, name string) (err error, stop bool) {
	start := time.Now()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, false
		case <-t.C:
		}
		st := e.Status()
		if st.Leading || st.Holder.ID == e.ID() {
			return nil, false
		}
		held := st.Holder.ID != ""
		if once && try == 0 && held {
			// Not a failure: the job runs elsewhere. run prints the line
			// and exits 0.
			return &codeError{code: exitOK, err: fmt.Errorf("election %q is held by %s (term %d): --once, not run", name, st.Holder.ID, st.Holder.Term)}, true
		}
		if try > 0 && time.Since(start) >= try {
			if held {
				return fmt.Errorf("election %q: lease not acquired within --try %s (held by %s, term %d)", name, try, st.Holder.ID, st.Holder.Term), true
			}
			return fmt.Errorf("election %q: lease not acquired within --try %s", name, try), true
		}
	}
}
