package workerfx

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"reflect"
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
// a *zap.Logger, Prometheus (a *prometheus.Registry, or a
// prometheus.Registerer and Gatherer; with none, a registry of its own;
// see WithHTTP) and a *fence.Guard or worker.Fence (see worker.WithFence).
// It provides the
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
// the module runs, and /metrics with solo's metrics: from the graph's
// *prometheus.Registry, or its prometheus.Gatherer (with the Registerer
// they are registered on), or, when the graph provides no Registerer, a
// registry of the module's own. A graph with a Registerer that is no
// Gatherer, and no Gatherer nor *prometheus.Registry, fails the start: its
// /metrics could not serve the metrics. Default: no HTTP server.
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

// AsJob annotates a job constructor so that its result joins the job group
// of the unnamed Module (or SpreadModule): a worker.Job, or a []worker.Job
// whose every job joins, such as worker.Sharded's shards:
//
//	fx.Provide(workerfx.AsJob(NewConsumeOrders))
//	fx.Provide(workerfx.AsJob(func(db *sql.DB) ([]worker.Job, error) {
//		return worker.Sharded("orders", 64, consumeShard(db))
//	}))
func AsJob(constructor any) any {
	return asJob(JobGroup, constructor)
}

// AsJobOf is AsJob for the Module of election name (Named(name)).
func AsJobOf(name string, constructor any) any {
	return asJob(JobGroup+"."+name, constructor)
}

// jobsType is the type of a constructor's result that AsJob flattens.
var jobsType = reflect.TypeFor[[]worker.Job]()

// asJob annotates constructor's result into group: as a worker.Job, or,
// when it is a []worker.Job, each of its jobs (fx's flatten).
func asJob(group string, constructor any) any {
	if t := reflect.TypeOf(constructor); t != nil && t.Kind() == reflect.Func && t.NumOut() > 0 && t.Out(0) == jobsType {
		return fx.Annotate(constructor, fx.ResultTags(`group:"`+group+`,flatten"`))
	}
	return fx.Annotate(constructor, fx.As(new(worker.Job)), fx.ResultTags(`group:"`+group+`"`))
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
	Registry   *prometheus.Registry  `optional:"true"`
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

// errNoGatherer is the refusal of a graph whose metrics /metrics could not
// serve.
var errNoGatherer = errors.New("workerfx: WithHTTP serves /metrics, but the graph provides a prometheus.Registerer " +
	"and no prometheus.Gatherer to serve its metrics from: provide the Gatherer of the same registry " +
	"(fx.Provide(func() prometheus.Gatherer { return reg })), or the *prometheus.Registry itself instead of both")

// prometheus returns where the module registers solo's metrics and what
// WithHTTP's /metrics serves, from what the graph provides:
//
//   - a Registerer and a Gatherer: those;
//   - a *prometheus.Registry (with or without either): it stands for the
//     one missing;
//   - a Registerer that is a Gatherer too (prometheus.DefaultRegisterer):
//     it, for both;
//   - nothing: a registry of the module's own, for both;
//   - a Gatherer only: solo's metrics on a registry of the module's own,
//     /metrics serving both;
//   - a Registerer only, neither a Gatherer nor a *Registry: refused
//     (errNoGatherer) with WithHTTP; without it, the application serves
//     its registry itself.
//
// own says the module made its own registry.
func (p moduleParams) prometheus(mo moduleOptions) (reg prometheus.Registerer, g prometheus.Gatherer, own bool, err error) {
	reg, g = p.Registerer, p.Gatherer
	if p.Registry != nil {
		if reg == nil {
			reg = p.Registry
		}
		if g == nil {
			g = p.Registry
		}
	}
	if rg, ok := reg.(prometheus.Gatherer); ok && g == nil {
		g = rg
	}
	switch {
	case reg == nil:
		r := prometheus.NewRegistry()
		if g == nil {
			return r, r, true, nil
		}
		return r, prometheus.Gatherers{g, r}, true, nil
	case g == nil && mo.httpAddr != "":
		return nil, nil, false, errNoGatherer
	}
	return reg, g, false, nil
}

// wiring is what a module builds from the graph for its workers: the
// logger (a no-op one if the graph has none), the metrics, what /metrics
// serves (nil: no /metrics), and the Worker options it passes on — logger,
// metrics, fence, then the Worker options given to the module.
type wiring struct {
	log      *zap.Logger
	metrics  *workerprom.Metrics
	gatherer prometheus.Gatherer
	opts     []worker.Option
}

// wiring builds the module's wiring (see type wiring).
func (p moduleParams) wiring(mo moduleOptions) (wiring, error) {
	log := p.Logger
	if log == nil {
		log = zap.NewNop()
	}
	reg, g, own, err := p.prometheus(mo)
	if err != nil {
		return wiring{}, err
	}
	metrics, err := workerprom.New(reg)
	if err != nil {
		return wiring{}, err
	}
	if own {
		where := "served on WithHTTP's /metrics"
		if mo.httpAddr == "" {
			where = "not served (no WithHTTP): provide a prometheus.Registerer or a *prometheus.Registry to export them"
		}
		log.Info("solo's metrics are on a registry of the module's own (the graph provides no prometheus.Registerer), " + where)
	}
	if err := workerprom.WatchTLS(reg, p.Client); err != nil {
		return wiring{}, err
	}
	opts := []worker.Option{worker.WithLogger(log), worker.WithFence(p.fence()), worker.WithMetrics(metrics)}
	return wiring{log: log, metrics: metrics, gatherer: g, opts: append(opts, mo.worker...)}, nil
}

// sortedJobs returns a copy of jobs in name order.
func sortedJobs(jobs jobList) []worker.Job {
	sorted := append([]worker.Job(nil), jobs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name() < sorted[j].Name() })
	return sorted
}

// moduleBase is what a Module builds before its jobs: the elector, and
// the wiring it shares with the Worker.
type moduleBase struct {
	wiring
	e *leader.Elector
}

// newModuleBase builds the elector of a Module.
func newModuleBase(p moduleParams, cfg leader.Config, mo moduleOptions) (*moduleBase, error) {
	wr, err := p.wiring(mo)
	if err != nil {
		return nil, err
	}
	e, err := leader.New(p.Client, cfg, leader.WithLogger(wr.log), leader.WithMetrics(wr.metrics.Elector(cfg.Name)))
	if err != nil {
		return nil, err
	}
	return &moduleBase{wiring: wr, e: e}, nil
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
	if err := w.CheckJobs(); err != nil { // worker.WithJobsRequired
		return nil, err
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
		handler: func() http.Handler { return workerprom.Handler(worker.Handler(w), b.gatherer) },
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
