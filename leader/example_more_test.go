package leader_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/leadertest"
	"github.com/solo-run/solo/leader/redisurl"
)

// New and Run on Redis: the function runs only while this process leads,
// with the fencing term in its context. (Needs a Redis server; not run.)
func Example_redis() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	client, err := redisurl.NewClient("redis://127.0.0.1:6379/0")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	e, err := leader.New(client, leader.Config{Name: "orders-sync"})
	if err != nil {
		log.Fatal(err)
	}
	err = e.Run(ctx, func(ctx context.Context) error {
		term, _ := leader.TermFrom(ctx)
		fmt.Println("leading with term", term)
		<-ctx.Done() // the term ended: stop before the lease can pass
		return nil
	})
	fmt.Println(err)
}

// A Hub shares one pub/sub connection and pipelined renewals among many
// elections on one client. Close it after its electors stopped. (Needs a
// Redis server; not run.)
func ExampleHub() {
	client, err := redisurl.NewClient("redis://127.0.0.1:6379/0")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	hub := leader.NewHub(client)
	defer hub.Close()
	for _, name := range []string{"tenant-1", "tenant-2", "tenant-3"} {
		e, err := leader.New(client, leader.Config{Name: name}, leader.WithHub(hub))
		if err != nil {
			log.Fatal(err)
		}
		_ = e // e.Run(ctx, fn) in a goroutine of its own, awaited before hub.Close
	}
}

// Lookup tells who leads an election without taking part. (Needs a Redis
// server; not run.)
func ExampleLookup() {
	client, err := redisurl.NewClient("redis://127.0.0.1:6379/0")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	h, err := leader.Lookup(context.Background(), client, leader.Config{Name: "orders-sync"})
	switch {
	case errors.Is(err, leader.ErrNoLeader):
		fmt.Println("nobody leads")
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println(h.ID, "leads with term", h.Term, "since", h.Since)
	}
}

// Resign steps down gracefully: the function's context is cancelled with
// ErrResigned, the lease released after it returned, and the elector sits
// out one election.
func ExampleElector_Resign() {
	e, err := leader.NewWithStore(leadertest.New(), leader.Config{Name: "orders-sync", ID: "a"})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err = e.Run(ctx, func(ctx context.Context) error {
		go func() { _ = e.Resign(context.Background()) }()
		<-ctx.Done()
		fmt.Println("cancelled:", errors.Is(context.Cause(ctx), leader.ErrResigned))
		cancel() // end Run too, instead of campaigning again
		return nil
	})
	fmt.Println("run:", err, "leading:", e.IsLeader())
	// Output:
	// cancelled: true
	// run: <nil> leading: false
}

// Observe follows an election's leadership without taking part: the
// current leader first, then every change.
func ExampleElector_Observe() {
	lock := leadertest.New()
	cfg := leader.Config{Name: "orders-sync"}
	a, _ := leader.NewWithStore(lock, withID(cfg, "a"))
	watcher, _ := leader.NewWithStore(lock, withID(cfg, "w"))

	changes := make(chan leader.Change)
	octx, stopObserving := context.WithCancel(context.Background())
	observed := make(chan error)
	go func() { observed <- watcher.Observe(octx, func(c leader.Change) { changes <- c }) }()

	ctx, stopA := context.WithCancel(context.Background())
	ran := make(chan error)
	go func() { ran <- a.Run(ctx, func(ctx context.Context) error { <-ctx.Done(); return nil }) }()
	c := <-changes
	fmt.Println(c.Kind, c.Holder.ID == a.ID())
	stopA() // a shuts down and releases the lease
	c = <-changes
	fmt.Println(c.Kind, c.Holder.ID == a.ID())
	<-ran
	stopObserving()
	fmt.Println(<-observed)
	// Output:
	// elected true
	// released true
	// <nil>
}

func withID(c leader.Config, id string) leader.Config {
	c.ID = id
	return c
}
