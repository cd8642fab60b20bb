package workerfx_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader/redisurl"
	"github.com/solo-run/solo/worker/workerfx"
)

// TestModule_TLSCertExpiry: a Module on a client over TLS exports the
// expiry of the server's certificate and of its CA on the graph's
// registry once the elector connected (solo_tls_cert_expiry_seconds).
func TestModule_TLSCertExpiry(t *testing.T) {
	s := redistest.StartTLSWithCA(t, false)
	client, err := redisurl.NewClient("rediss://" + s.Server.TLSAddr() + "?tls_ca_file=" + s.CA.File)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	reg := prometheus.NewRegistry()
	app := fxtest.New(t,
		fx.Provide(
			func() redis.UniversalClient { return client },
			func() prometheus.Registerer { return reg },
			func() prometheus.Gatherer { return reg },
		),
		fx.NopLogger,
		workerfx.Module(fxConfig(t)),
	)
	app.RequireStart()
	defer app.RequireStop()
	want := map[string]float64{
		"server": float64(redistest.NotAfter(t, s.CertFile).Unix()),
		"ca":     float64(redistest.NotAfter(t, s.CA.File).Unix()),
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := map[string]float64{}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "solo_tls_cert_expiry_seconds" {
				continue
			}
			for _, m := range mf.GetMetric() {
				got[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			}
		}
		if got["server"] == want["server"] && got["ca"] == want["ca"] && len(got) == 2 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("solo_tls_cert_expiry_seconds = %v, want %v", got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
