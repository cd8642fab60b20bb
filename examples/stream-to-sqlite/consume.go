package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/fence"
	"github.com/solo-run/solo/leader/redisurl"
	"github.com/solo-run/solo/worker"
)

const (
	// readCount is the most messages one read returns: one transaction.
	readCount = 100
	// readBlock is how long a read waits for new messages. Short, because
	// go-redis does not interrupt a blocking read when its context is
	// cancelled: it bounds how long the job takes to notice a lost term.
	readBlock = 200 * time.Millisecond
	// writeTimeout bounds the write of a batch already read (see process).
	writeTimeout = 10 * time.Second
)

// consumer is the pull job: it runs on the leader only, for one term at a
// time.
type consumer struct {
	rdb       redis.UniversalClient // the stream's Redis
	store     *store
	stream    string
	group     string
	id        string        // consumer name in the group: the candidate ID
	sweep     time.Duration // how often to take over pending messages again
	slow      time.Duration // simulated processing time per batch (demo)
	autoclaim bool          // false only for -unsafe-no-autoclaim
	log       *zap.Logger
	stats     stats
}

// stats are the consumer's counters, written to -stats at exit.
type stats struct {
	Batches      atomic.Int64 // batches written
	Inserted     atomic.Int64 // messages stored (not stored before)
	TakenOver    atomic.Int64 // pending messages claimed from other consumers
	StaleRefused atomic.Int64 // writes the fence refused
}

func consume(ctx context.Context, args []string) error {
	var c common
	var id, upstream, statsPath string
	var ttl, renew, deadline, slow, sweep time.Duration
	var noFence, noAutoclaim bool
	fs := flag.NewFlagSet("consume", flag.ContinueOnError)
	c.register(fs)
	fs.StringVar(&upstream, "upstream", "", "Redis URL of the stream, when not the election's (-redis)")
	fs.StringVar(&id, "id", "", "candidate and consumer ID; the elector appends a random part (default HOST-PID)")
	fs.DurationVar(&ttl, "ttl", leader.DefaultTTL, "lease TTL")
	fs.DurationVar(&renew, "renew", 0, "renew interval (default TTL/3)")
	fs.DurationVar(&deadline, "deadline", 0, "renew deadline (default 2/3 of TTL)")
	fs.DurationVar(&sweep, "sweep", time.Second, "how often the leader takes over messages other consumers left pending")
	fs.DurationVar(&slow, "slow-write", 0, "demo: sleep this long between reading a batch and writing it, ignoring cancellation, as slow processing or a GC pause would")
	fs.StringVar(&statsPath, "stats", "", "write the counters as JSON to this file at exit")
	fs.BoolVar(&noFence, "unsafe-no-fence", false, "demo only: write without the fencing check, so a stale leader's writes commit")
	fs.BoolVar(&noAutoclaim, "unsafe-no-autoclaim", false, "demo only: never take over pending messages, so those of a dead leader are lost")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if upstream == "" {
		upstream = c.redisURL
	}

	log, err := newLogger()
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	lease, err := redisurl.NewClient(c.redisURL)
	if err != nil {
		return err
	}
	defer lease.Close()
	e, err := leader.New(lease, leader.Config{Name: c.name, ID: id, TTL: ttl, RenewInterval: renew, RenewDeadline: deadline},
		leader.WithLogger(log))
	if err != nil {
		return err
	}

	db, err := openDB(c.dbPath)
	if err != nil {
		return err
	}
	defer db.Close()
	st, err := newStore(ctx, db, c.name, e.ID(), !noFence)
	if err != nil {
		return err
	}

	// A client of its own for the stream, which may live elsewhere. Like
	// every redisurl.NewClient it has ContextTimeoutEnabled, and a read timeout
	// (1s) above readBlock.
	rdb, err := redisurl.NewClient(upstream)
	if err != nil {
		return err
	}
	defer rdb.Close()
	// Create the group now, from the stream's start, and the stream with
	// it if the producer has not run yet: a bad address fails the start.
	// Every term creates it again if it is missing (Redis lost its data).
	if _, err := ensureGroup(ctx, rdb, c.stream, c.group); err != nil {
		return err
	}

	opts := []worker.Option{worker.WithLogger(log)}
	if st.guard != nil {
		// The worker claims every term in the database before the ingest
		// starts: from then on every write of an older term is refused.
		opts = append(opts, worker.WithFence(st.guard))
	}
	w, err := worker.New(e, opts...)
	if err != nil {
		return err
	}
	cons := &consumer{
		rdb: rdb, store: st, stream: c.stream, group: c.group, id: e.ID(),
		sweep: sweep, slow: slow, autoclaim: !noAutoclaim, log: log.Named("ingest"),
	}
	if err := w.Pull("ingest", cons.run); err != nil {
		return err
	}
	if noFence {
		log.Error("-unsafe-no-fence: writes are NOT fenced; a stale leader's writes will commit (demonstration only)")
	}
	if noAutoclaim {
		log.Error("-unsafe-no-autoclaim: messages a dead leader left pending are never taken over (demonstration only)")
	}
	log.Info("consumer started", zap.String("id", e.ID()), zap.String("stream", c.stream), zap.String("db", c.dbPath))
	err = w.Run(ctx)
	return errors.Join(err, cons.writeStats(statsPath))
}

// run is one term's ingest (the worker has claimed the term in the
// database already): take over what the previous leader left pending, then
// read new messages until the term ends.
func (c *consumer) run(ctx context.Context) error {
	term, _ := leader.TermFrom(ctx)
	log := c.log.With(zap.Uint64("term", term))
	// Redis may have lost the group (and the stream) since the last term:
	// a restart without persistence, a failover to a replica that never had
	// it. Without a group every read fails with NOGROUP.
	if err := c.ensureGroup(ctx, log); err != nil {
		return err
	}
	log.Info("term started", zap.Bool("fenced", c.store.guard != nil))
	var swept time.Time
	for ctx.Err() == nil {
		if c.autoclaim && time.Since(swept) >= c.sweep {
			// At the term's start, and now and then after: a paused old
			// leader may still have read a batch after we took over.
			if err := c.takeOver(ctx, log, term); err != nil {
				return err
			}
			swept = time.Now()
		}
		res, err := c.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: c.group, Consumer: c.id, Streams: []string{c.stream, ">"},
			Count: readCount, Block: readBlock,
		}).Result()
		switch {
		case errors.Is(err, redis.Nil): // nothing new within readBlock
			continue
		case err != nil && ctx.Err() != nil:
			return nil
		case isNoGroup(err): // Redis lost its data during the term
			if err := c.ensureGroup(ctx, log); err != nil {
				return err
			}
			continue
		case err != nil:
			return fmt.Errorf("read %s: %w", c.stream, err)
		}
		for _, s := range res {
			if err := c.process(ctx, log, term, s.Messages); err != nil {
				return err
			}
		}
	}
	return nil
}

// takeOver claims every pending message of the group, whoever it was
// delivered to, and processes it. Between batches this consumer has nothing
// pending of its own (it acknowledges each batch before reading the next), so
// what it finds was left by a consumer that died or stalled: min-idle 0 need
// not wait for it to look idle.
func (c *consumer) takeOver(ctx context.Context, log *zap.Logger, term uint64) error {
	start := "0-0"
	for {
		msgs, next, err := c.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
			Stream: c.stream, Group: c.group, Consumer: c.id,
			MinIdle: 0, Start: start, Count: readCount,
		}).Result()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if isNoGroup(err) {
				// The group is gone, and with it every pending entry:
				// there is nothing to take over.
				return c.ensureGroup(ctx, log)
			}
			return fmt.Errorf("take over pending messages: %w", err)
		}
		if len(msgs) > 0 {
			c.stats.TakenOver.Add(int64(len(msgs)))
			log.Info("pending messages taken over", zap.Int("n", len(msgs)),
				zap.String("first", msgs[0].ID), zap.String("last", msgs[len(msgs)-1].ID))
			if err := c.process(ctx, log, term, msgs); err != nil {
				return err
			}
		}
		if next == "0-0" {
			return nil
		}
		start = next
	}
}

// ensureGroup creates the consumer group if it is missing, logging it.
func (c *consumer) ensureGroup(ctx context.Context, log *zap.Logger) error {
	created, err := ensureGroup(ctx, c.rdb, c.stream, c.group)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if created {
		log.Warn("consumer group recreated: Redis had lost it (and the stream with it, unless it is still there); reading from the stream's start",
			zap.String("stream", c.stream), zap.String("group", c.group))
	}
	return nil
}

// ensureGroup creates group on stream, from the stream's first entry, and
// the stream if it is missing (XGROUP CREATE … MKSTREAM). It reports whether
// it created the group; an existing one (BUSYGROUP) is left as it is.
func ensureGroup(ctx context.Context, rdb redis.UniversalClient, stream, group string) (bool, error) {
	err := rdb.XGroupCreateMkStream(ctx, stream, group, "0").Err()
	switch {
	case err == nil:
		return true, nil
	case strings.HasPrefix(err.Error(), "BUSYGROUP"):
		return false, nil
	default:
		return false, fmt.Errorf("create group %s on %s: %w", group, stream, err)
	}
}

// isNoGroup reports whether err is Redis's NOGROUP: the stream or the group
// does not exist.
func isNoGroup(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOGROUP")
}

// process writes one batch, fenced by term, then acknowledges it.
func (c *consumer) process(ctx context.Context, log *zap.Logger, term uint64, msgs []redis.XMessage) error {
	if len(msgs) == 0 {
		return nil
	}
	batch := make([]message, 0, len(msgs))
	ids := make([]string, 0, len(msgs))
	for _, m := range msgs {
		n, err := strconv.ParseInt(fmt.Sprint(m.Values["n"]), 10, 64)
		if err != nil {
			return fmt.Errorf("message %s: field n: %w", m.ID, err)
		}
		batch = append(batch, message{id: m.ID, n: n})
		ids = append(ids, m.ID)
	}
	log.Info("batch read", zap.Int("n", len(batch)), zap.String("first", ids[0]), zap.String("last", ids[len(ids)-1]))
	if c.slow > 0 {
		time.Sleep(c.slow) // the demo's slow processing: it does not watch ctx
	}

	// A batch once read is written even if the term ended meanwhile, and
	// acknowledged after the commit: on a shutdown that saves its
	// redelivery. Whether the write may still commit is for the fence to
	// say, not the context: a leader paused past its lease (GC, SIGSTOP, a
	// frozen VM) resumes right here, before it can notice anything.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	inserted, err := c.store.write(wctx, term, batch)
	if errors.Is(err, fence.ErrStaleTerm) {
		// Another leader has claimed the database: stop. The messages stay
		// pending; the new leader takes them over.
		c.stats.StaleRefused.Add(1)
		log.Warn("stale write refused", zap.Int("n", len(batch)), zap.Error(err))
		return fmt.Errorf("stale write refused: %w", err)
	}
	if err != nil {
		return fmt.Errorf("write batch %s..%s: %w", ids[0], ids[len(ids)-1], err)
	}
	if err := c.rdb.XAck(wctx, c.stream, c.group, ids...).Err(); err != nil {
		// Stored but still pending: taken over and stored again (a no-op)
		// by the next sweep.
		return fmt.Errorf("ack batch %s..%s: %w", ids[0], ids[len(ids)-1], err)
	}
	c.stats.Batches.Add(1)
	c.stats.Inserted.Add(int64(inserted))
	log.Info("batch written", zap.Int("n", len(batch)), zap.Int("inserted", inserted), zap.Bool("term_ended", ctx.Err() != nil))
	return nil
}

// writeStats writes the counters as JSON to path, if set.
func (c *consumer) writeStats(path string) error {
	c.log.Info("stats", zap.Int64("batches", c.stats.Batches.Load()), zap.Int64("inserted", c.stats.Inserted.Load()),
		zap.Int64("taken_over", c.stats.TakenOver.Load()), zap.Int64("stale_refused", c.stats.StaleRefused.Load()))
	if path == "" {
		return nil
	}
	b, err := json.Marshal(map[string]any{
		"id":            c.id,
		"batches":       c.stats.Batches.Load(),
		"inserted":      c.stats.Inserted.Load(),
		"taken_over":    c.stats.TakenOver.Load(),
		"stale_refused": c.stats.StaleRefused.Load(),
	})
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
