// Command sharded-consumer consumes a feed split into shards — one Redis
// Stream per shard, orders:0 … orders:15 — into SQLite, with every shard
// consumed on exactly one instance at a time and the shards spread over
// the instances running: a Kafka consumer group, on solo's leases.
//
// Every instance runs `consume`: a worker.Spread with one sharded job, each
// shard an election of its own. A shard's job reads its stream from the
// position stored in SQLite and writes each batch and the new position in one
// transaction fenced by the shard's term (worker.WithFence claims it at the
// start of every term), so every message is stored exactly once across
// crashes, pauses and rebalances.
//
//	sharded-consumer produce -n 10000 -rate 2000
//	sharded-consumer consume -db orders.db        (on every instance)
//	sharded-consumer check -n 10000 -db orders.db
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/fence"
	"github.com/solo-run/solo/leader/redisurl"
	"github.com/solo-run/solo/worker"
)

const usage = `usage: sharded-consumer produce|consume|check [flags]

  produce  add messages n=1..N, message n to stream orders:(n mod shards)
  consume  run an instance: it consumes its share of the shards into SQLite
  check    verify the database: every message exactly once
`

// errCheckFailed: check found the database wrong; main exits 1.
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
		fmt.Fprintf(os.Stderr, "sharded-consumer %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// options are the flags every command takes.
type options struct {
	redisURL string
	shards   int
	dbPath   string
	n        int
	from     int
	rate     int
	id       string
	ttl      time.Duration
}

func run(ctx context.Context, cmd string, args []string, stdout io.Writer) error {
	var o options
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.StringVar(&o.redisURL, "redis", "redis://127.0.0.1:6379/0", "Redis URL of the streams and the leases")
	fs.IntVar(&o.shards, "shards", 16, "number of shards (streams orders:0 … orders:N−1)")
	fs.StringVar(&o.dbPath, "db", "orders.db", "SQLite database (consume, check)")
	fs.IntVar(&o.n, "n", 10000, "number of messages (produce, check)")
	fs.IntVar(&o.from, "from", 1, "first message number (produce): -from 2001 -n 2000 produces 2001 … 4000")
	fs.IntVar(&o.rate, "rate", 0, "messages per second (produce; 0: as fast as possible)")
	fs.StringVar(&o.id, "id", "", "instance ID; a random part is appended (default HOST-PID)")
	fs.DurationVar(&o.ttl, "ttl", leader.DefaultTTL, "lease TTL of every shard")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.shards < 1 {
		return fmt.Errorf("-shards %d: must be at least 1", o.shards)
	}
	switch cmd {
	case "produce":
		return produce(ctx, o)
	case "consume":
		return consume(ctx, o)
	case "check":
		return check(ctx, o, stdout)
	}
	fmt.Fprint(os.Stderr, usage)
	return flag.ErrHelp
}

func stream(shard int) string { return "orders:" + strconv.Itoa(shard) }

func produce(ctx context.Context, o options) error {
	rdb, err := redisurl.NewClient(o.redisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	var tick <-chan time.Time
	if o.rate > 0 {
		t := time.NewTicker(time.Second / time.Duration(o.rate))
		defer t.Stop()
		tick = t.C
	}
	for n := o.from; n < o.from+o.n; n++ {
		if tick != nil {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-tick:
			}
		}
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream(n % o.shards), Values: []any{"n", n}}).Err(); err != nil {
			return err
		}
	}
	return nil
}

// schema: the messages, and each shard's position in its stream, written
// in the same fenced transaction.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS messages (
		seq INTEGER PRIMARY KEY AUTOINCREMENT,
		shard INTEGER NOT NULL,
		msg_id TEXT NOT NULL,
		n INTEGER NOT NULL,
		term INTEGER NOT NULL,
		instance TEXT NOT NULL,
		UNIQUE (shard, msg_id)
	)`,
	`CREATE TABLE IF NOT EXISTS positions (shard INTEGER PRIMARY KEY, last_id TEXT NOT NULL)`,
}

func openDB(ctx context.Context, path string) (*sql.DB, *fence.Guard, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		return nil, nil, err
	}
	g, err := fence.New(db)
	if err == nil {
		err = g.EnsureTable(ctx)
	}
	for _, q := range schema {
		if err == nil {
			_, err = db.ExecContext(ctx, q)
		}
	}
	if err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	return db, g, nil
}

func consume(ctx context.Context, o options) error {
	log, err := zap.NewProduction()
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	rdb, err := redisurl.NewClient(o.redisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	db, guard, err := openDB(ctx, o.dbPath)
	if err != nil {
		return err
	}
	defer db.Close()

	// The group is "sharded-consumer"; shard i's election is
	// sharded-consumer.orders/i. WithFence claims each shard's term in the
	// database before the shard's job runs.
	s, err := worker.NewSpread(rdb, leader.Config{Name: "sharded-consumer", ID: o.id, TTL: o.ttl}, worker.SpreadConfig{},
		worker.WithLogger(log), worker.WithFence(guard))
	if err != nil {
		return err
	}
	err = s.Sharded("orders", o.shards, func(ctx context.Context, shard int) error {
		return consumeShard(ctx, rdb, db, guard, shard, log)
	})
	if err != nil {
		return err
	}
	log.Info("consuming", zap.String("member", s.Member()), zap.Int("shards", o.shards))
	return s.Run(ctx)
}

// consumeShard reads the shard's stream from its stored position and
// writes every batch, with the new position, in one transaction fenced by
// the shard's term, until the term ends.
func consumeShard(ctx context.Context, rdb redis.UniversalClient, db *sql.DB, guard *fence.Guard, shard int, log *zap.Logger) error {
	term, _ := leader.TermFrom(ctx)
	tok, _ := fence.TokenFrom(ctx) // the shard's election, term and holder
	last := "0"
	err := db.QueryRowContext(ctx, `SELECT last_id FROM positions WHERE shard = ?`, shard).Scan(&last)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	log.Info("shard started", zap.Int("shard", shard), zap.Uint64("term", term), zap.String("from", last))
	stored := 0
	for ctx.Err() == nil {
		// go-redis does not interrupt a blocking read when ctx ends: keep
		// the block short, it bounds how long the job takes to stop.
		res, err := rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{stream(shard), last}, Count: 100, Block: 200 * time.Millisecond}).Result()
		if errors.Is(err, redis.Nil) || ctx.Err() != nil {
			continue
		}
		if err != nil {
			return err
		}
		msgs := res[0].Messages
		err = guard.Do(ctx, func(tx *sql.Tx) error { // fenced by the shard's token
			for _, m := range msgs {
				n, _ := strconv.Atoi(fmt.Sprint(m.Values["n"]))
				if _, err := tx.ExecContext(ctx, `INSERT INTO messages (shard, msg_id, n, term, instance) VALUES (?, ?, ?, ?, ?)`,
					shard, m.ID, n, term, worker.MemberOf(tok.Holder)); err != nil {
					return err
				}
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO positions (shard, last_id) VALUES (?, ?)
				ON CONFLICT (shard) DO UPDATE SET last_id = excluded.last_id`, shard, msgs[len(msgs)-1].ID)
			return err
		})
		if err != nil {
			return fmt.Errorf("shard %d: %w", shard, err)
		}
		last = msgs[len(msgs)-1].ID
		if stored == 0 {
			log.Info("first batch stored", zap.Int("shard", shard), zap.Uint64("term", term), zap.Int("messages", len(msgs)))
		}
		stored += len(msgs)
	}
	return nil
}

func check(ctx context.Context, o options, stdout io.Writer) error {
	db, _, err := openDB(ctx, o.dbPath)
	if err != nil {
		return err
	}
	defer db.Close()
	var rows, distinct, instances int
	var lo, hi sql.NullInt64
	err = db.QueryRowContext(ctx, `SELECT COUNT(*), COUNT(DISTINCT n), MIN(n), MAX(n), COUNT(DISTINCT instance) FROM messages`).
		Scan(&rows, &distinct, &lo, &hi, &instances)
	if err != nil {
		return err
	}
	var names string
	err = db.QueryRowContext(ctx, `SELECT COALESCE(GROUP_CONCAT(instance, ', '), '') FROM (SELECT DISTINCT instance FROM messages ORDER BY instance)`).Scan(&names)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%d rows, %d distinct messages (want %d), written by %d instances (%s)\n", rows, distinct, o.n, instances, names)
	switch {
	case rows != distinct:
		fmt.Fprintf(stdout, "FAIL: %d messages stored twice\n", rows-distinct)
		return errCheckFailed
	case distinct != o.n || lo.Int64 != 1 || hi.Int64 != int64(o.n):
		fmt.Fprintf(stdout, "FAIL: %d messages missing\n", o.n-distinct)
		return errCheckFailed
	}
	// Along the commit order, a shard's terms never go down: no write of a
	// stale term was accepted.
	var stale int
	err = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM (SELECT term,
		LAG(term) OVER (PARTITION BY shard ORDER BY seq) AS prev FROM messages) WHERE prev > term`).Scan(&stale)
	if err != nil {
		return err
	}
	if stale > 0 {
		fmt.Fprintf(stdout, "FAIL: %d stale writes accepted\n", stale)
		return errCheckFailed
	}
	fmt.Fprintln(stdout, "OK: every message exactly once")
	return nil
}
