package fence

import (
	"strconv"
	"time"
)

// DefaultTable is the name of the fence table unless WithTable says
// otherwise.
const DefaultTable = "solo_fence"

// DefaultLockTimeout is WithLockTimeout's default. It is above
// DefaultIdleTimeout, so one Claim outlasts a leader frozen inside a
// checked transaction (see docs/decisions/0004-fence-timeouts.md).
const DefaultLockTimeout = 5 * time.Second

// DefaultIdleTimeout is WithIdleTimeout's default. It is below the least
// time the lease takes to fail over from a frozen leader at the default
// timings, so the fence adds nothing to that failover; a fenced transaction
// idle that long between two statements is ended by the server.
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

// WithLockTimeout bounds, on PostgreSQL, how long Claim waits for the
// transactions that passed Check, and Check for a Claim queued before it;
// past it they return an error wrapping ErrClaimTimeout. Rounded up to
// whole milliseconds; zero leaves only ctx to bound the wait; negative is
// an error in New. SQLite ignores it (its driver's busy timeout bounds the
// wait). Default: DefaultLockTimeout.
func WithLockTimeout(d time.Duration) Option {
	return optionFunc(func(o *options) { o.lockTimeout = d })
}

// WithIdleTimeout sets, on PostgreSQL, the idle_in_transaction_session_timeout
// of every transaction Check and Claim run in: the server ends a checked
// transaction left idle that long between two statements (its leader
// frozen, or a slow call inside it), which bounds how long it holds off the
// next Claim. Rounded up to whole milliseconds; zero leaves the server's
// setting alone; negative is an error in New. SQLite ignores it. Default:
// DefaultIdleTimeout; see docs/design.md, "Failover with the fence".
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
