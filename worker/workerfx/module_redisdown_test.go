package workerfx_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker/workerfx"
)

// termJob reports each term it runs in, never blocking.
type termJob struct{ started chan uint64 }

func (j *termJob) Name() string { return "sync" }

func (j *termJob) Run(ctx context.Context) error {
	term, _ := leader.TermFrom(ctx)
	select {
	case j.started <- term:
	default:
	}
	<-ctx.Done()
	return nil
}

// freeAddr returns a 127.0.0.1 address nothing listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// startApp starts app, which serves HTTP on addr, and stops it when the
// test ends; get GETs a path on addr and returns the status and the body.
func startApp(t *testing.T, app *fx.App, addr string) (get func(path string) (int, string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		t.Fatalf("Start() = %v, want the app started", err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = app.Stop(sctx)
	})
	return func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
}

// Redis is not a start-up dependency of the host service: with
// Redis down the fx app starts and serves, /livez and /readyz answer 200
// (/readyz says Redis is unreachable), solo_election_redis_up is 0, and
// the job starts once Redis is back. Then, with this instance leading,
// Redis frozen and Redis down for longer than a liveness probe's failure
// window keep /livez at 200.
func TestModule_StartsWhileRedisIsDownAndLivezIgnoresRedis(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = client.Close() })
	cfg := fxConfig(t) // TTL 2s
	job := &termJob{started: make(chan uint64, 1)}
	reg := prometheus.NewRegistry()
	addr := freeAddr(t)
	app := fx.New(
		fx.NopLogger,
		fx.Provide(
			func() redis.UniversalClient { return client },
			func() prometheus.Registerer { return reg },
			func() prometheus.Gatherer { return reg },
		),
		workerfx.Module(cfg, workerfx.WithHTTP(addr)),
		fx.Provide(workerfx.AsJob(func() *termJob { return job })),
	)
	get := startApp(t, app, addr) // with Redis down
	if code, body := get("/livez"); code != http.StatusOK {
		t.Fatalf("Redis down: /livez = %d %s", code, body)
	}
	// The first acquire fails within the dial timeout.
	waitFor(t, "/readyz to report Redis unreachable", func() bool {
		code, body := get("/readyz")
		return code == http.StatusOK && strings.Contains(body, "redis unreachable")
	})
	if _, body := get("/metrics"); !strings.Contains(body, `solo_election_redis_up{election="`+cfg.Name+`"} 0`) ||
		!strings.Contains(body, `solo_election_leader{election="`+cfg.Name+`"} 0`) {
		t.Fatalf("Redis down: /metrics lacks redis_up 0 and leader 0:\n%s", body)
	}
	srv.Restart(t)
	select {
	case <-job.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the job did not start after Redis came back")
	}
	if code, body := get("/readyz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("Redis back: /readyz = %d %q", code, body)
	}

	// Leading. A probe failing 3 times 1s apart would restart the leader in
	// 3s; hold Redis frozen, then down, for longer than that (and past the
	// renew deadline, so that the renewal loop meets the outage at every
	// stage), polling /livez.
	for _, outage := range []string{"frozen", "down"} {
		if outage == "frozen" {
			srv.Stop(t)
		} else {
			srv.Kill(t)
		}
		end := time.Now().Add(3500 * time.Millisecond)
		for time.Now().Before(end) {
			if code, body := get("/livez"); code != http.StatusOK {
				t.Fatalf("Redis %s: /livez = %d %s, want 200", outage, code, body)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if outage == "frozen" {
			srv.Cont(t)
		} else {
			srv.Restart(t)
		}
		select {
		case <-job.started:
		case <-time.After(30 * time.Second):
			t.Fatalf("the job did not start again after Redis %s", outage)
		}
	}
}

// waitFor polls cond every 50ms for up to 30s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
