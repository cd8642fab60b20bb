package worker_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
	"github.com/solo-run/solo/worker/workerprom"
)

// startMember runs a Spread of group with the jobs j and k (recording into
// k as name) on client, with opts.
func startMember(t *testing.T, client redis.UniversalClient, k *tracker, group, name string, opts ...worker.Option) *spreadInst {
	t.Helper()
	return startJobsWith(t, client, k, group, name, opts, "j", "k")
}

// readyz returns s's /readyz.
func readyz(s *worker.Spread) (int, string) {
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	return rec.Code, rec.Body.String()
}

// within polls cond every 20ms for up to 10s.
// scrape gathers reg in the text format.
func scrape(t *testing.T, reg *prometheus.Registry) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Code, rec.Body.String()
}

func within(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out (30s) waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSpread_RefusalClearsAtShare: a member refused on job j (version
// skew, or a Redis configuration error) reports it while it campaigns for
// j; once it is at its share it campaigns for j no more, and its /readyz,
// RedisConfigErr and solo_election_protocol_refused clear (a member still
// campaigning for j goes on reporting it). Before, the error outlived the
// campaign, and a member at its share never campaigned again to clear it:
// a rolling update stalled on its readiness and the skew alert kept
// firing.
//
// Mutation: with the old reporting (every job's elector status, whether
// its campaign runs or not) this fails with "timed out (10s) waiting for
// a's /readyz to pass at its share" in both subtests.
func TestSpread_RefusalClearsAtShare(t *testing.T) {
	t.Run("skew", func(t *testing.T) {
		srv := redistest.Start(t)
		client := srv.Client(t)
		ctx := context.Background()
		jc := spreadConfig("rskew")
		jc.Name += ".j"
		holder := "1795716987186825 next-1"
		client.Set(ctx, jc.LeaseKey(), holder, time.Minute)
		client.HSet(ctx, jc.InfoKey(), "lease", holder, "proto", "2", "proto_min", "2")
		client.PExpire(ctx, jc.InfoKey(), time.Minute)
		reg := prometheus.NewRegistry()
		m, err := workerprom.New(reg)
		if err != nil {
			t.Fatal(err)
		}
		gauge := `solo_election_protocol_refused{election="` + jc.Name + `"} `
		k := newTracker(t)
		a := startMember(t, client, k, "rskew", "a", worker.WithMetrics(m))
		k.waitLoads(t, 10*time.Second, []int{1}, "a") // k; j refused
		within(t, "a's /readyz to fail on the protocol 2 holder of j", func() bool {
			code, body := readyz(a.s)
			_, metrics := scrape(t, reg)
			return code == http.StatusServiceUnavailable && strings.Contains(body, "job j: not campaigning (version skew)") &&
				strings.Contains(metrics, gauge+"1\n")
		})
		b := startMember(t, client, k, "rskew", "b") // share 1 each: a stops campaigning for j
		within(t, "b's /readyz to fail on the protocol 2 holder of j", func() bool {
			code, _ := readyz(b.s)
			return code == http.StatusServiceUnavailable
		})
		within(t, "a's /readyz to pass at its share", func() bool {
			code, _ := readyz(a.s)
			_, metrics := scrape(t, reg)
			return code == http.StatusOK && strings.Contains(metrics, gauge+"0\n")
		})
		client.Del(ctx, jc.LeaseKey(), jc.InfoKey()) // the skew is gone
		k.waitLoads(t, 10*time.Second, []int{1, 1}, "a", "b")
		within(t, "b's /readyz to pass", func() bool { code, _ := readyz(b.s); return code == http.StatusOK })
	})
	t.Run("config", func(t *testing.T) {
		srv := redistest.Start(t)
		// The group's keys and job k's, not job j's: a's campaign for j
		// is refused as a configuration error.
		g := spreadConfig("rcfg")
		acl := srv.ACLClient(t, "+@all", "&*", "~"+g.Key("*"), "~"+leader.Config{Name: g.Name + ".k"}.Key("*"))
		k := newTracker(t)
		a := startMember(t, acl, k, "rcfg", "a")
		k.waitLoads(t, 10*time.Second, []int{1}, "a")
		within(t, "a's /readyz to fail on job j's configuration error", func() bool {
			code, body := readyz(a.s)
			return code == http.StatusServiceUnavailable && strings.Contains(body, `job "j"`)
		})
		startMember(t, srv.Client(t), k, "rcfg", "b") // b takes j: a is at its share
		k.waitLoads(t, 10*time.Second, []int{1, 1}, "a", "b")
		srv.SetACLUser(t, "+@all", "&*", "~*") // fixed live
		within(t, "a's /readyz to pass at its share", func() bool {
			code, _ := readyz(a.s)
			return code == http.StatusOK && a.s.RedisConfigErr() == nil
		})
	})
}
