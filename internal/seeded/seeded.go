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

// With returns a context carrying r. The receiver of the context must be
// the only user of r (a *rand.Rand is not safe for concurrent use).
func With(ctx context.Context, r *rand.Rand) context.Context {
	return context.WithValue(ctx, key{}, r)
}

// From returns the source carried by ctx, if any.
func From(ctx context.Context) (*rand.Rand, bool) {
	r, ok := ctx.Value(key{}).(*rand.Rand)
	return r, ok && r != nil
}
