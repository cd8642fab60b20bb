package lock

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/solo-run/solo/internal/hooks"
)

// The simulator's settle (hooks.Hooks.Settle, WithHooks): a wait that
// could end two ways at one fake instant decides by a fixed order, so a
// replay decides the same way. Each case makes the two ways coincide and runs 20 times.
//
// Mutation checks: without the drain after call's settle, "call returned
// lock: no reply within the renew deadline, want the reply that came at
// the bound (run 1)"; without sleep's grant check after its settle,
// "sleep = true, \"\", want the grant that came with the timer (run 0)";
// settled returning ok without looking at ctx, "waitReady = true, want
// false: ctx ended at the timer's instant (run 0)".
func TestSettle_FixedOrderAtOneInstant(t *testing.T) {
	settle := func(string) { time.Sleep(time.Nanosecond) }
	t.Run("call takes a reply that comes at its bound", func(t *testing.T) {
		for i := range 20 {
			synctest.Test(t, func(t *testing.T) {
				v, err := call(context.Background(), time.Second, settle, func(ctx context.Context) (int, error) {
					time.Sleep(time.Second) // the reply lands as the bound passes
					return 7, nil
				})
				if err != nil || v != 7 {
					t.Fatalf("call returned %v, want the reply that came at the bound (run %d)", err, i)
				}
			})
		}
	})
	t.Run("sleep takes a grant that comes with its timer", func(t *testing.T) {
		for i := range 20 {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				m := &Mutex{c: &Client{ctx: ctx}, hooks: hooks.Hooks{Settle: settle}}
				w := &waiter{notify: make(chan struct{}, 1), grant: make(chan string, 1)}
				time.AfterFunc(time.Second, func() { w.grant <- "5 c-1.0" })
				ok, g := m.sleep(context.Background(), w, time.Second)
				if !ok || g != "5 c-1.0" {
					t.Fatalf("sleep = %v, %q, want the grant that came with the timer (run %d)", ok, g, i)
				}
			})
		}
	})
	t.Run("waitReady reports an end that comes with the timer", func(t *testing.T) {
		for i := range 20 {
			synctest.Test(t, func(t *testing.T) {
				m := &Mutex{c: &Client{ctx: context.Background()}, cfg: Config{RetryInterval: time.Second}, hooks: hooks.Hooks{Settle: settle}}
				w := &waiter{ready: make(chan struct{})}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				if m.waitReady(ctx, w, time.Second) {
					t.Fatalf("waitReady = true, want false: ctx ended at the timer's instant (run %d)", i)
				}
			})
		}
	})
}
