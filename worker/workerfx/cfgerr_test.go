package workerfx_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
	"github.com/solo-run/solo/worker/workerfx"
)

// For an embedding service (Module and SpreadModule):
// an ACL that lacks a rule solo needs does not crash the host; it is
// logged once at error level with the fix, counted in
// solo_election_redis_config_errors_total (at 0 from the start), and
// fails /readyz with the fix; with FailFast it fails the start. Old code:
// one warn "acquire failed; retrying" (spread: "heartbeat failed"),
// /readyz 200 "ok; redis unreachable", FailFast's ping passed.
func TestModule_RedisConfigErrorIsReportedAndFailsReadiness(t *testing.T) {
	for _, mode := range []string{"elect", "spread"} {
		t.Run(mode, func(t *testing.T) {
			srv := redistest.Start(t)
			// Every rule but HSET, which the acquire and heartbeat scripts
			// run but the start ping (the inspect script, PING) does not.
			client := srv.ACLClient(t, "~*", "&*", "+@all", "-hset")
			cfg := fxConfig(t)
			module := func(opts ...workerfx.Option) fx.Option {
				if mode == "spread" {
					return workerfx.SpreadModule(cfg, worker.SpreadConfig{}, opts...)
				}
				return workerfx.Module(cfg, opts...)
			}
			job := &termJob{started: make(chan uint64, 1)}
			provide := func(core zapcore.Core, reg *prometheus.Registry) fx.Option {
				return fx.Provide(
					func() redis.UniversalClient { return client },
					func() *zap.Logger { return zap.New(core) },
					func() prometheus.Registerer { return reg },
					func() prometheus.Gatherer { return reg },
					workerfx.AsJob(func() *termJob { return job }),
				)
			}

			// FailFast: the start fails, naming the configuration error.
			core, _ := observer.New(zapcore.InfoLevel)
			app := fx.New(fx.NopLogger, provide(core, prometheus.NewRegistry()), module(workerfx.FailFast()))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := app.Start(ctx)
			cancel()
			if err == nil || !errors.Is(err, leader.ErrRedisConfig) ||
				!strings.Contains(err.Error(), "worker: redis configuration error at start: ") || !strings.Contains(err.Error(), "hset") {
				t.Fatalf("FailFast Start() = %v, want a redis configuration error naming hset", err)
			}

			// Without: the app starts and reports.
			core, logs := observer.New(zapcore.InfoLevel)
			reg := prometheus.NewRegistry()
			addr := freeAddr(t)
			app = fx.New(fx.NopLogger, provide(core, reg), module(workerfx.WithHTTP(addr)))
			metric := `solo_election_redis_config_errors_total{election="` + cfg.Name + `"} `
			if _, body := scrape(t, reg); !strings.Contains(body, metric+"0\n") {
				t.Fatalf("before start: /metrics lacks %s0:\n%s", metric, body)
			}
			get := startApp(t, app, addr)
			waitFor(t, "/readyz to fail with the configuration error", func() bool {
				code, body := get("/readyz")
				return code == http.StatusServiceUnavailable && strings.HasPrefix(body, "redis configuration error: ") &&
					strings.Contains(body, "hset") && strings.Contains(body, "docs/operations.md#acl")
			})
			waitFor(t, "three refusals counted", func() bool {
				_, body := scrape(t, reg)
				return !strings.Contains(body, metric+"0\n") && !strings.Contains(body, metric+"1\n") && !strings.Contains(body, metric+"2\n")
			})
			if code, _ := get("/livez"); code != http.StatusOK {
				t.Fatalf("/livez = %d, want 200: a configuration error is not a wedged process", code)
			}
			if errs := logs.FilterLevelExact(zapcore.ErrorLevel).All(); len(errs) != 1 || !strings.Contains(errs[0].Message, "refused by redis: a configuration error") {
				t.Fatalf("error lines = %+v, want exactly one", errs)
			}
			select {
			case <-job.started:
				t.Fatal("the job ran although Redis refuses solo's calls")
			default:
			}

			// Fixed: the job runs, /readyz recovers, without a restart.
			if err := srv.Client(t).Do(context.Background(), "ACL", "SETUSER", "solo", "+hset").Err(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-job.started:
			case <-time.After(30 * time.Second):
				t.Fatal("the job did not start after the ACL was fixed")
			}
			waitFor(t, "/readyz ok after the fix", func() bool { code, _ := get("/readyz"); return code == http.StatusOK })
		})
	}
}

// scrape gathers reg in the text format.
func scrape(t *testing.T, reg *prometheus.Registry) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Code, rec.Body.String()
}
