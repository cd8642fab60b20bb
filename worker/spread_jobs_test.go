package worker_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
)

// TestLookupJobs: a reader with no job list of its own (solo status of a
// group built in code) reads the group's jobs from what the live members'
// heartbeats publish: the union of their lists (two members with
// different jobs, as in a rolling deploy that adds one), shards by name;
// a member that left takes its jobs with it; an empty group has none.
func TestLookupJobs(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	cfg := leader.Config{Name: "lj", TTL: time.Second}
	idle := func(ctx context.Context) error { <-ctx.Done(); return nil }
	start := func(id string, add func(s *worker.Spread) error) (stop func()) {
		c := cfg
		c.ID = id
		s, err := worker.NewSpread(client, c, worker.SpreadConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if err := add(s); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		var once sync.Once
		stop = func() { once.Do(func() { cancel(); <-done }) }
		t.Cleanup(stop)
		return stop
	}
	stopA := start("a", func(s *worker.Spread) error {
		if err := s.Pull("sync", idle); err != nil {
			return err
		}
		return s.Sharded("orders", 2, func(ctx context.Context, _ int) error { return idle(ctx) })
	})
	stopB := start("b", func(s *worker.Spread) error {
		if err := s.Pull("sync", idle); err != nil {
			return err
		}
		return s.Pull("refunds", idle)
	})
	want := func(what, jobs string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			got, err := worker.LookupJobs(context.Background(), client, cfg)
			if err == nil && strings.Join(got, " ") == jobs {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: LookupJobs() = %q, %v; want %q", what, got, err, jobs)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	want("two members", "orders/0 orders/1 refunds sync")
	stopA()
	want("a left", "refunds sync")
	stopB()
	want("empty group", "")
}
