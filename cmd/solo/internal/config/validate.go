package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/redisurl"
	"github.com/solo-run/solo/worker"
)

// validateTLS checks the redis.tls_* keys against a redis.url that parses.
func (r RedisConfig) validateTLS() error {
	opts := r.tlsOptions()
	if len(opts) == 0 {
		return nil
	}
	given := url.Values{}
	if _, q, ok := strings.Cut(r.URL, "?"); ok {
		given, _ = url.ParseQuery(q) // checked by redisurl.Parse already
	}
	for _, o := range opts {
		key := "redis." + o[0]
		switch {
		case given.Has(o[0]):
			return &Error{Key: key, Value: strconv.Quote(o[1]), Reason: "also given as " + o[0] + " in redis.url: give it once"}
		case !strings.HasPrefix(strings.ToLower(r.URL), "rediss"):
			return &Error{Key: key, Value: strconv.Quote(o[1]), Reason: "needs TLS: a rediss://, rediss+sentinel:// or rediss+cluster:// redis.url"}
		}
	}
	if _, err := redisurl.Parse(r.ClientURL()); err != nil {
		ce := &Error{Key: "redis", Reason: err.Error()}
		if ue, ok := errors.AsType[*redisurl.Error](err); ok {
			ce.Reason = ue.Reason
		}
		return ce
	}
	return nil
}

// Validate checks the configuration and returns a *Error naming the
// key and value of the first bad value. Empty Misfire and Restart mean
// their defaults. Commands are not checked: library users register jobs in
// code, and `solo run` checks the commands it runs.
func (c Config) Validate() error {
	for _, check := range []func() error{c.validateRedis, c.validateElection, c.validateWorker,
		c.validateHTTP, c.validateFence, c.validateLog, c.validateJobs} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// validateRedis checks redis.url and the redis.tls_* keys.
func (c Config) validateRedis() error {
	if c.Redis.URL == "" {
		return nil
	}
	if _, err := redisurl.Parse(c.Redis.URL); err != nil {
		ce := &Error{Key: "redis.url", Value: strconv.Quote(redisurl.Redact(c.Redis.URL)), Reason: err.Error()}
		if ue, ok := errors.AsType[*redisurl.Error](err); ok {
			ce.Value, ce.Reason = strconv.Quote(ue.URL), ue.Reason
		}
		return ce
	}
	return c.Redis.validateTLS()
}

// validateElection checks the election's keys: leader.Config's rules,
// the command's floors, the mode and the grace period.
func (c Config) validateElection() error {
	if err := c.Election.Config.Validate(); err != nil {
		if le, ok := errors.AsType[*leader.ConfigError](err); ok {
			if le.Field == "name" && c.Election.Name == "" {
				return &Error{Key: "election.name", Value: `""`, Reason: "must not be empty: " + NameRemedy}
			}
			return &Error{Key: "election." + le.Field, Value: formatValue(le.Value), Reason: le.Reason}
		}
		return &Error{Key: "election", Reason: err.Error()}
	}
	if err := checkFloors(c.Election.Config); err != nil {
		return err
	}
	switch c.Election.Mode {
	case worker.ModeElect, worker.ModeStandby, worker.ModeAlways, worker.ModeSpread:
	default:
		return &Error{Key: "election.mode", Value: strconv.Quote(string(c.Election.Mode)), Reason: "must be one of elect, standby, always, spread"}
	}
	if g := c.Election.GracePeriod; g < 0 {
		return &Error{Key: "election.grace_period", Value: g.String(), Reason: "must be positive"}
	} else if g != 0 {
		if bound, sum := c.ExitBound(); g < bound {
			return &Error{Key: "election.grace_period", Value: g.String(),
				Reason: fmt.Sprintf("shorter than solo run's exit bound %s (%s): the SIGKILL at the end of the grace period could come before solo released the lease; raise the grace period (terminationGracePeriodSeconds) and this value together, or lower election.shutdown_timeout", bound, sum)}
		}
	}
	return nil
}

// validateWorker checks the spread and worker keys.
func (c Config) validateWorker() error {
	if err := c.Spread.Validate(c.LeaderConfig()); err != nil {
		if le, ok := errors.AsType[*leader.ConfigError](err); ok {
			return &Error{Key: "spread." + le.Field, Value: formatValue(le.Value), Reason: le.Reason}
		}
		return &Error{Key: "spread", Reason: err.Error()}
	}
	if err := validatePolicy(c.Worker); err != nil {
		return err
	}
	if c.Election.Mode == worker.ModeSpread && c.Worker.MaxFailedTerms > 0 {
		// Each spread job is an election of its own; none of them counts
		// failed terms, so the key would be accepted and ignored.
		return &Error{Key: "worker.max_failed_terms", Value: strconv.Itoa(c.Worker.MaxFailedTerms),
			Reason: "not supported with election.mode spread (jobs never give up there): set it to 0"}
	}
	return nil
}

// validateHTTP checks http.addr.
func (c Config) validateHTTP() error {
	if c.HTTP.Addr != "" {
		if _, _, err := net.SplitHostPort(c.HTTP.Addr); err != nil {
			return &Error{Key: "http.addr", Value: strconv.Quote(c.HTTP.Addr), Reason: `want host:port, such as "127.0.0.1:8080" or ":8080"`}
		}
	}
	return nil
}

// validateFence checks fence.dsn.
func (c Config) validateFence() error {
	if c.Fence.DSN != "" {
		if _, _, err := FenceDriver(c.Fence.DSN); err != nil {
			return &Error{Key: "fence.dsn", Value: strconv.Quote(RedactDSN(c.Fence.DSN)), Reason: err.Error()}
		}
	}
	return nil
}

// validateLog checks log.level and log.time.
func (c Config) validateLog() error {
	switch c.Log.Time {
	case "", LogTimeEpoch, LogTimeISO8601:
	default:
		return &Error{Key: "log.time", Value: strconv.Quote(c.Log.Time), Reason: "must be epoch or iso8601"}
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
		return nil
	default:
		return &Error{Key: "log.level", Value: strconv.Quote(c.Log.Level), Reason: "must be one of debug, info, warn, error"}
	}
}

// validateJobs checks each job, and that their names are unique.
func (c Config) validateJobs() error {
	names := make(map[string]int, len(c.Jobs))
	for i, j := range c.Jobs {
		if err := j.validate(fmt.Sprintf("jobs[%d]", i)); err != nil {
			return err
		}
		if first, dup := names[j.Name]; dup {
			return &Error{Key: fmt.Sprintf("jobs[%d].name", i), Value: strconv.Quote(j.Name), Reason: fmt.Sprintf("duplicate job name (also jobs[%d])", first)}
		}
		names[j.Name] = i
	}
	return nil
}

// NameRemedy says where an election's name comes from.
const NameRemedy = "set election.name in config.yaml, SOLO_ELECTION_NAME or --name"

// Floors of the election's timings in the solo command. The library
// accepts a TTL down to 1ms; the command does not, for a lease that short
// only churns (thousands of elections a second). Every renewal must come
// back within renew_deadline − renew_interval (TTL/3 by default): a Redis
// round trip plus the scheduling slack of a busy host (GC, a noisy
// neighbour, a loaded core: tens of milliseconds). The budgets derived from
// a TTL of at least minTTL are at least minBudget (TTL/5 = 20ms); one set
// explicitly must be too.
const (
	minTTL    = 100 * time.Millisecond
	minBudget = 10 * time.Millisecond
)

// checkFloors applies minTTL and minBudget to an election configuration
// that leader.Config.Validate accepted (zero fields are derived from TTL).
func checkFloors(lc leader.Config) error {
	if lc.TTL != 0 && lc.TTL < minTTL { // zero: leader.DefaultTTL
		return &Error{Key: "election.ttl", Value: lc.TTL.String(),
			Reason: fmt.Sprintf("must be at least %s: each renewal needs a Redis round trip plus scheduling slack within renew_deadline", minTTL)}
	}
	for _, b := range []struct {
		key string
		d   time.Duration
	}{
		{"renew_interval", lc.RenewInterval},
		{"renew_deadline", lc.RenewDeadline},
		{"retry_interval", lc.RetryInterval},
		{"resign_cooldown", lc.ResignCooldown},
		{"shutdown_timeout", lc.ShutdownTimeout},
		{"replica_timeout", lc.ReplicaTimeout},
	} {
		if b.d != 0 && b.d < minBudget {
			return &Error{Key: "election." + b.key, Value: b.d.String(),
				Reason: fmt.Sprintf("must be at least %s (scheduling slack of a busy host)", minBudget)}
		}
	}
	return nil
}

func validatePolicy(p worker.Policy) error {
	if p.MaxFailures < 1 {
		return &Error{Key: "worker.max_failures", Value: strconv.Itoa(p.MaxFailures), Reason: "must be at least 1"}
	}
	if p.RestartBackoff <= 0 {
		return &Error{Key: "worker.restart_backoff", Value: p.RestartBackoff.String(), Reason: "must be positive"}
	}
	if p.RestartBackoffMax <= 0 {
		return &Error{Key: "worker.restart_backoff_max", Value: p.RestartBackoffMax.String(), Reason: "must be positive"}
	}
	if p.RestartBackoff > p.RestartBackoffMax {
		return &Error{Key: "worker.restart_backoff", Value: p.RestartBackoff.String(),
			Reason: fmt.Sprintf("must not exceed worker.restart_backoff_max (%s)", p.RestartBackoffMax)}
	}
	if p.MaxFailedTerms < 0 {
		return &Error{Key: "worker.max_failed_terms", Value: strconv.Itoa(p.MaxFailedTerms), Reason: "must not be negative (0: never give up)"}
	}
	return nil
}

func (j JobConfig) validate(key string) error {
	if j.Name == "" {
		return &Error{Key: key + ".name", Value: `""`, Reason: "must not be empty"}
	}
	if j.Schedule != "" {
		err := worker.CheckSchedule(j.Schedule)
		if errors.Is(err, worker.ErrNeverFires) {
			return &Error{Key: key + ".schedule", Value: strconv.Quote(j.Schedule),
				Reason: fmt.Sprintf("job %q never fires: %s", j.Name, strings.TrimPrefix(err.Error(), "worker: "))}
		}
		if err != nil {
			return &Error{Key: key + ".schedule", Value: strconv.Quote(j.Schedule), Reason: OneLine(err.Error())}
		}
	}
	if j.TimeZone != "" {
		tz := &Error{Key: key + ".time_zone", Value: strconv.Quote(j.TimeZone)}
		switch _, err := time.LoadLocation(j.TimeZone); {
		case j.Schedule == "":
			tz.Reason = "only for jobs with a schedule"
		case strings.HasPrefix(j.Schedule, "CRON_TZ=") || strings.HasPrefix(j.Schedule, "TZ="):
			tz.Reason = "the schedule has a CRON_TZ= prefix already: keep one of them"
		case err != nil:
			tz.Reason = "unknown time zone: want an IANA name such as Europe/Paris, or UTC"
		}
		if tz.Reason != "" {
			return tz
		}
	}
	switch j.Misfire {
	case "":
	case worker.MisfireSkip, worker.MisfireRunOnce:
		if j.Schedule == "" {
			return &Error{Key: key + ".misfire", Value: strconv.Quote(string(j.Misfire)), Reason: "only for jobs with a schedule"}
		}
	default:
		return &Error{Key: key + ".misfire", Value: strconv.Quote(string(j.Misfire)), Reason: "must be one of skip, run-once"}
	}
	switch j.Restart {
	case "":
	case worker.RestartAlways, worker.RestartOnFailure, worker.RestartNever:
		if j.Schedule != "" {
			return &Error{Key: key + ".restart", Value: strconv.Quote(string(j.Restart)), Reason: "only for jobs without a schedule (pull jobs)"}
		}
	default:
		return &Error{Key: key + ".restart", Value: strconv.Quote(string(j.Restart)), Reason: "must be one of always, on-failure, never"}
	}
	return nil
}
