package lock

import (
	"context"

	"github.com/solo-run/solo/internal/lockseam"
)

// The simulator's seam (internal/lockseam): an Option, reachable only from
// inside this module, that swaps the Redis store for a simulated one.
func init() {
	lockseam.WithSettle = func(settle func()) any {
		return optionFunc(func(o *options) { o.settle = settle })
	}
	lockseam.WithStore = func(newStore func(lockseam.Lock) lockseam.Store) any {
		return optionFunc(func(o *options) {
			o.newStore = func(m *Mutex) store {
				s := newStore(lockseam.Lock{Name: m.name, KeyPrefix: m.cfg.KeyPrefix, Channel: m.channel, TTL: m.cfg.TTL, Fair: m.fair})
				if g, ok := s.(lockseam.Granter); ok && g.TakesGrants() {
					// Client.Mutex sets grants for its Redis store
					// only; a seam store that queues calls as the Redis
					// store does takes them too.
					m.grants = m.fair
				}
				return seamStore{s}
			}
		})
	}
}

// seamStore adapts a lockseam.Store to store.
type seamStore struct{ s lockseam.Store }

func (s seamStore) acquire(ctx context.Context, owner string, adopt []string, reenter string, wait bool) (acquireReply, error) {
	r, err := s.s.Acquire(ctx, owner, adopt, reenter, wait)
	return acquireReply{code: r.Code, term: r.Term, count: r.Count, holder: r.Holder, pttl: r.PTTL, field: r.Field, seen: r.Seen}, err
}

func (s seamStore) renew(ctx context.Context, field string) (bool, error) {
	return s.s.Renew(ctx, field)
}

func (s seamStore) release(ctx context.Context, field string, last bool) (int64, error) {
	return s.s.Release(ctx, field, last)
}

func (s seamStore) abandon(ctx context.Context, call string, owners []string) error {
	return s.s.Abandon(ctx, call, owners)
}

// The outcome codes are one set (a mismatch fails to compile).
var (
	_ = [1]struct{}{}[codeAbandoned-lockseam.CodeAbandoned]
	_ = [1]struct{}{}[codeGone-lockseam.CodeGone]
	_ = [1]struct{}{}[codeHeld-lockseam.CodeHeld]
	_ = [1]struct{}{}[codeAcquired-lockseam.CodeAcquired]
	_ = [1]struct{}{}[codeAdopted-lockseam.CodeAdopted]
	_ = [1]struct{}{}[codeReentered-lockseam.CodeReentered]
)
