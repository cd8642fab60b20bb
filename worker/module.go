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

// JobGroup is the fx value group the module collects jobs from.
const JobGroup = "solo.jobs"

// Module runs every Job of the "solo.jobs" value group under the election
// that Config describes. The application provides a Config, a
// redis.UniversalClient (the module never creates clients), and optionally
// a *zap.Logger, a prometheus.Registerer (+ prometheus.Gatherer for
// /metrics) and a Fence, which the worker then claims every term in before
// any job runs (WithFence):
//
//	fx.Provide(fx.Annotate(newGuard, fx.As(new(worker.Fence)))) // newGuard returns *fence.Guard
//
// When Config.HTTP.Addr is set it serves Handler there.
//
// OnStart checks that Redis answers (a bad address fails the start) and
// starts the worker on a context of its own; OnStop cancels it and waits
// for the jobs to drain and the lease to be released, bounded by the stop
// context: set fx.StopTimeout above election.shutdown_timeout (default
// TTL) plus a second.
var Module = fx.Module("worker",
	leader.Module,
	fx.Provide(
		electionConfig,
		newMetricsFromParams,
		NewFromParams,
	),
	// The module's purpose is to run the jobs: force the worker into
	// existence, so applications need no Invoke of their own.
	fx.Invoke(func(*Worker) {}),
)

// AsJob annotates a job constructor so that its result, which must
// implement Job, joins the module's job group:
//
//	fx.Provide(worker.AsJob(NewConsumeOrders))
func AsJob(constructor any) any {
	return fx.Annotate(constructor, fx.As(new(Job)), fx.ResultTags(`group:"`+JobGroup+`"`))
}

// Params are the inputs of NewFromParams.
type Params struct {
	fx.In

	Lifecycle  fx.Lifecycle
	Shutdowner fx.Shutdowner
	Config     Config
	Elector    *leader.Elector
	Jobs       []Job               `group:"solo.jobs"`
	Logger     *zap.Logger         `optional:"true"`
	Metrics    *Metrics            `optional:"true"`
	Gatherer   prometheus.Gatherer `optional:"true"`
	Fence      Fence               `optional:"true"`
}

// MetricsParams are the inputs of the module's metrics.
type MetricsParams struct {
	fx.In

	Registerer prometheus.Registerer `optional:"true"`
}

// MetricsResult are the module's metrics: for the worker and, through
// leader.Params, for the elector.
type MetricsResult struct {
	fx.Out

	Metrics *Metrics
	Leader  leader.Metrics
}

func newMetricsFromParams(p MetricsParams, c Config) (MetricsResult, error) {
	if p.Registerer == nil {
		return MetricsResult{}, nil
	}
	m, err := NewMetrics(p.Registerer)
	if err != nil {
		return MetricsResult{}, err
	}
	return MetricsResult{Metrics: m, Leader: m.Elector(c.Election.Name)}, nil
}

func electionConfig(c Config) leader.Config { return c.LeaderConfig() }

// NewFromParams builds the Worker, registers the group's jobs (in name
// order) and hooks it to the fx lifecycle.
func NewFromParams(p Params) (*Worker, error) {
	log := p.Logger
	if log == nil {
		log = zap.NewNop()
	}
	w, err := New(p.Elector, WithLogger(log), WithMetrics(p.Metrics), WithPolicy(p.Config.Worker),
		WithMode(p.Config.Election.Mode), WithFence(p.Fence))
	if err != nil {
		return nil, err
	}
	jobs := append([]Job(nil), p.Jobs...)
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].Name() < jobs[j].Name() })
	for _, j := range jobs {
		if err := w.Add(j); err != nil {
			return nil, err
		}
	}
	r := &runner{w: w, log: log, addr: p.Config.HTTP.Addr, gatherer: p.Gatherer, shutdown: p.Shutdowner}
	p.Lifecycle.Append(fx.Hook{OnStart: r.start, OnStop: r.stop})
	return w, nil
}

// runner owns the goroutines the module starts: the worker and, if
// configured, the HTTP server.
type runner struct {
	w        *Worker
	log      *zap.Logger
	addr     string
	gatherer prometheus.Gatherer
	shutdown fx.Shutdowner

	cancel  context.CancelFunc
	done    chan struct{}
	srv     *http.Server
	srvDone chan struct{}
}

func (r *runner) start(ctx context.Context) error {
	// Quick and fallible: Redis must answer now (no leader is fine).
	if _, err := r.w.Elector().Leader(ctx); err != nil && !errors.Is(err, leader.ErrNoLeader) {
		return fmt.Errorf("worker: redis unreachable at start: %w", err)
	}
	if r.addr != "" {
		ln, err := net.Listen("tcp", r.addr)
		if err != nil {
			return fmt.Errorf("worker: http listen on %s: %w", r.addr, err)
		}
		r.srv = &http.Server{Handler: Handler(r.w, r.gatherer), ReadHeaderTimeout: 5 * time.Second}
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
		err := r.w.Run(runCtx)
		if err == nil {
			return
		}
		r.log.Error("worker stopped", zap.Error(err))
		if runCtx.Err() == nil { // stopped on its own: ask fx to shut down
			_ = r.shutdown.Shutdown(fx.ExitCode(1))
		}
	}()
	return nil
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
