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
	// Postgres is PostgreSQL 9.6 or later: $n placeholders; Check takes
	// the election's advisory lock shared (Claim takes it exclusively), then
	// locks the fence row FOR SHARE.
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
	// hasHolder counts the table's holder columns (0 or 1): tables created
	// before the holder was recorded lack it, and addHolder adds it.
	hasHolder string
	addHolder string
	claim     string
	load      string
	// check runs in a fenced transaction. For SQLite it is an UPDATE whose
	// rows affected tell the result; for PostgreSQL a SELECT ... FOR SHARE
	// returning the stored term and holder, after lockShared.
	check string
	// lockShared and lockExclusive (PostgreSQL only) take the election's
	// transaction-level advisory lock, shared in Check and exclusive in
	// Claim, after setting the Guard's timeouts for the transaction; each
	// returns text columns, the first of which is lock_timeout as it was
	// (or '' when the Guard sets no lock timeout).
	lockShared    string
	lockExclusive string
	// lockCols is how many columns lockShared and lockExclusive return.
	lockCols int
}

// advisoryKey is the PostgreSQL advisory lock key of an election: the fence
// table's OID and the hash of the election's name (placeholder $1). Every
// client of one table computes the same key, however it spells the table
// (the OID resolves schema and case); elections whose names collide on the
// hash merely queue behind each other.
func advisoryKey(table string) string {
	return fmt.Sprintf(`'%s'::regclass::oid::integer, hashtext($1)`, table)
}

// newQueries builds the statements for dialect d on table. lockTimeoutMS and
// idleTimeoutMS are the Guard's timeouts in milliseconds, "" for none.
func newQueries(d Dialect, table, lockTimeoutMS, idleTimeoutMS string) queries {
	if d == Postgres {
		return postgresQueries(table, lockTimeoutMS, idleTimeoutMS)
	}
	return sqliteQueries(table)
}

// createSQL creates the table; the second verb is the type of updated_at.
const createSQL = `CREATE TABLE IF NOT EXISTS %s (
	election TEXT PRIMARY KEY,
	term BIGINT NOT NULL,
	holder TEXT,
	updated_at %s NOT NULL DEFAULT CURRENT_TIMESTAMP
)`

// The upsert's WHERE is what refuses a lower term: it updates only to a
// higher term. Both dialects report one row affected when the row is
// inserted or updated and zero when the WHERE is false; Claim then reads
// the row (in the same transaction) to tell a re-claim by the same holder
// (accepted, nothing changed) from a stale term or another holder of the
// same term (refused).
//
// On PostgreSQL it runs at READ COMMITTED, whatever the server's default,
// after Claim took the election's advisory lock exclusively: claims of one
// election run one at a time and each sees the latest committed row; two
// inserts of a fresh row cannot race. On SQLite the statement runs under
// the database write lock.
const claimSQL = `INSERT INTO %[1]s AS f (election, term, holder, updated_at) VALUES (%[2]s, %[3]s, %[4]s, CURRENT_TIMESTAMP)
ON CONFLICT (election) DO UPDATE SET term = excluded.term, holder = excluded.holder, updated_at = excluded.updated_at
WHERE f.term < excluded.term`

// postgresQueries are the statements on PostgreSQL; the timeouts are in
// milliseconds, "" for none.
func postgresQueries(table, lockTimeoutMS, idleTimeoutMS string) queries {
	// The settings come first in the target list, which PostgreSQL
	// evaluates in order: the lock waits under the new lock_timeout.
	var set []string
	if lockTimeoutMS != "" {
		set = append(set, `current_setting('lock_timeout')`,
			fmt.Sprintf(`set_config('lock_timeout', '%s', true)`, lockTimeoutMS))
	} else {
		set = append(set, `''`)
	}
	if idleTimeoutMS != "" {
		set = append(set, fmt.Sprintf(`set_config('idle_in_transaction_session_timeout', '%s', true)`, idleTimeoutMS))
	}
	lock := func(fn string) string {
		return fmt.Sprintf(`SELECT %s, %s(%s)::text`, strings.Join(set, ", "), fn, advisoryKey(table))
	}
	return queries{
		create:    fmt.Sprintf(createSQL, table, "TIMESTAMPTZ"),
		hasHolder: fmt.Sprintf(`SELECT count(*) FROM pg_attribute WHERE attrelid = '%s'::regclass AND attname = 'holder' AND NOT attisdropped`, table),
		addHolder: fmt.Sprintf(`ALTER TABLE %s ADD COLUMN IF NOT EXISTS holder TEXT`, table),
		claim:     fmt.Sprintf(claimSQL, table, "$1", "$2", "$3"),
		load:      fmt.Sprintf(`SELECT term, holder FROM %s WHERE election = $1`, table),
		// Advisory locks queue in arrival order: a Check that comes
		// after a waiting Claim waits behind it, so a Claim waits only
		// for the transactions that had passed Check when it arrived.
		// (Row locks do not queue so: a FOR SHARE request skips a
		// waiting exclusive one while only share locks hold the row,
		// and a leader overlapping its transactions held a Claim off
		// for as long as it liked.) Shared advisory locks do not
		// conflict with each other: the leader's own transactions run
		// in parallel.
		lockShared:    lock("pg_advisory_xact_lock_shared"),
		lockExclusive: lock("pg_advisory_xact_lock"),
		lockCols:      len(set) + 1,
		// Read after the advisory lock: at READ COMMITTED the statement
		// sees every Claim committed before the lock was granted. At
		// REPEATABLE READ or SERIALIZABLE the transaction's snapshot may
		// predate such a Claim (it was taken by the transaction's first
		// statement); FOR SHARE then fails with a serialization failure
		// (the row changed since the snapshot), which Check reports as
		// a stale term.
		check: fmt.Sprintf(`SELECT term, holder FROM %s WHERE election = $1 FOR SHARE`, table),
	}
}

// sqliteQueries are the statements on SQLite.
func sqliteQueries(table string) queries {
	schema, name := "main", table
	if i := strings.IndexByte(table, '.'); i >= 0 {
		schema, name = table[:i], table[i+1:]
	}
	return queries{
		create:    fmt.Sprintf(createSQL, table, "TEXT"),
		hasHolder: fmt.Sprintf(`SELECT count(*) FROM pragma_table_info('%s', '%s') WHERE name = 'holder'`, name, schema),
		addHolder: fmt.Sprintf(`ALTER TABLE %s ADD COLUMN holder TEXT`, table),
		claim:     fmt.Sprintf(claimSQL, table, "?", "?", "?"),
		load:      fmt.Sprintf(`SELECT term, holder FROM %s WHERE election = ?`, table),
		// SQLite has one writer at a time. Making the check a write
		// takes the database write lock at the check and keeps it until
		// the transaction ends, so no Claim can commit in between. (A
		// plain SELECT would only take a read snapshot: a Claim could
		// commit right after it.) The no-op UPDATE counts as one row
		// changed when the stored term and holder equal ours. SQLite's
		// lock queue is the busy handler's retry loop, not a queue: a
		// Claim competes with the leader's next transactions for the
		// write lock, and wins it as soon as none is open.
		check: fmt.Sprintf(`UPDATE %s SET term = term WHERE election = ? AND term = ? AND holder = ?`, table),
	}
}
