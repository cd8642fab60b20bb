package fence

import (
	"database/sql"
	"fmt"
	"reflect"
	"strings"
)

// Dialect is the SQL flavour of a database: it decides the placeholder style
// and how Check holds the term until commit.
type Dialect int

const (
	// Detect finds the dialect from the type of db.Driver(). It is the
	// default.
	Detect Dialect = iota
	// SQLite is SQLite 3.24 or later: ? placeholders; Check takes the
	// database write lock.
	SQLite
	// Postgres is PostgreSQL 9.5 or later: $n placeholders; Check locks the
	// fence row FOR SHARE.
	Postgres
)

// String returns the dialect's name.
func (d Dialect) String() string {
	switch d {
	case Detect:
		return "detect"
	case SQLite:
		return "sqlite"
	case Postgres:
		return "postgres"
	default:
		return fmt.Sprintf("Dialect(%d)", int(d))
	}
}

// DetectDialect returns the dialect of db from the package path of its
// driver's type. It knows modernc.org/sqlite, github.com/mattn/go-sqlite3,
// github.com/jackc/pgx and github.com/lib/pq (and, loosely, any driver whose
// package path names sqlite, pgx or postgres); for others pass WithDialect.
func DetectDialect(db *sql.DB) (Dialect, error) {
	if db == nil {
		return Detect, fmt.Errorf("fence: nil db")
	}
	t := reflect.TypeOf(db.Driver())
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	pkg := strings.ToLower(t.PkgPath())
	switch {
	case strings.Contains(pkg, "sqlite"):
		return SQLite, nil
	case strings.Contains(pkg, "pgx"), strings.Contains(pkg, "lib/pq"),
		strings.Contains(pkg, "postgres"):
		return Postgres, nil
	}
	return Detect, fmt.Errorf("fence: detect dialect: unknown driver %s (package %q); use WithDialect",
		reflect.TypeOf(db.Driver()), t.PkgPath())
}

// queries holds the statements of one dialect and table.
type queries struct {
	create string
	claim  string
	load   string
	// check runs first in a fenced transaction. For SQLite it is an UPDATE
	// whose rows affected tell the result; for PostgreSQL a SELECT ... FOR
	// SHARE returning the stored term.
	check string
}

// newQueries builds the statements for dialect d on table.
func newQueries(d Dialect, table string) queries {
	// The upsert's WHERE is what refuses a lower term. Both dialects report
	// one row affected when the row is inserted or updated and zero when the
	// WHERE is false, which is how Claim tells acceptance from refusal.
	//
	// On PostgreSQL, at READ COMMITTED (autocommit, or the short
	// transaction Claim opens to set lock_timeout), ON CONFLICT DO UPDATE
	// locks the conflicting row and evaluates the WHERE against its latest
	// committed version, waiting for concurrent claimers and for checked
	// transactions holding FOR SHARE; two inserts of a fresh row are settled
	// by the speculative insertion, so neither fails with a unique violation.
	// On SQLite the statement runs under the database write lock.
	const claim = `INSERT INTO %[1]s AS f (election, term, updated_at) VALUES (%[2]s, %[3]s, CURRENT_TIMESTAMP)
ON CONFLICT (election) DO UPDATE SET term = excluded.term, updated_at = excluded.updated_at
WHERE f.term <= excluded.term`
	switch d {
	case Postgres:
		return queries{
			create: fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	election TEXT PRIMARY KEY,
	term BIGINT NOT NULL,
	updated_at TIMESTAMPTZ NOT NULL DEFAULT CURRENT_TIMESTAMP
)`, table),
			claim: fmt.Sprintf(claim, table, "$1", "$2"),
			load:  fmt.Sprintf(`SELECT term FROM %s WHERE election = $1`, table),
			// FOR SHARE conflicts with the FOR NO KEY UPDATE lock that
			// Claim's upsert takes on the row, and is held until the
			// transaction ends: a Claim of a higher term therefore waits
			// until this transaction has committed or rolled back. If a
			// Claim is in progress when we lock, READ COMMITTED makes us
			// wait for it and then return the row's new version, so we see
			// the new term and refuse. Share locks do not conflict with
			// each other, so the leader's own transactions run in parallel.
			check: fmt.Sprintf(`SELECT term FROM %s WHERE election = $1 FOR SHARE`, table),
		}
	default:
		return queries{
			create: fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	election TEXT PRIMARY KEY,
	term BIGINT NOT NULL,
	updated_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP
)`, table),
			claim: fmt.Sprintf(claim, table, "?", "?"),
			load:  fmt.Sprintf(`SELECT term FROM %s WHERE election = ?`, table),
			// SQLite has one writer at a time. Making the check a write
			// takes the database write lock at the check and keeps it until
			// the transaction ends, so no Claim can commit in between. (A
			// plain SELECT would only take a read snapshot: a Claim could
			// commit right after it.) The no-op UPDATE counts as one row
			// changed when the stored term equals ours.
			check: fmt.Sprintf(`UPDATE %s SET term = term WHERE election = ? AND term = ?`, table),
		}
	}
}
