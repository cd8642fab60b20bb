package lock_test

import (
	"context"
	"testing"

	"github.com/solo-run/solo/leader/lock"
)

// BenchmarkRedlock: one uncontended TryLock + Unlock cycle, one
// goroutine, a single master (NewClient) against Redlock over 1 and 3
// masters (NewRedlockClient), every server on loopback.
func BenchmarkRedlock(b *testing.B) {
	srvs := startMasters(b, 3)
	cases := []struct {
		name   string
		client func(b *testing.B) *lock.Client
	}{
		{"single", func(b *testing.B) *lock.Client { return newLockClient(b, newRedis(b, srvs[0].Addr())) }},
		{"redlock-1", func(b *testing.B) *lock.Client { return newRedlock(b, srvs[:1]) }},
		{"redlock-3", func(b *testing.B) *lock.Client { return newRedlock(b, srvs) }},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			m := mustMutex(b, bc.client(b), "bench-"+bc.name)
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
		})
	}
}
