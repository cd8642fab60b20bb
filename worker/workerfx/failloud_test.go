package workerfx_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
	"github.com/solo-run/solo/worker/workerfx"
)

// startErr starts app and returns the start's error, stopping the app if
// it started.
func startErr(t *testing.T, app *fx.App) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := app.Start(ctx)
	if err == nil {
		t.Cleanup(func() {
			sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer scancel()
			_ = app.Stop(sctx)
		})
	}
	return err
}

// TestModule_AlwaysWithAFenceFailsStart: a service moving off fetch=true
// with mode always and a fence in its graph fails to start, the error
// naming the mode, the fence and the way off fetch=true that works with
// it. Before, it started, and every fenced write of its jobs failed with
// "fence: no fencing token" while /readyz said ok.
func TestModule_AlwaysWithAFenceFailsStart(t *testing.T) {
	client := downClient(t)
	app := fx.New(fx.NopLogger,
		fx.Provide(func() redis.UniversalClient { return client },
			fx.Annotate(func() *claims { return &claims{} }, fx.As(new(worker.Fence)))),
		workerfx.Module(fxConfig(t), workerfx.WorkerOptions(worker.WithMode(worker.ModeAlways))),
		fx.Provide(workerfx.AsJob(func() *termJob { return &termJob{started: make(chan uint64, 1)} })),
	)
	err := startErr(t, app)
	for _, want := range []string{`mode "always"`, "fence", "mode elect", "mode standby"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Start() = %v, want it to say %q", err, want)
		}
	}
}

// TestModule_NoJobs: a module whose group is empty (the job provided
// without AsJob) warns at start, naming AsJob, and starts; with
// worker.WithJobsRequired its start fails with worker.ErrNoJobs, for
// Module and SpreadModule. Before, it started with nothing to run and
// said so only at info.
func TestModule_NoJobs(t *testing.T) {
	for _, spread := range []bool{false, true} {
		for _, required := range []bool{false, true} {
			core, logs := observer.New(zapcore.InfoLevel)
			cfg := fxConfig(t)
			var opts []workerfx.Option
			if required {
				opts = append(opts, workerfx.WorkerOptions(worker.WithJobsRequired()))
			}
			module := workerfx.Module(cfg, opts...)
			if spread {
				module = workerfx.SpreadModule(cfg, worker.SpreadConfig{}, opts...)
			}
			client := downClient(t)
			app := fx.New(fx.NopLogger, fx.Supply(zap.New(core)),
				fx.Provide(func() redis.UniversalClient { return client }),
				module,
				// Provided, but not in the group: AsJob forgotten.
				fx.Provide(func() *termJob { return &termJob{started: make(chan uint64, 1)} }),
			)
			err := startErr(t, app)
			what := map[bool]string{false: "Module", true: "SpreadModule"}[spread]
			if required {
				if !errors.Is(err, worker.ErrNoJobs) || !strings.Contains(err.Error(), "workerfx.AsJob(") {
					t.Errorf("%s, jobs required: Start() = %v, want ErrNoJobs naming AsJob", what, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s: Start() = %v", what, err)
			}
			waitFor(t, "the warning", func() bool {
				return logs.FilterLevelExact(zapcore.WarnLevel).FilterMessageSnippet("workerfx.AsJob(").Len() == 1
			})
		}
	}
}

// shardJobs returns the shards of the job "orders", as a constructor of
// the application would: worker.Sharded's ([]worker.Job, error).
func shardJobs(n int, started chan<- string) func() ([]worker.Job, error) {
	return func() ([]worker.Job, error) {
		return worker.Sharded("orders", n, func(ctx context.Context, shard int) error {
			e, _ := worker.ElectorFrom(ctx)
			started <- e.Config().Name
			<-ctx.Done()
			return nil
		})
	}
}

// TestModule_AsJobTakesShards: AsJob (and AsJobOf) take a constructor of
// a []worker.Job, such as worker.Sharded's, and add every job of it to the
// group, beside single jobs; in a SpreadModule each shard is an election.
// Before, fx refused the graph: "[]worker.Job does not implement
// worker.Job".
func TestModule_AsJobTakesShards(t *testing.T) {
	client := downClient(t)
	cfg := fxConfig(t)
	var s *worker.Spread
	var named *worker.Worker
	app := fx.New(fx.NopLogger,
		fx.Provide(func() redis.UniversalClient { return client }),
		workerfx.SpreadModule(cfg, worker.SpreadConfig{}),
		fx.Provide(workerfx.AsJob(shardJobs(3, make(chan string, 3)))),
		fx.Provide(workerfx.AsJob(func() *termJob { return &termJob{started: make(chan uint64, 1)} })),
		workerfx.Module(leader.Config{Name: cfg.Name + "-b"}, workerfx.Named("b")),
		fx.Provide(workerfx.AsJobOf("b", shardJobs(2, make(chan string, 2)))),
		fx.Populate(&s),
		fx.Invoke(fx.Annotate(func(w *worker.Worker) { named = w }, fx.ParamTags(`name:"b"`))),
	)
	if err := startErr(t, app); err != nil {
		t.Fatalf("Start() = %v", err)
	}
	if got := s.Jobs(); strings.Join(got, " ") != "orders/0 orders/1 orders/2 sync" {
		t.Errorf("spread jobs %q, want the 3 shards and sync", got)
	}
	if got := named.Jobs(); strings.Join(got, " ") != "orders/0 orders/1" {
		t.Errorf("named module's jobs %q, want the 2 shards", got)
	}
}
