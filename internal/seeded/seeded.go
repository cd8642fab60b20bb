// Package seeded carries a seeded random source in a context, so that the
// module's own simulator can make an elector's jitter replay exactly. It is
// internal: code outside this module cannot set it, and without it the
// elector draws from a source seeded by the runtime.
package seeded

import (
	"context"
	"math/rand/v2"
)

type key struct{}

type perElection struct{}

// With returns a context carrying r. The receiver of the context must be
// the only user of r (a *rand.Rand is not safe for concurrent use).
func With(ctx context.Context, r *rand.Rand) context.Context {
	return context.WithValue(ctx, key{}, r)
}

// WithPerElection returns a context carrying next, which gives each
// campaign (each leader.Elector.Run) under the context a source of its
// own, by the election's name. It is for a context shared by several
// electors (a Spread runs one per job under Run's context): a shared
// source would be drawn from in the order the scheduler runs their
// goroutines, and a replay would diverge. next must be safe for
// concurrent use and must not depend on the order of its calls across
// elections (count per election).
func WithPerElection(ctx context.Context, next func(election string) *rand.Rand) context.Context {
	return context.WithValue(ctx, perElection{}, next)
}

// From returns the source carried by ctx, if any.
func From(ctx context.Context) (*rand.Rand, bool) {
	r, ok := ctx.Value(key{}).(*rand.Rand)
	return r, ok && r != nil
}

// ForElection returns a source for a campaign of election: a new one from
// WithPerElection's function when ctx carries one, else From(ctx).
func ForElection(ctx context.Context, election string) (*rand.Rand, bool) {
	if next, ok := ctx.Value(perElection{}).(func(string) *rand.Rand); ok && next != nil {
		if r := next(election); r != nil {
			return r, true
		}
	}
	return From(ctx)
}

type settleKey struct{}

// WithSettle returns a context carrying settle, which code run under the
// context calls before a decision that reads what other goroutines do at
// the same instant (a worker's cron loop, before it checks whether a
// job's previous run is still going; an elector's term loop, before it
// takes what came), with a key naming the decider ("cron ELECTION",
// "elector NAME"). It is the simulator's: inside a testing/synctest
// bubble its settle returns once every other goroutine of the bubble is
// durably blocked, taking no fake time, so a replay decides the same way;
// deciders waiting at one instant go one at a time in key order, not in
// the order the scheduler ran them. Settle must never be called while
// holding a lock another goroutine may need.
func WithSettle(ctx context.Context, settle func(key string)) context.Context {
	return context.WithValue(ctx, settleKey{}, settle)
}

// SettleFrom returns the settle function ctx carries, or nil.
func SettleFrom(ctx context.Context) func(key string) {
	f, _ := ctx.Value(settleKey{}).(func(string))
	return f
}
