package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
)

func runCommand(args []string, stdout, stderr io.Writer, env []string) error {
	fs := flag.NewFlagSet("solo run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c common
	c.register(fs, true)
	restart := fs.String("restart", string(worker.RestartAlways), "when PROGRAM exits on its own: always, on-failure or never")
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
	if !dashes && len(cfg.Jobs) == 0 {
		return usageErr("nothing to run: give a program after -- or list jobs in the configuration")
	}
	for i, j := range cfg.Jobs {
		if !dashes && len(j.Command) == 0 {
			return usageErr("jobs[%d].command: must not be empty (job %q)", i, j.Name)
		}
	}
	log, err := newLogger(cfg.Log, stderr)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	client, err := connect(ctx, cfg.Redis.URL, 5*time.Second)
	if err != nil {
		return err
	}
	defer client.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := worker.NewMetrics(reg)
	if err != nil {
		return err
	}
	lc := cfg.LeaderConfig()
	e, err := leader.New(client, lc, leader.WithLogger(log), leader.WithMetrics(metrics.Elector(lc.Name)))
	if err != nil {
		return usageErr("%w", err)
	}
	w, err := worker.New(e, worker.WithLogger(log), worker.WithMetrics(metrics),
		worker.WithPolicy(cfg.Worker), worker.WithMode(cfg.Election.Mode))
	if err != nil {
		return usageErr("%w", err)
	}
	base := program{
		env:       env,
		election:  lc.Name,
		id:        e.ID(),
		killAfter: e.Config().StopBudget() * 3 / 4,
		stdout:    stdout,
		stderr:    stderr,
		log:       log.Named("program"),
	}
	if dashes {
		p := base
		p.argv = argv
		if err := w.Pull(filepath.Base(argv[0]), p.run, worker.WithRestart(r)); err != nil {
			return usageErr("%w", err)
		}
	}
	for _, j := range cfg.Jobs {
		if dashes {
			break
		}
		p := base
		p.argv = j.Command
		p.log = base.log.With(zap.String("job", j.Name))
		if j.Schedule != "" {
			err = w.Cron(j.Name, j.Schedule, p.run, worker.WithMisfire(j.Misfire))
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
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
			<-served
		}()
	}
	log.Info("solo running", zap.String("election", lc.Name), zap.String("id", e.ID()),
		zap.String("mode", string(cfg.Election.Mode)), zap.String("version", version))
	if err := w.Run(ctx); err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}
