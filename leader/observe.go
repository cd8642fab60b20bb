package leader

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Change is one change of an election's leadership as an observer saw it.
type Change struct {
	Kind Transition
	// Holder is the new holder for TransitionElected, else the one that went.
	Holder Holder
	// At is when the observer learned of the change, on its own clock.
	At time.Time
}

// Observe follows the election cfg names without taking part, calling fn
// from its goroutine for each change of leadership, in order: the current
// holder (TransitionElected), then each release, resignation, expiry and
// new term; fn must not block long. It uses Name, KeyPrefix, TTL and
// RetryInterval of cfg (a bad cfg is a *ConfigError), retries Redis errors
// and returns nil once ctx is done (docs/design.md, "Observing an election").
func Observe(ctx context.Context, client redis.UniversalClient, cfg Config, fn func(Change)) error {
	lock, cfg, err := lockFor(client, cfg)
	if err != nil {
		return err
	}
	return observe(ctx, lock, cfg, fn)
}

// Observe is Observe through this elector's Store: it reports the changes of
// the elector's own election, this elector's terms included.
func (e *Elector) Observe(ctx context.Context, fn func(Change)) error {
	return observe(ctx, e.lock, e.cfg, fn)
}

// observer is the state of one Observe.
type observer struct {
	lock Store
	cfg  Config
	fn   func(Change)

	cur      Holder // zero: nobody known to lead
	resigned uint64 // a resign request was seen for this term
	elected  Lease  // announced by a notice, not yet read: read at once
}

func observe(ctx context.Context, lock Store, cfg Config, fn func(Change)) error {
	if fn == nil {
		return errors.New("leader: nil observe function")
	}
	o := &observer{lock: lock, cfg: cfg, fn: fn}
	var events <-chan Event
	var live func() bool
	w, err := lock.Watch(ctx)
	if err == nil {
		defer w.Close()
		events, live = w.Events(), w.Live
	}
	t := time.NewTimer(0) // read the lease at once
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				events, live = nil, nil
				continue
			}
			o.notice(ev)
			if o.elected.Term != 0 {
				// Read the new holder's info (TTL, renew interval, value)
				// now, before the next notice: the notice carries only its
				// lease.
				wait := o.inspect(ctx)
				if live == nil || !live() {
					wait = min(wait, cfg.RetryInterval)
				}
				t.Reset(wait)
			} else if o.cur.Term == 0 {
				// Between holders: the next "elected" notice is due within a
				// round trip; read the lease after RetryInterval in case it
				// was lost.
				t.Reset(cfg.RetryInterval)
			}
			continue
		case <-t.C:
		}
		wait := o.inspect(ctx)
		if live == nil || !live() {
			wait = min(wait, cfg.RetryInterval)
		}
		t.Reset(wait)
	}
}

// notice applies one notice.
func (o *observer) notice(ev Event) {
	switch ev.Kind {
	case EventResign:
		if ev.Lease.Term == 0 || ev.Lease.Term == o.cur.Term {
			o.resigned = o.cur.Term
		}
	case EventReleased:
		if ev.Lease.Term == o.cur.Term && ev.Lease.ID == o.cur.ID {
			kind := TransitionReleased
			if o.resigned == o.cur.Term {
				kind = TransitionResigned
			}
			o.emit(kind, o.cur)
			o.cur = Holder{}
		}
	case EventElected:
		if ev.Lease.Term > o.cur.Term {
			if o.cur.Term != 0 {
				// The previous holder's release notice never came.
				o.emit(TransitionExpired, o.cur)
				o.cur = Holder{}
			}
			o.elected = ev.Lease
		}
	}
}

// inspect reads the lease and reports what changed since the last view. It
// returns how long to wait before the next read: the holder's remaining
// TTL (a renewal will have extended it by then, or it expired), or
// RetryInterval without a holder or on an error.
func (o *observer) inspect(ctx context.Context) time.Duration {
	rctx, cancel := context.WithTimeout(ctx, o.cfg.RetryInterval)
	defer cancel()
	rec, err := callBounded(rctx, func() (Record, error) { return o.lock.Inspect(rctx) })
	if l := o.elected; l.Term != 0 {
		o.elected = Lease{}
		if err != nil || rec.Lease != l {
			// The announced holder is already gone, or the read failed:
			// report it from the notice alone (its info unknown), so no
			// term is skipped; its release notice or the next read ends it.
			o.cur = holderOf(Record{Lease: l}, time.Now())
			o.emit(TransitionElected, o.cur)
			if err != nil {
				return o.cfg.RetryInterval
			}
		}
	}
	switch {
	case errors.Is(err, ErrNoLeader):
		if o.cur.Term != 0 {
			o.emit(TransitionExpired, o.cur)
			o.cur = Holder{}
		}
		return o.cfg.RetryInterval
	case err != nil:
		return o.cfg.RetryInterval
	}
	h := holderOf(rec, time.Now())
	if rec.Term != o.cur.Term || rec.ID != o.cur.ID {
		if o.cur.Term != 0 {
			o.emit(TransitionExpired, o.cur)
		}
		o.emit(TransitionElected, h)
	}
	o.cur = h
	return rec.TTLLeft + time.Millisecond
}

func (o *observer) emit(kind Transition, h Holder) {
	o.fn(Change{Kind: kind, Holder: h, At: time.Now()})
}
