package workerfx_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker/workerfx"
)

// namedJob reports the term of each run on its channel.
type namedJob struct {
	name  string
	terms chan uint64
}

func (j *namedJob) Name() string { return j.name }

func (j *namedJob) Run(ctx context.Context) error {
	term, _ := leader.TermFrom(ctx)
	j.terms <- term
	<-ctx.Done()
	return nil
}

// One fx app runs two elections: two workerfx.Module
// instances with name tags against a real redis-server; each leads its own
// election and runs its own job, and only its own (both jobs are named
// "consume"). Mutation: billing's job given to orders' group
// (AsJobOf("orders")) fails the start with `failed to build
// *worker.Worker[name="orders"]: ... worker: job "consume" registered
// twice`.
func TestModule_TwoElectionsInOneApp(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	orders := leader.Config{Name: t.Name() + ".orders", TTL: 2 * time.Second}
	billing := leader.Config{Name: t.Name() + ".billing", TTL: 2 * time.Second}
	jo := &namedJob{name: "consume", terms: make(chan uint64, 4)}
	jb := &namedJob{name: "consume", terms: make(chan uint64, 4)} // same job name, other election
	var eo, eb *leader.Elector
	app := fxtest.New(t,
		fx.NopLogger,
		fx.Provide(func() redis.UniversalClient { return client }),
		workerfx.Module(orders, workerfx.Named("orders")),
		workerfx.Module(billing, workerfx.Named("billing")),
		fx.Provide(
			workerfx.AsJobOf("orders", func() *namedJob { return jo }),
			workerfx.AsJobOf("billing", func() *namedJob { return jb }),
		),
		fx.Populate(
			fx.Annotate(&eo, fx.ParamTags(`name:"orders"`)),
			fx.Annotate(&eb, fx.ParamTags(`name:"billing"`)),
		),
	)
	app.RequireStart()
	for _, c := range []struct {
		name string
		job  *namedJob
		e    *leader.Elector
		cfg  leader.Config
	}{{"orders", jo, eo, orders}, {"billing", jb, eb, billing}} {
		var term uint64
		select {
		case term = <-c.job.terms:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s's job never ran", c.name)
		}
		h, err := leader.Lookup(context.Background(), client, c.cfg)
		if err != nil || h.Term != term || h.ID != c.e.ID() || c.e.Config().Name != c.cfg.Name {
			t.Fatalf("%s: Lookup() = %+v, %v; want %s leading term %d", c.name, h, err, c.e.ID(), term)
		}
	}
	app.RequireStop()
	for _, cfg := range []leader.Config{orders, billing} {
		if _, err := leader.Lookup(context.Background(), client, cfg); err == nil {
			t.Fatalf("%s still led after stop", cfg.Name)
		}
	}
}
