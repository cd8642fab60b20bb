package workerfx_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
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
	"github.com/solo-run/solo/worker/workerfx"
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
		workerfx.Module(cfg),
		fx.Provide(workerfx.AsJob(func() *consumeJob { return job })),
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
		workerfx.Module(fxConfig(t), workerfx.FailFast()),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := app.Start(ctx)
	if err == nil || !strings.Contains(err.Error(), "worker: redis unreachable at start") || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("Start() = %v, want an error naming redis and the address", err)
	}
}

// claims is a worker.Fence that accepts every claim and lists them.
type claims struct {
	mu  sync.Mutex
	got []string
}

func (c *claims) Claim(_ context.Context, election string, term uint64, holder string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, fmt.Sprintf("claim %s %d %s", election, term, holder))
	return nil
}

func (c *claims) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
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
	f := &claims{}
	var e *leader.Elector
	app := fxtest.New(t,
		fx.Provide(
			func() redis.UniversalClient { return client },
			fx.Annotate(func() *claims { return f }, fx.As(new(worker.Fence))),
		),
		fx.NopLogger,
		workerfx.Module(cfg),
		fx.Provide(workerfx.AsJob(func() *consumeJob { return job })),
		fx.Populate(&e),
	)
	app.RequireStart()
	term := <-job.started
	app.RequireStop()
	want := fmt.Sprintf("claim %s %d %s", cfg.Name, term, e.ID())
	if got := f.list(); len(got) != 1 || got[0] != want {
		t.Fatalf("fence saw %q, want [%q]", got, want)
	}
}
