package workerfx_test

import (
	"regexp"
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/worker/workerfx"
)

// A service embedding solo through the fx module exports
// solo_build_info on its /metrics: the solo version it requires, the
// protocol and the Go release. Old code: no such series.
func TestModule_ExportsBuildInfo(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	reg := prometheus.NewRegistry()
	addr := freeAddr(t)
	app := fx.New(
		fx.NopLogger,
		fx.Provide(
			func() redis.UniversalClient { return client },
			func() prometheus.Registerer { return reg },
			func() prometheus.Gatherer { return reg },
		),
		workerfx.Module(fxConfig(t), workerfx.WithHTTP(addr)),
	)
	get := startApp(t, app, addr)
	_, body := get("/metrics")
	want := regexp.MustCompile(`(?m)^solo_build_info\{goversion="` + regexp.QuoteMeta(runtime.Version()) + `",protocol="1",version="[^"]+"\} 1$`)
	if !want.MatchString(body) {
		t.Fatalf("/metrics lacks solo_build_info{goversion=%q,protocol=\"1\",version=…} 1:\n%s", runtime.Version(), body)
	}
}
