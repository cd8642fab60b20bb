package worker

import "github.com/solo-run/solo/internal/hooks"

// WithHooks sets the hooks through which this module's simulator runs a
// Worker or Spread (and the electors a Spread makes) deterministically.
// hooks.Hooks is internal to this module, so no other module can build
// one; the zero Hooks is production's behaviour.
func WithHooks(h hooks.Hooks) Option {
	return optionFunc(func(w *Worker) { w.hooks = h })
}
