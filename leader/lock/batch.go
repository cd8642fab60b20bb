package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	shared "github.com/solo-run/solo/internal/batch"
)

// batcher sends the scripts of concurrent calls over one Redis client in
// shared round trips, as a database's group commit does: a call that finds
// fewer than maxInflight sends in flight goes at once, on its caller's
// goroutine, exactly as without a batcher (one goroutine pays nothing but
// a mutex); calls that arrive while the sends in flight are at the limit
// queue, and leave together as one pipeline as soon as one returns. A busy
// process thus sends one write per round trip instead of one per call, and
// Redis reads them in one go: the system calls on both sides, which cost
// far more than the scripts (docs/bench.md), are shared by the batch.
//
// Every call keeps its own context: a queued call whose context ends
// leaves the queue (never sent); one already taken into a send returns at
// once too, its outcome unknown (an acquire's abandon leaves a tombstone,
// so it is right whether it lands before or after that send). A batch is
// sent (internal/batch) with the latest deadline of its calls
// (none if one has none), so no call is cut short by another's, and values
// of the callers' contexts do not reach the Redis client's hooks for a
// batched call.
//
// The batch is sent by a goroutine of the batcher's (drain), started when
// a send in flight returns with calls queued and ended when the queue is
// empty; wait (the Client's Close) waits for it, and from then on a
// returning send sends the queue itself instead of starting one.
type batcher struct {
	client redis.UniversalClient
	q      *shared.Batcher[*batchCall] // maxInflight lanes, the first calls inline
}

// maxInflight is how many sends may be in flight at once. Two, not one:
// a connection stalled by a lost packet (a retransmission takes 200 ms and
// more) holds up one lane, not every lock call of the process; and a call
// made just as another returns (a waiter woken by the release notice while
// the releaser has not yet read its reply) goes at once instead of a round
// trip later. One batches more when the process is busy (bench figure 1, 8
// goroutines), at the price of both.
const maxInflight = 2

// batchCall is one queued call.
type batchCall struct {
	ctx  context.Context
	s    *script
	a    []any
	cmd  *redis.Cmd
	done chan struct{} // closed when cmd is set
}

func (c *batchCall) Context() context.Context { return c.ctx }

// newBatcher returns a batcher for client, or nil when its calls should
// not share round trips: a Cluster or Ring client spreads its calls over
// several servers, where one send in flight would make the fast wait for
// the slow.
func newBatcher(client redis.UniversalClient) *batcher {
	if _, ok := client.(*redis.Client); !ok {
		return nil
	}
	b := &batcher{client: client}
	b.q = shared.New(shared.Options[*batchCall]{Send: b.send, Lanes: maxInflight, Inline: true})
	return b
}

// run sends the command line a of script s (see script.run) and returns
// its command, answered.
func (b *batcher) run(ctx context.Context, s *script, a []any) *redis.Cmd {
	c, inline := b.q.Join(func() *batchCall { return &batchCall{ctx: ctx, s: s, a: a, done: make(chan struct{})} })
	if inline {
		defer b.q.Done()
		return s.run(ctx, b.client, a)
	}
	// A send in flight that does not return (a connection black-holed
	// by the network while Redis is fine) must not take every queued
	// call down with it: a call waits in the queue at most a quarter of
	// its time left, then leaves it and goes alone on a connection of its
	// own.
	var escape <-chan time.Time
	if d, ok := ctx.Deadline(); ok {
		t := time.NewTimer(time.Until(d) / 4)
		defer t.Stop()
		escape = t.C
	}
	select {
	case <-c.done:
		return c.cmd
	case <-escape:
		if b.q.Unqueue(c) {
			return s.run(ctx, b.client, a)
		}
		select {
		case <-c.done:
			return c.cmd
		case <-ctx.Done():
		}
	case <-ctx.Done():
		if b.q.Unqueue(c) {
			return failedCmd(ctx, a, notSent(ctx.Err()))
		}
	}
	select {
	case <-c.done: // answered as the context ended: the answer is known
		return c.cmd
	default:
	}
	// Taken into a send that has not answered: its outcome is unknown.
	return failedCmd(ctx, a, ctx.Err())
}

// send runs the calls of batch whose contexts are live as one pipeline,
// and answers every call.
func (b *batcher) send(batch []*batchCall) {
	defer func() {
		for _, c := range batch {
			close(c.done)
		}
	}()
	live := shared.Live(batch, func(c *batchCall, err error) { c.cmd = failedCmd(c.ctx, c.a, notSent(err)) })
	switch len(live) {
	case 0:
		return
	case 1:
		c := live[0]
		c.cmd = c.s.run(c.ctx, b.client, c.a)
		return
	}
	// Not the Client's context: a cleanup call (an abandon, the release
	// of a lock not held on) must go out even during Close.
	ctx, cancel := shared.Bound(context.Background(), live)
	defer cancel()
	cmds := make([]*redis.Cmd, len(live))
	for i, c := range live {
		c.cmd = redis.NewCmd(ctx, c.a...)
		c.cmd.SetFirstKeyPos(3)
		cmds[i] = c.cmd
	}
	shared.Exec(ctx, b.client, cmds)
	for _, c := range live {
		if isNoScript(c.cmd.Err()) {
			// Not run: the server lost its scripts (a restart). EVAL
			// loads the script again; later batches use EVALSHA.
			c.cmd = c.s.eval(ctx, b.client, c.a)
		}
	}
}

// wait waits for the drain goroutine, if any; after it, a send that
// returns with calls queued sends them itself.
func (b *batcher) wait() { b.q.Close(nil) }

// failedCmd is a command for a that was not answered: err.
func failedCmd(ctx context.Context, a []any, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx, a...)
	cmd.SetErr(err)
	return cmd
}

// errNotSent marks the error of a call that never reached Redis: its
// outcome is known (nothing happened), so an acquire needs no abandon.
var errNotSent = errors.New("lock: call not sent")

func notSent(err error) error { return fmt.Errorf("%w (%w)", err, errNotSent) }

func isNoScript(err error) bool { return shared.NoScript(err) }
