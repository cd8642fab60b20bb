package workerprom_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/solo-run/solo/worker/workerprom"
)

// TestHandler: Handler serves /metrics from the gatherer and passes every
// other request to next; without a gatherer it is next.
func TestHandler(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := workerprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.Elector("orders")
	next := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { _, _ = rw.Write([]byte("next " + r.URL.Path)) })
	get := func(h http.Handler, path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	h := workerprom.Handler(next, reg)
	if code, body := get(h, "/metrics"); code != http.StatusOK || !strings.Contains(body, `solo_election_leader{election="orders"} 0`) {
		t.Fatalf("/metrics = %d %q", code, body)
	}
	if _, body := get(h, "/readyz"); body != "next /readyz" {
		t.Fatalf("/readyz = %q, want next's", body)
	}
	if _, body := get(workerprom.Handler(next, nil), "/metrics"); body != "next /metrics" {
		t.Fatalf("without a gatherer /metrics = %q, want next's", body)
	}
}

// TestNew_SharesCollectors: a second New on one registry shares the
// collectors registered by the first; a nil registry is refused.
func TestNew_SharesCollectors(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := workerprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := workerprom.New(reg)
	if err != nil {
		t.Fatalf("second New on one registry: %v", err)
	}
	a.JobAdded("orders", "sync")
	b.JobRan("orders", "sync", nil)
	n, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	runs := -1.0
	for _, f := range n {
		if f.GetName() == "solo_job_runs_total" {
			runs = f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if runs != 1 {
		t.Fatalf("solo_job_runs_total = %v, want 1", runs)
	}
	if _, err := workerprom.New(nil); err == nil {
		t.Fatal("New(nil) accepted")
	}
}
