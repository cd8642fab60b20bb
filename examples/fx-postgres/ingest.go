package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/fence"
)

// schema is the application's tables: the messages stored, one row per
// batch (in commit order, for the check), and the stream position.
const schema = `
CREATE TABLE IF NOT EXISTS messages (
	msg_id TEXT NOT NULL, -- no unique key: a message stored twice would show
	n BIGINT NOT NULL,
	term BIGINT NOT NULL,
	instance TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS batches (
	seq BIGSERIAL PRIMARY KEY,
	term BIGINT NOT NULL,
	instance TEXT NOT NULL,
	size INT NOT NULL
);
CREATE TABLE IF NOT EXISTS positions (
	stream TEXT PRIMARY KEY,
	last_id TEXT NOT NULL
);`

func createTables(ctx context.Context, db *sql.DB) error {
	// Several instances start at once: serialize the CREATEs, which can
	// collide on PostgreSQL's catalog.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext('fx-postgres schema'))`); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, schema); err != nil {
		return fmt.Errorf("create tables: %w", err)
	}
	return tx.Commit()
}

// Ingest is the singleton job: it reads the stream from the stored
// position and stores each batch, with the new position, in one fenced
// transaction.
type Ingest struct {
	rdb   redis.UniversalClient
	db    *sql.DB
	guard *fence.Guard
	log   *zap.Logger
	f     Flags
}

// NewIngest is a plain constructor: fx gives it the guard, the client, the
// pool and the logger. (It could take the module's *leader.Elector too;
// it needs nothing of it.)
func NewIngest(rdb redis.UniversalClient, db *sql.DB, guard *fence.Guard, log *zap.Logger, f Flags) *Ingest {
	return &Ingest{rdb: rdb, db: db, guard: guard, log: log.Named("ingest"), f: f}
}

// Name implements worker.Job.
func (j *Ingest) Name() string { return "ingest" }

// Run implements worker.Job: one term's ingest. Its context carries the
// term and the fencing token, and is cancelled when the term ends.
func (j *Ingest) Run(ctx context.Context) error {
	term, _ := leader.TermFrom(ctx)
	// The holder the term is held under (the elector's ID: -id plus a
	// random part, HOST-PID when -id is not given), as the fence records it.
	tok, _ := fence.TokenFrom(ctx)
	instance := tok.Holder
	log := j.log.With(zap.Uint64("term", term))
	last := "0"
	err := j.db.QueryRowContext(ctx, `SELECT last_id FROM positions WHERE stream = $1`, j.f.Stream).Scan(&last)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	log.Info("ingest started", zap.String("from", last))
	for ctx.Err() == nil {
		// go-redis does not interrupt a blocking read when ctx ends: keep
		// the block short, it bounds how long the job takes to stop.
		res, err := j.rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{j.f.Stream, last}, Count: 100, Block: 200 * time.Millisecond}).Result()
		if errors.Is(err, redis.Nil) || ctx.Err() != nil {
			continue
		}
		if err != nil {
			return err
		}
		msgs := res[0].Messages
		// The whole fenced write: the election, the term and the holder
		// come from ctx. Refused (fence.ErrStaleTerm) once a newer leader
		// claimed, whatever this one believes.
		err = j.guard.Do(ctx, func(tx *sql.Tx) error {
			for _, m := range msgs {
				n, err := strconv.ParseInt(fmt.Sprint(m.Values["n"]), 10, 64)
				if err != nil {
					return fmt.Errorf("message %s: field n: %w", m.ID, err)
				}
				if _, err := tx.ExecContext(ctx, `INSERT INTO messages (msg_id, n, term, instance) VALUES ($1, $2, $3, $4)`,
					m.ID, n, int64(term), instance); err != nil {
					return err
				}
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO batches (term, instance, size) VALUES ($1, $2, $3)`,
				int64(term), instance, len(msgs)); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO positions (stream, last_id) VALUES ($1, $2)
				ON CONFLICT (stream) DO UPDATE SET last_id = excluded.last_id`, j.f.Stream, msgs[len(msgs)-1].ID); err != nil {
				return err
			}
			return sleep(ctx, j.f.Hold) // the job's work, inside the transaction
		})
		if err != nil {
			return err // a refused stale write (fence.ErrStaleTerm) included: the worker logs it
		}
		last = msgs[len(msgs)-1].ID
		log.Info("batch stored", zap.Int("size", len(msgs)), zap.String("last", last))
	}
	return nil
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
