package lock_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/leader/lock"
)

// Benchmarks against a real redis-server on loopback.

// BenchmarkMutex_Uncontended: one TryLock + Unlock cycle with a term (two
// round trips, EVALSHA each; the watchdog goroutine starts and stops).
func BenchmarkMutex_Uncontended(b *testing.B) {
	b.Run("bounded", func(b *testing.B) { benchUncontended(b) })
	b.Run("inline", func(b *testing.B) { benchUncontended(b, lock.WithInlineCalls()) })
	b.Run("fair-inline", func(b *testing.B) { benchUncontended(b, lock.WithInlineCalls(), lock.WithFair()) })
}

func benchUncontended(b *testing.B, opts ...lock.Option) {
	_, rdb := startRedis(b)
	c := newLockClient(b, rdb, opts...)
	m := mustMutex(b, c, "bench")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		h, err := m.TryLock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := h.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

var compareAndDel = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// BenchmarkBare_SetNXCompareDel: the floor, without term or renewal: SET NX
// PX and a compare-and-DEL script.
func BenchmarkBare_SetNXCompareDel(b *testing.B) {
	_, rdb := startRedis(b)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		tok := strconv.Itoa(i)
		ok, err := rdb.SetNX(ctx, "bare", tok, 10*time.Second).Result()
		if err != nil || !ok {
			b.Fatal(ok, err)
		}
		if err := compareAndDel.Run(ctx, rdb, []string{"bare"}, tok).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMutex_Handover8: 8 goroutines on one lock, each holding it for
// 1ms. wake_p50/p99 is the time from a holder's Unlock call to the next
// holder's Lock returning: the release round trip, the notice, and the
// winner's acquire round trip.
func BenchmarkMutex_Handover8(b *testing.B) {
	b.Run("unfair", func(b *testing.B) { benchHandover(b) })
	b.Run("fair", func(b *testing.B) { benchHandover(b, lock.WithFair()) })
}

func benchHandover(b *testing.B, opts ...lock.Option) {
	_, rdb := startRedis(b)
	c := newLockClient(b, rdb, opts...)
	m := mustMutex(b, c, "handover")
	ctx := context.Background()
	var (
		mu       sync.Mutex
		released time.Time // when the last holder called Unlock
		lat      []time.Duration
	)
	b.ResetTimer()
	var wg sync.WaitGroup
	ops := b.N
	var left = ops
	for range 8 {
		wg.Go(func() {
			for {
				h, err := m.Lock(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				got := time.Now()
				mu.Lock()
				if !released.IsZero() {
					lat = append(lat, got.Sub(released))
				}
				done := left <= 0
				left--
				mu.Unlock()
				if !done {
					time.Sleep(time.Millisecond)
				}
				mu.Lock()
				released = time.Now()
				mu.Unlock()
				if err := h.Unlock(ctx); err != nil {
					b.Error(err)
					return
				}
				if done {
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "wake_p50_µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "wake_p99_µs")
	}
}
