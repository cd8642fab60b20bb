package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/solo-run/solo/cmd/solo/internal/config"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
	"github.com/solo-run/solo/worker/workerprom"
)

// openFence opens the fence of fence.dsn, if any: the worker claims every
// term in it before the program starts, with the term and holder the
// program gets as SOLO_TERM and SOLO_ID; the program's own fenced writes
// then refuse a stale leader (docs/design.md, "The fence").
func (r *runState) openFence() error {
	if r.cfg.Fence.DSN == "" {
		return nil
	}
	guard, closeDB, err := openFence(r.ctx, r.cfg.Fence)
	if err != nil {
		return err
	}
	r.onClose(closeDB)
	r.wopts = append(r.wopts, worker.WithFence(guard))
	r.fenceTable = guard.Table()
	return nil
}

// program is what every program of this solo run shares; the election's
// fields are set by build, or per job under spread.
func (r *runState) program() program {
	return program{env: programEnv(r.env, r.passEnv), fenceTable: r.fenceTable,
		killAfter: r.killAfter, stdout: r.stdout, stderr: r.stderr, sup: r.sup, log: r.log.Named("program")}
}

// pollInterval is how often a keeper reads its lease's status: a quarter
// of the shorter of renew_interval and the renewal's budget, within
// [10ms, 250ms].
func pollInterval(lc leader.Config) time.Duration {
	return min(max(min(lc.RenewInterval, lc.RenewDeadline-lc.RenewInterval)/4, 10*time.Millisecond), 250*time.Millisecond)
}

// build makes the worker, registers the program after -- or the
// configuration's jobs, and starts the HTTP server of http.addr.
func (r *runState) build() error {
	w, err := worker.New(r.elector, r.wopts...)
	if err != nil {
		return usageErr("%w", err)
	}
	r.w = w
	base := r.program()
	base.election, base.id, base.status = r.lc.Name, r.elector.ID(), r.elector.Status
	base.renewDeadline, base.renewInterval, base.poll = r.lc.RenewDeadline, r.lc.RenewInterval, pollInterval(r.lc)
	r.ended.Store(-1)
	if r.dashes {
		err = r.addProgram(base)
	} else {
		err = r.addJobs(base)
	}
	if err != nil {
		return err
	}
	if r.cfg.HTTP.Addr == "" {
		return nil
	}
	addr, stop, err := serveHTTP(r.cfg.HTTP.Addr, workerprom.Handler(worker.Handler(w), r.reg), r.log)
	if err != nil {
		return err
	}
	r.log.Info("http listening", zap.String("addr", addr.String()))
	r.onClose(stop)
	return nil
}

// addProgram registers the program given after -- as a pull job. Under
// --once, or a restart policy that lets it end for good, its end stops
// solo run (cancel with errProgramEnded), recording its code in ended.
func (r *runState) addProgram(base program) error {
	p := base
	p.argv = r.argv
	p.job = filepath.Base(r.argv[0])
	job := p.run
	if r.once {
		// One term at most: however the program's run ends, solo exits
		// (a signal to solo: 0, as always; a term lost under the
		// program: 1).
		job = func(jctx context.Context) error {
			err := p.run(jctx)
			if r.ctx.Err() != nil {
				return err
			}
			code := exitCode(err)
			if jctx.Err() != nil && code == 0 {
				code = exitError // stopped: the term ended under it
			}
			r.ended.Store(int64(code))
			r.cancel(errProgramEnded)
			return err
		}
	} else if r.restart != worker.RestartAlways {
		// As consul lock does: a program that ended for good leaves
		// nothing to lead for. Cancelling Run releases the lease (the
		// tree is gone already) and solo exits with the program's code,
		// instead of holding the lease with nothing running.
		job = func(jctx context.Context) error {
			err := p.run(jctx)
			if jctx.Err() != nil || (r.restart == worker.RestartOnFailure && err != nil) {
				return err // the term ended, or the policy restarts it
			}
			r.ended.Store(int64(exitCode(err)))
			r.cancel(errProgramEnded)
			return err
		}
	}
	if err := r.w.Pull(p.job, job, worker.WithRestart(r.restart)); err != nil {
		return usageErr("%w", err)
	}
	return nil
}

// errProgramEnded stops solo run when its program ended and is not
// restarted.
var errProgramEnded = errors.New("program ended and is not restarted")

// addJobs registers the configuration's jobs: cron jobs and pull jobs.
func (r *runState) addJobs(base program) error {
	for _, j := range r.cfg.Jobs {
		p := base
		p.argv = j.Command
		p.job = j.Name
		if len(r.cfg.Jobs) > 1 {
			// Several jobs share solo's stdout and stderr: prefix each
			// line with its job. One job's output is passed untouched.
			p.prefix = "[" + j.Name + "] "
		}
		p.log = base.log.With(zap.String("job", j.Name))
		var err error
		if j.Schedule != "" {
			err = r.w.Cron(j.Name, j.Spec(), p.run, worker.WithMisfire(j.Misfire))
		} else {
			err = r.w.Pull(j.Name, p.run, worker.WithRestart(j.Restart))
		}
		if err != nil {
			return usageErr("%w", err)
		}
	}
	return nil
}

// serveHTTP serves h on addr until stop, which shuts the server down
// within config.HTTPShutdownTimeout and waits for it.
func serveHTTP(addr string, h http.Handler, log *zap.Logger) (net.Addr, func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("http listen on %s: %w", addr, err)
	}
	srv := worker.NewHTTPServer(h)
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server stopped", zap.Error(err))
		}
	}()
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), config.HTTPShutdownTimeout)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-served
	}
	return ln.Addr(), stop, nil
}
