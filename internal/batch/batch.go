// Package batch sends the Redis commands of concurrent callers in one
// pipeline: a Hub's renewals (leader) and a lock Client's script calls
// (leader/lock). Every call keeps its own context: one whose context ended
// before the send is answered with its error and not sent, and the batch
// runs until the latest deadline of its calls (none if one has none), so
// no call is cut short by another's.
package batch

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Call is one caller's call in a batch.
type Call interface {
	// Context is the caller's context.
	Context() context.Context
}

// Live returns the calls of batch whose contexts have not ended; each
// other call is handed to fail with its context's error, in order.
func Live[C Call](batch []C, fail func(c C, err error)) []C {
	live := make([]C, 0, len(batch))
	for _, c := range batch {
		if err := c.Context().Err(); err != nil {
			fail(c, err)
			continue
		}
		live = append(live, c)
	}
	return live
}

// Bound returns base ended at the latest deadline of calls, or base
// itself (with a no-op cancel) when one of them has no deadline.
func Bound[C Call](base context.Context, calls []C) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, c := range calls {
		d, ok := c.Context().Deadline()
		if !ok {
			return base, func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(base, latest)
}

// Exec sends cmds as one pipeline on client within ctx; each command
// holds its own reply or error. A hook that fails the pipeline without
// sending it leaves its commands with neither: they get its error.
func Exec(ctx context.Context, client redis.UniversalClient, cmds []*redis.Cmd) {
	pipe := client.Pipeline()
	for _, cmd := range cmds {
		_ = pipe.Process(ctx, cmd)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		for _, cmd := range cmds {
			if cmd.Err() == nil && cmd.Val() == nil {
				cmd.SetErr(err)
			}
		}
	}
}

// NoScript reports whether err is Redis's NOSCRIPT: the server lost its
// scripts (a restart, SCRIPT FLUSH) and did not run the call; EVAL with
// the script's source runs it and loads it again.
func NoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}
