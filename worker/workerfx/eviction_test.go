package workerfx_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/worker"
	"github.com/solo-run/solo/worker/workerfx"
)

// An embedding service on a Redis that may evict solo's keys (maxmemory
// with a volatile-* policy) does not run its job: /readyz fails naming the
// policy and the fix, solo_election_redis_evicting is 1 (0 from the
// start); fixed live, the job runs, /readyz recovers and the gauge reads
// 0, without a restart. Old code: the job ran, /readyz said ok.
func TestModule_EvictionPolicyFailsReadiness(t *testing.T) {
	for _, mode := range []string{"elect", "spread"} {
		t.Run(mode, func(t *testing.T) {
			srv := redistest.Start(t, "--maxmemory", "100mb", "--maxmemory-policy", "volatile-lru")
			client := srv.Client(t)
			cfg := fxConfig(t)
			addr := freeAddr(t)
			election, module := cfg.Name, workerfx.Module(cfg, workerfx.WithHTTP(addr))
			if mode == "spread" {
				election, module = cfg.Name+".sync", workerfx.SpreadModule(cfg, worker.SpreadConfig{}, workerfx.WithHTTP(addr))
			}
			job := &termJob{started: make(chan uint64, 1)}
			reg := prometheus.NewRegistry()
			app := fx.New(fx.NopLogger, fx.Provide(
				func() redis.UniversalClient { return client },
				func() *zap.Logger { return zap.NewNop() },
				func() prometheus.Registerer { return reg },
				func() prometheus.Gatherer { return reg },
				workerfx.AsJob(func() *termJob { return job }),
			), module)
			get := startApp(t, app, addr)
			gauge := `solo_election_redis_evicting{election="` + election + `"} `
			waitFor(t, "/readyz to fail naming the policy", func() bool {
				code, body := get("/readyz")
				return code == http.StatusServiceUnavailable && strings.Contains(body, "maxmemory-policy volatile-lru") &&
					strings.Contains(body, "CONFIG SET maxmemory-policy noeviction")
			})
			waitFor(t, "the gauge at 1", func() bool { _, body := scrape(t, reg); return strings.Contains(body, gauge+"1\n") })
			select {
			case <-job.started:
				t.Fatal("the job ran on a Redis that may evict its lease")
			default:
			}

			if err := srv.Client(t).ConfigSet(context.Background(), "maxmemory-policy", "noeviction").Err(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-job.started:
			case <-time.After(30 * time.Second):
				t.Fatal("the job did not start after the policy was fixed")
			}
			waitFor(t, "/readyz ok after the fix", func() bool { code, _ := get("/readyz"); return code == http.StatusOK })
			waitFor(t, "the gauge at 0", func() bool { _, body := scrape(t, reg); return strings.Contains(body, gauge+"0\n") })
		})
	}
}
