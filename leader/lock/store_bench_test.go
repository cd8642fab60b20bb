package lock

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/hooks"
	"github.com/solo-run/solo/internal/redistest"
)

// BenchmarkStore_Cycle: the two scripts alone (acquire, release), on the
// caller's goroutine: the Redis side of the cycle, for comparison with
// BenchmarkMutex_Uncontended (which adds the bounds, the hold and the
// watchdog).
func BenchmarkStore_Cycle(b *testing.B) {
	srv := redistest.Start(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	s := newRedisStore(rdb, Config{}.withDefaults(), "bench")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		r, err := s.Acquire(ctx, "o", nil, "", false)
		if err != nil || r.Code != hooks.CodeAcquired {
			b.Fatal(r, err)
		}
		if _, err := s.Release(ctx, strconv.FormatUint(r.Term, 10)+" o", true); err != nil {
			b.Fatal(err)
		}
	}
}
