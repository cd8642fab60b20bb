// Package bounded bounds a call by its context whatever the client does
// with it: the one place where solo's packages (an election's calls, a
// spread member's heartbeat) abandon a call whose reply does not come in
// time.
package bounded

import "context"

// Call runs f in a goroutine of its own and returns its result, or ctx's
// error once ctx ends first. f must use ctx; a client that ignores it
// (go-redis without ContextTimeoutEnabled waits for its read timeout)
// keeps the goroutine until it returns, and its result is dropped.
func Call[T any](ctx context.Context, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}
