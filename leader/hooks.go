package leader

import "github.com/solo-run/solo/internal/hooks"

// WithHooks sets the hooks through which this module's simulator runs an
// Elector (New) or a Hub (NewHub) deterministically. hooks.Hooks is
// internal to this module, so no other module can build one; the zero
// Hooks is production's behaviour.
func WithHooks(h hooks.Hooks) interface {
	Option
	HubOption
} {
	return hooksOption{h}
}

type hooksOption struct{ h hooks.Hooks }

func (o hooksOption) apply(opts *options) { opts.hooks = o.h }
func (o hooksOption) applyHub(h *Hub)     { h.hooks = o.h }
