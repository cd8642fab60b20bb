package lock

import "github.com/solo-run/solo/internal/hooks"

// WithHooks sets the hooks through which this module's simulator runs a
// Client's Mutexes deterministically: Settle at the waits that could end
// in two ways at one instant, Rand for a call's jitter, NewLockStore for
// the store a Mutex runs over (waiters still subscribe through Redis).
// hooks.Hooks is internal to this module, so no other module can build
// one; the zero Hooks is production's behaviour.
func WithHooks(h hooks.Hooks) Option {
	return optionFunc(func(o *options) {
		o.hooks = h
		if h.NewLockStore != nil {
			o.newStore = func(m *Mutex) hooks.Store { return hookStore(m, h.NewLockStore) }
		}
	})
}

// hookStore makes m's store with newStore. A fair Mutex takes a release's
// grants over it when it queues calls as the Redis store does
// (hooks.Granter); Client.Mutex sets grants for its Redis store only.
func hookStore(m *Mutex, newStore func(hooks.Lock) hooks.Store) hooks.Store {
	s := newStore(hooks.Lock{Name: m.name, KeyPrefix: m.cfg.KeyPrefix, Channel: m.channel, TTL: m.cfg.TTL, Fair: m.fair})
	if g, ok := s.(hooks.Granter); ok && g.TakesGrants() {
		m.grants = m.fair
	}
	return s
}
