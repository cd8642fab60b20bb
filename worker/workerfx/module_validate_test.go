package workerfx_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/fence"
	"github.com/solo-run/solo/worker"
	"github.com/solo-run/solo/worker/workerfx"
)

// nopFence stands for a *fence.Guard in the graph.
type nopFence struct{}

func (nopFence) Claim(context.Context, string, uint64, string) error { return nil }

// TestModule_Validate checks, without running anything, every combination
// of workerfx.Module that the docs show: the graph builds, nothing the module
// uses internally leaks into the application's, and the application may
// provide what it owns (its own leader.Config, logger, registry, fence).
func TestModule_Validate(t *testing.T) {
	client := func() redis.UniversalClient { return redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) }
	job := func() worker.Job { return worker.PullJob("j", func(context.Context) error { return nil }) }
	cfg := leader.Config{Name: "orders"}
	tests := []struct {
		name string
		opts []fx.Option
	}{
		{name: "module alone", opts: []fx.Option{
			fx.Provide(client),
			workerfx.Module(cfg),
		}},
		{name: "with jobs, logger, registry, fence and http", opts: []fx.Option{
			fx.Provide(client, zap.NewNop, func() (prometheus.Registerer, prometheus.Gatherer) {
				r := prometheus.NewRegistry()
				return r, r
			}),
			fx.Provide(fx.Annotate(func() nopFence { return nopFence{} }, fx.As(new(worker.Fence)))),
			workerfx.Module(cfg, workerfx.WithHTTP("127.0.0.1:0"),
				workerfx.WorkerOptions(worker.WithPolicy(worker.DefaultPolicy()), worker.WithMode(worker.ModeStandby))),
			fx.Provide(workerfx.AsJob(job)),
		}},
		{name: "app provides its own leader.Config and uses the elector", opts: []fx.Option{
			fx.Provide(client, func() leader.Config { return leader.Config{Name: "app's own"} }),
			workerfx.Module(cfg),
			fx.Invoke(func(leader.Config, *leader.Elector, *worker.Worker) {}),
		}},
		{name: "two elections, named", opts: []fx.Option{
			fx.Provide(client),
			workerfx.Module(leader.Config{Name: "orders"}, workerfx.Named("orders")),
			workerfx.Module(leader.Config{Name: "billing"}, workerfx.Named("billing")),
			fx.Provide(workerfx.AsJobOf("orders", job), workerfx.AsJobOf("billing", job)),
			fx.Invoke(fx.Annotate(func(*worker.Worker, *leader.Elector) {}, fx.ParamTags(`name:"orders"`, `name:"billing"`))),
		}},
		{name: "one unnamed and one named election", opts: []fx.Option{
			fx.Provide(client),
			workerfx.Module(leader.Config{Name: "orders"}),
			workerfx.Module(leader.Config{Name: "billing"}, workerfx.Named("billing")),
			fx.Provide(workerfx.AsJob(job), workerfx.AsJobOf("billing", job)),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := fx.ValidateApp(append(tt.opts, fx.NopLogger)...); err != nil {
				t.Fatal(err)
			}
		})
	}

	// Two unnamed elections cannot share the graph: say so at validation.
	err := fx.ValidateApp(fx.NopLogger, fx.Provide(client),
		workerfx.Module(leader.Config{Name: "a"}), workerfx.Module(leader.Config{Name: "b"}))
	if err == nil {
		t.Fatal("two unnamed modules validated; want an already-provided error")
	}
}

// billingParams is how a job constructor takes a named module's elector.
type billingParams struct {
	fx.In
	Elector *leader.Elector `name:"billing"`
}

// TestModule_JobsTakeTheElectorAndTheGuard: every way the docs wire jobs
// validates — a job constructor that takes the module's *leader.Elector
// (named or not), a *fence.Guard provided as it is (which the worker then
// claims in too), the logger; under Module and SpreadModule, shards
// included. Only the *Worker and the *Spread, built from the jobs, are out
// of a job's reach, and fx says so.
//
// Before, Module built the elector in the constructor that consumes the
// job group, and documented the guard as fx.As(new(worker.Fence)):
//
//	cycle detected in dependency graph: func(worker.moduleParams, worker.jobList) (*worker.Worker, *leader.Elector, error) provided by "solo" …
//	missing type: *fence.Guard (did you mean worker.Fence?)
func TestModule_JobsTakeTheElectorAndTheGuard(t *testing.T) {
	client := func() redis.UniversalClient { return redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) }
	newGuard := func() (*fence.Guard, error) { return nil, nil } // validation calls no constructor
	jobTakingElector := func(e *leader.Elector, log *zap.Logger) worker.Job {
		return worker.PullJob("e", func(context.Context) error { return nil })
	}
	jobTakingGuard := func(g *fence.Guard) worker.Job {
		return worker.PullJob("g", func(context.Context) error { return nil })
	}
	shards := func(g *fence.Guard) ([]worker.Job, error) {
		return worker.Sharded("s", 4, func(context.Context, int) error { return nil })
	}
	tests := []struct {
		name string
		opts []fx.Option
	}{
		{name: "module: jobs take the elector and the guard", opts: []fx.Option{
			fx.Provide(client, zap.NewNop, newGuard),
			workerfx.Module(leader.Config{Name: "orders"}),
			fx.Provide(workerfx.AsJob(jobTakingElector), workerfx.AsJob(jobTakingGuard)),
		}},
		{name: "named module: a job takes its named elector", opts: []fx.Option{
			fx.Provide(client, zap.NewNop, newGuard),
			workerfx.Module(leader.Config{Name: "billing"}, workerfx.Named("billing")),
			fx.Provide(workerfx.AsJobOf("billing", func(p billingParams) worker.Job { return jobTakingElector(p.Elector, nil) })),
			fx.Provide(workerfx.AsJobOf("billing", jobTakingGuard)),
		}},
		{name: "spread module: jobs and shards take the guard", opts: []fx.Option{
			fx.Provide(client, zap.NewNop, newGuard),
			workerfx.SpreadModule(leader.Config{Name: "orders-svc"}, worker.SpreadConfig{}),
			fx.Provide(workerfx.AsJob(jobTakingGuard)),
			fx.Provide(fx.Annotate(shards, fx.ResultTags(`group:"solo.jobs,flatten"`))),
		}},
		{name: "a guard and a worker.Fence both provided", opts: []fx.Option{
			fx.Provide(client, newGuard),
			fx.Provide(fx.Annotate(func() nopFence { return nopFence{} }, fx.As(new(worker.Fence)))),
			workerfx.Module(leader.Config{Name: "orders"}),
			fx.Provide(workerfx.AsJob(jobTakingGuard)),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := fx.ValidateApp(append(tt.opts, fx.NopLogger)...); err != nil {
				t.Fatal(err)
			}
		})
	}

	// A job that takes the *Worker is a cycle: fx says so at validation.
	err := fx.ValidateApp(fx.NopLogger, fx.Provide(client), workerfx.Module(leader.Config{Name: "a"}),
		fx.Provide(workerfx.AsJob(func(*worker.Worker) worker.Job { return nil })))
	if err == nil || !strings.Contains(err.Error(), "cycle") {
		t.Fatalf("a job taking the *Worker: %v, want a cycle", err)
	}
}
