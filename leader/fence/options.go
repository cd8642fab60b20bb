package fence

import (
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
// service inside it) is ended by the server.
const DefaultIdleTimeout = 4 * time.Second

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

// millis rounds d up to whole milliseconds; "" for zero.
func millis(d time.Duration) (time.Duration, string) {
	if d <= 0 {
		return 0, ""
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return ms * time.Millisecond, strconv.FormatInt(int64(ms), 10)
}
