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

	"github.com/solo-run/solo/worker"
	"github.com/solo-run/solo/worker/workerfx"
)

// downClient is a client of an address nothing listens on: the modules
// start without Redis, and their metrics exist from the start.
func downClient(t *testing.T) redis.UniversalClient {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestModule_MetricsFromWhatTheGraphProvides: /metrics serves solo's
// metrics whatever Prometheus types the graph provides — a
// *prometheus.Registry alone, a Registerer and a Gatherer, a Gatherer
// alone, a Registerer that is a Gatherer too, or nothing (a registry of
// the module's own) — for Module and SpreadModule alike. Before, every
// shape but the two interfaces answered 404 without a log line: "registry
// only: GET /metrics = 404".
func TestModule_MetricsFromWhatTheGraphProvides(t *testing.T) {
	shapes := map[string]func(reg *prometheus.Registry) fx.Option{
		"registry only": func(reg *prometheus.Registry) fx.Option { return fx.Supply(reg) },
		"both interfaces": func(reg *prometheus.Registry) fx.Option {
			return fx.Provide(func() prometheus.Registerer { return reg }, func() prometheus.Gatherer { return reg })
		},
		"registerer that gathers": func(reg *prometheus.Registry) fx.Option {
			return fx.Provide(func() prometheus.Registerer { return reg })
		},
		"gatherer only": func(reg *prometheus.Registry) fx.Option {
			return fx.Provide(func() prometheus.Gatherer { return reg })
		},
		"none": func(*prometheus.Registry) fx.Option { return fx.Options() },
	}
	for name, shape := range shapes {
		for _, spread := range []bool{false, true} {
			t.Run(name+map[bool]string{false: "/module", true: "/spread"}[spread], func(t *testing.T) {
				t.Parallel()
				cfg := fxConfig(t)
				addr := freeAddr(t)
				election, module := cfg.Name, workerfx.Module(cfg, workerfx.WithHTTP(addr))
				if spread {
					election, module = cfg.Name+".sync", workerfx.SpreadModule(cfg, worker.SpreadConfig{}, workerfx.WithHTTP(addr))
				}
				reg := prometheus.NewRegistry()
				reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "app_own_total", Help: "The app's own."}))
				client := downClient(t)
				app := fx.New(fx.NopLogger, fx.Provide(func() redis.UniversalClient { return client }), shape(reg), module,
					fx.Provide(workerfx.AsJob(func() *termJob { return &termJob{started: make(chan uint64, 1)} })))
				get := startApp(t, app, addr)
				code, body := get("/metrics")
				if code != http.StatusOK || !strings.Contains(body, `solo_election_leader{election="`+election+`"} 0`) {
					t.Fatalf("GET /metrics = %d, want 200 with solo_election_leader of %s:\n%.400s", code, election, body)
				}
				if name != "none" && !strings.Contains(body, "app_own_total 0") {
					t.Errorf("GET /metrics lacks the application's own metric:\n%.400s", body)
				}
				if name != "gatherer only" && name != "none" {
					if mfs, _ := reg.Gather(); len(mfs) < 2 {
						t.Errorf("solo's metrics are not on the graph's registry (%d families)", len(mfs))
					}
				}
			})
		}
	}
}

// TestModule_RegistererWithoutGathererFailsStart: a Registerer that is no
// Gatherer, with no Gatherer nor *prometheus.Registry beside it, gives
// /metrics nothing to serve: with WithHTTP the start fails saying what is
// missing and how to provide it; without WithHTTP (the application serves
// its registry itself) the module starts. Before, the start succeeded and
// /metrics answered 404.
func TestModule_RegistererWithoutGathererFailsStart(t *testing.T) {
	for _, withHTTP := range []bool{true, false} {
		reg := prometheus.NewRegistry()
		wrapped := prometheus.WrapRegistererWithPrefix("svc_", reg) // a Registerer, not a Gatherer
		var opts []workerfx.Option
		if withHTTP {
			opts = append(opts, workerfx.WithHTTP(freeAddr(t)))
		}
		client := downClient(t)
		app := fx.New(fx.NopLogger,
			fx.Provide(func() redis.UniversalClient { return client }, func() prometheus.Registerer { return wrapped }),
			workerfx.Module(fxConfig(t), opts...))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := app.Start(ctx)
		cancel()
		if !withHTTP {
			if err != nil {
				t.Fatalf("without WithHTTP: Start() = %v, want started", err)
			}
			sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = app.Stop(sctx)
			scancel()
			continue
		}
		if err == nil {
			sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = app.Stop(sctx)
			scancel()
			t.Fatal("with WithHTTP: Start() = nil, want a refusal: /metrics would answer 404")
		}
		for _, want := range []string{"prometheus.Registerer", "no prometheus.Gatherer", "*prometheus.Registry"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Start() = %v, want it to say %q", err, want)
			}
		}
	}
}
