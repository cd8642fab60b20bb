package leader_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
)

// Benchmarks against a real redis-server on loopback. Each reports
// cmds/op: Redis commands sent per operation, counted by a client hook
// (after the script cache is warm, EVALSHA is the one command).

func benchLock(b *testing.B) (*leader.RedisStore, *cmdCounter, leader.Config) {
	srv := redistest.Start(b)
	c := newClient(b, srv.Addr())
	counter := newCmdCounter()
	c.AddHook(counter)
	cfg := leader.Config{Name: electionName(b)}
	lock, err := leader.NewRedisStore(c, cfg)
	if err != nil {
		b.Fatal(err)
	}
	// Warm the script cache: the first use of each script costs a NOSCRIPT.
	ctx := context.Background()
	_, rec, err := lock.Acquire(ctx, "warm", time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	if err := lock.Renew(ctx, rec.Lease, time.Minute); err != nil {
		b.Fatal(err)
	}
	if err := lock.Release(ctx, rec.Lease); err != nil {
		b.Fatal(err)
	}
	return lock, counter, cfg
}

func reportCmds(b *testing.B, counter *cmdCounter, before int, ops int) {
	b.ReportMetric(float64(counter.total()-before)/float64(ops), "cmds/op")
}

func BenchmarkRedisStore_Acquire(b *testing.B) {
	lock, counter, _ := benchLock(b)
	ctx := context.Background()
	leases := make([]leader.Lease, 0, b.N)
	b.ReportAllocs()
	before := counter.total()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		_, rec, err := lock.Acquire(ctx, fmt.Sprint("c", i), time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		leases = append(leases, rec.Lease)
		if err := lock.Release(ctx, rec.Lease); err != nil {
			b.Fatal(err)
		}
		before++ // the release above is not part of the measured op
		b.StartTimer()
	}
	reportCmds(b, counter, before, len(leases))
}

func BenchmarkRedisStore_Renew(b *testing.B) {
	lock, counter, _ := benchLock(b)
	ctx := context.Background()
	_, rec, err := lock.Acquire(ctx, "a", time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	before := counter.total()
	n := 0
	for b.Loop() {
		if err := lock.Renew(ctx, rec.Lease, time.Minute); err != nil {
			b.Fatal(err)
		}
		n++
	}
	reportCmds(b, counter, before, n)
}

func BenchmarkRedisStore_Release(b *testing.B) {
	lock, counter, _ := benchLock(b)
	ctx := context.Background()
	b.ReportAllocs()
	released, acquires := 0, 0
	before := counter.total()
	for b.Loop() {
		b.StopTimer()
		_, rec, err := lock.Acquire(ctx, "a", time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		acquires++
		b.StartTimer()
		if err := lock.Release(ctx, rec.Lease); err != nil {
			b.Fatal(err)
		}
		released++
	}
	b.ReportMetric(float64(counter.total()-before-acquires)/float64(released), "cmds/op")
}

// BenchmarkHandoff measures a graceful handoff between two electors: from
// the moment the leader's function returns (release follows) to the start
// of the other's function, woken by the release notice. It reports the
// median and p99 besides the mean (ns/op).
func BenchmarkHandoff(b *testing.B) {
	srv := redistest.Start(b)
	var mu sync.Mutex
	var returned time.Time
	var samples []time.Duration
	next := make(chan struct{}, 1)
	stopAt := 0
	fn := func(ctx context.Context) error {
		now := time.Now()
		mu.Lock()
		if !returned.IsZero() {
			samples = append(samples, now.Sub(returned))
		}
		done := len(samples) >= stopAt
		mu.Unlock()
		if done {
			select {
			case next <- struct{}{}:
			default:
			}
			<-ctx.Done()
			return nil
		}
		mu.Lock()
		returned = time.Now()
		mu.Unlock()
		return nil // release; the other candidate takes over
	}
	stopAt = b.N
	var stops []func() error
	for _, id := range []string{"a", "b"} {
		cfg := leader.Config{Name: electionName(b), ID: id, TTL: 10 * time.Second, RetryInterval: 2 * time.Second}
		stops = append(stops, runRedis(b, mustNew(b, newClient(b, srv.Addr()), cfg), fn))
	}
	b.ResetTimer()
	<-next
	b.StopTimer()
	for _, stop := range stops {
		_ = stop()
	}
	mu.Lock()
	defer mu.Unlock()
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	var sum time.Duration
	for _, s := range samples {
		sum += s
	}
	b.ReportMetric(float64(sum.Nanoseconds())/float64(len(samples)), "ns/handoff")
	b.ReportMetric(float64(samples[len(samples)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(samples[len(samples)*99/100].Nanoseconds()), "p99-ns")
}
