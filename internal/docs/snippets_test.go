package docs_test

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/fence"
	"github.com/solo-run/solo/leader/lock"
	"github.com/solo-run/solo/worker"
	"github.com/solo-run/solo/worker/workerfx"
	"github.com/solo-run/solo/worker/workerprom"
)

// The docs' fragments (README.md, docs/library.md), each between a
// "// README:NAME" line and a "// README:end" line: TestDocs_EveryGoSnippetRuns finds every ```go
// block of the docs here (or in a file it names), and the tests in
// snippets_run_test.go run each fragment against a real redis-server and
// SQLite.

// startSnippet is README's library start; consume is the job.
func startSnippet(ctx context.Context, client redis.UniversalClient, consume func(context.Context, uint64) error) error {
	// README:start
	e, err := leader.New(client, leader.Config{Name: "orders-sync"})
	if err != nil {
		return err
	}
	// Run campaigns until ctx ends, calling fn for every term this instance wins.
	return e.Run(ctx, func(ctx context.Context) error {
		term, _ := leader.TermFrom(ctx) // the fencing term: the fence refuses lower ones
		return consume(ctx, term)       // ctx is cancelled before the lease can pass on
	})
	// README:end
}

// fxSnippet is docs/library.md's fx wiring.
func fxSnippet(newRedisClient, newLogger, newDB, newGuard, NewConsumeOrders any) *fx.App {
	// README:fx
	app := fx.New(
		fx.Provide(newRedisClient, newLogger, newDB),        // redis.UniversalClient, *zap.Logger, *sql.DB
		fx.Provide(newGuard),                                // *fence.Guard: the worker claims each term in it, jobs take it
		workerfx.Module(leader.Config{Name: "orders-sync"}), // the app owns the tunables
		fx.Provide(workerfx.AsJob(NewConsumeOrders)),        // func(*fence.Guard, *zap.Logger) *ConsumeOrders
	)
	// README:end
	return app
}

// ConsumeOrders is the fx snippet's job.
type ConsumeOrders struct {
	guard *fence.Guard
	log   *zap.Logger
}

func (j *ConsumeOrders) Name() string { return "consume-orders" }

// README:fxjob
// Run is the job: its context carries the term and the fencing token.
func (j *ConsumeOrders) Run(ctx context.Context) error {
	err := j.guard.Do(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO orders (note) VALUES ('consumed')")
		return err
	}) // fence.ErrStaleTerm once a newer leader has claimed
	if err != nil {
		return err
	}
	<-ctx.Done() // a pull job runs as long as this instance leads
	return nil
}

// README:end

// spreadSnippet is docs/library.md's spread snippet.
func spreadSnippet(ctx context.Context, client redis.UniversalClient, log *zap.Logger, metrics *workerprom.Metrics, guard *fence.Guard,
	consumeRefunds func(context.Context) error, consumeOrders func(context.Context, int) error) error {
	// README:spread
	s, err := worker.NewSpread(client, leader.Config{Name: "orders-svc"}, worker.SpreadConfig{},
		worker.WithLogger(log), worker.WithMetrics(metrics), worker.WithFence(guard))
	if err != nil {
		return err
	}
	_ = s.Pull("refunds", consumeRefunds)
	_ = s.Sharded("orders", 64, func(ctx context.Context, shard int) error {
		return consumeOrders(ctx, shard) // shard also in worker.ShardFrom(ctx); guard.Do(ctx, fn) fences by the shard's term
	})
	return s.Run(ctx) // until ctx ends: leave the group, drain, release
	// README:end
}

// lockSnippet is docs/library.md's lock snippet.
func lockSnippet(ctx context.Context, rdb redis.UniversalClient, guard *fence.Guard) error {
	// README:lock
	c, err := lock.NewClient(rdb) // one per process: it owns one pub/sub connection
	if err != nil {
		return err
	}
	defer c.Close()

	m, err := c.Mutex("account-42")
	if err != nil {
		return err // bad name or timings: names the field and value
	}
	h, err := m.LockTimeout(ctx, 5*time.Second) // or Lock(ctx), or TryLock(ctx) → lock.ErrNotObtained
	if err != nil {
		return err
	}
	defer h.Unlock(context.Background())

	// h.Context() is cancelled before the lock can pass to anyone else
	// (ErrRenewDeadline, ErrLockLost): stop when it is done. It carries the
	// hold's fencing token (h.Token(): lock:account-42, the term, the
	// holder): the first write claims the term, a stale holder's are refused.
	return guard.Do(h.Context(), func(tx *sql.Tx) error {
		_, err := tx.ExecContext(h.Context(), "UPDATE accounts SET balance = balance - 10 WHERE id = 42")
		return err
	})
	// README:end
}

// fenceSnippet is docs/library.md's fence snippet; ctx is a job's.
func fenceSnippet(ctx context.Context, db *sql.DB) error {
	// README:fence
	g, err := fence.New(db) // SQLite (modernc) or PostgreSQL (pgx); placeholders handled
	if err != nil {
		return err
	}
	if err := g.EnsureTable(ctx); err != nil { // once, at start-up
		return err
	}
	// ctx is a job's (or a lock hold's): it carries the election, the term
	// and the holder. The first write of a term claims it (worker.WithFence
	// claims before the jobs run); a lower term is refused.
	err = g.Do(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO orders (note) VALUES ('fenced')")
		return err
	})
	if errors.Is(err, fence.ErrStaleTerm) {
		return err // a newer leader has claimed: this instance no longer leads
	}
	// README:end
	return err
}
