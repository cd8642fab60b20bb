package fencetest_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/solo-run/solo/internal/pgtest"
	"github.com/solo-run/solo/leader/fence"
)

// env is one test's database: a Guard on its own fence table and a data
// table that fenced transactions write to.
type env struct {
	dialect fence.Dialect
	db      *sql.DB
	g       *fence.Guard
	writes  string // data table: who TEXT, term BIGINT
}

// tables numbers the tables of tests that share one PostgreSQL database.
var tables atomic.Int64

// forEachBackend runs test against SQLite and PostgreSQL.
func forEachBackend(t *testing.T, test func(t *testing.T, newEnv func(t *testing.T) *env)) {
	t.Run("sqlite", func(t *testing.T) {
		test(t, func(t *testing.T) *env {
			return setup(t, openSQLite(t), fence.DefaultTable, "writes")
		})
	})
	t.Run("postgres", func(t *testing.T) {
		db := pgtest.Start(t).DB(t)
		test(t, func(t *testing.T) *env {
			n := tables.Add(1)
			return setup(t, db, fmt.Sprintf("fence_%d", n), fmt.Sprintf("writes_%d", n))
		})
	})
	// The same suite where the server's default isolation is stricter: the
	// guard must not care (fenced transactions begin with the default).
	for _, level := range isolationLevels[1:] {
		t.Run("postgres-"+strings.ReplaceAll(level, " ", "-"), func(t *testing.T) {
			srv := pgtest.Start(t)
			db := isolatedDB(t, srv, srv.DB(t), level)
			test(t, func(t *testing.T) *env {
				n := tables.Add(1)
				return setup(t, db, fmt.Sprintf("fence_%d", n), fmt.Sprintf("writes_%d", n))
			})
		})
	}
}

func openSQLite(t *testing.T) *sql.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fence.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func setup(t *testing.T, db *sql.DB, table, writes string) *env {
	t.Helper()
	g, err := fence.New(db, fence.WithTable(table))
	if err != nil {
		t.Fatalf("new guard: %v", err)
	}
	if err := g.EnsureTable(ctxT(t)); err != nil {
		t.Fatalf("ensure table: %v", err)
	}
	if _, err := db.ExecContext(ctxT(t), "CREATE TABLE "+writes+" (who TEXT NOT NULL, term BIGINT NOT NULL)"); err != nil {
		t.Fatalf("create %s: %v", writes, err)
	}
	return &env{dialect: g.Dialect(), db: db, g: g, writes: writes}
}

// ctxT bounds a test's database calls so that a deadlock fails instead of
// hanging.
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// ph returns the i-th (1-based) placeholder of the dialect.
func (e *env) ph(i int) string {
	if e.dialect == fence.Postgres {
		return fmt.Sprintf("$%d", i)
	}
	return "?"
}

// insert writes one row of the data table in tx.
func (e *env) insert(ctx context.Context, tx *sql.Tx, who string, term uint64) error {
	_, err := tx.ExecContext(ctx, fmt.Sprintf("INSERT INTO %s (who, term) VALUES (%s, %s)", e.writes, e.ph(1), e.ph(2)), who, int64(term))
	return err
}

// write runs one fenced transaction inserting a row.
func (e *env) write(ctx context.Context, name, who string, term uint64) error {
	return e.g.DoTerm(ctx, name, term, h(term), func(tx *sql.Tx) error { return e.insert(ctx, tx, who, term) })
}

// count returns how many rows who has in the data table.
func (e *env) count(t *testing.T, who string) int {
	t.Helper()
	return e.countWhere(t, "who = "+e.ph(1), who)
}

// countWhere counts the data table's rows matching cond.
func (e *env) countWhere(t *testing.T, cond string, args ...any) int {
	t.Helper()
	var n int
	if err := e.db.QueryRowContext(ctxT(t), "SELECT count(*) FROM "+e.writes+" WHERE "+cond, args...).Scan(&n); err != nil {
		t.Errorf("count: %v", err)
	}
	return n
}

// stored returns the election's stored term.
func (e *env) stored(t *testing.T, name string) uint64 {
	t.Helper()
	term, err := e.g.Term(ctxT(t), name)
	if err != nil {
		t.Fatalf("term %q: %v", name, err)
	}
	return term
}

// mustClaim claims term and fails the test on error.
func (e *env) mustClaim(t *testing.T, name string, term uint64) {
	t.Helper()
	if err := e.g.Claim(ctxT(t), name, term, h(term)); err != nil {
		t.Fatalf("claim %q %d: %v", name, term, err)
	}
}

// h is the holder the tests claim term with: one holder per term, as an
// election hands them out.
func h(term uint64) string { return fmt.Sprintf("holder-%d", term) }
