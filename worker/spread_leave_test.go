package worker

import (
	"context"
	"testing"
	"time"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
)

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
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	s, err := NewSpread(client, leader.Config{Name: "late", ID: "a"}, SpreadConfig{})
	if err != nil {
		t.Fatal(err)
	}
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
