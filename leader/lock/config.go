package lock

import (
	"time"

	"go.uber.org/zap"

	"github.com/solo-run/solo/internal/hooks"
	"github.com/solo-run/solo/leader"
)

// Defaults of Config.
const (
	DefaultKeyPrefix = leader.DefaultKeyPrefix
	DefaultTTL       = 10 * time.Second
	DefaultDrift     = leader.DefaultDrift
)

// Config holds the timings of the locks of one Client. The zero value of
// every field means "use the default"; negative values are errors. The
// rule is the election's (package leader):
//
//	RenewInterval < RenewDeadline < TTL × (1 − Drift)
//
// and TTL − RenewDeadline is the stop budget: the time the work under a hold
// has, after the hold's context was cancelled on a missed renewal, before
// another process can possibly take the lock.
type Config struct {
	// KeyPrefix starts every Redis key of a lock: PREFIX:{NAME}:lock.
	// Default "solo".
	KeyPrefix string

	// TTL is the lock's expiry on the Redis server, renewed while held.
	// Default 10s; at least 1ms.
	TTL time.Duration

	// RenewInterval is how often a hold is renewed, measured from the send
	// time of the last successful renewal. Default TTL/3.
	RenewInterval time.Duration

	// RenewDeadline bounds the time since the send time of the last
	// successful renewal (or the acquire): past it the hold's context is
	// cancelled with ErrRenewDeadline. Default 2/3 of TTL. It also bounds
	// every Redis call of a Lock, TryLock or Unlock.
	RenewDeadline time.Duration

	// RetryInterval bounds a waiter's sleep when it has neither a live
	// release notice nor the holder's remaining TTL to go by, and is the
	// back-off after a failed acquire. Default TTL/5.
	RetryInterval time.Duration

	// Drift is the assumed maximum relative rate difference between this
	// host's monotonic clock and the Redis server's (0.01 = 1%). Default
	// 0.01; must be in [0, 0.5).
	Drift float64

	// MinReplicas, when positive, makes every acquire and renewal wait (WAIT)
	// until that many replicas acknowledged it, as leader.Config.MinReplicas
	// does: an acquire acknowledged by fewer is handed back and reported as
	// ErrNotReplicated (Lock retries); such a renewal counts as failed. Use it
	// with Sentinel. Releases do not wait. Default 0 (off). NewRedlockClient
	// refuses it.
	MinReplicas int

	// ReplicaTimeout bounds each WAIT for MinReplicas. Default
	// min(RenewInterval/2, 500ms). Must be below RenewDeadline −
	// RenewInterval.
	ReplicaTimeout time.Duration
}

// withDefaults returns a copy with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.KeyPrefix == "" {
		c.KeyPrefix = DefaultKeyPrefix
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.RenewInterval == 0 {
		c.RenewInterval = c.TTL / 3
	}
	if c.RenewDeadline == 0 {
		c.RenewDeadline = c.TTL * 2 / 3
	}
	if c.RetryInterval == 0 {
		c.RetryInterval = c.TTL / 5
	}
	if c.Drift == 0 {
		c.Drift = DefaultDrift
	}
	if c.ReplicaTimeout == 0 {
		c.ReplicaTimeout = min(c.RenewInterval/2, 500*time.Millisecond)
	}
	return c
}

// validate checks a config whose defaults are applied, by the election's
// own rules (the same fields, names and messages: *leader.ConfigError),
// with name as the lock's name.
func (c Config) validate(name string) error {
	lc := leader.Config{
		Name:           name,
		KeyPrefix:      c.KeyPrefix,
		TTL:            c.TTL,
		RenewInterval:  c.RenewInterval,
		RenewDeadline:  c.RenewDeadline,
		RetryInterval:  c.RetryInterval,
		Drift:          c.Drift,
		MinReplicas:    c.MinReplicas,
		ReplicaTimeout: c.ReplicaTimeout,
	}
	return lc.Validate()
}

// Option configures a Client or one Mutex.
type Option interface{ apply(*options) }

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

type options struct {
	cfg    Config
	cfgSet bool
	fixed  time.Duration // > 0: WithFixedLease
	fair   bool
	log    *zap.Logger
	id     string
	inline bool
	// newStore, when set, makes a Mutex's store instead of the Redis
	// store (Redlock, WithHooks' NewLockStore, tests' fakes); nil refuses
	// the Mutex's options.
	newStore func(m *Mutex) hooks.Store
	hooks    hooks.Hooks // WithHooks
}

// WithInlineCalls makes Lock, TryLock and Unlock send their Redis call on
// the caller's goroutine even when the client does not honour context
// deadlines: such a call is then bounded only by the client's own
// timeouts. By default only a client that honours them (*redis.Client, or
// *redis.ClusterClient with ContextTimeoutEnabled) gets inline calls. Safety
// does not depend on the mode, only promptness (docs/design.md, "Locks").
func WithInlineCalls() Option {
	return optionFunc(func(o *options) { o.inline = true })
}

// WithConfig sets the timings (defaults apply to its zero fields).
func WithConfig(cfg Config) Option {
	return optionFunc(func(o *options) { o.cfg, o.cfgSet = cfg, true })
}

// WithFixedLease makes every hold a lease of ttl that is never renewed: the
// hold's context ends at the acquire's send time + ttl × (1 − Drift) with
// ErrLeaseExpired, and the key expires on the server after ttl. Use it when
// the work is bounded and a watchdog is unwanted.
func WithFixedLease(ttl time.Duration) Option {
	return optionFunc(func(o *options) { o.fixed = ttl })
}

// WithFair makes waiters take the lock in the order they started waiting
// (a FIFO queue in Redis, as Redisson's fair lock). See the package doc
// for its cost. With MinReplicas, a head whose adopting acquire gets too
// few replica acknowledgements hands the grant back and queues again at
// the tail: it loses its place.
func WithFair() Option {
	return optionFunc(func(o *options) { o.fair = true })
}

// WithLogger sets the logger. Default zap.NewNop().
func WithLogger(log *zap.Logger) Option {
	return optionFunc(func(o *options) {
		if log != nil {
			o.log = log
		}
	})
}

// WithID sets the base of this Client's owner IDs (default HOST-PID). A
// random part per Client and a sequence number per Lock call are always
// appended, so configuration cannot make two holds share an owner.
func WithID(id string) Option {
	return optionFunc(func(o *options) { o.id = id })
}

// resolve applies the defaults and checks the configuration for the lock
// name (or, for a Client, a placeholder name).
func (o *options) resolve(name string) (Config, error) {
	cfg := o.cfg.withDefaults()
	if o.fixed != 0 {
		if o.fixed < time.Millisecond {
			return cfg, &leader.ConfigError{Field: "fixed_lease", Value: o.fixed,
				Reason: "must be at least 1ms (Redis expiry has millisecond resolution)"}
		}
		// A fixed lease is never renewed: the checks of the renewal
		// timings are met by construction.
		cfg.TTL = o.fixed
		cfg.RenewDeadline = time.Duration(float64(o.fixed) * (1 - cfg.Drift))
		cfg.RenewInterval = cfg.RenewDeadline / 2
		if o.cfg.RetryInterval == 0 {
			cfg.RetryInterval = o.fixed / 5
		}
		if cfg.Drift < 0 || cfg.Drift >= 0.5 {
			return cfg, &leader.ConfigError{Field: "drift", Value: cfg.Drift, Reason: "must be in [0, 0.5)"}
		}
		if err := checkName(name, cfg.KeyPrefix); err != nil {
			return cfg, err
		}
		return cfg, nil
	}
	if err := cfg.validate(name); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// checkName validates name and prefix by the election's rules.
func checkName(name, prefix string) error {
	return leader.Config{Name: name, KeyPrefix: prefix}.Validate()
}
