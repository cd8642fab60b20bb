// Command basic is the smallest solo program: start it on several machines
// (or in several terminals) and exactly one of them runs the job. Stop that
// one with Ctrl-C and another takes over within a round trip; kill it with
// kill -9 and another takes over when its lease expires (10s by default).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/redisurl"
)

func main() {
	redisURL := flag.String("redis", "redis://127.0.0.1:6379/0", "Redis URL")
	flag.Parse()
	if err := run(*redisURL); err != nil {
		fmt.Fprintln(os.Stderr, "basic:", err)
		os.Exit(1)
	}
}

func run(redisURL string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	client, err := redisurl.NewClient(redisURL)
	if err != nil {
		return err
	}
	defer client.Close()

	e, err := leader.New(client, leader.Config{Name: "basic"})
	if err != nil {
		return err
	}
	// Run campaigns until ctx ends, calling the function for every term won.
	return e.Run(ctx, func(ctx context.Context) error {
		term, _ := leader.TermFrom(ctx)
		fmt.Println("leading, term", term)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done(): // lease lost, or shutting down
				fmt.Println("stepping down, term", term)
				return nil
			case now := <-tick.C:
				fmt.Println("working, term", term, now.Format(time.TimeOnly))
			}
		}
	})
}
