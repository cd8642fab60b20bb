package main

import (
	"context"
	"errors"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/solo-run/solo/leader/redisurl"
	"github.com/solo-run/solo/worker"
)

// run campaigns and runs the jobs until solo run stops, waits for every
// program tree to end, and returns what solo run exits with.
func (r *runState) run() error {
	r.log.Info("solo running", zap.String("election", r.lc.Name), zap.String("id", r.elector.ID()),
		zap.String("mode", string(r.cfg.Election.Mode)), zap.String("version", soloVersion()),
		zap.Int("protocol", soloProtocol()), zap.Duration("kill_after", r.killAfter))
	// --once and --try watch the first acquire: gaveUp is what solo exits
	// with when it stops campaigning before it ever led.
	var gaveUp atomic.Pointer[error]
	if r.once || r.try > 0 {
		wctx, wstop := context.WithCancel(r.ctx)
		wdone := make(chan struct{})
		go func() {
			defer close(wdone)
			if err, stop := watchAcquire(wctx, r.elector, r.once, r.try, r.lc.Name); stop {
				gaveUp.Store(&err)
				r.log.Info("stopping: lease not acquired", zap.NamedError("why", err))
				r.cancel(errNotAcquired)
			}
		}()
		defer func() { wstop(); <-wdone }()
	}
	// A refusal by Redis (an ACL that lacks a rule, a password rotated on
	// the server first, a certificate that no longer verifies) reaches
	// every instance at once: it does not stop solo. The elector logs it
	// once per episode, counts it and retries every retry_interval; /readyz
	// fails with the fix until it is fixed. Only --once, whose exit code
	// is its report, stops on one, with exit 2.
	var cw *configWatch
	if r.once {
		cw = watchConfig(r.ctx, r.cancel, func() error { return r.elector.Status().ConfigErr }, r.configSig.c)
	}
	err := r.w.Run(r.ctx)
	// Never exit while a program tree lives, whatever Run returned (after
	// ErrStopTimeout the keeper is still killing it, on its own deadline).
	r.sup.wait()
	if cw != nil {
		if cerr := cw.stop(); cerr != nil {
			return usageErr("redis %s: %w", redisurl.Redact(r.cfg.Redis.ClientURL()), cerr)
		}
	}
	return r.result(err, &gaveUp)
}

// result is what solo run exits with once the worker's Run returned err:
// gaveUp is the first acquire's watch's verdict, when it stopped solo.
func (r *runState) result(err error, gaveUp *atomic.Pointer[error]) error {
	if errors.Is(err, worker.ErrGaveUp) {
		// Logged by the worker. Exit if asked; else stay up, campaigning
		// no more, so that /readyz and the metric tell (a supervisor
		// restarting solo would only start the ping-pong again).
		if r.exitOnGiveUp {
			return &codeError{code: exitGaveUp, err: err}
		}
		r.log.Info("not campaigning any more; waiting for a signal to exit")
		<-r.ctx.Done()
		return nil
	}
	if err != nil {
		return err
	}
	code := r.ended.Load()
	if why := gaveUp.Load(); code < 0 && why != nil {
		return *why
	}
	if code >= 0 {
		r.log.Info("program ended and is not restarted: lease released, exiting",
			zap.String("restart", string(r.restart)), zap.Int64("exit_code", code), zap.Bool("child_exit_code", r.childExit))
		if r.childExit && code != 0 {
			return &codeError{code: int(code), err: errQuiet}
		}
		return nil
	}
	r.log.Info("stopped")
	return nil
}
