// Command solo runs any program as a singleton across instances, shows and
// steers the election, and demonstrates it all on an embedded Redis.
//
//	solo run [-c config.yaml] [--redis URL] [--name NAME] [--ttl 10s] -- PROGRAM ARGS...
//	solo run [-c config.yaml]                 (the jobs listed in config.yaml)
//	solo status [-c config.yaml] [--name NAME] [--json | --watch] [NAME...]
//	solo resign [-c config.yaml] [--name NAME] [--wait 30s] [NAME]
//	solo forget [-c config.yaml] NAME
//	solo demo
//	solo version
//
// run, status, resign and forget take the same configuration flags;
// `solo --help` and `solo COMMAND --help` document every flag (help.go).
//
// Exit codes (exitCodes in help.go): 0 success, 1 runtime error, 2 usage
// or configuration error, 3 no leader (status, resign), 4 the instance
// that resigned leads again and no other took over (resign), 5 gave up
// after worker.max_failed_terms failed terms (run --exit-on-give-up), 6 a
// lease is held (forget), 126/127 the program is not executable / not
// found (run). solo run whose program ended and is not restarted exits
// with the program's code.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"

	"github.com/solo-run/solo/cmd/solo/internal/config"
	"github.com/solo-run/solo/leader"
)

// Exit codes.
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitNoLeader = 3
	// exitSameLeader: solo resign saw the resigner come back after its
	// cooldown, with no other instance taking over.
	exitSameLeader = 4
	// exitGaveUp: solo run --exit-on-give-up stopped campaigning after
	// worker.max_failed_terms failed terms in a row.
	exitGaveUp = 5
)

// usage is the short reminder printed after a wrong command.
const usage = "usage: solo run|status|resign|forget|demo|version [FLAGS] ...; solo --help for more\n"

func main() {
	hideEnviron()
	// go-redis logs dial failures through a package-level logger of its own;
	// solo reports them once, in its own words (see connect).
	redis.SetLogger(quietRedis{})
	// SIGPIPE is caught for the whole life of the process, never ignored
	// (an ignored disposition would be inherited by programs through exec):
	// a write to a closed stdout or stderr then fails with EPIPE instead of
	// killing solo with its program still running.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	if len(os.Args) > 1 && os.Args[1] == keeperArg {
		os.Exit(keeperMain(os.Args[2:]))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, os.Environ()))
}

// hideEnviron makes this process non-dumpable (PR_SET_DUMPABLE 0), first
// thing, in solo and in its keeper alike (the keeper is solo re-executed,
// and an exec makes a process dumpable again). Its environment holds
// secrets — SOLO_REDIS_URL's password, the fence DSN's — and the kernel
// shows a process's initial environment in /proc/PID/environ, which
// clearing variables does not scrub: non-dumpable, that file, /proc/PID/mem
// and ptrace are denied to every other process of the same user, the
// program solo runs included; only root (CAP_SYS_PTRACE) can still read
// them. The program itself is dumpable again after its exec. Side
// effects: no core dump of solo, and a debugger must run as root.
func hideEnviron() {
	// It cannot fail with these arguments on Linux; were it refused, solo
	// would run as before rather than not at all.
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
}

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// codeError carries an exit code; its message is printed once, by run.
type codeError struct {
	code int
	err  error
}

func (e *codeError) Error() string { return e.err.Error() }
func (e *codeError) Unwrap() error { return e.err }

func usageErr(format string, args ...any) error {
	return &codeError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// run is main without the exit: it returns the exit code.
func run(args []string, stdout, stderr io.Writer, env []string) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, overview(env))
		return exitUsage
	}
	switch {
	case args[0] == "help" || args[0] == "-h" || args[0] == "--help" || args[0] == "-help":
		name := ""
		if args[0] == "help" && len(args) > 1 {
			name = args[1]
		}
		if !printHelp(stdout, name, env) {
			fmt.Fprintf(stderr, "solo: %s\n%s", unknownCommand(name), usage)
			return exitUsage
		}
		return exitOK
	case wantsHelp(args[1:]) && printHelp(stdout, args[0], env):
		return exitOK
	}
	err := dispatch(args[0], args[1:], stdout, stderr, env)
	if errors.Is(err, errUnknownCommand) {
		fmt.Fprintf(stderr, "solo: %s\n%s", unknownCommand(args[0]), usage)
		return exitUsage
	}
	if err == nil {
		return exitOK
	}
	code := exitError
	var ce *codeError
	if errors.As(err, &ce) {
		code = ce.code
	} else if fix := redisConfigError(err); fix != "" {
		// A call Redis refused as a configuration error (status, resign,
		// forget): no retry cures it.
		code = exitUsage
		if !errors.Is(err, leader.ErrRedisConfig) { // else err ends with the fix
			err = fmt.Errorf("%w: %s", err, fix)
		}
	}
	if !errors.Is(err, errQuiet) {
		fmt.Fprintln(stderr, "solo:", err)
	}
	return code
}

// unknownCommand is the message for a name that is no command, with the
// nearest command when one is close (a typo such as "stauts").
func unknownCommand(name string) string {
	msg := fmt.Sprintf("unknown command %q", name)
	names := []string{"help"}
	for _, d := range commands {
		names = append(names, d.name)
	}
	if near := config.Nearest(name, names); near != "" {
		msg += " (did you mean " + near + "?)"
	}
	return msg
}

// errUnknownCommand is dispatch's error for a name that is no command.
var errUnknownCommand = errors.New("unknown command")

// dispatch runs subcommand name.
func dispatch(name string, args []string, stdout, stderr io.Writer, env []string) error {
	switch name {
	case "run":
		return runCommand(args, stdout, stderr, env)
	case "status":
		return statusCommand(args, stdout, stderr, env)
	case "resign":
		return resignCommand(args, stdout, stderr, env)
	case "forget":
		return forgetCommand(args, stdout, stderr, env)
	case "demo":
		return demoCommand(args, stdout, stderr, env)
	case "version", "--version", "-version":
		return versionCommand(stdout)
	}
	return errUnknownCommand
}

// errQuiet marks an error already reported (flag parsing prints its own).
var errQuiet = errors.New("reported")
