package seeded

import (
	"reflect"
	"sync"
	"sync/atomic"
)

// perClient maps a Redis client to a value the simulator set for it.
type perClient[T any] struct {
	m sync.Map // client → *T
	// n counts the values set: without any (always, outside the
	// simulator) get looks nothing up.
	n atomic.Int32
}

func (p *perClient[T]) set(client any, v *T) (undo func()) {
	p.m.Store(client, v)
	p.n.Add(1)
	return func() {
		if p.m.CompareAndDelete(client, v) {
			p.n.Add(-1)
		}
	}
}

func (p *perClient[T]) get(client any) (*T, bool) {
	// A client that is not comparable (a struct value holding a map) would
	// make the map lookup panic; the simulator's never is.
	if p.n.Load() == 0 || client == nil || !reflect.ValueOf(client).Comparable() {
		return nil, false
	}
	v, ok := p.m.Load(client)
	if !ok {
		return nil, false
	}
	return v.(*T), true
}

// idSources maps a Redis client to the source of the random parts of the
// IDs of the electors made over it.
var idSources perClient[idSource]

type idSource struct {
	mu   sync.Mutex
	next func(election string) string
}

// SetIDs makes next the source of the random part of the ID of every
// elector made over client (leader.New, and so every elector of a
// worker.Spread over it), until the returned undo is called. It is the
// simulator's, so that a replay gives its electors the same IDs, and with
// them the same rendezvous hashing of a spread group's jobs; nothing
// outside this module can call it, and without it an ID's random part
// comes from crypto/rand. next gets the election's name (an elector's
// random part must depend on what it is, not on the order goroutines make
// electors in) and must never return the same value twice for one
// election: an elector adopts a lease held by its own ID.
func SetIDs(client any, next func(election string) string) (undo func()) {
	return idSources.set(client, &idSource{next: next})
}

// IDToken returns the next random part for an elector of election made
// over client; ok is false when no source was set for it.
func IDToken(client any, election string) (string, bool) {
	s, ok := idSources.get(client)
	if !ok {
		return "", false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.next(election), true
}

// settles maps a Redis client to the simulator's settle function for the
// leader.Hub and the worker.Spread made over it.
var settles perClient[func(string)]

// SetSettle makes settle the function a leader.Hub made over client calls
// (key "hub") before it takes renewals off its queue into a pipeline
// (such a Hub also orders its queue by key instead of by arrival), and a
// worker.Spread made over client (key "spread") before each step reads
// its jobs' state, until the returned undo is called. It is the
// simulator's: inside a testing/synctest bubble its settle returns once
// every other goroutine of the bubble is durably blocked, taking no fake
// time, so which renewals share a pipeline, in what order, and what a
// step sees, no longer depend on the order the scheduler ran the
// goroutines woken at that instant in. Settle must never be called while
// holding a lock another goroutine may need. Without it (always, outside
// the simulator) the Hub takes its queue as it finds it and the Spread
// steps at once.
func SetSettle(client any, settle func(key string)) (undo func()) {
	return settles.set(client, &settle)
}

// Settle returns the settle function set for client, or nil.
func Settle(client any) func(key string) {
	if f, ok := settles.get(client); ok {
		return *f
	}
	return nil
}
