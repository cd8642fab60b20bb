package worker_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/worker"
)

// TestSpread_ReadyzFailsOnProtocolSkew: while a job's election is held by
// a build whose protocol this one does not share an election with, the
// Spread's /readyz answers 503 naming the job; once that holder is gone
// the job runs here and /readyz answers 200. Mutation: the Spread's
// /readyz answering "ok" regardless fails with `timed out
// waiting for /readyz to fail on the protocol 2 holder`.
func TestSpread_ReadyzFailsOnProtocolSkew(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	cfg := spreadConfig("gskew")
	jc := cfg
	jc.Name = cfg.Name + ".j"
	holder := "1795716987186825 next-1"
	if err := client.Set(ctx, jc.LeaseKey(), holder, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	client.HSet(ctx, jc.InfoKey(), "lease", holder, "proto", "2", "proto_min", "2")
	client.PExpire(ctx, jc.InfoKey(), time.Minute)

	s, err := worker.NewSpread(client, cfg, worker.SpreadConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{}, 1)
	if err := s.Pull("j", func(ctx context.Context) error {
		select {
		case ran <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	h := s.Handler()
	readyz := func() (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		return rec.Code, rec.Body.String()
	}
	within(t, "/readyz to fail on the protocol 2 holder", func() bool {
		code, body := readyz()
		return code == http.StatusServiceUnavailable && strings.Contains(body, "job j: not campaigning (version skew)") &&
			strings.Contains(body, "speaks protocol 2")
	})
	client.Del(ctx, jc.LeaseKey(), jc.InfoKey())
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not run once the protocol 2 holder was gone")
	}
	within(t, "/readyz to pass", func() bool { code, _ := readyz(); return code == http.StatusOK })
}
