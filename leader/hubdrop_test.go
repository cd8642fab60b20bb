package leader

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/solo-run/solo/internal/redistest"
)

// A renewal queue removed while idle has its sending goroutine still
// returning: Close waits for it, so nothing the Hub started outlives
// Close.
func TestHub_CloseWaitsForDroppedQueues(t *testing.T) {
	srv := redistest.Start(t)
	client := hubClient(t, srv.Addr(), 2)
	ctx := context.Background()
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for range 50 {
		hub := NewHub(client)
		hub.idle = time.Millisecond
		l, err := hub.NewRedisStore(Config{Name: "drop", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		_, rec, err := l.Acquire(ctx, "me", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Renew(ctx, rec.Lease, time.Minute); err != nil {
			t.Fatal(err)
		}
		for len(hub.renewQueues()) > 0 {
			// The queue's sender is ending: Close right after it.
		}
		if err := hub.Close(); err != nil {
			t.Fatal(err)
		}
		// At once, not retried as goleak does: Close must have waited.
		buf := make([]byte, 1<<20)
		if st := string(buf[:runtime.Stack(buf, true)]); strings.Contains(st, "internal/batch.(*Batcher") {
			t.Fatalf("a renewal queue's sender outlived Close:\n%s", st)
		}
	}
}
