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

// /livez reflects this process only : a renewal that hangs on a
// frozen Redis keeps it at 200 up to the deadline, where the leader steps
// down; a follower and a renewing leader pass too.
func TestHandler_LivezIgnoresAHungRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stall, release := make(chan struct{}), make(chan struct{})
		in := newInstance(t, &stallable{Store: leadertest.New(), stall: stall, release: release}, "a")
		if err := in.w.Pull("job", func(ctx context.Context) error { <-ctx.Done(); return nil }); err != nil {
			t.Fatal(err)
		}
		h := worker.Handler(in.w)
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
		// Overdue by the old rule (1s + (2s − 1s)/2 after +3), but the
		// loop is not wedged: it waits on Redis.
		time.Sleep(1200 * time.Millisecond) // +4.7
		if code := livez(); code != http.StatusOK || !in.e.IsLeader() {
			t.Fatalf("leader waiting on a frozen Redis: /livez %d (leading %v), want 200", code, in.e.IsLeader())
		}
		time.Sleep(500 * time.Millisecond) // +5.2: stepped down
		if code := livez(); code != http.StatusOK || in.e.IsLeader() {
			t.Fatalf("after stepping down: /livez %d (leading %v)", code, in.e.IsLeader())
		}
	})
}
