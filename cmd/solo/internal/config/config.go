package config

import (
	"bytes"
	"errors"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
)

// DefaultLogLevel is log.level's default.
const DefaultLogLevel = "info"

// EnvPrefix starts the name of every environment variable that overrides a
// configuration key: SOLO_ELECTION_TTL overrides election.ttl.
const EnvPrefix = "SOLO_"

// Config is the whole configuration file (config.yaml) of the solo
// command. Load and Parse apply defaults, environment
// overrides and Validate; a Config built in code should be started from
// DefaultConfig and checked with Validate.
type Config struct {
	// Redis says where the leases live.
	Redis RedisConfig `yaml:"redis"`

	// Election holds the election's tunables and this instance's mode.
	Election ElectionConfig `yaml:"election"`

	// Worker is how failing pull jobs are restarted.
	Worker worker.Policy `yaml:"worker"`

	// HTTP is the status and metrics endpoint.
	HTTP HTTPConfig `yaml:"http"`

	// Fence is the SQL database in which `solo run` claims every term
	// before the program starts, so that the program's own fenced writes
	// (leader/fence's statements, with SOLO_TERM and SOLO_ID) refuse a
	// stale leader.
	Fence FenceConfig `yaml:"fence"`

	// Log is the zap logger's setup.
	Log LogConfig `yaml:"log"`

	// Spread tunes election.mode spread: each job an election of its own
	// (GROUP.JOB, the group being election.name), spread over the live
	// instances (worker.Spread).
	Spread worker.SpreadConfig `yaml:"spread"`

	// Jobs are the commands `solo run` runs under leadership when it is
	// given none on its command line. Not overridable from the environment.
	Jobs []JobConfig `yaml:"jobs"`
}

// RedisConfig says where the leases live.
type RedisConfig struct {
	// URL is a Redis URL as redisurl.Parse accepts it: redis://,
	// rediss://, redis+sentinel:// or redis+cluster://. Default "": none
	// configured (a program may bring its own client).
	URL string `yaml:"url"`

	// URLFile is a file holding the URL, read at start with trailing
	// newlines trimmed: the form that keeps the password out of argv and
	// the environment (a mounted Kubernetes Secret). Give it or URL, not
	// both. Default "": none.
	URLFile string `yaml:"url_file"`

	// TLSCAFile, TLSCertFile, TLSKeyFile and TLSServerName set up the TLS
	// of a rediss URL (rediss://, rediss+sentinel://, rediss+cluster://).
	// Each is the URL option of the same name (redisurl.Parse), added to
	// the URL by ClientURL; one given both here and in the URL is an error.
	// The files are read when a command starts.
	//
	// TLSCAFile is a PEM file of the authorities that verify the server's
	// certificate. Default "": the system's.
	TLSCAFile string `yaml:"tls_ca_file"`

	// TLSCertFile and TLSKeyFile are the PEM client certificate and its
	// private key, for a server that requires clients to authenticate
	// (redis-server --tls-auth-clients yes). Both or neither. Default "".
	TLSCertFile string `yaml:"tls_cert_file"`
	TLSKeyFile  string `yaml:"tls_key_file"`

	// TLSServerName is the name the server's certificate must hold.
	// Default "": the host of each address dialed.
	TLSServerName string `yaml:"tls_server_name"`
}

// tlsOptions returns the URL option of each TLS key that is set, in key
// order.
func (r RedisConfig) tlsOptions() [][2]string {
	var opts [][2]string
	for _, o := range [][2]string{
		{"tls_ca_file", r.TLSCAFile}, {"tls_cert_file", r.TLSCertFile},
		{"tls_key_file", r.TLSKeyFile}, {"tls_server_name", r.TLSServerName},
	} {
		if o[1] != "" {
			opts = append(opts, o)
		}
	}
	return opts
}

// ClientURL returns URL with the redis.tls_* keys that are set added as its
// options: the URL every command connects with.
func (r RedisConfig) ClientURL() string {
	opts := r.tlsOptions()
	if r.URL == "" || len(opts) == 0 {
		return r.URL
	}
	u, sep := r.URL, "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	for _, o := range opts {
		u += sep + o[0] + "=" + url.QueryEscape(o[1])
		sep = "&"
	}
	return u
}

// ElectionConfig is leader.Config (its keys sit directly under election:)
// plus the instance's Mode.
type ElectionConfig struct {
	leader.Config `yaml:",inline"`

	// Mode is elect, standby or always. Default elect.
	Mode worker.Mode `yaml:"mode"`

	// GracePeriod is the time this process is given, after SIGTERM, before
	// it is killed: Kubernetes' terminationGracePeriodSeconds, which the
	// container cannot read, so the manifest sets it here too (as
	// SOLO_ELECTION_GRACE_PERIOD). Validate refuses one shorter than solo
	// run's exit bound (ExitBound). Default 0: not told, not checked.
	GracePeriod time.Duration `yaml:"grace_period"`
}

// HTTPConfig is the status and metrics endpoint.
type HTTPConfig struct {
	// Addr is the listen address, such as "127.0.0.1:8080" or ":8080".
	// Default "": no HTTP server.
	Addr string `yaml:"addr"`
}

// FenceConfig names the database `solo run` claims each term in.
type FenceConfig struct {
	// DSN is the database: postgres://… or postgresql://… (PostgreSQL,
	// through pgx), or sqlite:PATH (SQLite through modernc.org/sqlite, on
	// one host only). Default "": no claim.
	DSN string `yaml:"dsn"`

	// DSNFile is a file holding the DSN, read at start with trailing
	// newlines trimmed, as redis.url_file. Give it or DSN, not both.
	// Default "": none.
	DSNFile string `yaml:"dsn_file"`

	// Table is the fence table, created if missing. Default solo_fence.
	Table string `yaml:"table"`
}

// LogConfig is the logger's setup.
type LogConfig struct {
	// Level is debug, info, warn or error. Default info.
	Level string `yaml:"level"`

	// Dev selects human-readable console output instead of JSON. Default
	// false.
	Dev bool `yaml:"dev"`

	// Time is how JSON lines stamp their "ts": LogTimeEpoch (seconds since
	// 1970 as a float, the default) or LogTimeISO8601 (UTC, milliseconds).
	Time string `yaml:"time"`
}

// The values of log.time.
const (
	LogTimeEpoch   = "epoch"
	LogTimeISO8601 = "iso8601"
)

// JobConfig is one job of the configuration file: a cron job when it has a
// Schedule, otherwise a long-running pull job.
type JobConfig struct {
	// Name identifies the job in logs, metrics and Redis. Required; unique.
	Name string `yaml:"name"`

	// Command is the program and its arguments (no shell unless you name
	// one). The loader accepts an empty command; `solo run` rejects it.
	Command []string `yaml:"command"`

	// Schedule is a robfig/cron v3 spec: 5 fields, 6 with seconds first, or
	// a descriptor such as "@every 10s" or "@hourly". Empty: a pull job.
	Schedule string `yaml:"schedule"`

	// Misfire is the policy for ticks missed during a failover; cron jobs
	// only. Empty means worker.MisfireSkip (Load and Parse fill it in).
	Misfire worker.Misfire `yaml:"misfire"`

	// Restart is when a pull job that returned is started again; pull jobs
	// only. Empty means worker.RestartAlways (Load and Parse fill it in).
	Restart worker.Restart `yaml:"restart"`

	// TimeZone is the IANA time zone of the schedule, such as
	// "Europe/Paris"; cron jobs only. Default "": UTC, whatever the host's
	// zone, so that every instance fires the same instant (a CRON_TZ=
	// prefix in the schedule works too, but not both).
	TimeZone string `yaml:"time_zone"`
}

// Spec is the job's schedule with its time zone as a CRON_TZ= prefix.
func (j JobConfig) Spec() string {
	if j.TimeZone == "" || j.Schedule == "" {
		return j.Schedule
	}
	return "CRON_TZ=" + j.TimeZone + " " + j.Schedule
}

// DefaultConfig returns the defaults: no Redis URL, an election with an
// empty name, key prefix "solo", TTL 10s and mode elect, max_failures 5,
// restart_backoff 1s up to 30s, no HTTP server, log level info, no jobs.
// The election's other durations stay zero, which leader.Config takes as
// "derived from the TTL in use", so setting only the TTL scales them all.
func DefaultConfig() Config {
	return Config{
		Election: ElectionConfig{
			Config: leader.Config{KeyPrefix: leader.DefaultKeyPrefix, TTL: leader.DefaultTTL},
			Mode:   worker.ModeElect,
		},
		Worker: worker.DefaultPolicy(),
		Log:    LogConfig{Level: DefaultLogLevel},
	}
}

// Load reads the YAML file at path (none when path is ""), applies the
// environment overrides in env (KEY=VALUE strings such as os.Environ
// returns) and validates the result. Errors about values are *Error,
// located by file and line or by environment variable; see Parse for the
// rules.
func Load(path string, env []string) (Config, error) {
	if path == "" {
		return parse("", nil, env)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	return parse(path, data, env)
}

// Parse is Load for a file already read; errors name it "config.yaml".
//
// Rules:
//   - a key the Config has no field for is an error, as is a key given twice;
//   - an omitted key, or one with an empty or null value, keeps its default;
//   - durations are strings such as "10s"; a bare number is an error, and
//     so is a zero or negative duration given explicitly;
//   - every scalar key can be overridden by an environment variable named
//     SOLO_ and the key's path upper-cased with '.' → '_' (see EnvVars),
//     parsed by the same rules; an empty variable means the default;
//   - then Validate runs.
func Parse(data []byte, env []string) (Config, error) {
	return parse("config.yaml", data, env)
}

// EnvVars returns the names of the environment variables that override
// configuration keys, in file order: SOLO_REDIS_URL, SOLO_ELECTION_NAME, …
func EnvVars() []string {
	var names []string
	for _, l := range configLeaves() {
		names = append(names, l.env)
	}
	return names
}

// LeaderConfig returns the election's leader.Config.
func (c Config) LeaderConfig() leader.Config {
	return c.Election.Config
}

// parse is Load and Parse: defaults, then the file, then env, then Validate.
func parse(file string, data []byte, env []string) (Config, error) {
	c := DefaultConfig()
	d := &yamlDecoder{file: file, lines: map[string]int{}, given: map[string]bool{}}
	if len(bytes.TrimSpace(data)) > 0 {
		if err := d.decodeFile(data, &c); err != nil {
			return Config{}, err
		}
	}
	fromEnv, err := applyEnv(env, &c)
	if err != nil {
		return Config{}, err
	}
	if err := readSecretFiles(&c); err != nil {
		return Config{}, err
	}
	minGiven := d.given[minReplicasKey]
	if given, present := envGiven(env, minReplicasEnv); present {
		minGiven = given
	}
	applySentinelDefaults(&c, minGiven)
	for i := range c.Jobs {
		j := &c.Jobs[i]
		switch {
		case j.Schedule != "" && j.Misfire == "":
			j.Misfire = worker.MisfireSkip
		case j.Schedule == "" && j.Restart == "":
			j.Restart = worker.RestartAlways
		}
	}
	if err := c.Validate(); err != nil {
		// Say where the bad value came from: the variable that set it
		// last, or its line in the file.
		if ce, ok := errors.AsType[*Error](err); ok {
			if name, ok := fromEnv[ce.Key]; ok {
				ce.Env = name
				if !strings.HasPrefix(ce.Value, `"`) {
					ce.Value = strconv.Quote(ce.Value)
				}
			} else if line, ok := d.line(ce.Key); ok {
				ce.File, ce.Line = file, line
			}
		}
		return Config{}, err
	}
	return c, nil
}
