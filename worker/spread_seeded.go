package worker

import (
	"context"
	"math/rand/v2"

	"github.com/solo-run/solo/internal/hooks"
	"github.com/solo-run/solo/internal/seeded"
	"github.com/solo-run/solo/leader"
)

// seededHooks gives an elector a Spread makes the hooks the module's
// simulator set through internal/seeded (on client, and on the context
// the Spread runs under), as leader.WithHooks; outside the simulator they
// are the zero Hooks' behaviour. It bridges until the simulator passes
// the Spread its hooks through WithHooks.
func seededHooks(ctx context.Context, client any) leader.Option {
	h := hooks.Hooks{
		Settle: seeded.SettleFrom(ctx),
		Rand: func(election string) *rand.Rand {
			r, _ := seeded.ForElection(ctx, election)
			return r
		},
	}
	if seeded.Settle(client) != nil { // the simulator sets its IDs with it
		h.IDToken = func(election string) string {
			t, _ := seeded.IDToken(client, election)
			return t
		}
	}
	return leader.WithHooks(h)
}
