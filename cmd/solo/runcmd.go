package main

import (
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/solo-run/solo/cmd/solo/internal/config"
	"github.com/solo-run/solo/worker"
)

// runCommand is `solo run`: parse the flags, load the configuration, build
// the supervision, the Redis client, the elector and the worker, then run
// until a signal, the program's end or a configuration error of Redis.
func runCommand(args []string, stdout, stderr io.Writer, env []string) error {
	f, err := parseRunFlags(args, stderr)
	if err != nil {
		return err
	}
	cfg, err := f.loadConfig(env)
	if err != nil {
		return err
	}
	r := &runState{runFlags: f, cfg: cfg, env: env, stdout: stdout, stderr: stderr}
	defer r.close()
	if err := r.supervise(); err != nil {
		return err
	}
	if err := r.connect(); err != nil {
		if errors.Is(err, errNothingRan) {
			return nil
		}
		return err
	}
	if err := r.openFence(); err != nil {
		return err
	}
	if cfg.Election.Mode == worker.ModeSpread { // spread_run.go
		return runSpread(r.ctx, cfg, r.client, r.reg, r.log, r.wopts, r.program(), f.dashes)
	}
	if err := r.build(); err != nil {
		return err
	}
	return r.run()
}

// runFlags are solo run's flags and arguments, checked against each other.
type runFlags struct {
	fs     *flag.FlagSet
	common common
	// restart is --restart (never under --once).
	restart                       worker.Restart
	childExit, once, exitOnGiveUp bool
	try                           time.Duration
	passEnv                       listFlag
	// dashes says a program was given after --; argv is it and its
	// arguments.
	dashes bool
	argv   []string
}

// parseRunFlags parses solo run's arguments; a bad combination is a usage
// error.
func parseRunFlags(args []string, stderr io.Writer) (*runFlags, error) {
	f := &runFlags{fs: flag.NewFlagSet("solo run", flag.ContinueOnError)}
	fs := f.fs
	fs.SetOutput(stderr)
	f.common.register(fs, "run", false)
	restart := fs.String("restart", string(worker.RestartAlways), "when PROGRAM exits on its own: always, on-failure or never; when it is not restarted, solo releases the lease and exits")
	fs.BoolVar(&f.childExit, "child-exit-code", true, "when PROGRAM ended and is not restarted, exit with its exit code (128+N for signal N); false: exit 0")
	fs.BoolVar(&f.once, "once", false, "run PROGRAM at most once: if the lease is free, run it and exit with its code; if another instance holds it, exit 0 at once (with --try: wait that long for it)")
	fs.BoolVar(&f.exitOnGiveUp, "exit-on-give-up", false, "exit 5 once the election had worker.max_failed_terms failed terms in a row (default: stay up, not campaigning, with /readyz failing)")
	fs.DurationVar(&f.try, "try", 0, "give up acquiring the lease after this `duration` and exit 1 (default: wait for ever)")
	fs.Var(&f.passEnv, "pass-env", "`NAMES` of SOLO_* variables to pass to the program (comma-separated, repeatable); by default none is")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	f.dashes = slices.Index(args, "--") >= 0
	f.argv = fs.Args()
	switch {
	case f.dashes && len(f.argv) == 0:
		return nil, usageErr("missing command after --")
	case !f.dashes && len(f.argv) > 0:
		return nil, usageErr("unexpected argument %q: put the program after --", f.argv[0])
	}
	if f.once {
		restartSet := false
		fs.Visit(func(fl *flag.Flag) { restartSet = restartSet || fl.Name == "restart" })
		if !f.dashes {
			return nil, usageErr("--once: give the program after --")
		}
		if restartSet && *restart != string(worker.RestartNever) {
			return nil, usageErr("--once with --restart %s: --once never restarts the program", *restart)
		}
		*restart = string(worker.RestartNever)
	}
	if f.try < 0 {
		return nil, usageErr("--try %s: must be positive", f.try)
	}
	f.restart = worker.Restart(*restart)
	switch f.restart {
	case worker.RestartAlways, worker.RestartOnFailure, worker.RestartNever:
	default:
		return nil, usageErr("--restart %q: want always, on-failure or never", *restart)
	}
	return f, nil
}

// loadConfig loads the configuration and checks it against the flags: a
// program to run, and every job with a command.
func (f *runFlags) loadConfig(env []string) (config.Config, error) {
	cfg, err := f.common.load(f.fs, env, "")
	if err != nil {
		return cfg, err
	}
	if f.exitOnGiveUp && cfg.Election.Mode == worker.ModeSpread {
		return cfg, usageErr("--exit-on-give-up: election.mode spread never gives up (worker.max_failed_terms is refused there): drop the flag")
	}
	if f.dashes {
		if err := resolveProgram(f.argv[0]); err != nil {
			return cfg, err
		}
	}
	if !f.dashes && len(cfg.Jobs) == 0 {
		return cfg, usageErr("nothing to run: give a program after -- or list jobs in the configuration")
	}
	for i, j := range cfg.Jobs {
		if !f.dashes && len(j.Command) == 0 {
			return cfg, usageErr("jobs[%d].command: must not be empty (job %q)", i, j.Name)
		}
	}
	return cfg, nil
}

// programEnv is env without solo's own SOLO_* variables (its configuration,
// the Redis URL and password among them), except those named in keep.
func programEnv(env, keep []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "SOLO_") && !slices.Contains(keep, name) {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// listFlag is a comma-separated, repeatable flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}
