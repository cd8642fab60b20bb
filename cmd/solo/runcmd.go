package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"github.com/solo-run/solo/cmd/solo/internal/config"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/redisurl"
	"github.com/solo-run/solo/worker"
)

// minStopMargin is the least time solo run accepts between the renew
// deadline and TTL × (1 − drift), the earliest the lease can pass: SIGTERM,
// SIGKILL at three quarters of it, and a quarter (≥ 50ms) for the kill to
// land and the tree to be reaped.
const minStopMargin = 200 * time.Millisecond

// stopTiming derives, from the timing rule, when SIGKILL follows SIGTERM,
// and refuses configurations under which solo run cannot stop a program
// tree before the lease can pass. lc has its defaults applied; failover is
// failoverAllowance's share of the margin (0 without Sentinel).
//
// The lease outlives the renew deadline by at least
// margin = TTL × (1 − drift) − renew_deadline − failover on this host's
// clock; SIGKILL comes at 3/4 of it (not of TTL − renew_deadline, which
// ignores drift).
func stopTiming(lc leader.Config, failover time.Duration) (killAfter time.Duration, err error) {
	safe := time.Duration(float64(lc.TTL) * (1 - lc.Drift))
	margin := safe - lc.RenewDeadline - failover
	if margin < minStopMargin && failover > 0 {
		return 0, usageErr("election.renew_interval %s + election.renew_deadline %s: leave %s before the lease can pass in a Sentinel failover (ttl×(1−drift) = %s − renew_deadline − renew_interval − %s for the sentinels to move the replicas; ttl %s, drift %g); solo run needs at least %s to stop the program: lower renew_interval or renew_deadline, or raise ttl",
			lc.RenewInterval, lc.RenewDeadline, margin, safe, config.SentinelReconfiguration, lc.TTL, lc.Drift, minStopMargin)
	}
	if margin < minStopMargin {
		return 0, usageErr("election.renew_deadline %s: leaves %s before the lease can pass (ttl×(1−drift) = %s, ttl %s, drift %g); solo run needs at least %s to stop the program (SIGTERM, then SIGKILL)",
			lc.RenewDeadline, margin, safe, lc.TTL, lc.Drift, minStopMargin)
	}
	killAfter = margin * 3 / 4
	if lc.ShutdownTimeout < margin {
		return 0, usageErr("election.shutdown_timeout %s: must be at least %s for solo run (SIGKILL comes %s after SIGTERM, and must land before solo gives up the drain)",
			lc.ShutdownTimeout, margin, killAfter)
	}
	return killAfter, nil
}

// programEnv is env without solo's own SOLO_* variables (its configuration,
// the Redis URL and password among them), except those named in keep.
func programEnv(env, keep []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "SOLO_") && !slices.Contains(keep, name) {
			continue
		}
		out = append(out, kv)
	}
	return out
}

type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

func runCommand(args []string, stdout, stderr io.Writer, env []string) error {
	fs := flag.NewFlagSet("solo run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c common
	c.register(fs, "run", false)
	restart := fs.String("restart", string(worker.RestartAlways), "when PROGRAM exits on its own: always, on-failure or never; when it is not restarted, solo releases the lease and exits")
	childExit := fs.Bool("child-exit-code", true, "when PROGRAM ended and is not restarted, exit with its exit code (128+N for signal N); false: exit 0")
	once := fs.Bool("once", false, "run PROGRAM at most once: if the lease is free, run it and exit with its code; if another instance holds it, exit 0 at once (with --try: wait that long for it)")
	exitOnGiveUp := fs.Bool("exit-on-give-up", false, "exit 5 once the election had worker.max_failed_terms failed terms in a row (default: stay up, not campaigning, with /readyz failing)")
	try := fs.Duration("try", 0, "give up acquiring the lease after this `duration` and exit 1 (default: wait for ever)")
	var passEnv listFlag
	fs.Var(&passEnv, "pass-env", "`NAMES` of SOLO_* variables to pass to the program (comma-separated, repeatable); by default none is")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	dashes := slices.Index(args, "--") >= 0
	argv := fs.Args()
	switch {
	case dashes && len(argv) == 0:
		return usageErr("missing command after --")
	case !dashes && len(argv) > 0:
		return usageErr("unexpected argument %q: put the program after --", argv[0])
	}
	if *once {
		restartSet := false
		fs.Visit(func(f *flag.Flag) { restartSet = restartSet || f.Name == "restart" })
		if !dashes {
			return usageErr("--once: give the program after --")
		}
		if restartSet && *restart != string(worker.RestartNever) {
			return usageErr("--once with --restart %s: --once never restarts the program", *restart)
		}
		*restart = string(worker.RestartNever)
	}
	if *try < 0 {
		return usageErr("--try %s: must be positive", *try)
	}
	r := worker.Restart(*restart)
	switch r {
	case worker.RestartAlways, worker.RestartOnFailure, worker.RestartNever:
	default:
		return usageErr("--restart %q: want always, on-failure or never", *restart)
	}
	cfg, err := c.load(fs, env, "")
	if err != nil {
		return err
	}
	if *exitOnGiveUp && cfg.Election.Mode == worker.ModeSpread {
		return usageErr("--exit-on-give-up: election.mode spread never gives up (worker.max_failed_terms is refused there): drop the flag")
	}
	if dashes {
		if err := resolveProgram(argv[0]); err != nil {
			return err
		}
	}
	if !dashes && len(cfg.Jobs) == 0 {
		return usageErr("nothing to run: give a program after -- or list jobs in the configuration")
	}
	for i, j := range cfg.Jobs {
		if !dashes && len(j.Command) == 0 {
			return usageErr("jobs[%d].command: must not be empty (job %q)", i, j.Name)
		}
	}
	// Logs never block solo: see logSink.
	sink := newLogSink(stderr, 1<<20)
	log, err := newLogger(cfg.Log, sink)
	if err != nil {
		return err
	}
	sink.log.Store(log.Named("log"))
	defer func() { _ = log.Sync() }()

	// Signals (see README, "Supervision"): INT, TERM, HUP and QUIT stop
	// gracefully; USR1, USR2 and WINCH go to the program's process group;
	// TSTP, TTIN and TTOU stop the program trees, then solo; CONT continues
	// them. PIPE is caught by main for the life of the process: a closed
	// stderr fails writes with EPIPE, which the log sink counts.
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH,
		syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGCONT)
	defer signal.Stop(sigs)
	sup := newSupervisor(log.Named("supervisor"))
	stopReaper := make(chan struct{})
	reaperDone := make(chan struct{})
	go func() { defer close(reaperDone); sup.reapLoop(stopReaper) }()
	defer func() { close(stopReaper); <-reaperDone }()
	sigDone := make(chan struct{})
	go func() { defer close(sigDone); handleSignals(sigs, sup, cancel, log) }()
	defer func() { signal.Stop(sigs); close(sigs); <-sigDone }()

	client, err := newClient(cfg.Redis.ClientURL())
	if err != nil {
		return err
	}
	lc := cfg.LeaderConfig()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), sink.total)
	metrics, err := worker.NewMetrics(reg)
	if err != nil {
		_ = client.Close()
		return err
	}
	// New logs min_replicas 0 on a Sentinel client (leader.SentinelWarning)
	// at error, in both modes, once: a spread group's electors share the
	// client.
	e, err := leader.New(client, lc, leader.WithLogger(log), leader.WithMetrics(metrics.Elector(lc.Name)))
	if err != nil {
		_ = client.Close()
		return usageErr("%w", err)
	}
	lc = e.Config()
	killAfter, err := stopTiming(lc, config.FailoverAllowance(cfg.Redis.URL, lc.RenewInterval, lc.MinReplicas))
	if err != nil {
		_ = client.Close()
		return err
	}
	// A configuration error (password, database, TLS) fails now. An
	// unreachable Redis does not: solo serves its HTTP endpoints and keeps
	// campaigning in the background, and the program runs once Redis
	// answers and this instance is elected (the elector logs "acquire
	// answered again" then).
	unreachable, err := pingFor(ctx, client, cfg.Redis.ClientURL(), 5*time.Second)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped by a signal while connecting: nothing ran
		}
		return err
	}
	if unreachable == nil {
		if err := refuseEviction(ctx, client, cfg.Redis.ClientURL()); err != nil {
			return err
		}
	}
	if unreachable != nil {
		log.Warn("redis unreachable; solo keeps trying in the background, and the program does not run until Redis answers",
			zap.String("cause", config.OneLine(unreachable.Error())))
	}
	defer client.Close()

	wopts := []worker.Option{worker.WithLogger(log), worker.WithMetrics(metrics),
		worker.WithPolicy(cfg.Worker), worker.WithMode(cfg.Election.Mode)}
	fenceTable := ""
	if cfg.Fence.DSN != "" {
		guard, closeDB, err := openFence(ctx, cfg.Fence)
		if err != nil {
			return err
		}
		defer closeDB()
		// The worker claims every term in the fence before the program
		// starts, with the term and holder the program gets as SOLO_TERM
		// and SOLO_ID; the program's own fenced writes then refuse a stale
		// leader (docs/design.md, "The fence").
		wopts = append(wopts, worker.WithFence(guard))
		fenceTable = guard.Table()
	}
	if cfg.Election.Mode == worker.ModeSpread { // spread_run.go
		return runSpread(ctx, cancel, cfg, client, reg, log, wopts, program{env: programEnv(env, passEnv), fenceTable: fenceTable,
			killAfter: killAfter, stdout: stdout, stderr: stderr, sup: sup, log: log.Named("program")}, dashes)
	}
	w, err := worker.New(e, wopts...)
	if err != nil {
		return usageErr("%w", err)
	}
	base := program{
		env:           programEnv(env, passEnv),
		fenceTable:    fenceTable,
		election:      lc.Name,
		id:            e.ID(),
		killAfter:     killAfter,
		renewDeadline: lc.RenewDeadline,
		status:        e.Status,
		poll:          min(max(min(lc.RenewInterval, lc.RenewDeadline-lc.RenewInterval)/4, 10*time.Millisecond), 250*time.Millisecond),
		stdout:        stdout,
		stderr:        stderr,
		sup:           sup,
		log:           log.Named("program"),
	}
	// ended holds the exit code (≥ 0) of a program that ended on its own
	// and will not be restarted, else -1.
	var ended atomic.Int64
	ended.Store(-1)
	if dashes {
		p := base
		p.argv = argv
		p.job = filepath.Base(argv[0])
		job := p.run
		if *once {
			// One term at most: however the program's run ends, solo exits
			// (a signal to solo: 0, as always; a term lost under the
			// program: 1).
			job = func(jctx context.Context) error {
				err := p.run(jctx)
				if ctx.Err() != nil {
					return err
				}
				code := exitCode(err)
				if jctx.Err() != nil && code == 0 {
					code = exitError // stopped: the term ended under it
				}
				ended.Store(int64(code))
				cancel(errProgramEnded)
				return err
			}
		} else if r != worker.RestartAlways {
			// As consul lock does: a program that ended for good leaves
			// nothing to lead for. Cancelling Run releases the lease (the
			// tree is gone already) and solo exits with the program's code,
			// instead of holding the lease with nothing running.
			job = func(jctx context.Context) error {
				err := p.run(jctx)
				if jctx.Err() != nil || (r == worker.RestartOnFailure && err != nil) {
					return err // the term ended, or the policy restarts it
				}
				ended.Store(int64(exitCode(err)))
				cancel(errProgramEnded)
				return err
			}
		}
		if err := w.Pull(p.job, job, worker.WithRestart(r)); err != nil {
			return usageErr("%w", err)
		}
	}
	for _, j := range cfg.Jobs {
		if dashes {
			break
		}
		p := base
		p.argv = j.Command
		p.job = j.Name
		if len(cfg.Jobs) > 1 {
			// Several jobs share solo's stdout and stderr: prefix each
			// line with its job. One job's output is passed untouched.
			p.prefix = "[" + j.Name + "] "
		}
		p.log = base.log.With(zap.String("job", j.Name))
		if j.Schedule != "" {
			err = w.Cron(j.Name, j.Spec(), p.run, worker.WithMisfire(j.Misfire))
		} else {
			err = w.Pull(j.Name, p.run, worker.WithRestart(j.Restart))
		}
		if err != nil {
			return usageErr("%w", err)
		}
	}

	if cfg.HTTP.Addr != "" {
		ln, err := net.Listen("tcp", cfg.HTTP.Addr)
		if err != nil {
			return fmt.Errorf("http listen on %s: %w", cfg.HTTP.Addr, err)
		}
		srv := &http.Server{Handler: worker.Handler(w, reg), ReadHeaderTimeout: 5 * time.Second}
		served := make(chan struct{})
		go func() {
			defer close(served)
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("http server stopped", zap.Error(err))
			}
		}()
		log.Info("http listening", zap.String("addr", ln.Addr().String()))
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), config.HTTPShutdownTimeout)
			defer cancel()
			_ = srv.Shutdown(sctx)
			<-served
		}()
	}
	log.Info("solo running", zap.String("election", lc.Name), zap.String("id", e.ID()),
		zap.String("mode", string(cfg.Election.Mode)), zap.String("version", soloVersion()),
		zap.Duration("kill_after", killAfter))
	// --once and --try watch the first acquire: gaveUp is what solo exits
	// with when it stops campaigning before it ever led.
	var gaveUp atomic.Pointer[error]
	if *once || *try > 0 {
		wctx, wstop := context.WithCancel(ctx)
		wdone := make(chan struct{})
		go func() {
			defer close(wdone)
			if err, stop := watchAcquire(wctx, e, *once, *try, lc.Name); stop {
				gaveUp.Store(&err)
				log.Info("stopping: lease not acquired", zap.NamedError("why", err))
				cancel(errNotAcquired)
			}
		}()
		defer func() { wstop(); <-wdone }()
	}
	// A configuration error of Redis (an ACL that lacks a rule, a wrong
	// password: no retry cures it) stops solo, with exit 2: at start, and
	// while leading, once the refused renewal ended the term.
	cw := watchConfig(ctx, cancel, func() error { return e.Status().ConfigErr })
	err = w.Run(ctx)
	// Never exit while a program tree lives, whatever Run returned (after
	// ErrStopTimeout the keeper is still killing it, on its own deadline).
	sup.wait()
	if cerr := cw.stop(); cerr != nil {
		return usageErr("redis %s: %w", redisurl.Redact(cfg.Redis.ClientURL()), cerr)
	}
	if errors.Is(err, worker.ErrGaveUp) {
		// Logged by the worker. Exit if asked; else stay up, campaigning
		// no more, so that /readyz and the metric tell (a supervisor
		// restarting solo would only start the ping-pong again).
		if *exitOnGiveUp {
			return &codeError{code: exitGaveUp, err: err}
		}
		log.Info("not campaigning any more; waiting for a signal to exit")
		<-ctx.Done()
		return nil
	}
	if err != nil {
		return err
	}
	if code := ended.Load(); code < 0 {
		if why := gaveUp.Load(); why != nil {
			return *why
		}
	}
	if code := ended.Load(); code >= 0 {
		log.Info("program ended and is not restarted: lease released, exiting",
			zap.String("restart", string(r)), zap.Int64("exit_code", code), zap.Bool("child_exit_code", *childExit))
		if *childExit && code != 0 {
			return &codeError{code: int(code), err: errQuiet}
		}
		return nil
	}
	log.Info("stopped")
	return nil
}

// errRedisConfig stops solo run on a configuration error of Redis.
var errRedisConfig = errors.New("redis configuration error")

// configWatch stops solo run at the first configuration error of Redis
// (leader.ErrRedisConfig) that configErr reports. It owns one goroutine,
// ended by stop or by the end of the context it was started with.
type configWatch struct {
	found atomic.Pointer[error]
	stopW context.CancelFunc
	done  chan struct{}
}

// watchConfig starts a configWatch on ctx: on an error it records it and
// cancels solo (cancel) with errRedisConfig. An eviction policy that
// appeared after the start (leader.ErrEvictionPolicy) does not stop solo:
// a server-side change must not take every instance down at once; the
// instance stays up, not ready, and recovers once it is fixed.
func watchConfig(ctx context.Context, cancel context.CancelCauseFunc, configErr func() error) *configWatch {
	wctx, stop := context.WithCancel(ctx)
	cw := &configWatch{stopW: stop, done: make(chan struct{})}
	go func() {
		defer close(cw.done)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			}
			if err := configErr(); err != nil && !errors.Is(err, leader.ErrEvictionPolicy) {
				cw.found.Store(&err)
				cancel(errRedisConfig)
				return
			}
		}
	}()
	return cw
}

// stop ends the watch and returns the configuration error it found, if any.
func (cw *configWatch) stop() error {
	cw.stopW()
	<-cw.done
	if p := cw.found.Load(); p != nil {
		return *p
	}
	return nil
}

// errNotAcquired stops solo run when --once or --try gives up the lease.
var errNotAcquired = errors.New("lease not acquired")

// watchAcquire watches e until it leads, and says whether to stop first:
// with once (and no try), as soon as another instance is seen holding the
// lease (a codeError with exit 0); with try, when try passed without leading (an
// error, exit 1).
func watchAcquire(ctx context.Context, e *leader.Elector, once bool, try time.Duration, name string) (err error, stop bool) {
	start := time.Now()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, false
		case <-t.C:
		}
		st := e.Status()
		if st.Leading || st.Holder.ID == e.ID() {
			return nil, false
		}
		held := st.Holder.ID != ""
		if once && try == 0 && held {
			// Not a failure: the job runs elsewhere. run prints the line
			// and exits 0.
			return &codeError{code: exitOK, err: fmt.Errorf("election %q is held by %s (term %d): --once, not run", name, st.Holder.ID, st.Holder.Term)}, true
		}
		if try > 0 && time.Since(start) >= try {
			if held {
				return fmt.Errorf("election %q: lease not acquired within --try %s (held by %s, term %d)", name, try, st.Holder.ID, st.Holder.Term), true
			}
			return fmt.Errorf("election %q: lease not acquired within --try %s", name, try), true
		}
	}
}

// errProgramEnded stops solo run when its program ended and is not
// restarted.
var errProgramEnded = errors.New("program ended and is not restarted")

// handleSignals acts on solo's signals until sigs closes.
func handleSignals(sigs <-chan os.Signal, sup *supervisor, cancel context.CancelCauseFunc, log *zap.Logger) {
	for s := range sigs {
		sig := s.(syscall.Signal)
		switch sig {
		case syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT:
			cancel(fmt.Errorf("signal %s", sig))
			log.Info("stopping: signal received", zap.String("signal", sig.String()))
		case syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH:
			sup.broadcast("S " + strconv.Itoa(int(sig)))
			log.Debug("signal forwarded to the program's process group", zap.String("signal", sig.String()))
		case syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU:
			// Stop the program trees first, then solo: a stopped solo must
			// never leave its program running unsupervised. While solo is
			// stopped the keepers still stop their trees at the renew
			// deadline, before the lease can pass.
			sup.broadcast("Z")
			_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		case syscall.SIGCONT:
			sup.broadcast("C")
			log.Info("continued", zap.String("signal", sig.String()))
		}
	}
}
