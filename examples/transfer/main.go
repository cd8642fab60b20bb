// Command transfer moves money between the accounts of a SQLite database
// from several processes at once, under one lock per account (package
// leader/lock), taken in account order so that two transfers never wait for
// each other in a cycle. Every transfer is fenced by the terms of both
// accounts' locks (package leader/fence): a process that was paused past its
// locks' TTL and wakes up with a transfer in hand has that write refused,
// instead of overwriting balances another process changed meanwhile.
//
//	transfer init -db bank.db -accounts 6 -balance 1000
//	transfer run -db bank.db -id a          (in several terminals)
//	transfer check -db bank.db
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

const usage = `usage: transfer init|run|check [flags]

  init   create the accounts, each with the same opening balance
  run    run a process that moves money between random accounts
  check  verify the database: total constant, no negative balance, every
         balance equal to its opening balance plus its ledger, no write of
         a stale term

Run "transfer COMMAND -h" for a command's flags.
`

// errCheckFailed is returned by check when the database is wrong; main exits
// 1 without repeating it.
var errCheckFailed = errors.New("check failed")

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1], os.Args[2:], os.Stdout)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	case errors.Is(err, errCheckFailed):
		os.Exit(1)
	case err != nil:
		fmt.Fprintf(os.Stderr, "transfer %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cmd string, args []string, stdout io.Writer) error {
	switch cmd {
	case "init":
		return initCmd(ctx, args, stdout)
	case "run":
		return runCmd(ctx, args)
	case "check":
		return checkCmd(ctx, args, stdout)
	default:
		fmt.Fprint(os.Stderr, usage)
		return flag.ErrHelp
	}
}

// newLogger logs JSON lines to stderr, with readable timestamps.
func newLogger() (*zap.Logger, error) {
	zc := zap.NewProductionConfig()
	zc.EncoderConfig.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	return zc.Build()
}
