package leader

import (
	"context"
	"errors"
	"fmt"
)

var (
	_ Proclaimer = (*RedisStore)(nil)
	_ Withdrawer = (*RedisStore)(nil)
)

// Proclaim replaces the value this elector proclaims with its leadership
// (Config.Value at first), as etcd's Election.Proclaim does: while it
// leads, the stored value changes at once, fenced by the lease, and every
// later term starts with it. It returns ErrNotLeader when this elector does
// not lead (the value is still kept for its later terms), a *ConfigError
// for a bad value, and an error when the Store cannot proclaim.
func (e *Elector) Proclaim(ctx context.Context, value string) error {
	if err := checkValue(value); err != nil {
		return err
	}
	p, ok := e.lock.(Proclaimer)
	if !ok {
		return fmt.Errorf("leader: proclaim: %T does not implement Proclaimer", e.lock)
	}
	st := e.Status()
	l := Lease{ID: e.cfg.ID}
	if st.Leading {
		l.Term = st.Term
	}
	_, err := callBounded(ctx, func() (struct{}, error) { return struct{}{}, p.Proclaim(ctx, l, value) })
	if errors.Is(err, ErrLeaseLost) {
		return ErrNotLeader
	}
	return err
}
