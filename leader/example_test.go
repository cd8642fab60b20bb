package leader_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/leadertest"
)

// Config names the bad field and its value.
func ExampleConfig_Validate() {
	err := leader.Config{Name: "orders-sync", TTL: 3 * time.Second, RenewDeadline: 5 * time.Second}.Validate()
	fmt.Println(err)
	// Output: invalid renew_deadline 5s: must be less than ttl×(1−drift) = 2.97s (ttl 3s, drift 0.01)
}

// All keys of an election share the hash tag {NAME}: one Cluster slot.
func ExampleConfig_LeaseKey() {
	cfg := leader.Config{Name: "orders-sync"}
	fmt.Println(cfg.LeaseKey())
	fmt.Println(cfg.TermKey())
	fmt.Println(cfg.EventsChannel())
	// Output:
	// solo:{orders-sync}:lease
	// solo:{orders-sync}:term
	// solo:{orders-sync}:events
}

// An elector on the in-memory lock of package leadertest: the function runs
// with the term in its context, and the lease is released when it returns.
func ExampleNewWithStore() {
	lock := leadertest.New()
	e, err := leader.NewWithStore(lock, leader.Config{Name: "orders-sync", ID: "a"})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	err = e.Run(ctx, func(ctx context.Context) error {
		term, ok := leader.TermFrom(ctx)
		fmt.Println("leading:", e.IsLeader(), "term:", term, ok)
		cancel() // shut down: Run cancels this context, waits, releases
		<-ctx.Done()
		fmt.Println("stopped:", context.Cause(ctx))
		return nil
	})
	_, _, held := lock.Holder()
	fmt.Println("run:", err, "lease held:", held, "leading:", e.IsLeader())
	fmt.Println(errors.Is(e.Resign(context.Background()), leader.ErrNotLeader))
	// Output:
	// leading: true term: 1 true
	// stopped: leader: shutting down
	// run: <nil> lease held: false leading: false
	// true
}
