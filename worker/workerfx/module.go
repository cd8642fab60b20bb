package workerfx

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/fence"
	"github.com/solo-run/solo/worker"
	"github.com/solo-run/solo/worker/workerprom"
)

// JobGroup is the fx value group an unnamed Module collects its jobs from;
// a Module with Named(NAME) collects them from JobGroup + "." + NAME.
const JobGroup = "solo.jobs"

// Module returns the fx module that runs one election, cfg, and the jobs of
// its value group (AsJob) on exactly one instance. It takes from the graph
// a redis.UniversalClient (never created nor closed by it) and, optionally,
// a *zap.Logger, a prometheus.Registerer (and Gatherer, for /metrics) and a
// *fence.Guard or worker.Fence (see worker.WithFence). It provides the
// *worker.Worker and its *leader.Elector (tagged name:"NAME" with Named)
// and nothing else; a job constructor may take the elector, not the Worker
// (fx reports a cycle). Redis is not a start-up dependency unless FailFast.
// OnStop waits for the jobs to drain and the lease to be released: set
// fx.StopTimeout above cfg.ShutdownTimeout (default TTL) plus a second.
func Module(cfg leader.Config, opts ...Option) fx.Option {
	mo := newModuleOptions(opts)
	tag := mo.tag()
	base := func(p moduleParams) (*moduleBase, error) { return newModuleBase(p, cfg, mo) }
	build := func(p moduleParams, b *moduleBase, jobs jobList) (*worker.Worker, error) {
		return newModuleWorker(p, b, jobs, mo)
	}
	return fx.Module(mo.moduleName("solo"),
		mo.provideJobs(),
		fx.Provide(fx.Private, base),
		// The elector does not depend on the jobs: a job may take it.
		fx.Provide(fx.Annotate(func(b *moduleBase) *leader.Elector { return b.e }, fx.ResultTags(tag))),
		fx.Provide(fx.Annotate(build, fx.ResultTags(tag))),
		// The module's purpose is to run the jobs: force the worker into
		// existence, so applications need no Invoke of their own.
		fx.Invoke(fx.Annotate(func(*worker.Worker) {}, fx.ParamTags(tag))),
	)
}

// Option configures a Module or a SpreadModule.
type Option interface {
	applyModule(*moduleOptions)
}

type moduleOptions struct {
	name     string
	httpAddr string
	failFast bool
	worker   []worker.Option
}

type optionFunc func(*moduleOptions)

func (f optionFunc) applyModule(mo *moduleOptions) { f(mo) }

// WorkerOptions passes opts to the module's worker (worker.New), or to
// every job's worker of a SpreadModule (worker.NewSpread).
func WorkerOptions(opts ...worker.Option) Option {
	return optionFunc(func(mo *moduleOptions) { mo.worker = append(mo.worker, opts...) })
}

func newModuleOptions(opts []Option) moduleOptions {
	var mo moduleOptions
	for _, o := range opts {
		o.applyModule(&mo)
	}
	return mo
}

// moduleName is the fx module's name: base, or base.NAME with Named(NAME).
func (mo moduleOptions) moduleName(base string) string {
	if mo.name != "" {
		return base + "." + mo.name
	}
	return base
}

// tag is the fx tag of what the module provides: name:"NAME" with
// Named(NAME), else none.
func (mo moduleOptions) tag() string {
	if mo.name != "" {
		return `name:"` + mo.name + `"`
	}
	return ""
}

// provideJobs provides, privately, the module's jobList: the value group
// JobGroup, or JobGroup.NAME with Named(NAME).
func (mo moduleOptions) provideJobs() fx.Option {
	group := JobGroup
	if mo.name != "" {
		group += "." + mo.name
	}
	return fx.Provide(
		fx.Private,
		fx.Annotate(func(jobs []worker.Job) jobList { return jobs }, fx.ParamTags(`group:"`+group+`"`)),
	)
}

// Named tags the module's *worker.Worker and *leader.Elector name:"NAME" and
// collects its jobs from the group JobGroup + "." + NAME (AsJobOf), so that
// one application can run several elections. Default: untagged, jobs from
// JobGroup.
func Named(name string) Option {
	return optionFunc(func(o *moduleOptions) { o.name = name })
}

// WithHTTP serves worker.Handler (/livez, /readyz, /leader; a
// SpreadModule Spread.Handler) on addr, such as "127.0.0.1:8080", while
// the module runs, with /metrics when the graph has a
// prometheus.Gatherer. Default: no HTTP server.
func WithHTTP(addr string) Option {
	return optionFunc(func(o *moduleOptions) { o.httpAddr = addr })
}

// FailFast makes the module's OnStart fail the application's start when
// Redis does not answer a ping within the start timeout, or refuses the
// first acquire (a Spread's first heartbeat) as a configuration error
// (leader.ErrRedisConfig). Default: Redis is not a start-up dependency; the
// module starts and campaigns in the background, and a configuration error
// is logged, counted and fails /readyz (docs/design.md, "Observability").
func FailFast() Option {
	return optionFunc(func(o *moduleOptions) { o.failFast = true })
}

// AsJob annotates a job constructor so that its result, which must
// implement worker.Job, joins the job group of the unnamed Module:
//
//	fx.Provide(workerfx.AsJob(NewConsumeOrders))
func AsJob(constructor any) any {
	return fx.Annotate(constructor, fx.As(new(worker.Job)), fx.ResultTags(`group:"`+JobGroup+`"`))
}

// AsJobOf is AsJob for the Module of election name (Named(name)).
func AsJobOf(name string, constructor any) any {
	return fx.Annotate(constructor, fx.As(new(worker.Job)), fx.ResultTags(`group:"`+JobGroup+"."+name+`"`))
}

// jobList is a module's job group, private to the module.
type jobList []worker.Job

// moduleParams are what a Module takes from the application's graph.
type moduleParams struct {
	fx.In

	Lifecycle  fx.Lifecycle
	Shutdowner fx.Shutdowner
	Client     redis.UniversalClient
	Logger     *zap.Logger           `optional:"true"`
	Registerer prometheus.Registerer `optional:"true"`
	Gatherer   prometheus.Gatherer   `optional:"true"`
	Fence      worker.Fence          `optional:"true"`
	Guard      *fence.Guard          `optional:"true"`
}

// fence returns the graph's Fence, else its *fence.Guard, else nil.
func (p moduleParams) fence() worker.Fence {
	switch {
	case p.Fence != nil:
		return p.Fence
	case p.Guard != nil:
		return p.Guard
	}
	return nil
}

// workerOptions returns the logger (a no-op one if the graph has none) and
// the Worker options a module passes on: logger, metrics (when the graph
// has a Registerer), fence, then the Worker options given to the module.
func (p moduleParams) workerOptions(mo moduleOptions) (*zap.Logger, *workerprom.Metrics, []worker.Option, error) {
	log := p.Logger
	if log == nil {
		log = zap.NewNop()
	}
	var metrics *workerprom.Metrics
	if p.Registerer != nil {
		var err error
		if metrics, err = workerprom.New(p.Registerer); err != nil {
			return nil, nil, nil, err
		}
	}
	opts := []worker.Option{worker.WithLogger(log), worker.WithFence(p.fence())}
	if metrics != nil {
		opts = append(opts, worker.WithMetrics(metrics))
	}
	opts = append(opts, mo.worker...)
	return log, metrics, opts, nil
}

// sortedJobs returns a copy of jobs in name order.
func sortedJobs(jobs jobList) []worker.Job {
	sorted := append([]worker.Job(nil), jobs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name() < sorted[j].Name() })
	return sorted
}

// moduleBase is what a Module builds before its jobs: the elector, and the
// logger, metrics and Worker options it shares with the Worker.
type moduleBase struct {
	e    *leader.Elector
	log  *zap.Logger
	opts []worker.Option
}

// newModuleBase builds the elector of a Module.
func newModuleBase(p moduleParams, cfg leader.Config, mo moduleOptions) (*moduleBase, error) {
	log, metrics, opts, err := p.workerOptions(mo)
	if err != nil {
		return nil, err
	}
	e, err := leader.New(p.Client, cfg, leader.WithLogger(log), leader.WithMetrics(metrics.Elector(cfg.Name)))
	if err != nil {
		return nil, err
	}
	return &moduleBase{e: e, log: log, opts: opts}, nil
}

// newModuleWorker builds the Worker on b's elector, registers the jobs (in
// name order) and hooks the worker to the fx lifecycle.
func newModuleWorker(p moduleParams, b *moduleBase, jobs jobList, mo moduleOptions) (*worker.Worker, error) {
	e, log := b.e, b.log
	w, err := worker.New(e, b.opts...)
	if err != nil {
		return nil, err
	}
	for _, j := range sortedJobs(jobs) {
		if err := w.Add(j); err != nil {
			return nil, err
		}
	}
	r := &runner{
		what: "worker",
		log:  log, addr: mo.httpAddr, shutdown: p.Shutdowner, failFast: mo.failFast,
		// Quick and fallible: Redis must answer now (no leader is fine).
		ping: func(ctx context.Context) error {
			if _, err := e.Leader(ctx); err != nil && !errors.Is(err, leader.ErrNoLeader) {
				return err
			}
			return nil
		},
		handler: func() http.Handler { return workerprom.Handler(worker.Handler(w), p.Gatherer) },
		answered: func() (bool, error) {
			if w.Mode() == worker.ModeAlways || w.Mode() == worker.ModeStandby {
				return true, nil // no acquire to wait for
			}
			st := e.Status()
			return st.Reached || st.ConfigErr != nil, st.ConfigErr
		},
		run: func(ctx context.Context) error {
			err := w.Run(ctx)
			if errors.Is(err, worker.ErrGaveUp) {
				// Logged by the worker; the app lives on, /readyz failing.
				return nil
			}
			return err
		},
	}
	p.Lifecycle.Append(fx.Hook{OnStart: r.start, OnStop: r.stop})
	return w, nil
}

// runner owns the goroutines a module (Module, SpreadModule) starts: the
// run function and, if configured, the HTTP server.
type runner struct {
	what string                      // in the log: "<what> stopped"
	ping func(context.Context) error // at start, with failFast: Redis must answer
	// answered, with failFast, says whether Redis answered run's first
	// call, and its configuration error (leader.ErrRedisConfig) if it
	// refused it: start fails on one.
	answered func() (bool, error)
	failFast bool
	handler  func() http.Handler         // served on addr, if set
	run      func(context.Context) error // runs until its context ends
	log      *zap.Logger
	addr     string
	shutdown fx.Shutdowner

	cancel  context.CancelFunc
	done    chan struct{}
	srv     *worker.HTTPServer
	srvDone chan struct{}
}

func (r *runner) start(ctx context.Context) error {
	if r.failFast {
		if err := leader.RedisConfig(r.ping(ctx)); errors.Is(err, leader.ErrRedisConfig) {
			// A wrong password or a missing AUTH fails the ping itself.
			return fmt.Errorf("worker: redis configuration error at start: %w", err)
		} else if err != nil {
			return fmt.Errorf("worker: redis unreachable at start: %w", err)
		}
	}
	if r.addr != "" {
		ln, err := net.Listen("tcp", r.addr)
		if err != nil {
			return fmt.Errorf("worker: http listen on %s: %w", r.addr, err)
		}
		r.srv = worker.NewHTTPServer(r.handler())
		r.srvDone = make(chan struct{})
		go func() {
			defer close(r.srvDone)
			if err := r.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				r.log.Error("http server stopped", zap.Error(err))
			}
		}()
	}
	// Never parent long-lived work on the start context: it carries the
	// start deadline.
	runCtx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan struct{})
	go func() {
		defer close(r.done)
		err := r.run(runCtx)
		if err == nil {
			return
		}
		r.log.Error(r.what+" stopped", zap.Error(err))
		if runCtx.Err() == nil { // stopped on its own: ask fx to shut down
			_ = r.shutdown.Shutdown(fx.ExitCode(1))
		}
	}()
	if r.failFast && r.answered != nil {
		if err := r.firstAnswer(ctx); err != nil {
			// fx does not call OnStop after a failed OnStart. Nothing
			// leads on a refused call, so Run returns at once.
			r.cancel()
			<-r.done
			if r.srv != nil {
				_ = r.srv.Close()
				<-r.srvDone
			}
			return fmt.Errorf("worker: redis configuration error at start: %w", err)
		}
	}
	return nil
}

// firstAnswer waits, within ctx, for Redis to answer run's first call, and
// returns the configuration error it refused it with, if any. A call not
// answered by the end of ctx is not an error: the ping was.
func (r *runner) firstAnswer(ctx context.Context) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		if ok, err := r.answered(); ok {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (r *runner) stop(ctx context.Context) error {
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
