package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/solo-run/solo/cmd/solo/internal/config"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
	"github.com/solo-run/solo/worker/workerprom"
)

// runState is what solo run's steps hand on to each other: the flags and
// configuration, then what each step built. close undoes the steps, last
// first, as deferred calls would.
type runState struct {
	*runFlags
	cfg            config.Config
	env            []string
	stdout, stderr io.Writer

	// Built by supervise.
	log    *zap.Logger
	sink   *logSink
	ctx    context.Context
	cancel context.CancelCauseFunc
	sup    *supervisor
	// Built by connect and openFence.
	client     redis.UniversalClient
	reg        *prometheus.Registry
	elector    *leader.Elector
	configSig  *configSignal // the elector's metrics, waking watchConfig
	lc         leader.Config // with its defaults applied
	killAfter  time.Duration
	wopts      []worker.Option
	fenceTable string
	// Built by build.
	w *worker.Worker
	// ended holds the exit code (≥ 0) of a program that ended on its own
	// and will not be restarted, else -1.
	ended atomic.Int64

	undo []func()
}

// onClose adds f to what close runs.
func (r *runState) onClose(f func()) { r.undo = append(r.undo, f) }

// close runs the deferred calls, last first.
func (r *runState) close() {
	for i := len(r.undo) - 1; i >= 0; i-- {
		r.undo[i]()
	}
}

// supervise starts the logger, the signal handler and the supervisor of
// the program trees with its reaper.
func (r *runState) supervise() error {
	// Logs never block solo: see logSink.
	r.sink = newLogSink(r.stderr, 1<<20)
	log, err := newLogger(r.cfg.Log, r.sink)
	if err != nil {
		return err
	}
	r.log = log
	r.sink.log.Store(log.Named("log"))
	r.onClose(func() { _ = log.Sync() })

	// Signals (see docs/cli.md, "Signals"): INT, TERM, HUP and QUIT stop
	// gracefully; USR1, USR2 and WINCH go to the program's process group;
	// TSTP, TTIN and TTOU stop the program trees, then solo; CONT continues
	// them. PIPE is caught by main for the life of the process: a closed
	// stderr fails writes with EPIPE, which the log sink counts.
	r.ctx, r.cancel = context.WithCancelCause(context.Background())
	r.onClose(func() { r.cancel(nil) })
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH,
		syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGCONT)
	r.onClose(func() { signal.Stop(sigs) })
	if r.sup, err = newSupervisor(log.Named("supervisor")); err != nil {
		return err
	}
	stopReaper := make(chan struct{})
	reaperDone := make(chan struct{})
	go func() { defer close(reaperDone); r.sup.reapLoop(stopReaper) }()
	r.onClose(func() { close(stopReaper); <-reaperDone })
	sigDone := make(chan struct{})
	go func() { defer close(sigDone); handleSignals(sigs, r.sup, r.cancel, log) }()
	r.onClose(func() { signal.Stop(sigs); close(sigs); <-sigDone })
	return nil
}

// errNothingRan is connect's error when a signal stopped solo run before
// Redis answered: solo run exits 0, nothing ran.
var errNothingRan = errors.New("stopped before Redis answered")

// connect builds the Redis client, the metrics and the elector, derives
// the stop timing, and checks that Redis takes this configuration. An
// unreachable Redis, or one that refuses this configuration, is logged,
// not fatal (but for --once).
func (r *runState) connect() error {
	client, err := newClient(r.cfg.Redis.ClientURL())
	if err != nil {
		return err
	}
	lc := r.cfg.LeaderConfig()
	r.reg = prometheus.NewRegistry()
	r.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), r.sink.total)
	metrics, err := workerprom.New(r.reg)
	if err == nil {
		err = workerprom.WatchTLS(r.reg, client)
	}
	if err != nil {
		_ = client.Close()
		return err
	}
	// New logs min_replicas 0 on a Sentinel client (leader.SentinelWarning)
	// at error, in both modes, once: a spread group's electors share the
	// client.
	r.configSig = newConfigSignal(metrics.Elector(lc.Name))
	e, err := leader.New(client, lc, leader.WithLogger(r.log), leader.WithMetrics(r.configSig))
	if err != nil {
		_ = client.Close()
		return usageErr("%w", err)
	}
	lc = e.Config()
	killAfter, err := stopTiming(lc, config.FailoverAllowance(r.cfg.Redis.URL, lc.RenewInterval, lc.MinReplicas))
	if err != nil {
		_ = client.Close()
		return err
	}
	// An unreachable Redis, and a server that refuses this configuration
	// (a password, an ACL rule, a database, a certificate: fixed on the
	// server's side as often as on ours), are not fatal: solo serves its
	// HTTP endpoints, not ready (/readyz 503 with the reason), keeps
	// campaigning in the background, and the program runs once Redis
	// answers and this instance is elected. A refusal ends only --once,
	// whose exit code is its report (exit 2).
	unreachable, refused := pingFor(r.ctx, client, r.cfg.Redis.ClientURL(), 5*time.Second)
	switch {
	case r.ctx.Err() != nil:
		_ = client.Close()
		return errNothingRan // stopped by a signal while connecting
	case refused != nil && r.once:
		_ = client.Close()
		return refused
	case refused != nil:
		r.log.Warn("redis refuses this configuration; solo stays up, not ready, and retries every retry_interval until it is fixed",
			zap.String("cause", config.OneLine(refused.Error())))
	case unreachable != nil:
		r.log.Warn("redis unreachable; solo keeps trying in the background, and the program does not run until Redis answers",
			zap.String("cause", config.OneLine(unreachable.Error())))
	default:
		if err := refuseEviction(r.ctx, client, r.cfg.Redis.ClientURL()); err != nil {
			_ = client.Close()
			return err
		}
	}
	r.onClose(func() { _ = client.Close() })
	r.client, r.elector, r.lc, r.killAfter = client, e, lc, killAfter
	// solo serves no traffic: it is ready once Redis answered it.
	r.wopts = []worker.Option{worker.WithLogger(r.log), worker.WithMetrics(metrics),
		worker.WithPolicy(r.cfg.Worker), worker.WithMode(r.cfg.Election.Mode), worker.WithWaitForRedis()}
	return nil
}
