package lock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
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
// leaves the queue (never sent) or, once sent, returns at once with the
// context's error (its outcome unknown, as any call's that timed out). A
// batch is sent with the earliest deadline of its calls, so no call is
// bounded later than its own deadline, and values of the callers'
// contexts do not reach the Redis client's hooks for a batched call.
//
// The batch is sent by a goroutine of the batcher's (drain), started when
// the send in flight returns with calls queued and ended when the queue
// is empty; stop (the Client's Close) cuts a batch in flight, and wait
// waits for the goroutine.
type batcher struct {
	client redis.UniversalClient
	stop   context.Context // a batch's context: ends with the Client
	wg     sync.WaitGroup

	mu       sync.Mutex
	inflight int // sends in flight, at most maxInflight
	queue    []*batchCall
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

// newBatcher returns a batcher for client, or nil when its calls should
// not share round trips: a Cluster or Ring client spreads its calls over
// several servers, where one send in flight would make the fast wait for
// the slow.
func newBatcher(client redis.UniversalClient, stop context.Context) *batcher {
	if _, ok := client.(*redis.Client); !ok {
		return nil
	}
	return &batcher{client: client, stop: stop}
}

// run sends the command line a of script s (see script.run) and returns
// its command, answered.
func (b *batcher) run(ctx context.Context, s *script, a []any) *redis.Cmd {
	b.mu.Lock()
	if b.inflight < maxInflight {
		b.inflight++
		b.mu.Unlock()
		cmd := s.run(ctx, b.client, a)
		b.next()
		return cmd
	}
	c := &batchCall{ctx: ctx, s: s, a: a, done: make(chan struct{})}
	b.queue = append(b.queue, c)
	b.mu.Unlock()
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
	case <-escape:
		if b.unqueue(c) {
			return s.run(ctx, b.client, a)
		}
		<-c.done
	case <-ctx.Done():
		if b.unqueue(c) {
			return failedCmd(ctx, a, notSent(ctx.Err()))
		}
		// Already in a send: wait for its answer (its deadline is at most
		// this call's), so that the caller learns what happened instead
		// of a call it would have to undo (an abandon) racing the send
		// that still carries it.
		<-c.done
	}
	return c.cmd
}

// unqueue takes c out of the queue; false if it was already taken into a
// send.
func (b *batcher) unqueue(c *batchCall) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := slices.Index(b.queue, c)
	if i < 0 {
		return false
	}
	b.queue = slices.Delete(b.queue, i, i+1)
	return true
}

// next ends a send: the batcher is idle again, or the calls queued
// meanwhile leave as the next send, on a drain goroutine.
func (b *batcher) next() {
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.inflight--
		b.mu.Unlock()
		return
	}
	// The send's slot passes to the drain goroutine.
	batch := b.queue
	b.queue = nil
	b.wg.Add(1)
	b.mu.Unlock()
	go b.drain(batch)
}

// drain sends batches until nothing is queued.
func (b *batcher) drain(batch []*batchCall) {
	defer b.wg.Done()
	for {
		b.send(batch)
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.inflight--
			b.mu.Unlock()
			return
		}
		batch = b.queue
		b.queue = nil
		b.mu.Unlock()
	}
}

// send runs the calls of batch whose contexts are live as one pipeline,
// and answers every call.
func (b *batcher) send(batch []*batchCall) {
	defer func() {
		for _, c := range batch {
			close(c.done)
		}
	}()
	live := make([]*batchCall, 0, len(batch))
	var deadline time.Time
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.cmd = failedCmd(c.ctx, c.a, notSent(err))
			continue
		}
		live = append(live, c)
		if d, ok := c.ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
			deadline = d
		}
	}
	switch len(live) {
	case 0:
		return
	case 1:
		c := live[0]
		c.cmd = c.s.run(c.ctx, b.client, c.a)
		return
	}
	ctx := b.stop
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	pipe := b.client.Pipeline()
	for _, c := range live {
		c.cmd = redis.NewCmd(ctx, c.a...)
		c.cmd.SetFirstKeyPos(3)
		_ = pipe.Process(ctx, c.cmd)
	}
	_, _ = pipe.Exec(ctx) // every command carries its own error
	for _, c := range live {
		if isNoScript(c.cmd.Err()) {
			// Not run: the server lost its scripts (a restart). EVAL
			// loads the script again; later batches use EVALSHA.
			c.cmd = c.s.eval(ctx, b.client, c.a)
		}
	}
}

// wait waits for the drain goroutine, if any.
func (b *batcher) wait() { b.wg.Wait() }

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

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}
