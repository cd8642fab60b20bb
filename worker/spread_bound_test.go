package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/faultproxy"
	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
)

// TestSpread_HeartbeatBoundedWhenTheReplyIsLost: a heartbeat whose reply
// never comes returns at its context's deadline, as an election's calls
// do, not at the client's read timeout (go-redis without
// ContextTimeoutEnabled waits for that); a member held that long misses
// its own deadlines.
//
// Mutation: with the script run unbounded this fails with "heartbeat
// returned after 30s ... want within 10s of its 300ms bound".
func TestSpread_HeartbeatBoundedWhenTheReplyIsLost(t *testing.T) {
	srv := redistest.Start(t)
	px, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	client := redis.NewClient(&redis.Options{Addr: px.Addr(), ReadTimeout: 30 * time.Second, MaxRetries: -1})
	defer client.Close()
	s, err := NewSpread(client, leader.Config{Name: "bound", ID: "a"}, SpreadConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, _, err := s.heartbeat(ctx, nil, time.Second, 2*time.Second); err != nil {
		t.Fatal(err) // the script is loaded; the connection is up
	}
	px.BlackholeReplies(true)
	hctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err = s.heartbeat(hctx, nil, time.Second, 2*time.Second)
	took := time.Since(start)
	if took > 10*time.Second || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("heartbeat returned after %s with %v; want context.DeadlineExceeded within 10s of its 300ms bound", took.Round(time.Second), err)
	}
}
