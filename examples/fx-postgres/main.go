// Command fx-postgres is an fx service that consumes a Redis Stream into
// PostgreSQL on exactly one of its instances, each message exactly once,
// behind the fence: workerfx.Module runs the singleton job "ingest"; the job
// takes the *fence.Guard from the graph, like any other dependency, and
// writes each batch and the stream position in one call,
//
//	guard.Do(ctx, func(tx *sql.Tx) error { … })
//
// which takes the election, the term and the holder from the job's
// context: no IDs, no terms by hand. The worker claims every term in the
// fence before the job starts (the graph's guard is its fence), so a
// leader that was paused and woke up after another took over has its
// writes refused, and the next leader resumes from the position the last
// accepted batch stored.
//
//	fx-postgres -redis redis://127.0.0.1:6379/0 -pg postgres://localhost/app -id a   (on every instance)
//	redis-cli XADD orders '*' n 1
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the PostgreSQL driver, as "pgx"
	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/fence"
	"github.com/solo-run/solo/leader/redisurl"
	"github.com/solo-run/solo/worker/workerfx"
)

// Flags are the command-line flags.
type Flags struct {
	RedisURL string
	PgDSN    string
	ID       string
	Stream   string
	TTL      time.Duration
	// Hold is how long each batch's transaction stays open after its
	// inserts: the work a real job does there. The test pauses a leader
	// inside it.
	Hold time.Duration
	// FenceIdle is the guard's idle timeout: the longest a leader frozen
	// inside a fenced transaction holds the next leader off.
	FenceIdle time.Duration
}

func main() {
	var f Flags
	fs := flag.NewFlagSet("fx-postgres", flag.ContinueOnError)
	fs.StringVar(&f.RedisURL, "redis", "redis://127.0.0.1:6379/0", "Redis URL of the stream and the election")
	fs.StringVar(&f.PgDSN, "pg", "postgres://localhost/app", "PostgreSQL URL")
	fs.StringVar(&f.ID, "id", "", "this instance's ID (default host-pid)")
	fs.StringVar(&f.Stream, "stream", "orders", "Redis Stream to consume")
	fs.DurationVar(&f.TTL, "ttl", 10*time.Second, "lease duration")
	fs.DurationVar(&f.Hold, "hold", 0, "time each batch's transaction stays open (a job's work)")
	fs.DurationVar(&f.FenceIdle, "fence-idle", fence.DefaultIdleTimeout, "the fence's idle_in_transaction_session_timeout: how long a leader frozen in a fenced transaction holds the next one off")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if f.TTL <= 0 {
		fmt.Fprintf(os.Stderr, "fx-postgres: -ttl %s: must be positive\n", f.TTL)
		os.Exit(2)
	}
	if f.Hold < 0 {
		fmt.Fprintf(os.Stderr, "fx-postgres: -hold %s: must not be negative\n", f.Hold)
		os.Exit(2)
	}
	app := fx.New(
		fx.Supply(f),
		fx.Provide(newLogger, newRedisClient, newDB, newGuard),
		// The application owns the election's tunables. The module takes
		// the graph's *fence.Guard as its fence: it claims every term in it
		// before the job runs.
		workerfx.Module(leader.Config{Name: "fx-postgres", ID: f.ID, TTL: f.TTL}),
		fx.Provide(workerfx.AsJob(NewIngest)),
		fx.Invoke(func(lc fx.Lifecycle, log *zap.Logger) { // after the worker's start
			lc.Append(fx.StartHook(func() { log.Info("instance started", zap.String("id", f.ID)) }))
		}),
		fx.WithLogger(func(log *zap.Logger) fxevent.Logger {
			l := &fxevent.ZapLogger{Logger: log.Named("fx")}
			l.UseLogLevel(zapcore.DebugLevel)
			return l
		}),
		fx.StopTimeout(f.TTL+5*time.Second),
	)
	app.Run()
	if app.Err() != nil {
		os.Exit(1)
	}
}

// newLogger builds a production (JSON) zap logger.
func newLogger(lc fx.Lifecycle) (*zap.Logger, error) {
	log, err := zap.NewProduction()
	if err != nil {
		return nil, err
	}
	lc.Append(fx.StopHook(func() { _ = log.Sync() }))
	return log, nil
}

// newRedisClient connects to -redis; the worker module consumes the client
// but never creates or closes it.
func newRedisClient(lc fx.Lifecycle, f Flags) (redis.UniversalClient, error) {
	client, err := redisurl.NewClient(f.RedisURL)
	if err != nil {
		return nil, err
	}
	lc.Append(fx.StopHook(client.Close)) // after the worker released the lease
	return client, nil
}

// newDB opens the pool and, at start, creates the tables if missing.
func newDB(lc fx.Lifecycle, f Flags) (*sql.DB, error) {
	db, err := sql.Open("pgx", f.PgDSN)
	if err != nil {
		return nil, fmt.Errorf("-pg: %w", err)
	}
	lc.Append(fx.Hook{
		OnStart: func(ctx context.Context) error { return createTables(ctx, db) },
		OnStop:  func(context.Context) error { return db.Close() },
	})
	return db, nil
}

// newGuard is the fence of the database. Provided as it is, it is both
// the worker's fence (it claims every term) and what jobs take.
func newGuard(lc fx.Lifecycle, db *sql.DB, f Flags) (*fence.Guard, error) {
	// PostgreSQL, detected from the pgx driver; New refuses a negative
	// -fence-idle, naming it.
	g, err := fence.New(db, fence.WithIdleTimeout(f.FenceIdle))
	if err != nil {
		return nil, err
	}
	lc.Append(fx.StartHook(g.EnsureTable))
	return g, nil
}
