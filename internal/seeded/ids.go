package seeded

import (
	"reflect"
	"sync"
	"sync/atomic"
)

// idSources maps a Redis client to the source of the random parts of the
// IDs of the electors made over it.
var idSources sync.Map // client → *idSource

// nSources counts the sources set: without any (always, outside the
// simulator) IDToken looks nothing up.
var nSources atomic.Int32

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
	s := &idSource{next: next}
	idSources.Store(client, s)
	nSources.Add(1)
	return func() {
		if idSources.CompareAndDelete(client, s) {
			nSources.Add(-1)
		}
	}
}

// IDToken returns the next random part for an elector of election made
// over client; ok is false when no source was set for it.
func IDToken(client any, election string) (string, bool) {
	// A client that is not comparable (a struct value holding a map) would
	// make the map lookup panic; the simulator's never is.
	if nSources.Load() == 0 || client == nil || !reflect.ValueOf(client).Comparable() {
		return "", false
	}
	v, ok := idSources.Load(client)
	if !ok {
		return "", false
	}
	s := v.(*idSource)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.next(election), true
}
