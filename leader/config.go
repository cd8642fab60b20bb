package leader

import (
	"fmt"
	"os"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Defaults for Config. Durations derived from TTL (RenewInterval,
// RenewDeadline, RetryInterval, ResignCooldown, ShutdownTimeout) are computed
// from the TTL actually in use, so setting only TTL scales all of them.
const (
	DefaultKeyPrefix = "solo"
	DefaultTTL       = 10 * time.Second
	DefaultDrift     = 0.01
)

// Config holds the tunables of one election. The zero value of every field
// except Name means "use the default"; negative values are errors. The
// timings must keep RenewInterval < RenewDeadline < TTL × (1 − Drift); a
// job has the stop budget TTL − RenewDeadline to stop after a missed
// deadline (docs/design.md, "Timing: why two leaders never run at once").
type Config struct {
	// Name is the election: candidates with the same Name and KeyPrefix
	// compete for one lease. Required; must not contain '{', '}' or white
	// space (it is the Redis Cluster hash tag of the election's keys).
	Name string

	// ID names this candidate in the lease value; the Elector appends "-"
	// and a random part (Elector.ID returns the whole), so two processes
	// given the same ID stay two candidates. Default "HOST-PID". Must not
	// contain white space.
	ID string

	// KeyPrefix starts every Redis key of the election: PREFIX:{NAME}:lease.
	// Default "solo".
	KeyPrefix string

	// TTL is the lease length on the Redis server. Default 10s; at least 1ms.
	TTL time.Duration

	// RenewInterval is how often the leader renews the lease, measured from
	// the send time of the last successful renewal. Default TTL/3.
	RenewInterval time.Duration

	// RenewDeadline bounds the time since the send time of the last
	// successful renewal (or the acquire): past it the leader cancels its
	// jobs' context and steps down. Default 2/3 of TTL.
	RenewDeadline time.Duration

	// RetryInterval bounds a follower's wait when it has neither a release
	// notice nor the holder's remaining TTL to go by, and is the back-off
	// after a failed acquire or a term that ended in failure. Default TTL/5.
	RetryInterval time.Duration

	// ResignCooldown is how long a candidate that resigned waits before it
	// campaigns again. Default RetryInterval.
	ResignCooldown time.Duration

	// ShutdownTimeout bounds how long Run, once its context is done, keeps
	// renewing while the leader function drains. Past it renewing stops and
	// the lease is left to expire, never released under a running
	// function. Default TTL.
	ShutdownTimeout time.Duration

	// Drift is the assumed maximum relative rate difference between this
	// host's monotonic clock and the Redis server's clock (0.01 = 1%).
	// Default 0.01; must be in [0, 0.5).
	Drift float64

	// MinReplicas, when positive, makes acquire, renew and checkpoints wait
	// (WAIT) for that many replicas: an acquire acknowledged by fewer is
	// refused, such a renew fails. Set it with Sentinel, with RenewInterval
	// TTL/10 and RenewDeadline TTL/2 (solo run derives them for a Sentinel
	// URL; New logs SentinelWarning without it). Default 0 (off). The
	// failover margin: docs/design.md, "Deployments".
	MinReplicas int

	// ReplicaTimeout bounds each WAIT for MinReplicas. Default
	// min(RenewInterval/2, 500ms). Must be below RenewDeadline−RenewInterval.
	ReplicaTimeout time.Duration

	// Value is proclaimed with the leadership, as etcd's Campaign value:
	// stored beside the lease when this candidate takes it, and shown by
	// Lookup, Observe, /leader and solo status (for instance the leader's
	// address, so followers can route to it). Elector.Proclaim replaces it
	// while leading. Optional; valid UTF-8, at most MaxValueLen bytes.
	Value string
}

// MaxValueLen bounds Config.Value and Elector.Proclaim's value.
const MaxValueLen = 4096

// ConfigError reports one bad configuration value. Field is the field's
// name in snake case (renew_interval for RenewInterval), the key solo's
// configuration file gives it; loaders that nest the config may prefix it
// (election.ttl).
type ConfigError struct {
	Field  string
	Value  any
	Reason string
}

// Error implements error.
func (e *ConfigError) Error() string {
	return fmt.Sprintf("invalid %s %s: %s", e.Field, formatValue(e.Value), e.Reason)
}

// DefaultConfig returns the default tunables with an empty Name and ID. The
// ID is filled in by New.
func DefaultConfig() Config {
	return Config{}.withDefaults()
}

// Validate checks the configuration as New would use it (defaults applied)
// and returns a *ConfigError naming the first bad field and its value.
func (c Config) Validate() error {
	return c.withDefaults().validate()
}

// withDefaults returns a copy with every zero field set to its default.
// Defaults derive from the TTL in use.
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
		// TTL×2/3 without the overflow of TTL×2 near the largest
		// duration (which gave a negative or zero deadline).
		c.RenewDeadline = c.TTL/3*2 + c.TTL%3*2/3
	}
	if c.RetryInterval == 0 {
		c.RetryInterval = c.TTL / 5
	}
	if c.ResignCooldown == 0 {
		c.ResignCooldown = c.RetryInterval
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = c.TTL
	}
	if c.Drift == 0 {
		c.Drift = DefaultDrift
	}
	if c.ReplicaTimeout == 0 {
		c.ReplicaTimeout = min(c.RenewInterval/2, 500*time.Millisecond)
	}
	return c
}

// validate checks a config whose defaults are applied.
func (c Config) validate() error {
	if err := checkName("name", c.Name, true); err != nil {
		return err
	}
	if err := checkName("key_prefix", c.KeyPrefix, true); err != nil {
		return err
	}
	if c.ID != "" {
		if err := checkName("id", c.ID, false); err != nil {
			return err
		}
	}
	positive := []struct {
		field string
		d     time.Duration
	}{
		{"ttl", c.TTL},
		{"renew_interval", c.RenewInterval},
		{"renew_deadline", c.RenewDeadline},
		{"retry_interval", c.RetryInterval},
		{"resign_cooldown", c.ResignCooldown},
		{"shutdown_timeout", c.ShutdownTimeout},
		{"replica_timeout", c.ReplicaTimeout},
	}
	for _, p := range positive {
		if p.d <= 0 {
			return &ConfigError{Field: p.field, Value: p.d, Reason: "must be positive"}
		}
	}
	if c.TTL < time.Millisecond {
		return &ConfigError{Field: "ttl", Value: c.TTL, Reason: "must be at least 1ms (Redis expiry has millisecond resolution)"}
	}
	if c.Drift < 0 || c.Drift >= 0.5 {
		return &ConfigError{Field: "drift", Value: c.Drift, Reason: "must be in [0, 0.5)"}
	}
	if c.RenewInterval >= c.RenewDeadline {
		return &ConfigError{Field: "renew_interval", Value: c.RenewInterval,
			Reason: fmt.Sprintf("must be less than renew_deadline (%s)", c.RenewDeadline)}
	}
	if limit := c.safeDeadlineLimit(); c.RenewDeadline >= limit {
		return &ConfigError{Field: "renew_deadline", Value: c.RenewDeadline,
			Reason: fmt.Sprintf("must be less than ttl×(1−drift) = %s (ttl %s, drift %g)", limit, c.TTL, c.Drift)}
	}
	if err := checkValue(c.Value); err != nil {
		return err
	}
	if c.MinReplicas < 0 {
		return &ConfigError{Field: "min_replicas", Value: c.MinReplicas, Reason: "must not be negative"}
	}
	if c.MinReplicas > 0 && c.ReplicaTimeout >= c.RenewDeadline-c.RenewInterval {
		return &ConfigError{Field: "replica_timeout", Value: c.ReplicaTimeout,
			Reason: fmt.Sprintf("must be less than renew_deadline−renew_interval = %s", c.RenewDeadline-c.RenewInterval)}
	}
	return nil
}

// checkValue validates a proclaimed value.
func checkValue(v string) error {
	if len(v) > MaxValueLen {
		return &ConfigError{Field: "value", Value: fmt.Sprintf("%.32s… (%d bytes)", v, len(v)), Reason: fmt.Sprintf("must be at most %d bytes", MaxValueLen)}
	}
	if !utf8.ValidString(v) {
		return &ConfigError{Field: "value", Value: v, Reason: "must be valid UTF-8"}
	}
	return nil
}

// safeDeadlineLimit is TTL × (1 − Drift): the longest a lease is certain to
// last on the server, measured on this host's clock from the send time.
func (c Config) safeDeadlineLimit() time.Duration {
	return time.Duration(float64(c.TTL) * (1 - c.Drift))
}

// StopBudget is TTL − RenewDeadline: the time a job has to stop after its
// context was cancelled on a missed renew deadline, before another
// candidate can possibly acquire the lease.
func (c Config) StopBudget() time.Duration {
	c = c.withDefaults()
	return c.TTL - c.RenewDeadline
}

// LeaseKey returns the Redis key holding the lease: PREFIX:{NAME}:lease.
func (c Config) LeaseKey() string { return c.key("lease") }

// TermKey returns the Redis key holding the last term handed out.
func (c Config) TermKey() string { return c.key("term") }

// InfoKey returns the Redis hash kept beside the lease with the holder's
// TTL, renew interval, proclaimed value and acquire time: PREFIX:{NAME}:info.
func (c Config) InfoKey() string { return c.key("info") }

// CandidatesKey returns the Redis sorted set of waiting candidates:
// PREFIX:{NAME}:candidates.
func (c Config) CandidatesKey() string { return c.key("candidates") }

// EventsChannel returns the pub/sub channel of release and resign notices.
func (c Config) EventsChannel() string { return c.key("events") }

// Key returns PREFIX:{NAME}:SUFFIX, a key in the election's Cluster slot.
func (c Config) Key(suffix string) string { return c.key(suffix) }

func (c Config) key(suffix string) string {
	prefix := c.KeyPrefix
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	return prefix + ":{" + c.Name + "}:" + suffix
}

func checkName(field, v string, required bool) error {
	if v == "" {
		if required {
			return &ConfigError{Field: field, Value: v, Reason: "must not be empty"}
		}
		return nil
	}
	if strings.ContainsAny(v, "{}") {
		return &ConfigError{Field: field, Value: v, Reason: "must not contain '{' or '}'"}
	}
	if strings.IndexFunc(v, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return &ConfigError{Field: field, Value: v, Reason: "must not contain white space or control characters"}
	}
	return nil
}

func formatValue(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("%q", v)
	case time.Duration:
		return v.String()
	default:
		return fmt.Sprint(v)
	}
}

// defaultBaseID returns HOST-PID, the ID's base when none is configured.
func defaultBaseID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	host = strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) || unicode.IsControl(r) || r == '{' || r == '}' {
			return '_'
		}
		return r
	}, host)
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}
