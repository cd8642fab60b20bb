package main

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/solo-run/solo/cmd/solo/internal/config"
	"github.com/solo-run/solo/worker"
	"github.com/solo-run/solo/worker/workerprom"
)

// runSpread is `solo run` in election.mode spread: the configured jobs,
// each an election of its own (NAME.JOB), spread over the live instances
// of the group election.name (worker.Spread). Every job's program gets its
// own election, holder ID and term (SOLO_ELECTION, SOLO_ID, SOLO_TERM) and
// its keeper watches its own lease. It returns when ctx ends, after every
// program tree is gone.
func runSpread(ctx context.Context, cfg config.Config, client redis.UniversalClient, reg *prometheus.Registry,
	log *zap.Logger, wopts []worker.Option, base program, dashes bool) error {
	if dashes {
		return usageErr("election.mode spread runs the jobs of the configuration: give no program after --")
	}
	s, err := worker.NewSpread(client, cfg.LeaderConfig(), cfg.Spread, wopts...)
	if err != nil {
		return usageErr("%w", err)
	}
	lc, _ := s.Config()
	base.poll = pollInterval(lc)
	base.renewDeadline, base.renewInterval = lc.RenewDeadline, lc.RenewInterval
	for _, j := range cfg.Jobs {
		p := base
		p.argv = j.Command
		p.job = j.Name
		if len(cfg.Jobs) > 1 {
			p.prefix = "[" + j.Name + "] " // as runcmd: several jobs share solo's output
		}
		p.log = base.log.With(zap.String("job", j.Name))
		run := func(jctx context.Context) error {
			e, ok := worker.ElectorFrom(jctx)
			if !ok {
				return errors.New("spread job without its elector") // cannot happen under a Spread
			}
			q := p
			q.election, q.id, q.status = e.Config().Name, e.ID(), e.Status
			return q.run(jctx)
		}
		if j.Schedule != "" {
			err = s.Cron(j.Name, j.Spec(), run, worker.WithMisfire(j.Misfire))
		} else {
			err = s.Pull(j.Name, run, worker.WithRestart(j.Restart))
		}
		if err != nil {
			return usageErr("%w", err)
		}
	}
	if cfg.HTTP.Addr != "" {
		_, stop, err := serveHTTP(cfg.HTTP.Addr, workerprom.Handler(s.Handler(), reg), log)
		if err != nil {
			return err
		}
		defer stop()
	}
	log.Info("solo running", zap.String("group", lc.Name), zap.String("member", s.Member()),
		zap.String("mode", string(worker.ModeSpread)), zap.Int("jobs", len(cfg.Jobs)), zap.String("version", soloVersion()), zap.Int("protocol", soloProtocol()))
	// A refusal by Redis does not stop solo: as runCommand's.
	err = s.Run(ctx)
	// Never exit while a program tree lives.
	base.sup.wait()
	if err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}
