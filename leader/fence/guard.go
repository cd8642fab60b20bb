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
// the election's lock unless WithLockTimeout says otherwise. It is above
// DefaultIdleTimeout, so that one Claim outlasts a leader frozen inside a
// checked transaction: the server ends that transaction first, and the
// Claim goes through with no retry.
const DefaultLockTimeout = 5 * time.Second

// DefaultIdleTimeout is, on PostgreSQL, the idle_in_transaction_session_timeout
// that Check and Claim set for their transactions unless WithIdleTimeout
// says otherwise: the longest a leader frozen inside a checked transaction
// (between two statements) holds off the next leader's Claim. At 4s it is
// below the time the lease takes to fail over from a frozen leader with
// solo's default timings (TTL − renew interval = 6.7s at least), so the
// fence adds nothing to that failover; the price is that a fenced
// transaction idle 4s between two statements (a slow call to another
// service inside it) is ended by the server. (It was 30s.)
const DefaultIdleTimeout = 4 * time.Second

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

// Option configures a Guard.
type Option interface {
	apply(*options)
}

type options struct {
	table       string
	dialect     Dialect
	lockTimeout time.Duration
	idleTimeout time.Duration
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
// Claim queued or in progress: each sets lock_timeout for its own
// statements inside its transaction, and returns an error wrapping
// ErrClaimTimeout when it passes. It is rounded up to whole milliseconds;
// zero turns the bound off (only ctx bounds the wait); negative is an error
// in New. SQLite ignores it: there the driver's busy timeout bounds the
// wait. Default: DefaultLockTimeout.
func WithLockTimeout(d time.Duration) Option {
	return optionFunc(func(o *options) { o.lockTimeout = d })
}

// WithIdleTimeout sets, on PostgreSQL, the idle_in_transaction_session_timeout
// of every transaction Check (and Claim) runs in (SET LOCAL): the server ends
// the session of a transaction left idle that long — a leader frozen
// (SIGSTOP, a paused VM, a long GC) between two statements of a checked
// transaction — and with it the locks that hold off the next leader's
// Claim. It bounds how long such a leader blocks failover to the database;
// a fenced transaction that itself idles longer between statements (a slow
// call to another service inside it) is ended too, so keep fenced
// transactions short or raise it. Rounded up to whole milliseconds; zero
// leaves the server's setting alone; negative is an error in New. SQLite
// ignores it. Default: DefaultIdleTimeout.
func WithIdleTimeout(d time.Duration) Option {
	return optionFunc(func(o *options) { o.idleTimeout = d })
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

// millis rounds d up to whole milliseconds; "" for zero.
func millis(d time.Duration) (time.Duration, string) {
	if d <= 0 {
		return 0, ""
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return ms * time.Millisecond, strconv.FormatInt(int64(ms), 10)
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

// Claim stores term as the election's current term and holder as the one
// holding it, unless a higher term is stored already; it inserts the row
// when it is missing. Call it once at the start of a term, before the first
// fenced write, with the term the election handed out and the holder's
// identity (leader.Elector.ID()): a fenced transaction passes Check only
// with both.
//
// Claiming the stored term again with the same holder succeeds and changes
// nothing. Claiming it with another holder is refused with an error
// wrapping ErrHolderMismatch: two holders of one term mean the election
// handed it out twice (or a term was made up), and the fence keeps the
// first. A claim of a term lower than the stored one is refused with an
// error wrapping ErrStaleTerm, naming both terms. Of concurrent claims of
// one election, the highest term always ends up stored.
//
// Claim runs in a short transaction of its own, at READ COMMITTED whatever
// the server's default isolation, so it behaves the same under every
// default. It waits for the transactions that had passed Check when it
// came (not for those that came after it: on PostgreSQL they queue behind
// it); on PostgreSQL at most the lock timeout (WithLockTimeout), then it
// returns an error wrapping ErrClaimTimeout and may be retried; on SQLite
// at most the driver's busy timeout. ctx bounds the wait too.
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

// Check verifies, inside tx, that term is still the election's stored term
// and holder its stored holder, and makes that hold until tx ends: a Claim
// of a higher term cannot commit before tx commits or rolls back. Call it
// as the first statement of tx.
//
// On PostgreSQL it takes the election's advisory lock shared (transaction
// level; Claim takes it exclusively), then reads the fence row FOR SHARE.
// Advisory locks queue in arrival order: a Check that comes while a Claim
// waits waits behind it, and then sees the new term. The leader's own
// concurrent transactions do not wait for one another. It waits at most
// the lock timeout (WithLockTimeout), then returns an error wrapping
// ErrClaimTimeout; once it passed, the transaction's own lock_timeout is
// back, and idle_in_transaction_session_timeout is the Guard's for the
// rest of the transaction (WithIdleTimeout). It works at every isolation
// level: at REPEATABLE READ or SERIALIZABLE, a transaction whose snapshot
// predates a Claim of a higher term is refused with ErrStaleTerm too (the
// error also wraps the server's serialization failure).
//
// On SQLite it performs a no-op UPDATE of the row, which takes the database
// write lock (SQLite has one writer at a time) and holds it until tx ends.
//
// It returns an error wrapping ErrStaleTerm when a higher term is stored,
// ErrHolderMismatch when term is stored with another holder, and
// ErrNotClaimed when the row is missing or holds a lower term. Either way
// the caller must roll tx back.
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

// Do runs fn in a transaction fenced by the Token that ctx carries (a
// worker job's context, a spread job's, lock.Hold.Context; see WithToken):
// it begins the transaction, runs Check, then fn, then commits. When the
// fence has not seen the token's term yet (ErrNotClaimed: a lock's new
// hold, a job whose worker has no WithFence), Do claims it first, then
// checks again: the first write of a term claims it, and a lower term is
// still refused. If Check, fn or the commit fails, or fn panics, the
// transaction is rolled back (and the panic goes on). fn's error is
// returned as it is; a refusal wraps ErrStaleTerm or ErrHolderMismatch, a
// context without a token ErrNoToken. fn must not commit or roll back tx
// itself. Cancelling ctx rolls the transaction back.
//
// A write computed from reads made before the term's first Do (a stream
// position, a balance) needs the term claimed before those reads: until
// the claim, a transaction of an older term that passed its check may
// still commit under them. The worker with WithFence claims before any
// job runs; a lock holder claims its Hold.Token after Lock.
func (g *Guard) Do(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tok, err := tokenOf(ctx)
	if err != nil {
		return err
	}
	return g.do(ctx, tok.Election, tok.Term, tok.Holder, true, fn)
}

// DoTerm is Do with the election, term and holder given by hand instead of
// a Token in ctx, and no claim: a term the fence has not seen is refused
// with ErrNotClaimed (claim it first with Claim). It was Do before the
// token; programs that write outside a job or a hold (solo run's SOLO_TERM
// and SOLO_ID) use it.
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

// identRE matches a table name that is safe to use unquoted.
var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)

// querier is what load needs from a *sql.DB or *sql.Tx.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// validate rejects input no election hands out. Term 0 is refused because it
// is what a missing term reads as, and terms above math.MaxInt64 because the
// column is a signed BIGINT.
func validate(name string, term uint64, holder string) error {
	if name == "" {
		return errors.New("fence: empty election name")
	}
	if term == 0 {
		return fmt.Errorf("fence: election %q: term 0 is not a term (missing term?)", name)
	}
	if term > math.MaxInt64 {
		return fmt.Errorf("fence: election %q: term %d exceeds the largest storable term %d", name, term, int64(math.MaxInt64))
	}
	if holder == "" {
		return fmt.Errorf("fence: election %q: empty holder (want the elector's ID)", name)
	}
	return nil
}

// row is the stored state of one election.
type row struct {
	term   int64
	holder sql.NullString // NULL in rows claimed before holders were recorded
}

// load reads the stored row; ok is false when it is missing.
func load(ctx context.Context, q querier, query, name string) (r row, ok bool, err error) {
	err = q.QueryRowContext(ctx, query, name).Scan(&r.term, &r.holder)
	if errors.Is(err, sql.ErrNoRows) {
		return row{}, false, nil
	}
	if err != nil {
		return row{}, false, err
	}
	if r.term < 0 {
		return row{}, false, fmt.Errorf("negative stored term %d", r.term)
	}
	return r, true, nil
}

// refuses returns the sentinel error r gives to term and holder, or nil if
// it accepts them. For a Claim (claim true) a lower stored term is not a
// refusal (the upsert raises it); for a Check it is ErrNotClaimed.
func (r row) refuses(term uint64, holder string, claim bool) error {
	switch s := uint64(r.term); {
	case s > term:
		return ErrStaleTerm
	case s < term && claim:
		return nil
	case s < term:
		return ErrNotClaimed
	case !r.holder.Valid || r.holder.String != holder:
		return ErrHolderMismatch
	}
	return nil
}

// verdict turns r into op's error for term and holder, nil if it accepts.
func (r row) verdict(op, name string, term uint64, holder string, claim bool) error {
	switch err := r.refuses(term, holder, claim); err {
	case nil:
		if claim && uint64(r.term) < term {
			// Only a concurrent DELETE or a lowered row gets here.
			return fmt.Errorf("fence: %s: refused, yet stored term %d is lower", op, r.term)
		}
		return nil
	case ErrStaleTerm:
		return staleErr(name, term, r)
	case ErrNotClaimed:
		return fmt.Errorf("%w: election %q: term %d, stored term %d is lower", ErrNotClaimed, name, term, r.term)
	default:
		by := fmt.Sprintf("holder %q", r.holder.String)
		if !r.holder.Valid {
			by = "no recorded holder (claimed before holders were recorded)"
		}
		return fmt.Errorf("%w: election %q: term %d is claimed by %s, not %q", ErrHolderMismatch, name, term, by, holder)
	}
}

func staleErr(name string, term uint64, r row) error {
	return fmt.Errorf("%w: election %q: offered term %d, stored term %d", ErrStaleTerm, name, term, r.term)
}

// rollback rolls tx back after err and returns err, joined with the
// rollback's own error unless the transaction was already over.
func rollback(tx *sql.Tx, err error) error {
	if rbErr := tx.Rollback(); rbErr != nil && !errors.Is(rbErr, sql.ErrTxDone) {
		return errors.Join(err, fmt.Errorf("fence: rollback: %w", rbErr))
	}
	return err
}
