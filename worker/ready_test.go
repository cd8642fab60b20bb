package worker_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
)

// readyzOf returns h's /readyz answer.
func readyzOf(h http.Handler) (int, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	return rec.Code, strings.TrimSpace(rec.Body.String())
}

// closedAddr is an address nothing listens on (tcpmux, never served).
const closedAddr = "127.0.0.1:1"

// runWorker runs a worker of an elector on addr, with opts, for the test.
func runWorker(t *testing.T, addr string, opts ...worker.Option) http.Handler {
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	e, err := leader.New(client, leader.Config{Name: strings.ReplaceAll(t.Name(), "/", "."), TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(e, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return worker.Handler(w)
}

// waitReadyz waits up to 10s for h's /readyz to answer code, and returns
// the body.
func waitReadyz(t *testing.T, h http.Handler, code int, want string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, body := readyzOf(h)
		if got == code && strings.Contains(body, want) {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz = %d %q, want %d with %q", got, body, code, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// With WithWaitForRedis, /readyz fails until Redis first answered,
// naming Redis and why it did not; without it, it is 200 at once, as it
// always was (the reason in its body).
func TestWithWaitForRedis(t *testing.T) {
	t.Run("unreachable", func(t *testing.T) {
		h := runWorker(t, closedAddr, worker.WithWaitForRedis())
		if code, body := readyzOf(h); code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "waiting for redis: ") {
			t.Fatalf("/readyz = %d %q at once, want 503 waiting for redis", code, body)
		}
		waitReadyz(t, h, http.StatusServiceUnavailable, "connection refused")
	})
	t.Run("unreachable, without the option", func(t *testing.T) {
		h := runWorker(t, closedAddr)
		waitReadyz(t, h, http.StatusOK, "ok; redis unreachable")
	})
	t.Run("answered", func(t *testing.T) {
		srv := redistest.Start(t)
		waitReadyz(t, runWorker(t, srv.Addr(), worker.WithWaitForRedis()), http.StatusOK, "ok")
	})
	t.Run("always", func(t *testing.T) { // no call to wait for
		h := runWorker(t, closedAddr, worker.WithWaitForRedis(), worker.WithMode(worker.ModeAlways))
		if code, body := readyzOf(h); code != http.StatusOK {
			t.Fatalf("/readyz = %d %q in mode always, want 200", code, body)
		}
	})
	t.Run("spread", func(t *testing.T) {
		srv := redistest.Start(t)
		client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = client.Close() })
		s, err := worker.NewSpread(client, spreadConfig("ready"), worker.SpreadConfig{}, worker.WithWaitForRedis())
		if err != nil {
			t.Fatal(err)
		}
		if code, body := readyzOf(s.Handler()); code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "waiting for redis: ") {
			t.Fatalf("/readyz = %d %q before Run, want 503 waiting for redis", code, body)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		defer func() { cancel(); <-done }()
		waitReadyz(t, s.Handler(), http.StatusOK, "ok")
	})
}
