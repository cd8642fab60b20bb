package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
)

// consumeJob is a job built by a plain constructor, as users write them.
type consumeJob struct {
	started chan uint64
	stopped chan error
}

func (j *consumeJob) Name() string { return "consume-orders" }

func (j *consumeJob) Run(ctx context.Context) error {
	term, _ := leader.TermFrom(ctx)
	j.started <- term
	<-ctx.Done()
	time.Sleep(200 * time.Millisecond) // drains a little
	j.stopped <- context.Cause(ctx)
	return nil
}

func fxConfig(t *testing.T) leader.Config {
	return leader.Config{Name: strings.ReplaceAll(t.Name(), "/", "."), TTL: 2 * time.Second}
}

func TestModule_RunsGroupJobsAndDrainsOnStop(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	cfg := fxConfig(t)
	job := &consumeJob{started: make(chan uint64, 1), stopped: make(chan error, 1)}
	core, logs := observer.New(zapcore.DebugLevel)
	reg := prometheus.NewRegistry()
	app := fxtest.New(t,
		fx.Supply(zap.New(core)),
		fx.Provide(
			func() redis.UniversalClient { return client },
			func() prometheus.Registerer { return reg },
			func() prometheus.Gatherer { return reg },
		),
		fx.WithLogger(func(l *zap.Logger) fxevent.Logger { return &fxevent.ZapLogger{Logger: l} }),
		worker.Module(cfg),
		fx.Provide(worker.AsJob(func() *consumeJob { return job })),
	)
	app.RequireStart()
	term := <-job.started
	h, err := leader.Lookup(context.Background(), client, cfg)
	if err != nil || h.Term != term {
		t.Fatalf("Lookup() = %+v, %v; want the job's term %d", h, err, term)
	}
	app.RequireStop()
	// Stop cancelled the running job, waited for it, then released.
	select {
	case cause := <-job.stopped:
		if !errors.Is(cause, leader.ErrShutdown) {
			t.Fatalf("job cancelled with %v, want ErrShutdown", cause)
		}
	default:
		t.Fatal("stop returned before the job did")
	}
	if _, err := leader.Lookup(context.Background(), client, cfg); !errors.Is(err, leader.ErrNoLeader) {
		t.Fatalf("after stop Lookup() = %v, want ErrNoLeader (released)", err)
	}
	// fx's own events went through zap; the transitions were logged once.
	if len(logs.FilterMessage("started").All()) != 1 {
		t.Fatal("fx events not logged through zap")
	}
	for _, msg := range []string{"elected", "released"} {
		if n := len(logs.FilterMessage(msg).All()); n != 1 {
			t.Fatalf("%q logged %d times, want once", msg, n)
		}
	}
	if mfs, _ := reg.Gather(); len(mfs) == 0 {
		t.Fatal("no metrics registered on the given registry")
	}
}

// With FailFast, an unreachable Redis fails the start, naming the address.
func TestModule_FailFastUnreachableRedisFailsStart(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	app := fx.New(
		fx.NopLogger,
		fx.Provide(func() redis.UniversalClient { return client }),
		worker.Module(fxConfig(t), worker.FailFast()),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := app.Start(ctx)
	if err == nil || !strings.Contains(err.Error(), "worker: redis unreachable at start") || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("Start() = %v, want an error naming redis and the address", err)
	}
}

func TestHandler(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	cfg := fxConfig(t)
	cfg.Value = "10.0.0.7:8080"
	reg := prometheus.NewRegistry()
	m, _ := worker.NewMetrics(reg)
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

	hs := httptest.NewServer(worker.Handler(w, reg))
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
		info.Holder.TTLMillis != cfg.TTL.Milliseconds() || info.Holder.TTLLeftMillis <= 0 || info.Holder.RenewMillis != e.Config().RenewInterval.Milliseconds() ||
		info.Holder.Value != cfg.Value || info.Holder.LastRenew.IsZero() || info.Candidates == nil {
		t.Fatalf("/leader = %s", body)
	}
	// One vocabulary with solo status --json (issue 14.9): the exact keys.
	var raw map[string]json.RawMessage
	_ = json.Unmarshal([]byte(body), &raw)
	var holder, self map[string]json.RawMessage
	_ = json.Unmarshal(raw["holder"], &holder)
	_ = json.Unmarshal(raw["self"], &self)
	if got, want := strings.Join(slices.Sorted(maps.Keys(raw)), ","), "candidates,election,holder,self"; got != want {
		t.Fatalf("/leader keys = %s, want %s", got, want)
	}
	if got, want := strings.Join(slices.Sorted(maps.Keys(holder)), ","), "id,last_renew,protocol,protocol_min,renew_ms,since,term,ttl_left_ms,ttl_ms,value"; got != want {
		t.Fatalf("/leader holder keys = %s, want %s", got, want)
	}
	if got, want := strings.Join(slices.Sorted(maps.Keys(self)), ","), "id,last_renew,role,since,term"; got != want {
		t.Fatalf("/leader self keys = %s, want %s", got, want)
	}
	if _, body := get("/metrics"); !strings.Contains(body, `solo_election_leader{election="`+cfg.Name+`"} 1`) {
		t.Fatalf("/metrics = %s", body)
	}
}

// TestModule_ClaimsInAProvidedFence: a Fence in the graph (here a fake, as
// a *fence.Guard would be provided) is claimed with the term and the
// elector's ID before the group's jobs run.
func TestModule_ClaimsInAProvidedFence(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	cfg := fxConfig(t)
	job := &consumeJob{started: make(chan uint64, 1), stopped: make(chan error, 1)}
	j := &journal{}
	var e *leader.Elector
	app := fxtest.New(t,
		fx.Provide(
			func() redis.UniversalClient { return client },
			fx.Annotate(func() *fakeFence { return &fakeFence{j: j} }, fx.As(new(worker.Fence))),
		),
		fx.NopLogger,
		worker.Module(cfg),
		fx.Provide(worker.AsJob(func() *consumeJob { return job })),
		fx.Populate(&e),
	)
	app.RequireStart()
	term := <-job.started
	app.RequireStop()
	want := fmt.Sprintf("claim %s %d %s", cfg.Name, term, e.ID())
	if got := j.list(); len(got) != 1 || got[0] != want {
		t.Fatalf("fence saw %q, want [%q]", got, want)
	}
}
