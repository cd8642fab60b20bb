package worker_test

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/jsonshape"
	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
	"github.com/solo-run/solo/worker/workerprom"
)

// TestHandler: a leader's /livez and /readyz answer 200, /leader serves
// the election in the words of solo status --json, and /metrics (added by
// workerprom.Handler) its gauges.
func TestHandler(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	cfg := leader.Config{Name: strings.ReplaceAll(t.Name(), "/", "."), TTL: 2 * time.Second}
	cfg.Value = "10.0.0.7:8080"
	reg := prometheus.NewRegistry()
	m, _ := workerprom.New(reg)
	e, err := leader.New(client, cfg, leader.WithMetrics(m.Elector(cfg.Name)))
	if err != nil {
		t.Fatal(err)
	}
	w, _ := worker.New(e, worker.WithMetrics(m))
	started := make(chan struct{}, 1)
	_ = w.Pull("p", func(ctx context.Context) error { started <- struct{}{}; <-ctx.Done(); return nil })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-started

	hs := httptest.NewServer(workerprom.Handler(worker.Handler(w), reg))
	defer hs.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, p := range []string{"/livez", "/readyz"} {
		if code, _ := get(p); code != http.StatusOK {
			t.Fatalf("%s = %d", p, code)
		}
	}
	code, body := get("/leader")
	var info leaderBody
	if err := json.Unmarshal([]byte(body), &info); err != nil || code != http.StatusOK {
		t.Fatalf("/leader = %d %s (%v)", code, body, err)
	}
	if info.Self.Role != "leader" || info.Self.ID != e.ID() || info.Holder == nil || info.Holder.ID != e.ID() || info.Holder.Term != e.Term() ||
		info.Holder.LeaseTTLMillis != cfg.TTL.Milliseconds() || info.Holder.TTLLeftMillis <= 0 || info.Holder.RenewMillis != e.Config().RenewInterval.Milliseconds() ||
		info.Holder.Value != cfg.Value || info.Holder.LastRenew.IsZero() || info.Candidates == nil {
		t.Fatalf("/leader = %s", body)
	}
	// One vocabulary with solo status --json: the exact keys.
	var raw map[string]json.RawMessage
	_ = json.Unmarshal([]byte(body), &raw)
	var self map[string]json.RawMessage
	_ = json.Unmarshal(raw["self"], &self)
	if got, want := strings.Join(slices.Sorted(maps.Keys(raw)), ","), "candidates,election,holder,self"; got != want {
		t.Fatalf("/leader keys = %s, want %s", got, want)
	}
	if err := jsonshape.Holder(raw["holder"]); err != nil {
		t.Fatalf("/leader: %v:\n%s", err, body)
	}
	if err := jsonshape.Times([]byte(body)); err != nil {
		t.Fatalf("/leader: %v:\n%s", err, body)
	}
	if got, want := strings.Join(slices.Sorted(maps.Keys(self)), ","), "id,last_renew,role,since,term"; got != want {
		t.Fatalf("/leader self keys = %s, want %s", got, want)
	}
	if _, body := get("/metrics"); !strings.Contains(body, `solo_election_leader{election="`+cfg.Name+`"} 1`) {
		t.Fatalf("/metrics = %s", body)
	}
}
