package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/solo-run/solo/leader/fence"
)

// schema is the ingest's tables. seq numbers commits in order (SQLite has one
// writer at a time), so the terms of a correct run never decrease along it.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS messages (
		seq INTEGER PRIMARY KEY AUTOINCREMENT,
		msg_id TEXT NOT NULL UNIQUE,  -- stream entry ID: a redelivery is stored once
		n INTEGER NOT NULL,           -- the payload
		term INTEGER NOT NULL,        -- fencing term of the writer
		instance TEXT NOT NULL        -- the writer's candidate ID
	)`,
	// One row per committed batch, even one whose messages were all stored
	// already: the audit trail of who wrote when.
	`CREATE TABLE IF NOT EXISTS batches (
		seq INTEGER PRIMARY KEY AUTOINCREMENT,
		term INTEGER NOT NULL,
		instance TEXT NOT NULL,
		read INTEGER NOT NULL,
		inserted INTEGER NOT NULL,
		first_id TEXT NOT NULL,
		last_id TEXT NOT NULL,
		at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
	)`,
}

// message is one stream entry as the ingest stores it.
type message struct {
	id string
	n  int64
}

// store writes batches of messages into SQLite, fenced by a term and the
// instance's ID (the fence's holder) unless guard is nil (the
// -unsafe-no-fence demonstration).
type store struct {
	db       *sql.DB
	guard    *fence.Guard
	election string
	instance string
}

// openDB opens the SQLite file shared by all instances, which must run on one
// host (SQLite's locks, and so the fence, hold only there). WAL lets readers work
// while the leader writes; busy_timeout makes writers wait for each other
// (and bounds how long a Claim waits for a transaction already checked).
func openDB(path string) (*sql.DB, error) {
	return sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
}

// newStore creates the tables if needed. fenced=false leaves writes unfenced.
func newStore(ctx context.Context, db *sql.DB, election, instance string, fenced bool) (*store, error) {
	s := &store{db: db, election: election, instance: instance}
	// The first statement opens a connection and runs its pragmas.
	if err := execBusy(ctx, db, "SELECT 1"); err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	if fenced {
		g, err := fence.New(db)
		if err != nil {
			return nil, err
		}
		if err := g.EnsureTable(ctx); err != nil {
			return nil, err
		}
		s.guard = g
	}
	for _, q := range schema {
		if err := execBusy(ctx, db, q); err != nil {
			return nil, fmt.Errorf("create tables: %w", err)
		}
	}
	return s, nil
}

// execBusy runs q, again while SQLite answers SQLITE_BUSY for up to 10s: a
// new connection's journal_mode pragma can meet another instance's lock
// before busy_timeout is in force (seen under load in CI: "create tables:
// database is locked (5) (SQLITE_BUSY)").
func execBusy(ctx context.Context, db *sql.DB, q string) error {
	end := time.Now().Add(10 * time.Second)
	for {
		_, err := db.ExecContext(ctx, q)
		if err == nil || !strings.Contains(err.Error(), "SQLITE_BUSY") || time.Now().After(end) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// claim records term as the database's current term: from then on every
// write of an older term is refused. Call it when a term starts, before the
// first write. It returns an error wrapping fence.ErrStaleTerm when a newer
// term has claimed already.
func (s *store) claim(ctx context.Context, term uint64) error {
	if s.guard == nil {
		return nil
	}
	return s.guard.Claim(ctx, s.election, term, s.instance)
}

// write stores msgs in one transaction, each message at most once, and
// returns how many were new. Fenced, it returns an error wrapping
// fence.ErrStaleTerm, and writes nothing, when a newer term has claimed the
// database.
func (s *store) write(ctx context.Context, term uint64, msgs []message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	var inserted int
	fn := func(tx *sql.Tx) error {
		inserted = 0
		stmt, err := tx.PrepareContext(ctx, `INSERT INTO messages (msg_id, n, term, instance) VALUES (?, ?, ?, ?)
			ON CONFLICT (msg_id) DO NOTHING`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for _, m := range msgs {
			res, err := stmt.ExecContext(ctx, m.id, m.n, int64(term), s.instance)
			if err != nil {
				return fmt.Errorf("insert %s: %w", m.id, err)
			}
			if k, err := res.RowsAffected(); err == nil {
				inserted += int(k)
			}
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO batches (term, instance, read, inserted, first_id, last_id) VALUES (?, ?, ?, ?, ?, ?)`,
			int64(term), s.instance, len(msgs), inserted, msgs[0].id, msgs[len(msgs)-1].id)
		return err
	}
	var err error
	if s.guard != nil {
		err = s.guard.Do(ctx, fn) // the term, election and holder travel in ctx
	} else {
		err = unfenced(ctx, s.db, fn)
	}
	if err != nil {
		return 0, err
	}
	return inserted, nil
}

// unfenced runs fn in a plain transaction: what -unsafe-no-fence does
// instead of fence.Guard.Do.
func unfenced(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return errors.Join(err, ignoreDone(tx.Rollback()))
	}
	return tx.Commit()
}

func ignoreDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}

// tableExists reports whether db has the table.
func tableExists(ctx context.Context, db *sql.DB, name string) (bool, error) {
	var n int
	err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`,
		strings.ToLower(name)).Scan(&n)
	return n > 0, err
}
