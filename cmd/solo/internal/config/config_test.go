package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
)

// minimal is the smallest valid file; error cases append to it or replace it.
const minimal = "election:\n  name: orders-sync\n"

// graceRemedy ends the message of a grace period shorter than the exit
// bound.
const graceRemedy = "the SIGKILL at the end of the grace period could come before solo released the lease; raise the grace period (terminationGracePeriodSeconds) and this value together, or lower election.shutdown_timeout"

func TestParse_Errors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		env  []string
		want string // exact error text
	}{
		// Structure.
		{name: "unknown key", yaml: "election:\n  name: a\n  tll: 10s\n", want: `config.yaml:3: unknown key election.tll (did you mean election.ttl?)`},
		{name: "unknown top-level key", yaml: minimal + "workers:\n  max_failures: 3\n", want: `config.yaml:3: unknown key workers (did you mean worker?)`},
		{name: "unknown job key", yaml: minimal + "jobs:\n  - name: a\n    cmd: [x]\n", want: `config.yaml:5: unknown key jobs[0].cmd`},
		{name: "duplicate key", yaml: minimal + "  ttl: 5s\n  ttl: 6s\n", want: `config.yaml:4: duplicate key election.ttl (first at line 3)`},
		{name: "section not a mapping", yaml: "election: orders\n", want: `config.yaml:1: election: want a mapping`},
		{name: "top level not a mapping", yaml: "- a\n- b\n", want: `config.yaml:1: want a mapping at the top level`},
		{name: "jobs not a list", yaml: minimal + "jobs:\n  name: a\n", want: `config.yaml:4: jobs: want a list`},
		{name: "command not a list", yaml: minimal + "jobs:\n  - name: a\n    command: echo hi\n", want: `config.yaml:5: jobs[0].command: want a list`},
		{name: "list for a string", yaml: "election:\n  name: [a, b]\n", want: `config.yaml:2: election.name: want a string`},
		{name: "syntax error", yaml: "election:\n  name: a\n ttl: 5s\n", want: `config.yaml:2: did not find expected key`},
		{name: "two documents", yaml: minimal + "---\nlog:\n  level: info\n", want: `config.yaml:3: more than one YAML document`},

		// Values as the file states them.
		{name: "bare integer duration", yaml: minimal + "  ttl: 10\n", want: `config.yaml:3: election.ttl 10: want a duration such as "10s"`},
		{name: "bare zero duration", yaml: minimal + "  ttl: 0\n", want: `config.yaml:3: election.ttl 0: want a duration such as "10s"`},
		{name: "quoted integer duration", yaml: minimal + "  ttl: \"10\"\n", want: `config.yaml:3: election.ttl "10": want a duration such as "10s"`},
		{name: "bad duration", yaml: minimal + "  ttl: ten seconds\n", want: `config.yaml:3: election.ttl "ten seconds": want a duration such as "10s"`},
		{name: "zero duration", yaml: minimal + "  ttl: 0s\n", want: `config.yaml:3: election.ttl 0s: must be positive`},
		{name: "negative duration", yaml: minimal + "  ttl: -1s\n", want: `config.yaml:3: election.ttl -1s: must be positive`},
		{name: "zero renew interval", yaml: minimal + "  renew_interval: 0s\n", want: `config.yaml:3: election.renew_interval 0s: must be positive`},
		{name: "zero restart backoff", yaml: minimal + "worker:\n  restart_backoff: 0s\n", want: `config.yaml:4: worker.restart_backoff 0s: must be positive`},
		{name: "duration as a list", yaml: minimal + "  ttl: [1s]\n", want: `config.yaml:3: election.ttl: want a duration such as "10s"`},
		{name: "word for an integer", yaml: minimal + "worker:\n  max_failures: five\n", want: `config.yaml:4: worker.max_failures "five": want an integer`},
		{name: "float for an integer", yaml: minimal + "worker:\n  max_failures: 1.5\n", want: `config.yaml:4: worker.max_failures 1.5: want an integer`},
		{name: "bad bool", yaml: minimal + "log:\n  dev: maybe\n", want: `config.yaml:4: log.dev "maybe": want true or false`},
		{name: "bad drift", yaml: minimal + "  drift: lots\n", want: `config.yaml:3: election.drift "lots": want a number`},

		// Validate, located in the file.
		{name: "empty name", yaml: "election:\n  name: \"\"\n", want: `config.yaml:2: election.name "": must not be empty: set election.name in config.yaml, SOLO_ELECTION_NAME or --name`},
		{name: "omitted name", yaml: "log:\n  level: info\n", want: `election.name "": must not be empty: set election.name in config.yaml, SOLO_ELECTION_NAME or --name`},
		{name: "empty file", yaml: "", want: `election.name "": must not be empty: set election.name in config.yaml, SOLO_ELECTION_NAME or --name`},
		{name: "name with brace", yaml: "election:\n  name: a{b}\n", want: `config.yaml:2: election.name "a{b}": must not contain '{' or '}'`},
		{name: "id with space", yaml: minimal + "  id: host 1\n", want: `config.yaml:3: election.id "host 1": must not contain white space or control characters`},
		{name: "deadline not below ttl", yaml: minimal + "  renew_deadline: 10s\n", want: `config.yaml:3: election.renew_deadline 10s: must be less than ttl×(1−drift) = 9.9s (ttl 10s, drift 0.01)`},
		{name: "interval not below deadline", yaml: minimal + "  renew_interval: 8s\n", want: `config.yaml:3: election.renew_interval 8s: must be less than renew_deadline (6.666666666s)`},
		{name: "derived deadline has no line", yaml: minimal + "  ttl: 3s\n  renew_deadline: 2s\n  renew_interval: 2s\n", want: `config.yaml:5: election.renew_interval 2s: must be less than renew_deadline (2s)`},
		{name: "drift out of range", yaml: minimal + "  drift: 0.5\n", want: `config.yaml:3: election.drift 0.5: must be in [0, 0.5)`},
		{name: "negative min replicas", yaml: minimal + "  min_replicas: -1\n", want: `config.yaml:3: election.min_replicas -1: must not be negative`},
		{name: "bad mode", yaml: minimal + "  mode: leader\n", want: `config.yaml:3: election.mode "leader": must be one of elect, standby, always, spread`},
		{name: "empty mode", yaml: minimal + "  mode: \"\"\n", want: `config.yaml:3: election.mode "": must be one of elect, standby, always, spread`},
		{name: "zero max failures", yaml: minimal + "worker:\n  max_failures: 0\n", want: `config.yaml:4: worker.max_failures 0: must be at least 1`},
		{name: "negative max failed terms", yaml: minimal + "worker:\n  max_failed_terms: -1\n", want: `config.yaml:4: worker.max_failed_terms -1: must not be negative (0: never give up)`},
		// Accepted and ignored before.
		{name: "max failed terms in spread mode", yaml: minimal + "  mode: spread\nworker:\n  max_failed_terms: 3\n", want: `config.yaml:5: worker.max_failed_terms 3: not supported with election.mode spread (jobs never give up there): set it to 0`},
		{name: "backoff above max", yaml: minimal + "worker:\n  restart_backoff: 1m\n", want: `config.yaml:4: worker.restart_backoff 1m0s: must not exceed worker.restart_backoff_max (30s)`},
		{name: "bad log time", yaml: minimal + "log:\n  time: rfc3339\n", want: `config.yaml:4: log.time "rfc3339": must be epoch or iso8601`},
		{name: "bad log level", yaml: minimal + "log:\n  level: verbose\n", want: `config.yaml:4: log.level "verbose": must be one of debug, info, warn, error`},
		{name: "bad http addr", yaml: minimal + "http:\n  addr: \"8080\"\n", want: `config.yaml:4: http.addr "8080": want host:port, such as "127.0.0.1:8080" or ":8080"`},
		{name: "bad fence dsn", yaml: minimal + "fence:\n  dsn: mysql://u:pw@db/app\n", want: `config.yaml:4: fence.dsn "mysql://u:xxxxx@db/app": want postgres://…, postgresql://… or sqlite:PATH`},
		{name: "empty sqlite path", yaml: minimal + "fence:\n  dsn: \"sqlite:\"\n", want: `config.yaml:4: fence.dsn "sqlite:": sqlite: needs a file path, such as sqlite:/var/lib/app/app.db`},
		{name: "bad redis url", yaml: "redis:\n  url: redis://u:pw@h:6379/x\n" + minimal, want: `config.yaml:2: redis.url "redis://u:xxxxx@h:6379/x": bad database number "x"`},
		{name: "sentinel url without master", yaml: "redis:\n  url: redis+sentinel://h1/\n" + minimal, want: `config.yaml:2: redis.url "redis+sentinel://h1/": missing master name`},
		{name: "empty job name", yaml: minimal + "jobs:\n  - command: [x]\n", want: `config.yaml:4: jobs[0].name "": must not be empty`},
		{name: "duplicate job name", yaml: minimal + "jobs:\n  - name: a\n  - name: b\n  - name: a\n", want: `config.yaml:6: jobs[2].name "a": duplicate job name (also jobs[0])`},
		{name: "bad schedule", yaml: minimal + "jobs:\n  - name: a\n    schedule: every minute\n", want: `config.yaml:5: jobs[0].schedule "every minute": expected 5 to 6 fields, found 2: [every minute]`},
		{name: "bad descriptor", yaml: minimal + "jobs:\n  - name: a\n    schedule: \"@every 10\"\n", want: `config.yaml:5: jobs[0].schedule "@every 10": failed to parse duration @every 10: time: missing unit in duration "10"`},
		{name: "misfire without schedule", yaml: minimal + "jobs:\n  - name: a\n    misfire: skip\n", want: `config.yaml:5: jobs[0].misfire "skip": only for jobs with a schedule`},
		{name: "bad misfire", yaml: minimal + "jobs:\n  - name: a\n    schedule: \"@hourly\"\n    misfire: catch-up\n", want: `config.yaml:6: jobs[0].misfire "catch-up": must be one of skip, run-once`},
		{name: "restart on cron job", yaml: minimal + "jobs:\n  - name: a\n    schedule: \"@hourly\"\n    restart: always\n", want: `config.yaml:6: jobs[0].restart "always": only for jobs without a schedule (pull jobs)`},
		{name: "bad restart", yaml: minimal + "jobs:\n  - name: a\n    restart: sometimes\n", want: `config.yaml:5: jobs[0].restart "sometimes": must be one of always, on-failure, never`},
		// The time zone of a cron job.
		{name: "unknown time zone", yaml: minimal + "jobs:\n  - name: a\n    schedule: \"0 2 * * *\"\n    time_zone: Mars/Olympus\n", want: `config.yaml:6: jobs[0].time_zone "Mars/Olympus": unknown time zone: want an IANA name such as Europe/Paris, or UTC`},
		{name: "time zone on a pull job", yaml: minimal + "jobs:\n  - name: a\n    time_zone: UTC\n", want: `config.yaml:5: jobs[0].time_zone "UTC": only for jobs with a schedule`},
		{name: "time zone and CRON_TZ", yaml: minimal + "jobs:\n  - name: a\n    schedule: \"CRON_TZ=UTC 0 2 * * *\"\n    time_zone: Europe/Paris\n", want: `config.yaml:6: jobs[0].time_zone "Europe/Paris": the schedule has a CRON_TZ= prefix already: keep one of them`},

		// The environment.
		{name: "env negative duration", yaml: minimal, env: []string{"SOLO_ELECTION_TTL=-1s"}, want: `SOLO_ELECTION_TTL="-1s": must be positive`},
		{name: "env zero duration", yaml: minimal, env: []string{"SOLO_ELECTION_RENEW_INTERVAL=0s"}, want: `SOLO_ELECTION_RENEW_INTERVAL="0s": must be positive`},
		{name: "env bare integer", yaml: minimal, env: []string{"SOLO_ELECTION_TTL=10"}, want: `SOLO_ELECTION_TTL="10": want a duration such as "10s"`},
		{name: "env bad integer", yaml: minimal, env: []string{"SOLO_WORKER_MAX_FAILURES=x"}, want: `SOLO_WORKER_MAX_FAILURES="x": want an integer`},
		{name: "env bad bool", yaml: minimal, env: []string{"SOLO_LOG_DEV=maybe"}, want: `SOLO_LOG_DEV="maybe": want true or false`},
		{name: "env invalid integer", yaml: minimal, env: []string{"SOLO_WORKER_MAX_FAILURES=0"}, want: `SOLO_WORKER_MAX_FAILURES="0": must be at least 1`},
		{name: "env bad mode", yaml: minimal, env: []string{"SOLO_ELECTION_MODE=leader"}, want: `SOLO_ELECTION_MODE="leader": must be one of elect, standby, always, spread`},
		{name: "env bad level", yaml: minimal, env: []string{"SOLO_LOG_LEVEL=loud"}, want: `SOLO_LOG_LEVEL="loud": must be one of debug, info, warn, error`},
		{name: "env interval not below deadline", yaml: minimal, env: []string{"SOLO_ELECTION_RENEW_INTERVAL=8s"}, want: `SOLO_ELECTION_RENEW_INTERVAL="8s": must be less than renew_deadline (6.666666666s)`},
		{name: "env redis url redacted", yaml: minimal, env: []string{"SOLO_REDIS_URL=redis://u:pw@h/x"}, want: `SOLO_REDIS_URL="redis://u:xxxxx@h/x": bad database number "x"`},
		{name: "env name with space", yaml: minimal, env: []string{"SOLO_ELECTION_NAME=a b"}, want: `SOLO_ELECTION_NAME="a b": must not contain white space or control characters`},
		{name: "env overrides a good file value", yaml: minimal + "  ttl: 5s\n", env: []string{"SOLO_ELECTION_TTL=0s"}, want: `SOLO_ELECTION_TTL="0s": must be positive`},
		{name: "env empty means default", yaml: minimal, env: []string{"SOLO_ELECTION_NAME="}, want: `SOLO_ELECTION_NAME="": must not be empty: set election.name in config.yaml, SOLO_ELECTION_NAME or --name`},
		{name: "env last one wins", yaml: minimal, env: []string{"SOLO_ELECTION_TTL=5s", "SOLO_ELECTION_TTL=-5s"}, want: `SOLO_ELECTION_TTL="-5s": must be positive`},
		// Old code: unknown SOLO_* variables were ignored.
		{name: "env unknown variable", yaml: minimal, env: []string{"SOLO_ELECTION_TLL=1s"},
			want: `unknown environment variable SOLO_ELECTION_TLL (did you mean SOLO_ELECTION_TTL?); SOLO_* variables name configuration keys (config.yaml)`},
		{name: "env unknown variable, nothing near", yaml: minimal, env: []string{"SOLO_COLOUR=blue"},
			want: `unknown environment variable SOLO_COLOUR; SOLO_* variables name configuration keys (config.yaml)`},

		// election.grace_period: parsed as every
		// duration, then held against solo run's exit bound (ExitBound):
		// here 10s shutdown_timeout + 1s release + 1s log flush = 12s.
		{name: "negative grace period", yaml: minimal + "  grace_period: -1s\n", want: `config.yaml:3: election.grace_period -1s: must be positive`},
		{name: "unparsable grace period", yaml: minimal + "  grace_period: soon\n", want: `config.yaml:3: election.grace_period "soon": want a duration such as "10s"`},
		{name: "grace period in bare seconds", yaml: minimal, env: []string{"SOLO_ELECTION_GRACE_PERIOD=15"}, want: `SOLO_ELECTION_GRACE_PERIOD="15": want a duration such as "10s"`},
		{name: "grace period too short", yaml: minimal + "  grace_period: 11s\n",
			want: `config.yaml:3: election.grace_period 11s: shorter than solo run's exit bound 12s (election.shutdown_timeout 10s + 1 Redis round trip of 1s (the release) + 1s log flush): ` + graceRemedy},
		{name: "grace period too short from env", yaml: minimal + "  shutdown_timeout: 20s\nhttp:\n  addr: :8080\n", env: []string{"SOLO_ELECTION_GRACE_PERIOD=15s"},
			want: `SOLO_ELECTION_GRACE_PERIOD="15s": shorter than solo run's exit bound 24s (election.shutdown_timeout 20s + 1 Redis round trip of 1s (the release) + 2s http shutdown + 1s log flush): ` + graceRemedy},
		{name: "grace period too short in spread mode", yaml: minimal + "  grace_period: 12s\n  mode: spread\nredis:\n  url: redis://r:6379/0?read_timeout=500ms\n",
			want: `config.yaml:3: election.grace_period 12s: shorter than solo run's exit bound 12.5s (election.shutdown_timeout 10s + 3 Redis round trips of 500ms (leave, releases, entry removal) + 1s log flush): ` + graceRemedy},
		{name: "file error before env", yaml: minimal + "  ttl: 0s\n", env: []string{"SOLO_ELECTION_TTL=5s"}, want: `config.yaml:3: election.ttl 0s: must be positive`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tt.yaml), tt.env)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("Parse() = %+v, %v\nwant error %s", cfg, err, tt.want)
			}
			if !reflect.DeepEqual(cfg, Config{}) {
				t.Fatalf("Parse() returned %+v with its error, want the zero Config", cfg)
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %T is not a *Error", err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error spans lines: %q", err)
			}
		})
	}
}

func TestConfigError_Fields(t *testing.T) {
	_, err := Parse([]byte(minimal+"  ttl: -1s\n"), nil)
	ce, ok := errors.AsType[*Error](err)
	if !ok {
		t.Fatalf("error %T is not a *Error", err)
	}
	want := Error{Key: "election.ttl", Value: "-1s", Reason: "must be positive", File: "config.yaml", Line: 3}
	if *ce != want {
		t.Fatalf("Error = %+v, want %+v", *ce, want)
	}

	_, err = Parse([]byte(minimal), []string{"SOLO_ELECTION_MODE=x"})
	ce, _ = errors.AsType[*Error](err)
	want = Error{Key: "election.mode", Value: `"x"`, Reason: "must be one of elect, standby, always, spread", Env: "SOLO_ELECTION_MODE"}
	if ce == nil || *ce != want {
		t.Fatalf("Error = %+v, want %+v", ce, want)
	}
}

// example is the config.yaml of the design brief, with the election's
// derived durations left empty (which means default).
const example = `redis:
  url: redis://127.0.0.1:6379/0   # "" means: none configured
election:
  name: orders-sync
  id: ""              # default host-pid-random
  key_prefix: solo
  ttl: 10s
  renew_interval:
  renew_deadline:
  retry_interval:
  resign_cooldown:
  shutdown_timeout:
  drift: 0.01
  min_replicas: 0
  replica_timeout:
  mode: elect         # elect | standby | always
worker:
  max_failures: 5          # consecutive job failures before the instance resigns
  restart_backoff: 1s      # first restart delay of a failed pull job
  restart_backoff_max: 30s # cap of the exponential back-off
http:
  addr: ""            # e.g. 127.0.0.1:8080; "" = off
log:
  level: info         # debug | info | warn | error
  dev: false          # console instead of JSON
jobs:                 # used by the solo run command (no "--")
  - name: report
    command: ["sh", "-c", "echo hi"]
    schedule: "@every 10s"
    misfire: skip
  - name: pull
    command: [worker]
    restart: on-failure
`

func TestParse_Example(t *testing.T) {
	got, err := Parse([]byte(example), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.Redis.URL = "redis://127.0.0.1:6379/0"
	want.Election.Name = "orders-sync"
	want.Election.Drift = 0.01
	want.Jobs = []JobConfig{
		{Name: "report", Command: []string{"sh", "-c", "echo hi"}, Schedule: "@every 10s", Misfire: worker.MisfireSkip},
		{Name: "pull", Command: []string{"worker"}, Restart: worker.RestartOnFailure},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Parse(example) =\n%+v\nwant\n%+v", got, want)
	}
	if lc := got.LeaderConfig(); !reflect.DeepEqual(lc, want.Election.Config) {
		t.Fatalf("LeaderConfig() = %+v, want %+v", lc, want.Election.Config)
	}
}

func TestParse_OmittedKeysTakeDefaults(t *testing.T) {
	got, err := Parse([]byte(minimal+"jobs:\n  - name: cron\n    schedule: '*/5 * * * *'\n  - name: pull\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.Election.Name = "orders-sync"
	want.Jobs = []JobConfig{
		{Name: "cron", Schedule: "*/5 * * * *", Misfire: worker.MisfireSkip},
		{Name: "pull", Restart: worker.RestartAlways},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Parse() =\n%+v\nwant\n%+v", got, want)
	}
	if got.Election.Mode != worker.ModeElect || got.Worker.MaxFailures != 5 || got.Worker.RestartBackoff != time.Second ||
		got.Worker.RestartBackoffMax != 30*time.Second || got.Log.Level != "info" || got.Election.TTL != 10*time.Second ||
		got.Election.KeyPrefix != "solo" {
		t.Fatalf("defaults not applied: %+v", got)
	}
	// Derived durations stay zero, so leader derives them from the TTL in
	// use: setting only the TTL scales them all.
	short, err := Parse([]byte(minimal+"  ttl: 3s\n"), nil)
	if err != nil {
		t.Fatalf("ttl 3s alone: %v", err)
	}
	if lc := short.LeaderConfig(); lc.TTL != 3*time.Second || lc.RenewDeadline != 0 || lc.StopBudget() != time.Second {
		t.Fatalf("LeaderConfig() = %+v, want ttl 3s with derived timings", lc)
	}
}

func TestParse_EmptyValuesMeanDefault(t *testing.T) {
	got, err := Parse([]byte(minimal+"  ttl:\n  drift: ~\n  min_replicas: ''\nworker:\n  max_failures:\n  restart_backoff: ''\nhttp:\nlog:\n  dev:\njobs:\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.Election.Name = "orders-sync"
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Parse() =\n%+v\nwant\n%+v", got, want)
	}
}

func TestParse_EnvOverridesFile(t *testing.T) {
	file := minimal + "  ttl: 20s\n  mode: standby\nredis:\n  url: redis://file:6379\nlog:\n  level: warn\nhttp:\n  addr: 127.0.0.1:8080\n"
	env := []string{
		"PATH=/bin",
		"SOLO_TERM=7",          // set by `solo run` for its jobs: not a config key
		"SOLO_REQUIRE_REDIS=1", // a test suite's switch: allowed
		"SOLO_REDIS_URL=redis+cluster://h1:7000,h2:7001",
		"SOLO_ELECTION_NAME=billing",
		"SOLO_ELECTION_ID=me-1",
		"SOLO_ELECTION_KEY_PREFIX=app",
		"SOLO_ELECTION_TTL=30s",
		"SOLO_ELECTION_RENEW_INTERVAL=5s",
		"SOLO_ELECTION_RENEW_DEADLINE=20s",
		"SOLO_ELECTION_RETRY_INTERVAL=3s",
		"SOLO_ELECTION_RESIGN_COOLDOWN=6s",
		"SOLO_ELECTION_SHUTDOWN_TIMEOUT=25s",
		"SOLO_ELECTION_DRIFT=0.05",
		"SOLO_ELECTION_MIN_REPLICAS=2",
		"SOLO_ELECTION_REPLICA_TIMEOUT=250ms",
		"SOLO_ELECTION_MODE=always",
		"SOLO_WORKER_MAX_FAILURES=9",
		"SOLO_WORKER_RESTART_BACKOFF=500ms",
		"SOLO_WORKER_RESTART_BACKOFF_MAX=10s",
		"SOLO_HTTP_ADDR=", // empty: the default, off
		"SOLO_LOG_LEVEL=error",
		"SOLO_LOG_DEV=true",
	}
	got, err := Parse([]byte(file), env)
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.Redis.URL = "redis+cluster://h1:7000,h2:7001"
	want.Election.Config = leader.Config{
		Name: "billing", ID: "me-1", KeyPrefix: "app", TTL: 30 * time.Second,
		RenewInterval: 5 * time.Second, RenewDeadline: 20 * time.Second, RetryInterval: 3 * time.Second,
		ResignCooldown: 6 * time.Second, ShutdownTimeout: 25 * time.Second, Drift: 0.05,
		MinReplicas: 2, ReplicaTimeout: 250 * time.Millisecond,
	}
	want.Election.Mode = worker.ModeAlways
	want.Worker = worker.Policy{MaxFailures: 9, RestartBackoff: 500 * time.Millisecond, RestartBackoffMax: 10 * time.Second}
	want.Log = LogConfig{Level: "error", Dev: true}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Parse() =\n%+v\nwant\n%+v", got, want)
	}

	// An empty variable resets a key the file set to its default.
	got, err = Parse([]byte(file), []string{"SOLO_ELECTION_TTL=", "SOLO_ELECTION_MODE=", "SOLO_LOG_LEVEL="})
	if err != nil {
		t.Fatal(err)
	}
	if got.Election.TTL != leader.DefaultTTL || got.Election.Mode != worker.ModeElect || got.Log.Level != "info" {
		t.Fatalf("empty variables did not reset: ttl %s mode %s level %s", got.Election.TTL, got.Election.Mode, got.Log.Level)
	}
}

func TestEnvVars(t *testing.T) {
	want := []string{
		"SOLO_REDIS_URL", "SOLO_REDIS_URL_FILE", "SOLO_REDIS_TLS_CA_FILE", "SOLO_REDIS_TLS_CERT_FILE", "SOLO_REDIS_TLS_KEY_FILE", "SOLO_REDIS_TLS_SERVER_NAME",
		"SOLO_ELECTION_NAME", "SOLO_ELECTION_ID", "SOLO_ELECTION_KEY_PREFIX", "SOLO_ELECTION_TTL",
		"SOLO_ELECTION_RENEW_INTERVAL", "SOLO_ELECTION_RENEW_DEADLINE", "SOLO_ELECTION_RETRY_INTERVAL",
		"SOLO_ELECTION_RESIGN_COOLDOWN", "SOLO_ELECTION_SHUTDOWN_TIMEOUT", "SOLO_ELECTION_DRIFT",
		"SOLO_ELECTION_MIN_REPLICAS", "SOLO_ELECTION_REPLICA_TIMEOUT", "SOLO_ELECTION_VALUE", "SOLO_ELECTION_MODE",
		"SOLO_ELECTION_GRACE_PERIOD",
		"SOLO_WORKER_MAX_FAILURES", "SOLO_WORKER_RESTART_BACKOFF", "SOLO_WORKER_RESTART_BACKOFF_MAX", "SOLO_WORKER_MAX_FAILED_TERMS",
		"SOLO_HTTP_ADDR", "SOLO_FENCE_DSN", "SOLO_FENCE_DSN_FILE", "SOLO_FENCE_TABLE", "SOLO_LOG_LEVEL", "SOLO_LOG_DEV", "SOLO_LOG_TIME",
		"SOLO_SPREAD_HEARTBEAT", "SOLO_SPREAD_MEMBER_TTL", "SOLO_SPREAD_MIN_HOLD",
	}
	if got := EnvVars(); !slices.Equal(got, want) {
		t.Fatalf("EnvVars() =\n%q\nwant\n%q", got, want)
	}
}

func TestLoad_FullRoundTrip(t *testing.T) {
	got, err := Load("testdata/full.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Redis: RedisConfig{URL: "rediss+sentinel://app:secret@10.0.0.1:26379,10.0.0.2:26379/mymaster/2?sentinel_password=s3",
			TLSCAFile: "testdata/tls/cert.pem", TLSCertFile: "testdata/tls/cert.pem", TLSKeyFile: "testdata/tls/key.pem", TLSServerName: "redis.example"},
		Election: ElectionConfig{
			Config: leader.Config{
				Name: "orders-sync", ID: "host-a-1", KeyPrefix: "solo-test", TTL: 15 * time.Second,
				RenewInterval: 3 * time.Second, RenewDeadline: 9 * time.Second, RetryInterval: 2 * time.Second,
				ResignCooldown: 4 * time.Second, ShutdownTimeout: 20 * time.Second, Drift: 0.02,
				MinReplicas: 1, ReplicaTimeout: 500 * time.Millisecond, Value: "10.0.0.7:8080",
			},
			Mode:        worker.ModeStandby,
			GracePeriod: 25 * time.Second,
		},
		Worker: worker.Policy{MaxFailures: 3, RestartBackoff: 2 * time.Second, RestartBackoffMax: time.Minute, MaxFailedTerms: 4},
		HTTP:   HTTPConfig{Addr: "127.0.0.1:8080"},
		Fence:  FenceConfig{DSN: "postgres://solo:secret@127.0.0.1:5432/app", Table: "app_fence"},
		Log:    LogConfig{Level: "debug", Dev: true, Time: "iso8601"},
		Spread: worker.SpreadConfig{Heartbeat: 4 * time.Second, MemberTTL: 15 * time.Second, MinHold: 20 * time.Second},
		Jobs: []JobConfig{
			{Name: "report", Command: []string{"sh", "-c", "echo hi"}, Schedule: "@every 10s", Misfire: worker.MisfireRunOnce, TimeZone: "Europe/Paris"},
			{Name: "sync", Command: []string{"/usr/local/bin/sync", "--once"}, Restart: worker.RestartOnFailure},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Load(full.yaml) =\n%+v\nwant\n%+v", got, want)
	}

	out, err := yaml.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Parse(out, nil)
	if err != nil {
		t.Fatalf("Parse(Marshal(full)) = %v\n%s", err, out)
	}
	if !reflect.DeepEqual(again, got) {
		t.Fatalf("round trip changed the config:\n%+v\nwant\n%+v", again, got)
	}

	// The struct mirrors the file key for key: full.yaml sets every key,
	// and marshalling the Config writes exactly those keys.
	full, err := os.ReadFile("testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if fileKeys, structKeys := keyPaths(t, full), keyPaths(t, out); !slices.Equal(fileKeys, structKeys) {
		t.Fatalf("keys of full.yaml\n%q\ndiffer from the Config's\n%q", fileKeys, structKeys)
	}
}

func TestLoad_Files(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "solo.yaml")
	if err := os.WriteFile(path, []byte(minimal+"  ttl: -2s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path, nil); err == nil || err.Error() != path+`:3: election.ttl -2s: must be positive` {
		t.Fatalf("Load(bad file) = %v", err)
	}

	if _, err := Load(filepath.Join(dir, "missing.yaml"), nil); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load(missing file) = %v, want fs.ErrNotExist", err)
	}

	// No file: defaults and the environment only.
	got, err := Load("", []string{"SOLO_ELECTION_NAME=orders-sync"})
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.Election.Name = "orders-sync"
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Load(\"\") =\n%+v\nwant\n%+v", got, want)
	}
	if _, err := Load("", nil); err == nil || err.Error() != `election.name "": must not be empty: set election.name in config.yaml, SOLO_ELECTION_NAME or --name` {
		t.Fatalf("Load(\"\", no env) = %v", err)
	}
}

func TestConfig_Validate(t *testing.T) {
	c := DefaultConfig()
	c.Election.Name = "orders-sync"
	c.Jobs = []JobConfig{{Name: "a", Schedule: "0 */5 * * * *"}, {Name: "b"}} // empty policies mean defaults
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate() = %v", err)
	}

	c.Worker = worker.Policy{}
	if err := c.Validate(); err == nil || err.Error() != `worker.max_failures 0: must be at least 1` {
		t.Fatalf("Validate(zero Policy) = %v", err)
	}
	c.Worker = worker.Policy{MaxFailures: 1, RestartBackoff: -time.Second, RestartBackoffMax: time.Second}
	if err := c.Validate(); err == nil || err.Error() != `worker.restart_backoff -1s: must be positive` {
		t.Fatalf("Validate(negative backoff) = %v", err)
	}

	var zero Config
	zero.Election.Name = "x"
	if err := zero.Validate(); err == nil || err.Error() != `election.mode "": must be one of elect, standby, always, spread` {
		t.Fatalf("Validate(zero Config) = %v", err)
	}
}

// keyPaths lists the key paths of a YAML document, with list indices
// dropped (jobs.name), sorted and without duplicates.
func keyPaths(t *testing.T, data []byte) []string {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	var paths []string
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		switch n.Kind {
		case yaml.DocumentNode, yaml.SequenceNode:
			for _, c := range n.Content {
				walk(c, prefix)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				p := n.Content[i].Value
				if prefix != "" {
					p = prefix + "." + p
				}
				paths = append(paths, p)
				walk(n.Content[i+1], p)
			}
		}
	}
	walk(&doc, "")
	slices.Sort(paths)
	return slices.Compact(paths)
}

// TestParse_NeverFiringSchedule: a schedule that parses but never fires is
// refused with its line, through worker.CheckSchedule.
func TestParse_NeverFiringSchedule(t *testing.T) {
	_, err := Parse([]byte("election:\n  name: orders-sync\njobs:\n  - name: feb30\n    schedule: \"0 0 30 2 *\"\n"), nil)
	want := `config.yaml:5: jobs[0].schedule "0 0 30 2 *": job "feb30" never fires: no date in the next five years matches it`
	if err == nil || err.Error() != want {
		t.Errorf("config: got %v\nwant %s", err, want)
	}
}

// TestLibraryKeys_EveryField: every exported field of the library types in
// Config has a file key, the field's name in snake case (as
// leader.ConfigError.Field names it), and every key names a field: a field
// added to leader.Config, worker.Policy or worker.SpreadConfig fails here
// until solo's file has its key.
func TestLibraryKeys_EveryField(t *testing.T) {
	for typ, keys := range libraryKeys {
		fields := map[string]bool{}
		for i := range typ.NumField() {
			f := typ.Field(i)
			if !f.IsExported() {
				continue
			}
			fields[f.Name] = true
			key, ok := keys[f.Name]
			if !ok {
				t.Errorf("%s.%s has no key in libraryKeys", typ, f.Name)
				continue
			}
			if want := snakeCase(f.Name); key != want {
				t.Errorf("%s.%s: key %q, want %q", typ, f.Name, key, want)
			}
		}
		for name := range keys {
			if !fields[name] {
				t.Errorf("libraryKeys[%s] names %s, which is no exported field", typ, name)
			}
		}
	}
}

// snakeCase returns a Go field name in snake case: RenewInterval
// renew_interval, MemberTTL member_ttl, ID id.
func snakeCase(name string) string {
	var b strings.Builder
	r := []rune(name)
	for i, c := range r {
		upper := c >= 'A' && c <= 'Z'
		if upper && i > 0 {
			prevLower := r[i-1] >= 'a' && r[i-1] <= 'z'
			nextLower := i+1 < len(r) && r[i+1] >= 'a' && r[i+1] <= 'z'
			if prevLower || (nextLower && r[i-1] >= 'A' && r[i-1] <= 'Z') {
				b.WriteByte('_')
			}
		}
		if upper {
			c += 'a' - 'A'
		}
		b.WriteRune(c)
	}
	return b.String()
}
