package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Guard fences the transactions of one database. It is safe for concurrent
// use; it holds no state besides its configuration, so many Guards can share
// one table.
type Guard struct {
	db      *sql.DB
	table   string
	dialect Dialect
	q       queries
	// lockTimeout bounds the lock waits of Claim and Check on PostgreSQL;
	// zero means no bound. idleTimeout is the idle_in_transaction_session_timeout
	// they set; zero leaves the server's.
	lockTimeout time.Duration
	idleTimeout time.Duration
}

// New returns a Guard for db. It does not touch the database; call
// EnsureTable to create the table. It fails on a nil db, a bad table name, or
// a driver whose dialect it cannot detect.
func New(db *sql.DB, opts ...Option) (*Guard, error) {
	if db == nil {
		return nil, errors.New("fence: nil db")
	}
	o := options{table: DefaultTable, dialect: Detect, lockTimeout: DefaultLockTimeout, idleTimeout: DefaultIdleTimeout}
	for _, opt := range opts {
		opt.apply(&o)
	}
	if !identRE.MatchString(o.table) {
		return nil, fmt.Errorf("fence: table name %q: want an identifier or schema.identifier", o.table)
	}
	if o.lockTimeout < 0 {
		return nil, fmt.Errorf("fence: lock timeout %s: must not be negative (zero turns it off)", o.lockTimeout)
	}
	if o.idleTimeout < 0 {
		return nil, fmt.Errorf("fence: idle timeout %s: must not be negative (zero leaves the server's)", o.idleTimeout)
	}
	d := o.dialect
	switch d {
	case Detect:
		var err error
		if d, err = DetectDialect(db); err != nil {
			return nil, err
		}
	case SQLite, Postgres:
	default:
		return nil, fmt.Errorf("fence: unknown dialect %v", d)
	}
	g := &Guard{db: db, table: o.table, dialect: d}
	var lockMS, idleMS string
	if d == Postgres {
		g.lockTimeout, lockMS = millis(o.lockTimeout)
		g.idleTimeout, idleMS = millis(o.idleTimeout)
	}
	g.q = newQueries(d, o.table, lockMS, idleMS)
	return g, nil
}

// Dialect returns the dialect the Guard uses.
func (g *Guard) Dialect() Dialect { return g.dialect }

// Table returns the fence table's name.
func (g *Guard) Table() string { return g.table }

// EnsureTable creates the fence table if it does not exist, and adds the
// holder column to a table created before it was recorded. It is safe to
// call on every start, from several processes at once: when the table is
// as it should be, it only reads the catalog (no ALTER TABLE, whose lock
// would queue behind the leader's open transactions and hold up its next
// ones).
func (g *Guard) EnsureTable(ctx context.Context) error {
	_, err := g.db.ExecContext(ctx, g.q.create)
	if err != nil && ctx.Err() == nil {
		// Two concurrent CREATE TABLE IF NOT EXISTS can collide on
		// PostgreSQL's catalog (a unique violation on pg_type); once the
		// winner has committed, the retry is a no-op.
		_, err = g.db.ExecContext(ctx, g.q.create)
	}
	if err != nil {
		return fmt.Errorf("fence: create table %s: %w", g.table, err)
	}
	has, err := g.hasHolder(ctx)
	if err != nil || has {
		return err
	}
	if _, err := g.db.ExecContext(ctx, g.q.addHolder); err != nil {
		// SQLite has no ADD COLUMN IF NOT EXISTS: a concurrent EnsureTable
		// may have added it first.
		if has, err2 := g.hasHolder(ctx); err2 != nil || !has {
			return fmt.Errorf("fence: add column holder to %s: %w", g.table, err)
		}
	}
	return nil
}

func (g *Guard) hasHolder(ctx context.Context) (bool, error) {
	var n int
	if err := g.db.QueryRowContext(ctx, g.q.hasHolder).Scan(&n); err != nil {
		return false, fmt.Errorf("fence: inspect table %s: %w", g.table, err)
	}
	return n > 0, nil
}

// Claim stores term as the election's current term and holder as its
// holder, unless a higher term is stored; it inserts the row when missing.
// Call it at the start of a term, before the first fenced write. Claiming
// the stored term again with the same holder changes nothing; with another
// holder it returns an error wrapping ErrHolderMismatch, and a term below
// the stored one ErrStaleTerm. It runs in a transaction of its own and
// waits for the transactions that passed Check before it came: on
// PostgreSQL at most the lock timeout, then ErrClaimTimeout (retry). See
// docs/design.md, "The fence".
func (g *Guard) Claim(ctx context.Context, name string, term uint64, holder string) error {
	if err := validate(name, term, holder); err != nil {
		return err
	}
	op := fmt.Sprintf("claim %q term %d", name, term)
	stored, err := g.claim(ctx, name, term, holder)
	if err != nil {
		return g.lockErr(op, err)
	}
	if stored == nil {
		return nil
	}
	return stored.verdict(op, name, term, holder, true)
}

// claim runs the claim in a transaction of its own and returns nil when the
// upsert took, or else the row that refused it, read in the same
// transaction.
func (g *Guard) claim(ctx context.Context, name string, term uint64, holder string) (*row, error) {
	var opts *sql.TxOptions
	if g.dialect == Postgres {
		opts = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	}
	tx, err := g.db.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	if g.dialect == Postgres {
		if _, err := g.lock(ctx, tx, g.q.lockExclusive, name); err != nil {
			return nil, err
		}
	}
	res, err := tx.ExecContext(ctx, g.q.claim, name, int64(term), holder)
	if err != nil {
		return nil, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return nil, fmt.Errorf("rows affected: %w", err)
	}
	var stored *row
	if n == 0 {
		r, ok, err := load(ctx, tx, g.q.load, name)
		switch {
		case err != nil:
			return nil, err
		case !ok:
			return nil, errors.New("refused, then no row found")
		}
		stored = &r
		if stored.refuses(term, holder, true) == nil {
			stored = nil // the same holder claimed the same term again
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	return stored, nil
}

// lock runs one of the advisory lock statements in tx and returns
// lock_timeout as it was before ("" when the Guard sets none).
func (g *Guard) lock(ctx context.Context, tx *sql.Tx, query, name string) (string, error) {
	dest := make([]any, g.q.lockCols)
	var prev string
	dest[0] = &prev
	for i := 1; i < len(dest); i++ {
		dest[i] = new(sql.NullString)
	}
	err := tx.QueryRowContext(ctx, query, name).Scan(dest...)
	return prev, err
}

// sqlStateError is a driver error carrying a SQLSTATE code: pgx's
// *pgconn.PgError, lib/pq's *pq.Error.
type sqlStateError interface {
	error
	SQLState() string
}

// sqlState returns err's SQLSTATE, or "".
func sqlState(err error) string {
	if s, ok := errors.AsType[sqlStateError](err); ok {
		return s.SQLState()
	}
	return ""
}

// lockErr wraps err from op, adding ErrClaimTimeout when PostgreSQL gave up
// waiting for a lock (SQLSTATE 55P03, lock_not_available: lock_timeout).
func (g *Guard) lockErr(op string, err error) error {
	if sqlState(err) == "55P03" {
		return fmt.Errorf("fence: %s: the fence stayed locked past lock_timeout %s: %w: %w", op, g.lockTimeout, ErrClaimTimeout, err)
	}
	return fmt.Errorf("fence: %s: %w", op, err)
}

// Check verifies, inside tx, that term and holder are still the election's
// stored ones, and keeps that true until tx ends: a Claim of a higher term
// cannot commit before tx does. Call it as the first statement of tx, at
// any isolation level. It returns an error wrapping ErrStaleTerm (a higher
// term is stored), ErrHolderMismatch (another holder), ErrNotClaimed (no
// row, or a lower term) or ErrClaimTimeout; on error the caller must roll
// tx back. How each dialect holds it: docs/design.md, "Schema and
// statements".
func (g *Guard) Check(ctx context.Context, tx *sql.Tx, name string, term uint64, holder string) error {
	if err := validate(name, term, holder); err != nil {
		return err
	}
	if tx == nil {
		return errors.New("fence: check: nil tx")
	}
	op := fmt.Sprintf("check %q term %d", name, term)
	if g.dialect == Postgres {
		prev, err := g.lock(ctx, tx, g.q.lockShared, name)
		if err != nil {
			return g.lockErr(op, err)
		}
		r, ok, err := load(ctx, tx, g.q.check, name)
		switch {
		case sqlState(err) == "40001":
			return fmt.Errorf("%w: election %q: offered term %d: the fence row changed after this transaction's snapshot was taken (a Claim committed meanwhile): %w",
				ErrStaleTerm, name, term, err)
		case err != nil:
			return g.lockErr(op, err)
		case !ok:
			return fmt.Errorf("%w: election %q: term %d: no row in %s", ErrNotClaimed, name, term, g.table)
		}
		if err := r.verdict(op, name, term, holder, false); err != nil {
			return err
		}
		if g.lockTimeout > 0 {
			// The rest of the caller's transaction keeps its own setting.
			if _, err := tx.ExecContext(ctx, `SELECT set_config('lock_timeout', $1, true)`, prev); err != nil {
				return fmt.Errorf("fence: %s: restore lock_timeout: %w", op, err)
			}
		}
		return nil
	}
	res, err := tx.ExecContext(ctx, g.q.check, name, int64(term), holder)
	if err != nil {
		return fmt.Errorf("fence: %s: %w", op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("fence: %s: rows affected: %w", op, err)
	}
	if n == 1 {
		return nil
	}
	// We hold the write lock now, so this read is the state that refused us.
	r, ok, err := load(ctx, tx, g.q.load, name)
	switch {
	case err != nil:
		return fmt.Errorf("fence: %s: %w", op, err)
	case !ok:
		return fmt.Errorf("%w: election %q: term %d: no row in %s", ErrNotClaimed, name, term, g.table)
	}
	if err := r.verdict(op, name, term, holder, false); err != nil {
		return err
	}
	return fmt.Errorf("fence: %s: update matched %d rows", op, n)
}

// Begin starts a transaction with opts (nil for the driver's defaults) and
// runs Check in it. On success the caller owns the transaction and must
// commit or roll it back; on error it has been rolled back. It may return
// errors wrapping ErrStaleTerm, ErrHolderMismatch or ErrNotClaimed, as
// Check does.
func (g *Guard) Begin(ctx context.Context, name string, term uint64, holder string, opts *sql.TxOptions) (*sql.Tx, error) {
	if err := validate(name, term, holder); err != nil {
		return nil, err
	}
	tx, err := g.db.BeginTx(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("fence: begin %q term %d: %w", name, term, err)
	}
	if err := g.Check(ctx, tx, name, term, holder); err != nil {
		return nil, rollback(tx, err)
	}
	return tx, nil
}

// Do runs fn in a transaction fenced by the Token that ctx carries (see
// WithToken) and commits it; a term the fence has not seen yet is claimed
// first. fn must not commit or roll back tx. If Check, fn or the commit
// fails, fn panics or ctx is cancelled, the transaction is rolled back.
// fn's error is returned as it is; a refusal wraps ErrStaleTerm or
// ErrHolderMismatch, a ctx without a token ErrNoToken. A write computed
// from reads made before the term's first Do needs the term claimed before
// those reads (see docs/design.md, "The fence").
func (g *Guard) Do(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tok, err := tokenOf(ctx)
	if err != nil {
		return err
	}
	return g.do(ctx, tok.Election, tok.Term, tok.Holder, true, fn)
}

// DoTerm is Do with the election, term and holder given by hand instead of
// a Token in ctx, and no claim: a term the fence has not seen is refused
// with ErrNotClaimed (Claim it first). It serves writes outside a job or a
// hold, such as those of solo run's SOLO_TERM and SOLO_ID.
func (g *Guard) DoTerm(ctx context.Context, name string, term uint64, holder string, fn func(tx *sql.Tx) error) error {
	return g.do(ctx, name, term, holder, false, fn)
}

// do runs fn fenced by term and holder; with claim, a term not claimed yet
// is claimed, then checked again.
func (g *Guard) do(ctx context.Context, name string, term uint64, holder string, claim bool, fn func(tx *sql.Tx) error) error {
	if fn == nil {
		return errors.New("fence: nil func")
	}
	tx, err := g.Begin(ctx, name, term, holder, nil)
	if claim && errors.Is(err, ErrNotClaimed) {
		if err := g.Claim(ctx, name, term, holder); err != nil {
			return err
		}
		tx, err = g.Begin(ctx, name, term, holder, nil)
	}
	if err != nil {
		return err
	}
	// Runs when fn panics; after a commit or an explicit rollback it is a
	// no-op returning sql.ErrTxDone.
	defer func() { _ = tx.Rollback() }()
	if err := fn(tx); err != nil {
		return rollback(tx, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("fence: commit %q term %d: %w", name, term, err)
	}
	return nil
}

// Term returns the term stored for the election. It returns an error
// wrapping ErrNotClaimed when there is no row.
func (g *Guard) Term(ctx context.Context, name string) (uint64, error) {
	term, _, err := g.Stored(ctx, name)
	return term, err
}

// Stored returns the term stored for the election and its holder ("" for a
// row claimed before holders were recorded). It returns an error wrapping
// ErrNotClaimed when there is no row.
func (g *Guard) Stored(ctx context.Context, name string) (term uint64, holder string, err error) {
	if name == "" {
		return 0, "", errors.New("fence: empty election name")
	}
	r, ok, err := load(ctx, g.db, g.q.load, name)
	if err != nil {
		return 0, "", fmt.Errorf("fence: load %q: %w", name, err)
	}
	if !ok {
		return 0, "", fmt.Errorf("%w: election %q: no row in %s", ErrNotClaimed, name, g.table)
	}
	return uint64(r.term), r.holder.String, nil
}
