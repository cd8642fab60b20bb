package worker_test

import (
	"context"
	"fmt"
	"log"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/leadertest"
	"github.com/solo-run/solo/worker"
)

// A pull job runs while this instance leads, with the term in its context,
// and is cancelled when the term ends.
func ExampleWorker_Pull() {
	e, err := leader.NewWithStore(leadertest.New(), leader.Config{Name: "orders-sync", ID: "a"})
	if err != nil {
		log.Fatal(err)
	}
	w, err := worker.New(e)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	_ = w.Pull("consume-orders", func(ctx context.Context) error {
		term, _ := leader.TermFrom(ctx)
		fmt.Println("consuming with term", term)
		stop() // in a program: a signal
		<-ctx.Done()
		fmt.Println("stopped:", context.Cause(ctx))
		return nil
	})
	fmt.Println("run:", w.Run(ctx))
	// Output:
	// consuming with term 1
	// stopped: leader: shutting down
	// run: <nil>
}

// A cron job fires on the leader only; a tick missed during a failover
// runs once, late, with MisfireRunOnce, and AtLeastOnce runs a tick again
// until its completion is recorded. (Runs until ctx ends; not run here.)
func ExampleWorker_Cron() {
	e, err := leader.NewWithStore(leadertest.New(), leader.Config{Name: "reports"})
	if err != nil {
		log.Fatal(err)
	}
	w, err := worker.New(e)
	if err != nil {
		log.Fatal(err)
	}
	err = w.Cron("nightly-report", "0 2 * * *", func(ctx context.Context) error {
		tick, _ := worker.TickFrom(ctx)
		fmt.Println("report for", tick)
		return nil
	}, worker.WithMisfire(worker.MisfireRunOnce), worker.WithDelivery(worker.AtLeastOnce))
	if err != nil {
		log.Fatal(err)
	}
	_ = w.Run(context.Background())
}
