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
	s, client := scriptSpread(t, "twice")
	ctx := context.Background()
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

// scriptSpread returns a Spread of group name, member "a", that is never
// run, on a client of a fresh redis-server: for tests that call its
// heartbeat script directly.
func scriptSpread(t *testing.T, name string) (*Spread, redis.UniversalClient) {
	t.Helper()
	client := redistest.Start(t).Client(t)
	s, err := NewSpread(client, leader.Config{Name: name, ID: "a"}, SpreadConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return s, client
}

// TestSpread_LateHeartbeatKeepsTheLeaveExclusion: a heartbeat sent before
// a member left but run after its leave (a slow request, a client's retry)
// does not shorten the exclusion entry the leave extended over the drain:
// else the entry expires member_ttl + TTL after that heartbeat, while jobs
// still drain within shutdown_timeout, and an elect-mode instance waiting
// for the name starts them beside the draining member. The final leave
// still removes the entry.
//
// Mutation: with spread.lua's plain ZADD of the entry (the old script)
// this fails with "after a late heartbeat the exclusion expires in 2s,
// want the leave's 1m0s".
func TestSpread_LateHeartbeatKeepsTheLeaveExclusion(t *testing.T) {
	s, client := scriptSpread(t, "late")
	ctx := context.Background()
	beat := func(ttl, excl time.Duration) {
		t.Helper()
		if _, _, err := s.heartbeat(ctx, nil, ttl, excl); err != nil {
			t.Fatal(err)
		}
	}
	left := func() time.Duration {
		t.Helper()
		score, err := client.ZScore(ctx, s.spreadKey(), s.member).Result()
		if err != nil {
			t.Fatalf("the exclusion entry: %v", err)
		}
		now, err := client.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return time.UnixMilli(int64(score)).Sub(now).Round(time.Second)
	}
	beat(time.Second, 2*time.Second) // a member
	beat(0, time.Minute)             // the leave, over the drain
	beat(time.Second, 2*time.Second) // the heartbeat sent before it
	if d := left(); d < 50*time.Second {
		t.Fatalf("after a late heartbeat the exclusion expires in %s, want the leave's 1m0s", d)
	}
	beat(0, time.Minute) // the leave sent again
	if d := left(); d < 50*time.Second {
		t.Fatalf("after the leave sent again the exclusion expires in %s, want 1m0s", d)
	}
	beat(0, 0) // drained: the name is free
	if n, err := client.Exists(ctx, s.spreadKey()).Result(); err != nil || n != 0 {
		t.Fatalf("after the last leave the exclusion key exists (%d, %v), want it gone", n, err)
	}
}
