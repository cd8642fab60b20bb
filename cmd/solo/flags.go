package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/solo-run/solo/cmd/solo/internal/config"
)

// common are the flags every command that reads the configuration has.
type common struct {
	config string
	redis  string
	name   string
	ttl    string
	value  string
	dev    bool
	// fenceDSN and fenceTable are --fence-dsn and --fence-table.
	fenceDSN, fenceTable string
	// logFormat is --log-format: auto, console or json; logTime is
	// --log-time.
	logFormat, logTime string
	// gracePeriod is --grace-period.
	gracePeriod string
	// set records which flags were given.
	set map[string]bool
	// cmd and positional are register's.
	cmd        string
	positional bool
}

// register defines the configuration flags on fs, the same on every
// command that reads the configuration (a script that passes one to
// status keeps working). Help lists a command's flags only: -c, --redis
// and --name everywhere, runOnlyFlags on run alone (helpDefaults). cmd is
// the command's name; positional says whether it takes election names as
// arguments (status, resign, forget), which the remedy for a missing name
// mentions. A command's own flags (--json, --wait …) are defined by the
// command after register.
func (c *common) register(fs *flag.FlagSet, cmd string, positional bool) {
	c.cmd, c.positional = cmd, positional
	fs.StringVar(&c.config, "c", "", "configuration `file` (default: $SOLO_CONFIG, else ./config.yaml if present)")
	fs.StringVar(&c.config, "config", "", "same as -c")
	fs.StringVar(&c.redis, "redis", "", "Redis `URL`, overrides redis.url")
	fs.StringVar(&c.name, "name", "", "election `name`, overrides election.name")
	fs.StringVar(&c.ttl, "ttl", "", "lease `duration`, overrides election.ttl")
	fs.StringVar(&c.value, "value", "", "`value` proclaimed while this instance leads, such as its address (status and /leader show it), overrides election.value")
	fs.StringVar(&c.fenceDSN, "fence-dsn", "", "claim every term in this SQL database before the program starts: postgres://… or sqlite:PATH (`DSN`, overrides fence.dsn)")
	fs.StringVar(&c.fenceTable, "fence-table", "", "fence `table`, overrides fence.table (default solo_fence)")
	fs.StringVar(&c.gracePeriod, "grace-period", "", "time this process gets after SIGTERM before it is killed, such as Kubernetes' terminationGracePeriodSeconds (`duration`, overrides election.grace_period); refused when shorter than solo run's exit bound")
	fs.BoolVar(&c.dev, "dev", false, "human-readable console logs instead of JSON (same as --log-format console)")
	fs.StringVar(&c.logFormat, "log-format", "auto", "`format` of solo's logs: auto (console when stderr is a terminal, else JSON), console or json")
	fs.StringVar(&c.logTime, "log-time", "", "`stamp` of JSON log lines: epoch (seconds, the default) or iso8601 (UTC), overrides log.time")
}

// runOnlyFlags are the configuration flags only running uses (the lease,
// the proclaimed value, the fence, the grace period, the logs): every
// command accepts them, only run's help lists them.
var runOnlyFlags = []string{"ttl", "value", "fence-dsn", "fence-table", "grace-period", "dev", "log-format", "log-time"}

// helpDefaults is fs's flags as -h prints them, without runOnlyFlags
// unless fs is run's.
func helpDefaults(fs *flag.FlagSet) string {
	show := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	fs.VisitAll(func(f *flag.Flag) {
		if fs.Name() == "solo run" || !slices.Contains(runOnlyFlags, f.Name) {
			show.Var(f.Value, f.Name, f.Usage)
			show.Lookup(f.Name).DefValue = f.DefValue
		}
	})
	var defaults strings.Builder
	show.SetOutput(&defaults)
	show.PrintDefaults()
	return doubleDash(defaults.String())
}

// flagEnv maps each override flag to the variable it is passed as; flags
// come after the environment, so they win.
var flagEnv = map[string]string{
	"redis":        "SOLO_REDIS_URL",
	"name":         "SOLO_ELECTION_NAME",
	"ttl":          "SOLO_ELECTION_TTL",
	"value":        "SOLO_ELECTION_VALUE",
	"fence-dsn":    "SOLO_FENCE_DSN",
	"fence-table":  "SOLO_FENCE_TABLE",
	"grace-period": "SOLO_ELECTION_GRACE_PERIOD",
	"log-time":     "SOLO_LOG_TIME",
}

// loadOne parses args (flags on fs, at most one election name) of the
// command cmd, which takes one election, and loads the configuration. The
// election is the name given, else election.name; neither is a usage error.
func (c *common) loadOne(fs *flag.FlagSet, cmd string, args, env []string) (config.Config, string, error) {
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return config.Config{}, "", err
	}
	var name string
	switch len(pos) {
	case 0:
	case 1:
		name = pos[0]
	default:
		return config.Config{}, "", usageErr("%s takes one election name, got %q", cmd, pos)
	}
	cfg, err := c.load(fs, env, name)
	if err != nil {
		return config.Config{}, "", err
	}
	if name == "" {
		name = cfg.Election.Name
	}
	if name == "" {
		return config.Config{}, "", usageErr("election.name \"\": must not be empty: %s, or name it: solo %s NAME", config.NameRemedy, cmd)
	}
	return cfg, name, nil
}

// load reads the configuration: file, then SOLO_* environment, then flags.
// name, when not empty, is an election named on the command line: it
// stands in for election.name so that a configuration without one is valid.
func (c *common) load(fs *flag.FlagSet, env []string, name string) (config.Config, error) {
	c.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { c.set[f.Name] = true })
	path := c.config
	if path == "" {
		path = lookupEnv(env, "SOLO_CONFIG")
	}
	if path == "" {
		if _, err := os.Stat("config.yaml"); err == nil {
			path = "config.yaml"
		}
	}
	env = append([]string(nil), env...)
	if name != "" {
		env = append(env, "SOLO_ELECTION_NAME="+name)
	}
	for flagName, v := range map[string]string{"redis": c.redis, "name": c.name, "ttl": c.ttl, "value": c.value,
		"fence-dsn": c.fenceDSN, "fence-table": c.fenceTable, "grace-period": c.gracePeriod, "log-time": c.logTime} {
		if c.set[flagName] {
			env = append(env, flagEnv[flagName]+"="+v)
		}
	}
	cfg, err := config.Load(path, env)
	if err != nil {
		var ce *config.Error
		if errors.As(err, &ce) {
			for flagName, v := range flagEnv {
				if ce.Env == v && c.set[flagName] {
					ce.Env = "--" + flagName
				}
			}
			if ce.Key == "election.name" && c.positional && strings.HasSuffix(ce.Reason, config.NameRemedy) {
				ce.Reason += ", or name it: solo " + c.cmd + " NAME"
			}
			return cfg, usageErr("%s", ce.Error())
		}
		return cfg, usageErr("%w", err)
	}
	switch c.logFormat {
	case "", "auto":
		// log.dev: true asks for the console; otherwise a person at a
		// terminal gets it, and a log shipper gets JSON.
		cfg.Log.Dev = cfg.Log.Dev || c.dev || isTerminal(fs.Output())
	case "console":
		cfg.Log.Dev = true
	case "json":
		cfg.Log.Dev = c.dev
	default:
		return cfg, usageErr("--log-format %q: want auto, console or json", c.logFormat)
	}
	return cfg, nil
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func lookupEnv(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v
		}
	}
	return ""
}

// parseFlags parses args, turning flag errors into a usage error.
//
// A bad flag is one line (the flag package would add every flag's
// defaults); -h prints the defaults, which is how help lists the flags
// (flagDefaults).
func parseFlags(fs *flag.FlagSet, args []string) error {
	out := fs.Output()
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(out)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintf(out, "Usage of %s:\n", fs.Name())
		fmt.Fprint(out, helpDefaults(fs))
		return &codeError{code: exitOK, err: errQuiet}
	case err != nil:
		msg := err.Error()
		if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
			name = strings.TrimPrefix(name, "-")
			msg = "unknown flag " + dashed(name)
			var names []string
			fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
			if near := config.Nearest(name, names); near != "" {
				msg += " (did you mean " + dashed(near) + "?)"
			}
		}
		return usageErr("%s (see %s --help)", msg, fs.Name())
	}
	return nil
}

// dashed is a flag as docs/cli.md spells it: --name, and -c for one letter.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// parseInterleaved parses flags that may come before, between or after
// positional arguments (solo resign NAME --wait 5s), and returns the
// positionals. Everything after "--" is positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
