package worker_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
)

// nopFence stands for a *fence.Guard in the graph.
type nopFence struct{}

func (nopFence) Claim(context.Context, string, uint64, string) error { return nil }

// TestModule_Validate checks, without running anything, every combination
// of worker.Module that the docs show: the graph builds, nothing the module
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
			worker.Module(cfg),
		}},
		{name: "with jobs, logger, registry, fence and http", opts: []fx.Option{
			fx.Provide(client, zap.NewNop, func() (prometheus.Registerer, prometheus.Gatherer) {
				r := prometheus.NewRegistry()
				return r, r
			}),
			fx.Provide(fx.Annotate(func() nopFence { return nopFence{} }, fx.As(new(worker.Fence)))),
			worker.Module(cfg, worker.WithHTTP("127.0.0.1:0"),
				worker.WithOptions(worker.WithPolicy(worker.DefaultPolicy()), worker.WithMode(worker.ModeStandby))),
			fx.Provide(worker.AsJob(job)),
		}},
		{name: "app provides its own leader.Config and uses the elector", opts: []fx.Option{
			fx.Provide(client, func() leader.Config { return leader.Config{Name: "app's own"} }),
			worker.Module(cfg),
			fx.Invoke(func(leader.Config, *leader.Elector, *worker.Worker) {}),
		}},
		{name: "two elections, named", opts: []fx.Option{
			fx.Provide(client),
			worker.Module(leader.Config{Name: "orders"}, worker.Named("orders")),
			worker.Module(leader.Config{Name: "billing"}, worker.Named("billing")),
			fx.Provide(worker.AsJobOf("orders", job), worker.AsJobOf("billing", job)),
			fx.Invoke(fx.Annotate(func(*worker.Worker, *leader.Elector) {}, fx.ParamTags(`name:"orders"`, `name:"billing"`))),
		}},
		{name: "one unnamed and one named election", opts: []fx.Option{
			fx.Provide(client),
			worker.Module(leader.Config{Name: "orders"}),
			worker.Module(leader.Config{Name: "billing"}, worker.Named("billing")),
			fx.Provide(worker.AsJob(job), worker.AsJobOf("billing", job)),
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
		worker.Module(leader.Config{Name: "a"}), worker.Module(leader.Config{Name: "b"}))
	if err == nil {
		t.Fatal("two unnamed modules validated; want an already-provided error")
	}
}
