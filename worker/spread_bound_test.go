package worker

import (
	"context"
	"errors"
	"fmt"
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

// TestSpread_HeartbeatRunTwiceAnswersAlike: go-redis sends a script again
// after a connection reset, so spread.lua may run twice for one request;
// in every case (join, refused by an elect-mode lease, leave keeping the
// exclusion, leave removing it) the second run answers as the first did
// and publishes no second notice.
func TestSpread_HeartbeatRunTwiceAnswersAlike(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	s, err := NewSpread(client, leader.Config{Name: "twice", ID: "a"}, SpreadConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sub := client.Subscribe(ctx, s.cfg.EventsChannel())
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	msgs := sub.Channel()
	notices := func() int {
		n := 0
		for {
			select {
			case <-msgs:
				n++
			case <-time.After(200 * time.Millisecond):
				return n
			}
		}
	}
	twice := func(what string, ttl, excl time.Duration) {
		t.Helper()
		m1, h1, err1 := s.heartbeat(ctx, []string{"x"}, ttl, excl)
		n1 := notices()
		m2, h2, err2 := s.heartbeat(ctx, []string{"x"}, ttl, excl)
		n2 := notices()
		if fmt.Sprint(m1, h1, err1) != fmt.Sprint(m2, h2, err2) || n2 != 0 {
			t.Errorf("%s: first run %v %q %v (%d notices), second %v %q %v (%d notices); want the same answer and no second notice",
				what, m1, h1, err1, n1, m2, h2, err2, n2)
		}
	}
	twice("join", time.Minute, 2*time.Minute)
	twice("leave, keeping the exclusion", 0, time.Minute)
	twice("leave", 0, 0)
	if _, _, err := s.heartbeat(ctx, nil, time.Minute, 2*time.Minute); err != nil { // a member again
		t.Fatal(err)
	}
	notices()
	if err := client.Set(ctx, s.cfg.LeaseKey(), "7 e-1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	twice("refused by an elect-mode lease", time.Minute, 2*time.Minute)
}
