// Package hooks holds the construction-time hooks through which this
// module's simulator (internal/sim) runs the production code of leader,
// leader/lock and worker deterministically. Each package takes a Hooks
// through an option set at construction (leader.WithHooks,
// lock.WithHooks, worker.WithHooks); the zero Hooks is production's
// behaviour, and every hook is a no-op there. There is one code path: a
// hook decides an order or supplies a value where production would use
// the runtime's (its scheduler, crypto/rand, the Redis store), never a
// second branch of logic. Being internal, nothing outside this module can
// build a Hooks.
package hooks

import "math/rand/v2"

// Hooks are the simulator's hooks. The zero value is production.
type Hooks struct {
	// Settle, when set, is called where a wait could end in two ways at
	// one instant (a reply and its bound, a notice and a timer), and where
	// a batch is taken off a queue, with a key naming the place. Inside a
	// testing/synctest bubble the simulator's Settle returns once every
	// other goroutine of the bubble is durably blocked, so the choice then
	// made by a fixed order replays exactly. It must never be called while
	// holding a lock another goroutine may need.
	Settle func(key string)
	// Rand, when set, returns the source of jitter of one campaign, by
	// the election's name, or of one lock call, by "NAME SEQ" (the lock's
	// name and the call's number in its Client); its receiver is its only
	// user. Unset: a source seeded by the runtime.
	Rand func(name string) *rand.Rand
	// IDToken, when set, returns the random part of the ID of an elector
	// of election; it must never repeat for one election. Unset:
	// crypto/rand.
	IDToken func(election string) string
	// NewLockStore, when set, gives a Mutex the store it runs over instead
	// of the Redis store; waiters still subscribe through Redis.
	NewLockStore func(Lock) Store
}

// SettleAt calls Settle with key when it is set.
func (h Hooks) SettleAt(key string) {
	if h.Settle != nil {
		h.Settle(key)
	}
}
