package worker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/solo-run/solo/leader"
)

// SpreadModule is Module's counterpart for spreading jobs: it runs the jobs
// of its value group (AsJob, or AsJobOf with Named) under a Spread of the
// group cfg.Name — each job an election of its own, the jobs spread over
// the application's live instances — and provides the *Spread (tagged
// name:"NAME" with Named). It takes the same things from the graph as
// Module (a redis.UniversalClient; optionally a *zap.Logger, a
// prometheus.Registerer and Gatherer, a Fence) and the same options
// (Named, WithOptions, WithHTTP: there /leader serves SpreadInfo). A job
// constructor may return one Job; shards are registered as a []Job
// annotated into the group with fx.ResultTags(`group:"solo.jobs,flatten"`)
// (Sharded returns them).
//
// OnStart checks that Redis answers; OnStop leaves the group and waits for
// every job to drain and its lease to be released, bounded by the stop
// context: set fx.StopTimeout above cfg.ShutdownTimeout plus a second.
func SpreadModule(cfg leader.Config, sc SpreadConfig, opts ...ModuleOption) fx.Option {
	var mo moduleOptions
	for _, o := range opts {
		o.applyModule(&mo)
	}
	group, name, tag := JobGroup, "solo.spread", ""
	if mo.name != "" {
		group += "." + mo.name
		name += "." + mo.name
		tag = `name:"` + mo.name + `"`
	}
	build := func(p moduleParams, jobs jobList) (*Spread, error) {
		return newModuleSpread(p, jobs, cfg, sc, mo)
	}
	return fx.Module(name,
		fx.Provide(
			fx.Private,
			fx.Annotate(func(jobs []Job) jobList { return jobs }, fx.ParamTags(`group:"`+group+`"`)),
		),
		fx.Provide(fx.Annotate(build, fx.ResultTags(tag))),
		fx.Invoke(fx.Annotate(func(*Spread) {}, fx.ParamTags(tag))),
	)
}

// newModuleSpread builds the Spread, registers the jobs (in name order) and
// hooks it to the fx lifecycle.
func newModuleSpread(p moduleParams, jobs jobList, cfg leader.Config, sc SpreadConfig, mo moduleOptions) (*Spread, error) {
	log := p.Logger
	if log == nil {
		log = zap.NewNop()
	}
	var metrics *Metrics
	if p.Registerer != nil {
		var err error
		if metrics, err = NewMetrics(p.Registerer); err != nil {
			return nil, err
		}
	}
	opts := append([]Option{WithLogger(log), WithMetrics(metrics), WithFence(p.Fence)}, mo.worker...)
	s, err := NewSpread(p.Client, cfg, sc, opts...)
	if err != nil {
		return nil, err
	}
	sorted := append([]Job(nil), jobs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name() < sorted[j].Name() })
	if err := s.Add(sorted...); err != nil {
		return nil, err
	}
	r := &spreadRunner{s: s, log: log, addr: mo.httpAddr, gatherer: p.Gatherer, shutdown: p.Shutdowner}
	p.Lifecycle.Append(fx.Hook{OnStart: r.start, OnStop: r.stop})
	return s, nil
}

// spreadRunner owns the goroutines SpreadModule starts.
type spreadRunner struct {
	s        *Spread
	log      *zap.Logger
	addr     string
	gatherer prometheus.Gatherer
	shutdown fx.Shutdowner

	cancel  context.CancelFunc
	done    chan struct{}
	srv     *http.Server
	srvDone chan struct{}
}

func (r *spreadRunner) start(ctx context.Context) error {
	if err := r.s.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("worker: redis unreachable at start: %w", err)
	}
	if r.addr != "" {
		ln, err := net.Listen("tcp", r.addr)
		if err != nil {
			return fmt.Errorf("worker: http listen on %s: %w", r.addr, err)
		}
		r.srv = &http.Server{Handler: r.s.Handler(r.gatherer), ReadHeaderTimeout: 5 * time.Second}
		r.srvDone = make(chan struct{})
		go func() {
			defer close(r.srvDone)
			if err := r.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				r.log.Error("http server stopped", zap.Error(err))
			}
		}()
	}
	runCtx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan struct{})
	go func() {
		defer close(r.done)
		err := r.s.Run(runCtx)
		if err == nil {
			return
		}
		r.log.Error("spread worker stopped", zap.Error(err))
		if runCtx.Err() == nil {
			_ = r.shutdown.Shutdown(fx.ExitCode(1))
		}
	}()
	return nil
}

func (r *spreadRunner) stop(ctx context.Context) error {
	r.cancel()
	var err error
	select {
	case <-r.done:
	case <-ctx.Done():
		err = fmt.Errorf("worker: jobs still draining at stop timeout: %w", ctx.Err())
	}
	if r.srv != nil {
		err = errors.Join(err, r.srv.Shutdown(ctx))
		<-r.srvDone
	}
	return err
}
