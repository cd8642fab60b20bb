package worker_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/solo-run/solo/leader/leadertest"
	"github.com/solo-run/solo/worker"
)

// /livez fails while this instance leads but its renewal is overdue (issue:
// a health check for a liveness probe, as client-go's healthz adaptor),
// and passes for a follower, a renewing leader, and once it stepped down.
func TestHandler_LivezFailsWhileRenewalIsStuck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stall, release := make(chan struct{}), make(chan struct{})
		in := newInstance(t, &stallable{Lock: leadertest.New(), stall: stall, release: release}, "a")
		if err := in.w.Pull("job", func(ctx context.Context) error { <-ctx.Done(); return nil }); err != nil {
			t.Fatal(err)
		}
		h := worker.Handler(in.w, nil)
		livez := func() int {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/livez", nil))
			return rec.Code
		}
		if code := livez(); code != http.StatusOK {
			t.Fatalf("follower: /livez %d", code)
		}
		in.start()
		defer func() {
			close(release)
			_ = in.stop()
		}()
		time.Sleep(3500 * time.Millisecond) // leading, renewed at +1, +2, +3
		if code := livez(); code != http.StatusOK || !in.e.IsLeader() {
			t.Fatalf("renewing leader: /livez %d (leading %v)", code, in.e.IsLeader())
		}
		close(stall) // the renewal at +4 hangs; the deadline is +5
		// Limit: renew interval 1s + (2s − 1s)/2 = 1.5s after the last
		// renewal's send time (+3): unhealthy from +4.5 until +5.
		time.Sleep(1200 * time.Millisecond) // +4.7
		if code := livez(); code != http.StatusServiceUnavailable || !in.e.IsLeader() {
			t.Fatalf("stuck leader: /livez %d (leading %v), want 503", code, in.e.IsLeader())
		}
		time.Sleep(500 * time.Millisecond) // +5.2: stepped down
		if code := livez(); code != http.StatusOK || in.e.IsLeader() {
			t.Fatalf("after stepping down: /livez %d (leading %v)", code, in.e.IsLeader())
		}
	})
}
