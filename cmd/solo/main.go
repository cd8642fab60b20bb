// Command solo runs any program as a singleton across instances, shows and
// steers the election, and demonstrates it all on an embedded Redis.
//
//	solo run [-c config.yaml] [--redis URL] [--name NAME] [--ttl 10s] -- PROGRAM ARGS...
//	solo run [-c config.yaml]                 (the jobs listed in config.yaml)
//	solo status [-c config.yaml] [--name NAME] [--json | --watch] [NAME...]
//	solo resign [-c config.yaml] [--name NAME] [--wait 30s] [NAME]
//	solo demo
//	solo version
//
// run, status and resign take the same configuration flags.
//
// Exit codes: 0 success, 1 runtime error, 2 usage or configuration error,
// 3 no leader (status, resign), 4 the instance that resigned leads again
// and no other took over (resign). solo run whose program ended and is not
// restarted exits with the program's code.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/redis/go-redis/v9"
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

// version may be set at build time with -ldflags "-X main.version=...";
// soloVersion prefers the module version Go recorded in the binary.
var version = ""

// soloVersion returns the module version of this build (v1.2.3 when built
// by `go install github.com/solo-run/solo/cmd/solo@v1.2.3`), else the
// -ldflags value, else "(devel)" (a build from a work tree).
func soloVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	if version != "" {
		return version
	}
	return "(devel)"
}

const usage = `usage:
  solo run [FLAGS] [--restart always|on-failure|never] [--child-exit-code=false] [--once] [--try DURATION] -- PROGRAM [ARGS...]
  solo run [FLAGS]                     run the jobs listed in config.yaml
  solo status [FLAGS] [--json | --watch] [NAME...]
  solo resign [FLAGS] [--wait 30s] [NAME]
  solo demo [--redis URL]              a guided failover demo on an embedded Redis
  solo version

FLAGS, the same on run, status and resign (each overrides the key and its SOLO_* variable):
  -c FILE (config.yaml)  --redis URL  --name NAME  --ttl DURATION
  --fence-dsn DSN  --fence-table TABLE  --dev  --log-format auto|console|json

exit codes: 0 ok, 1 runtime error, 2 usage or configuration error, 3 no leader
(status, resign), 4 only the resigner came back (resign); run passes on the
exit code of a program that ended and is not restarted (--once: exit 0 when
another instance holds the lease; --try: exit 1 when not acquired in time)
`

func main() {
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
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	var err error
	switch args[0] {
	case "run":
		err = runCommand(args[1:], stdout, stderr, env)
	case "status":
		err = statusCommand(args[1:], stdout, stderr, env)
	case "resign":
		err = resignCommand(args[1:], stdout, stderr, env)
	case "forget":
		err = forgetCommand(args[1:], stdout, stderr, env)
	case "demo":
		err = demoCommand(args[1:], stdout, stderr, env)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, "solo", soloVersion())
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "solo: unknown command %q\n%s", args[0], usage)
		return exitUsage
	}
	if err == nil {
		return exitOK
	}
	code := exitError
	var ce *codeError
	if errors.As(err, &ce) {
		code = ce.code
	}
	if !errors.Is(err, errQuiet) {
		fmt.Fprintln(stderr, "solo:", err)
	}
	return code
}

// errQuiet marks an error already reported (flag parsing prints its own).
var errQuiet = errors.New("reported")
