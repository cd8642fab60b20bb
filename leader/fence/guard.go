package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"time"
)

// DefaultTable is the name of the fence table unless WithTable says
// otherwise.
const DefaultTable = "solo_fence"

// DefaultLockTimeout is how long, on PostgreSQL, Claim and Check wait for
// the fence row's lock unless WithLockTimeout says otherwise.
const DefaultLockTimeout = 5 * time.Second

// Guard fences the transactions of one database. It is safe for concurrent
// use; it holds no state besides its configuration, so many Guards (and the
// package-level functions) can share one table.
type Guard struct {
	db      *sql.DB
	table   string
	dialect Dialect
	q       queries
	// lockTimeout bounds the lock waits of Claim and Check on PostgreSQL;
	// zero means no bound. lockTimeoutMS is the same in milliseconds, as
	// lock_timeout takes it.
	lockTimeout   time.Duration
	lockTimeoutMS string
}

// Option configures a Guard.
type Option interface {
	apply(*options)
}

type options struct {
	table       string
	dialect     Dialect
	lockTimeout time.Duration
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithTable sets the fence table's name: an SQL identifier ([A-Za-z_] then
// [A-Za-z0-9_]), optionally qualified by a schema as schema.table, used
// unquoted (PostgreSQL folds it to lower case). Default: DefaultTable.
func WithTable(name string) Option {
	return optionFunc(func(o *options) { o.table = name })
}

// WithDialect sets the dialect instead of detecting it from the driver.
// Default: Detect.
func WithDialect(d Dialect) Option {
	return optionFunc(func(o *options) { o.dialect = d })
}

// WithLockTimeout bounds, on PostgreSQL, how long Claim waits for
// transactions that passed Check to end, and how long Check waits for a
// Claim in progress: each sets lock_timeout (SET LOCAL) for its statement
// inside its transaction, and returns an error wrapping ErrClaimTimeout
// when it passes. It is rounded up to whole milliseconds; zero turns the
// bound off (only ctx bounds the wait); negative is an error in New.
// SQLite ignores it: there the driver's busy timeout bounds the wait.
// Default: DefaultLockTimeout.
func WithLockTimeout(d time.Duration) Option {
	return optionFunc(func(o *options) { o.lockTimeout = d })
}

// New returns a Guard for db. It does not touch the database; call
// EnsureTable to create the table. It fails on a nil db, a bad table name, or
// a driver whose dialect it cannot detect.
func New(db *sql.DB, opts ...Option) (*Guard, error) {
	if db == nil {
		return nil, errors.New("fence: nil db")
	}
	o := options{table: DefaultTable, dialect: Detect, lockTimeout: DefaultLockTimeout}
	for _, opt := range opts {
		opt.apply(&o)
	}
	if !identRE.MatchString(o.table) {
		return nil, fmt.Errorf("fence: table name %q: want an identifier or schema.identifier", o.table)
	}
	if o.lockTimeout < 0 {
		return nil, fmt.Errorf("fence: lock timeout %s: must not be negative (zero turns it off)", o.lockTimeout)
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
	g := &Guard{db: db, table: o.table, dialect: d, q: newQueries(d, o.table)}
	if d == Postgres && o.lockTimeout > 0 {
		ms := (o.lockTimeout + time.Millisecond - 1) / time.Millisecond
		g.lockTimeout, g.lockTimeoutMS = ms*time.Millisecond, strconv.FormatInt(int64(ms), 10)
	}
	return g, nil
}

// Dialect returns the dialect the Guard uses.
func (g *Guard) Dialect() Dialect { return g.dialect }

// Table returns the fence table's name.
func (g *Guard) Table() string { return g.table }

// EnsureTable creates the fence table if it does not exist. It is safe to
// call on every start, from several processes at once.
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
	return nil
}

// Claim stores term as the election's current term, unless a higher term is
// stored already; it inserts the row when it is missing. Call it once at the
// start of a term, before the first fenced write, with the term the election
// handed out.
//
// Claim is one statement, atomic on its own (on PostgreSQL it runs in a
// short transaction of its own, to set lock_timeout): of concurrent claims,
// the highest term always ends up stored, and a claim of a term lower than
// one already committed is refused. Claiming the stored term again succeeds
// and changes nothing but updated_at.
//
// Claim waits for transactions that passed Check to end: on PostgreSQL at
// most the lock timeout (WithLockTimeout), then it returns an error
// wrapping ErrClaimTimeout and may be retried; on SQLite at most the
// driver's busy timeout. ctx bounds the wait too. It returns an error
// wrapping ErrStaleTerm when a higher term is stored, naming both terms.
func (g *Guard) Claim(ctx context.Context, name string, term uint64) error {
	if err := validate(name, term); err != nil {
		return err
	}
	n, err := g.claim(ctx, name, term)
	if err != nil {
		return g.lockErr(fmt.Sprintf("claim %q term %d", name, term), err)
	}
	if n > 0 {
		return nil
	}
	// Refused: read the stored term to say by whom. It may have grown again
	// since the upsert, which only makes the message more current.
	stored, ok, err := load(ctx, g.db, g.q.load, name)
	switch {
	case err != nil:
		return errors.Join(fmt.Errorf("%w: election %q: offered term %d", ErrStaleTerm, name, term), err)
	case !ok:
		// Only a DELETE between the two statements gets here.
		return fmt.Errorf("fence: claim %q term %d: refused, then no row found", name, term)
	}
	return staleErr(name, term, stored)
}

// claim runs the claim statement and returns the rows it affected. On
// PostgreSQL with a lock timeout it runs in a transaction of its own that
// sets lock_timeout first.
func (g *Guard) claim(ctx context.Context, name string, term uint64) (int64, error) {
	if g.lockTimeoutMS == "" {
		res, err := g.db.ExecContext(ctx, g.q.claim, name, int64(term))
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	}
	tx, err := g.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "SET LOCAL lock_timeout = "+g.lockTimeoutMS); err != nil {
		return 0, err
	}
	res, err := tx.ExecContext(ctx, g.q.claim, name, int64(term))
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("rows affected: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	return n, nil
}

// sqlStateError is a driver error carrying a SQLSTATE code: pgx's
// *pgconn.PgError, lib/pq's *pq.Error.
type sqlStateError interface {
	error
	SQLState() string
}

// lockErr wraps err from op, adding ErrClaimTimeout when PostgreSQL gave up
// waiting for a lock (SQLSTATE 55P03, lock_not_available: lock_timeout).
func (g *Guard) lockErr(op string, err error) error {
	if s, ok := errors.AsType[sqlStateError](err); ok && s.SQLState() == "55P03" {
		return fmt.Errorf("fence: %s: the fence row stayed locked past lock_timeout %s: %w: %w", op, g.lockTimeout, ErrClaimTimeout, err)
	}
	return fmt.Errorf("fence: %s: %w", op, err)
}

// Check verifies, inside tx, that term is still the election's stored term,
// and makes that hold until tx ends: a Claim of a higher term cannot commit
// before tx commits or rolls back. Call it as the first statement of tx.
//
// On PostgreSQL it locks the fence row FOR SHARE, so the leader's concurrent
// transactions do not wait for one another. It waits for a Claim in
// progress at most the lock timeout (WithLockTimeout), then returns an
// error wrapping ErrClaimTimeout. Once the check passed, the transaction's
// own lock_timeout is back (setting and restoring it are two more short
// statements; WithLockTimeout(0) saves them). On SQLite it performs a no-op
// UPDATE of the row, which takes the database write lock (SQLite has one
// writer at a time) and holds it until tx ends.
//
// It returns an error wrapping ErrStaleTerm when a higher term is stored, and
// one wrapping ErrNotClaimed when the row is missing or holds a lower term.
// Either way the caller must roll tx back.
func (g *Guard) Check(ctx context.Context, tx *sql.Tx, name string, term uint64) error {
	if err := validate(name, term); err != nil {
		return err
	}
	if tx == nil {
		return errors.New("fence: check: nil tx")
	}
	if g.dialect == Postgres {
		op := fmt.Sprintf("check %q term %d", name, term)
		var prev string
		if g.lockTimeoutMS != "" {
			// Target-list items are evaluated in order: the setting is read
			// before it is replaced.
			err := tx.QueryRowContext(ctx, `SELECT current_setting('lock_timeout'), set_config('lock_timeout', $1, true)`,
				g.lockTimeoutMS).Scan(&prev, new(string))
			if err != nil {
				return fmt.Errorf("fence: %s: set lock_timeout: %w", op, err)
			}
		}
		var stored int64
		err := tx.QueryRowContext(ctx, g.q.check, name).Scan(&stored)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: election %q: term %d: no row in %s", ErrNotClaimed, name, term, g.table)
		}
		if err != nil {
			return g.lockErr(op, err)
		}
		if err := compare(name, term, stored); err != nil {
			return err
		}
		if g.lockTimeoutMS != "" {
			// The rest of the caller's transaction keeps its own setting.
			if _, err := tx.ExecContext(ctx, `SELECT set_config('lock_timeout', $1, true)`, prev); err != nil {
				return fmt.Errorf("fence: %s: restore lock_timeout: %w", op, err)
			}
		}
		return nil
	}
	res, err := tx.ExecContext(ctx, g.q.check, name, int64(term))
	if err != nil {
		return fmt.Errorf("fence: check %q term %d: %w", name, term, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("fence: check %q term %d: rows affected: %w", name, term, err)
	}
	if n == 1 {
		return nil
	}
	// We hold the write lock now, so this read is the state that refused us.
	stored, ok, err := load(ctx, tx, g.q.load, name)
	switch {
	case err != nil:
		return fmt.Errorf("fence: check %q term %d: %w", name, term, err)
	case !ok:
		return fmt.Errorf("%w: election %q: term %d: no row in %s", ErrNotClaimed, name, term, g.table)
	case uint64(stored) == term:
		return fmt.Errorf("fence: check %q term %d: update matched %d rows", name, term, n)
	}
	return compare(name, term, stored)
}

// Begin starts a transaction with opts (nil for the driver's defaults) and
// runs Check in it. On success the caller owns the transaction and must
// commit or roll it back; on error it has been rolled back. It may return
// errors wrapping ErrStaleTerm or ErrNotClaimed, as Check does.
func (g *Guard) Begin(ctx context.Context, name string, term uint64, opts *sql.TxOptions) (*sql.Tx, error) {
	if err := validate(name, term); err != nil {
		return nil, err
	}
	tx, err := g.db.BeginTx(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("fence: begin %q term %d: %w", name, term, err)
	}
	if err := g.Check(ctx, tx, name, term); err != nil {
		return nil, rollback(tx, err)
	}
	return tx, nil
}

// Do runs fn in a transaction fenced by term: it begins the transaction,
// runs Check, then fn, then commits. If Check, fn or the commit fails, or fn
// panics, the transaction is rolled back (and the panic goes on). fn's error
// is returned as it is; a refusal wraps ErrStaleTerm or ErrNotClaimed. fn
// must not commit or roll back tx itself. Cancelling ctx rolls the
// transaction back.
func (g *Guard) Do(ctx context.Context, name string, term uint64, fn func(tx *sql.Tx) error) error {
	if fn == nil {
		return errors.New("fence: nil func")
	}
	tx, err := g.Begin(ctx, name, term, nil)
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
	if name == "" {
		return 0, errors.New("fence: empty election name")
	}
	stored, ok, err := load(ctx, g.db, g.q.load, name)
	if err != nil {
		return 0, fmt.Errorf("fence: load %q: %w", name, err)
	}
	if !ok {
		return 0, fmt.Errorf("%w: election %q: no row in %s", ErrNotClaimed, name, g.table)
	}
	return uint64(stored), nil
}

// Init creates the default fence table in db if it is missing; see
// Guard.EnsureTable.
func Init(ctx context.Context, db *sql.DB) error {
	g, err := New(db)
	if err != nil {
		return err
	}
	return g.EnsureTable(ctx)
}

// Claim claims term for the election in db's default fence table, detecting
// the dialect; see Guard.Claim.
func Claim(ctx context.Context, db *sql.DB, name string, term uint64) error {
	g, err := New(db)
	if err != nil {
		return err
	}
	return g.Claim(ctx, name, term)
}

// WithTx runs fn in a transaction of db fenced by term, using the default
// fence table and detecting the dialect; see Guard.Do.
func WithTx(ctx context.Context, db *sql.DB, name string, term uint64, fn func(tx *sql.Tx) error) error {
	g, err := New(db)
	if err != nil {
		return err
	}
	return g.Do(ctx, name, term, fn)
}

// identRE matches a table name that is safe to use unquoted.
var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)

// querier is what load needs from a *sql.DB or *sql.Tx.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// validate rejects input no election hands out. Term 0 is refused because it
// is what a missing term reads as, and terms above math.MaxInt64 because the
// column is a signed BIGINT.
func validate(name string, term uint64) error {
	if name == "" {
		return errors.New("fence: empty election name")
	}
	if term == 0 {
		return fmt.Errorf("fence: election %q: term 0 is not a term (missing term?)", name)
	}
	if term > math.MaxInt64 {
		return fmt.Errorf("fence: election %q: term %d exceeds the largest storable term %d", name, term, int64(math.MaxInt64))
	}
	return nil
}

// load reads the stored term; ok is false when the row is missing.
func load(ctx context.Context, q querier, query, name string) (stored int64, ok bool, err error) {
	err = q.QueryRowContext(ctx, query, name).Scan(&stored)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	if stored < 0 {
		return 0, false, fmt.Errorf("negative stored term %d", stored)
	}
	return stored, true, nil
}

// compare turns the stored term into Check's verdict for term.
func compare(name string, term uint64, stored int64) error {
	switch s := uint64(stored); {
	case stored < 0:
		return fmt.Errorf("fence: check %q: negative stored term %d", name, stored)
	case s == term:
		return nil
	case s > term:
		return staleErr(name, term, stored)
	default:
		return fmt.Errorf("%w: election %q: term %d, stored term %d is lower", ErrNotClaimed, name, term, stored)
	}
}

func staleErr(name string, term uint64, stored int64) error {
	return fmt.Errorf("%w: election %q: offered term %d, stored term %d", ErrStaleTerm, name, term, stored)
}

// rollback rolls tx back after err and returns err, joined with the
// rollback's own error unless the transaction was already over.
func rollback(tx *sql.Tx, err error) error {
	if rbErr := tx.Rollback(); rbErr != nil && !errors.Is(rbErr, sql.ErrTxDone) {
		return errors.Join(err, fmt.Errorf("fence: rollback: %w", rbErr))
	}
	return err
}
