// Command cron-report runs a cron job on exactly one instance and writes one
// row per tick into SQLite, fenced by the leadership term. It shows the two
// cron guarantees of a failover: no tick runs twice (the worker records each
// tick in Redis, fenced, before running it) and a tick that fell into the gap
// between two leaders follows the job's misfire policy: skip it, or run it
// once, late, on the new leader.
//
//	cron-report -db report.db -misfire run-once
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/fence"
	"github.com/solo-run/solo/leader/redisurl"
	"github.com/solo-run/solo/worker"
)

// jobName names the cron job in logs, metrics and Redis.
const jobName = "report"

// createTicks creates the table the job writes: one row per tick, so a tick
// that ran twice would violate the primary key.
const createTicks = `CREATE TABLE IF NOT EXISTS ticks (
	tick TEXT PRIMARY KEY, -- the scheduled time, RFC 3339, UTC
	term INTEGER NOT NULL, -- the fencing term of the leader that wrote it
	instance TEXT NOT NULL -- that leader's candidate ID
)`

// options are the command-line flags.
type options struct {
	redisURL string
	dbPath   string
	name     string
	id       string
	schedule string
	misfire  worker.Misfire
	ttl      time.Duration
	renew    time.Duration
	deadline time.Duration
}

func main() {
	var o options
	var misfire string
	flag.StringVar(&o.redisURL, "redis", "redis://127.0.0.1:6379/0", "Redis URL of the election")
	flag.StringVar(&o.dbPath, "db", "cron-report.db", "SQLite database file")
	flag.StringVar(&o.name, "name", "cron-report", "election name (also the fence's)")
	flag.StringVar(&o.id, "id", "", "candidate ID; the elector appends a random part (default HOST-PID)")
	flag.StringVar(&o.schedule, "schedule", "@every 2s", `cron spec: "@every 2s", "*/2 * * * * *" (seconds first), "0 3 * * *"`)
	flag.StringVar(&misfire, "misfire", "skip", "what to do about ticks missed during a failover: skip or run-once")
	flag.DurationVar(&o.ttl, "ttl", leader.DefaultTTL, "lease TTL")
	flag.DurationVar(&o.renew, "renew", 0, "renew interval (default TTL/3)")
	flag.DurationVar(&o.deadline, "deadline", 0, "renew deadline (default 2/3 of TTL)")
	flag.Parse()
	o.misfire = worker.Misfire(misfire)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cron-report:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	if o.misfire != worker.MisfireSkip && o.misfire != worker.MisfireRunOnce {
		return fmt.Errorf("-misfire %q: want skip or run-once", o.misfire)
	}
	log, err := newLogger()
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	// WAL lets readers (such as `sqlite3 report.db 'select * from ticks'`)
	// work while the leader writes; busy_timeout makes writers queue.
	db, err := sql.Open("sqlite", "file:"+o.dbPath+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		return err
	}
	defer db.Close()
	g, err := fence.New(db)
	if err != nil {
		return err
	}
	if err := g.EnsureTable(ctx); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, createTicks); err != nil {
		return fmt.Errorf("create ticks: %w", err)
	}

	client, err := redisurl.NewClient(o.redisURL)
	if err != nil {
		return err
	}
	defer client.Close()
	cfg := leader.Config{Name: o.name, ID: o.id, TTL: o.ttl, RenewInterval: o.renew, RenewDeadline: o.deadline}
	e, err := leader.New(client, cfg, leader.WithLogger(log))
	if err != nil {
		return err
	}
	w, err := worker.New(e, worker.WithLogger(log))
	if err != nil {
		return err
	}
	r := &reporter{elector: e, guard: g, log: log.Named(jobName)}
	if err := w.Cron(jobName, o.schedule, r.report, worker.WithMisfire(o.misfire)); err != nil {
		return err
	}
	log.Info("cron-report started", zap.String("id", e.ID()), zap.String("schedule", o.schedule),
		zap.String("misfire", string(o.misfire)), zap.String("db", o.dbPath))
	return w.Run(ctx)
}

// reporter is the cron job: one fenced row per tick.
type reporter struct {
	elector *leader.Elector
	guard   *fence.Guard
	log     *zap.Logger
}

// report runs once per tick, on the leader only.
func (r *reporter) report(ctx context.Context) error {
	term, _ := leader.TermFrom(ctx)
	tick, err := r.tick(ctx)
	if err != nil {
		return err
	}
	log := r.log.With(zap.Uint64("term", term), zap.Time("tick", tick))
	// The job's context carries the fencing token (election, term, holder):
	// the first write of a term claims it, and from then on the database
	// refuses every write of an older term, whatever its leader believes.
	err = r.guard.Do(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO ticks (tick, term, instance) VALUES (?, ?, ?)`,
			tick.UTC().Format(time.RFC3339), int64(term), r.elector.ID())
		return err
	})
	if errors.Is(err, fence.ErrStaleTerm) {
		// A newer term has claimed the database: this instance no longer
		// leads, whatever it believes. The worker logs the error.
		return fmt.Errorf("stale write refused: %w", err)
	}
	if err != nil {
		return err
	}
	log.Info("tick written")
	return nil
}

// tick returns the scheduled time this run is for: worker.TickFrom gives
// the tick the worker recorded (fenced by the term) before running the job,
// so a late run (misfire run-once) is stored under the missed tick, not
// under the time it runs at.
func (r *reporter) tick(ctx context.Context) (time.Time, error) {
	t, ok := worker.TickFrom(ctx)
	if !ok {
		return time.Time{}, errors.New("not a cron run: no tick in the context")
	}
	return t, nil
}

// newLogger logs JSON lines to stderr, with readable timestamps.
func newLogger() (*zap.Logger, error) {
	zc := zap.NewProductionConfig()
	zc.EncoderConfig.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	return zc.Build()
}
