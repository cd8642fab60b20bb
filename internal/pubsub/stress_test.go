package pubsub_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/solo-run/solo/internal/pubsub"
	"github.com/solo-run/solo/internal/redistest"
)

// TestMux_ChurnAndKills: references added and removed at random while
// the connection is killed now and then; once things settle, exactly the
// referenced channels are subscribed and live, and a message published
// on each reaches Message.
func TestMux_ChurnAndKills(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	var mu sync.Mutex
	got := map[string]int{}
	m := pubsub.New(rdb, pubsub.Config{Every: time.Second, Pause: time.Millisecond, Chunk: 2,
		Message: func(ch, _ string) { mu.Lock(); got[ch]++; mu.Unlock() }})
	defer m.Close()
	names := []string{"a", "b", "c", "d", "e"}
	refs := map[string]int{}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 3000; i++ {
		n := names[r.IntN(len(names))]
		switch {
		case r.IntN(100) == 0:
			_ = rdb.ClientKillByFilter(ctx, "TYPE", "pubsub").Err()
		case refs[n] > 0 && r.IntN(2) == 0:
			m.Remove(n)
			refs[n]--
		default:
			if _, err := m.Add(n); err != nil {
				t.Fatal(err)
			}
			refs[n]++
		}
		if r.IntN(20) == 0 {
			time.Sleep(time.Duration(r.IntN(500)) * time.Microsecond)
		}
	}
	for _, n := range names {
		if refs[n] == 0 && r.IntN(2) == 0 {
			if _, err := m.Add(n); err != nil {
				t.Fatal(err)
			}
			refs[n]++
		}
	}
	waitFor(t, "settled", func() bool {
		for _, n := range names {
			subs := rdb.PubSubNumSub(ctx, n).Val()[n]
			want := int64(0)
			if refs[n] > 0 {
				want = 1
			}
			if subs != want || m.Live(n) != (refs[n] > 0) {
				return false
			}
		}
		return true
	})
	for _, n := range names {
		if refs[n] > 0 {
			rdb.Publish(ctx, n, "x")
		}
	}
	waitFor(t, "delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, n := range names {
			if refs[n] > 0 && got[n] == 0 {
				return false
			}
		}
		return true
	})
	t.Log(fmt.Sprint(refs))
}
