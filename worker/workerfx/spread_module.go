package workerfx

import (
	"context"
	"net/http"

	"go.uber.org/fx"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
	"github.com/solo-run/solo/worker/workerprom"
)

// SpreadModule is Module for spreading jobs: it runs the jobs of its value
// group under a worker.Spread of the group cfg.Name, each job an election
// of its own, and provides the *worker.Spread (tagged name:"NAME" with
// Named). It takes the same things from the graph and the same options as
// Module. Shards join the group through AsJob too, from a constructor
// of a []worker.Job (worker.Sharded's). A job constructor may take
// anything but the *worker.Spread (fx reports a cycle). OnStop leaves the
// group and waits for every job to drain and its lease to be released: set
// fx.StopTimeout above cfg.ShutdownTimeout plus a second.
func SpreadModule(cfg leader.Config, sc worker.SpreadConfig, opts ...Option) fx.Option {
	mo := newModuleOptions(opts)
	tag := mo.tag()
	build := func(p moduleParams, jobs jobList) (*worker.Spread, error) {
		return newModuleSpread(p, jobs, cfg, sc, mo)
	}
	return fx.Module(mo.moduleName("solo.spread"),
		mo.provideJobs(),
		fx.Provide(fx.Annotate(build, fx.ResultTags(tag))),
		fx.Invoke(fx.Annotate(func(*worker.Spread) {}, fx.ParamTags(tag))),
	)
}

// newModuleSpread builds the Spread, registers the jobs (in name order) and
// hooks it to the fx lifecycle.
func newModuleSpread(p moduleParams, jobs jobList, cfg leader.Config, sc worker.SpreadConfig, mo moduleOptions) (*worker.Spread, error) {
	wr, err := p.wiring(mo)
	if err != nil {
		return nil, err
	}
	log := wr.log
	s, err := worker.NewSpread(p.Client, cfg, sc, wr.opts...)
	if err != nil {
		return nil, err
	}
	if err := s.Add(sortedJobs(jobs)...); err != nil {
		return nil, err
	}
	if err := s.CheckJobs(); err != nil { // worker.WithJobsRequired
		return nil, err
	}
	r := &runner{
		what: "spread worker",
		log:  log, addr: mo.httpAddr, shutdown: p.Shutdowner, failFast: mo.failFast,
		ping:    func(ctx context.Context) error { return p.Client.Ping(ctx).Err() },
		handler: func() http.Handler { return workerprom.Handler(s.Handler(), wr.gatherer) },
		answered: func() (bool, error) {
			err := s.RedisConfigErr()
			return s.HeartbeatAnswered() || err != nil, err
		},
		run: s.Run,
	}
	p.Lifecycle.Append(fx.Hook{OnStart: r.start, OnStop: r.stop})
	return s, nil
}
