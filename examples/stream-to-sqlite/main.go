// Command stream-to-sqlite is the job solo exists for: consume an upstream
// feed into a database on exactly one instance, exactly once across
// failovers.
//
// The feed is a Redis Stream read through a consumer group; the database is
// SQLite. Every instance runs `consume`; the leader reads the stream, writes
// each batch in one transaction fenced by its term, and acknowledges it
// after the commit. When it dies, the next leader first takes over the
// messages it left unacknowledged (XAUTOCLAIM); a message delivered twice is
// stored once (its stream ID is unique). When it was only paused past its
// lease and wakes up with a batch in hand, the fence refuses that write.
//
//	stream-to-sqlite produce -n 10000 -rate 1000
//	stream-to-sqlite consume -db orders.db        (on every instance)
//	stream-to-sqlite check -n 10000 -db orders.db
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

const usage = `usage: stream-to-sqlite produce|consume|check [flags]

  produce  add messages n=1..N to the stream
  consume  run an instance: the leader ingests the stream into SQLite
  check    verify the database against the stream: every message exactly
           once, no write of a stale term

Run "stream-to-sqlite COMMAND -h" for a command's flags.
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
		fmt.Fprintf(os.Stderr, "stream-to-sqlite %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cmd string, args []string, stdout io.Writer) error {
	switch cmd {
	case "produce":
		return produce(ctx, args, stdout)
	case "consume":
		return consume(ctx, args)
	case "check":
		return check(ctx, args, stdout)
	default:
		fmt.Fprint(os.Stderr, usage)
		return flag.ErrHelp
	}
}

// common are the flags every command has.
type common struct {
	redisURL string
	stream   string
	group    string
	dbPath   string
	name     string
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.redisURL, "redis", "redis://127.0.0.1:6379/0", "Redis URL of the stream (and of the election)")
	fs.StringVar(&c.stream, "stream", "orders", "stream key")
	fs.StringVar(&c.group, "group", "sqlite", "consumer group")
	fs.StringVar(&c.dbPath, "db", "orders.db", "SQLite database file")
	fs.StringVar(&c.name, "name", "stream-to-sqlite", "election name, also the fence's")
}

// newLogger logs JSON lines to stderr, with readable timestamps.
func newLogger() (*zap.Logger, error) {
	zc := zap.NewProductionConfig()
	zc.EncoderConfig.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	return zc.Build()
}
