package lock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/leader/lock"
)

// gate is a go-redis hook that holds the first lock.MaxInflight single
// commands it sees until release is closed, so that the calls made
// meanwhile queue in the Client's batcher; it records every pipeline's
// size and deadline. Start the held calls with hold.
type gate struct {
	held    chan struct{} // one value per command held
	release chan struct{}

	mu        sync.Mutex
	holding   int
	pipes     []int
	deadlines []time.Time
}

func newGate() *gate {
	return &gate{held: make(chan struct{}, lock.MaxInflight), release: make(chan struct{})}
}

// hold runs f on lock.MaxInflight goroutines (each makes one call, which
// the gate holds) and returns once every one is held; wait returns their
// errors after release.
func (g *gate) hold(f func(i int) error) (wait func() error) {
	errs := make(chan error, lock.MaxInflight)
	for i := range lock.MaxInflight {
		go func() { errs <- f(i) }()
	}
	for range lock.MaxInflight {
		<-g.held
	}
	return func() error {
		var all []error
		for range lock.MaxInflight {
			all = append(all, <-errs)
		}
		return errors.Join(all...)
	}
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		g.mu.Lock()
		hold := g.holding < lock.MaxInflight
		g.holding++
		g.mu.Unlock()
		if hold {
			g.held <- struct{}{}
			<-g.release
		}
		return next(ctx, cmd)
	}
}

func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || (cmds[0].Name() != "evalsha" && cmds[0].Name() != "eval") {
			return next(ctx, cmds) // the connection's handshake
		}
		d, _ := ctx.Deadline()
		g.mu.Lock()
		g.pipes = append(g.pipes, len(cmds))
		g.deadlines = append(g.deadlines, d)
		g.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (g *gate) pipelines() ([]int, []time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]int(nil), g.pipes...), append([]time.Time(nil), g.deadlines...)
}

// warmLockClient is newLockClient with the eviction policy already read,
// as a running Client has: a gate then holds lock calls, not that read.
func warmLockClient(t *testing.T, rdb *redis.Client) *lock.Client {
	t.Helper()
	c := newLockClient(t, rdb)
	if err := lock.EvictionGuardOf(c).Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

// waitQueued waits until n calls are queued in c's batcher.
func waitQueued(t *testing.T, c *lock.Client, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for lock.QueuedCalls(c) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", lock.QueuedCalls(c), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestBatch_CallsMadeDuringASendShareOneRoundTrip: while one call is in
// flight, the calls of other goroutines (other locks, each its own
// context) queue and then leave as ONE pipeline; every one of them gets
// its own answer (a term, a hold), and nothing is sent twice.
func TestBatch_CallsMadeDuringASendShareOneRoundTrip(t *testing.T) {
	_, rdb := startRedis(t)
	g := newGate()
	c := warmLockClient(t, rdb)
	rdb.AddHook(g)
	ctx := context.Background()
	const n = 12

	// The acquires in flight, held by the hook.
	first := g.hold(func(i int) error {
		h, err := mustMutex(t, c, fmt.Sprintf("first%d", i)).TryLock(ctx)
		if err == nil {
			err = h.Unlock(ctx)
		}
		return err
	})

	type result struct {
		h   *lock.Hold
		err error
	}
	results := make(chan result, n)
	for i := range n {
		m := mustMutex(t, c, fmt.Sprintf("q%d", i))
		go func() {
			h, err := m.TryLock(ctx)
			results <- result{h, err}
		}()
	}
	waitQueued(t, c, n)
	close(g.release)
	if err := first(); err != nil {
		t.Fatal(err)
	}
	terms := map[uint64]bool{}
	for range n {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		if terms[r.h.Term()] {
			t.Errorf("term %d handed out twice", r.h.Term())
		}
		terms[r.h.Term()] = true
		if err := r.h.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	pipes, _ := g.pipelines()
	if len(pipes) == 0 || pipes[0] != n {
		t.Fatalf("pipelines %v: want the %d queued acquires as the first, one round trip", pipes, n)
	}
	keys, err := rdb.Keys(ctx, "solo:{q*}:lock").Result()
	if err != nil || len(keys) != 0 {
		t.Fatalf("locks left after every Unlock: %v %v", keys, err)
	}
}

// TestBatch_AQueuedCallWhoseContextEndsIsNeverSent: the call returns its
// context's error and its lock is not taken; the batch carries the
// others, and is bounded by the earliest deadline among them.
func TestBatch_AQueuedCallWhoseContextEndsIsNeverSent(t *testing.T) {
	_, rdb := startRedis(t)
	g := newGate()
	c := warmLockClient(t, rdb)
	rdb.AddHook(g)
	ctx := context.Background()

	first := g.hold(func(i int) error {
		_, err := mustMutex(t, c, fmt.Sprintf("first%d", i)).TryLock(ctx)
		return err
	})

	cctx, cancel := context.WithCancel(ctx)
	gone := make(chan error, 1)
	go func() {
		_, err := mustMutex(t, c, "cancelled").TryLock(cctx)
		gone <- err
	}()
	early := time.Now().Add(time.Hour)
	dctx, dcancel := context.WithDeadline(ctx, early)
	defer dcancel()
	type result struct {
		h   *lock.Hold
		err error
	}
	kept := make(chan result, 2)
	for i, kctx := range []context.Context{dctx, ctx} {
		m := mustMutex(t, c, fmt.Sprintf("kept%d", i))
		go func() {
			h, err := m.TryLock(kctx)
			kept <- result{h, err}
		}()
	}
	waitQueued(t, c, 3)
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v, want context.Canceled", err)
	}
	waitQueued(t, c, 2)
	close(g.release)
	if err := first(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		r := <-kept
		if r.err != nil {
			t.Fatal(r.err)
		}
		defer func() { _ = r.h.Unlock(ctx) }()
	}
	if n, err := rdb.Exists(ctx, "solo:{cancelled}:lock").Result(); err != nil || n != 0 {
		t.Fatalf("the cancelled call's lock exists: %d %v", n, err)
	}
	pipes, deadlines := g.pipelines()
	if len(pipes) != 1 || pipes[0] != 2 {
		t.Fatalf("pipelines %v, want one of the 2 kept calls", pipes)
	}
	// Each call is bounded by RenewDeadline (inline calls get a deadline
	// of their own, sooner than the hour); the batch by the latest of them.
	if deadlines[0].IsZero() || !deadlines[0].Before(early) {
		t.Fatalf("batch deadline %v, want the latest of its calls' (before %v)", deadlines[0], early)
	}
}

// TestBatch_ScriptsLostByTheServerAreLoadedAgain: a batch sent after the
// server lost its scripts (a restart; SCRIPT FLUSH here) gets NOSCRIPT for
// every command, so none ran; each is sent again as EVAL, and every call
// succeeds.
func TestBatch_ScriptsLostByTheServerAreLoadedAgain(t *testing.T) {
	_, rdb := startRedis(t)
	c := newLockClient(t, rdb)
	ctx := context.Background()
	const n = 8
	holds := make([]*lock.Hold, n)
	for i := range holds {
		h, err := mustMutex(t, c, fmt.Sprintf("flushed%d", i)).TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		holds[i] = h
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	g := newGate()
	rdb.AddHook(g)
	first := g.hold(func(i int) error {
		_, err := mustMutex(t, c, fmt.Sprintf("first%d", i)).TryLock(ctx) // NOSCRIPT, then EVAL
		return err
	})
	errs := make(chan error, n)
	for _, h := range holds {
		go func() { errs <- h.Unlock(ctx) }()
	}
	waitQueued(t, c, n)
	close(g.release)
	if err := first(); err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("Unlock in a batch that met NOSCRIPT: %v", err)
		}
	}
	if pipes, _ := g.pipelines(); len(pipes) == 0 || pipes[0] != n {
		t.Fatalf("pipelines %v, want the %d releases as one", pipes, n)
	}
	keys, err := rdb.Keys(ctx, "solo:{flushed*}:lock").Result()
	if err != nil || len(keys) != 0 {
		t.Fatalf("locks left: %v %v", keys, err)
	}
}

// TestBatch_ClusterClientsSendEachCallAlone: a Cluster client's calls go
// to several servers; one send in flight would make the fast ones wait for
// the slow, so they are not batched.
func TestBatch_ClusterClientsSendEachCallAlone(t *testing.T) {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer func() { _ = cc.Close() }()
	c := newLockClient(t, cc)
	if n := lock.QueuedCalls(c); n != -1 {
		t.Fatalf("a Cluster client's lock Client batches (queued %d)", n)
	}
	_, rdb := startRedis(t)
	if n := lock.QueuedCalls(newLockClient(t, rdb)); n != 0 {
		t.Fatalf("a single-node client's lock Client does not batch (%d)", n)
	}
}

// TestBatch_AQueuedCallLeavesAStuckSend: the sends in flight do not
// return (its connection black-holed, say), yet Redis is fine: a queued
// call waits at most a quarter of its time left, then goes alone and
// succeeds, while the stuck send is still held.
func TestBatch_AQueuedCallLeavesAStuckSend(t *testing.T) {
	_, rdb := startRedis(t)
	g := newGate()
	c := warmLockClient(t, rdb)
	rdb.AddHook(g)
	ctx := context.Background()
	stuck := make(chan struct{})
	first := g.hold(func(i int) error {
		_, err := mustMutex(t, c, fmt.Sprintf("stuck%d", i)).TryLock(ctx)
		return err
	})
	go func() {
		_ = first()
		close(stuck)
	}()
	defer func() {
		close(g.release)
		<-stuck
	}()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	h, err := mustMutex(t, c, "escapes").TryLock(cctx)
	if err != nil {
		t.Fatalf("queued call behind a stuck send: %v", err)
	}
	select {
	case <-stuck:
		t.Fatal("the stuck sends returned before the queued call: nothing was stuck")
	default:
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestBatch_RandomCancellations: goroutines of one Client take and release
// a few shared locks and locks of their own with TryLock, a seeded random
// part of them under contexts that end mid-call (before, during or after
// the send that carries them). However the calls are batched and cut:
// never two holders of one lock at once (an in-process witness), no term
// handed out twice, and no lock left behind once every goroutine is done
// (a call reported as never sent took nothing; one whose outcome was
// unknown was abandoned). SOLO_BATCH_SEED=N replays a run's choices.
func TestBatch_RandomCancellations(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SOLO_BATCH_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("SOLO_BATCH_SEED=%q: %v", s, err)
		}
	}
	t.Logf("seed %d (SOLO_BATCH_SEED=%d replays the choices; the interleaving is the machine's)", seed, seed)
	_, rdb := startRedis(t)
	c := newLockClient(t, rdb)
	ctx := context.Background()
	const (
		goroutines = 16
		ops        = 150
		shared     = 3
	)
	var (
		mu      sync.Mutex
		holders = map[string]int{}
		terms   = map[string]bool{} // "NAME TERM": terms are per lock
		fails   []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		fails = append(fails, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for g := range goroutines {
		rng := rand.New(rand.NewPCG(seed, uint64(g)))
		own := mustMutex(t, c, fmt.Sprintf("own%d", g))
		sharedM := make([]*lock.Mutex, shared)
		for i := range sharedM {
			sharedM[i] = mustMutex(t, c, fmt.Sprintf("shared%d", i))
		}
		wg.Go(func() {
			for range ops {
				m := own
				if rng.IntN(2) == 0 {
					m = sharedM[rng.IntN(shared)]
				}
				cctx, cancel := context.WithCancel(ctx)
				if rng.IntN(4) == 0 {
					// Ends before, during or after the call.
					time.AfterFunc(time.Duration(rng.IntN(300))*time.Microsecond, cancel)
				}
				h, err := m.TryLock(cctx)
				cancel()
				if err != nil {
					if !errors.Is(err, lock.ErrNotObtained) && !errors.Is(err, context.Canceled) {
						fail("%s: TryLock: %v", m.Name(), err)
					}
					continue
				}
				mu.Lock()
				holders[m.Name()]++
				n := holders[m.Name()]
				key := fmt.Sprint(m.Name(), " ", h.Term())
				if terms[key] {
					fails = append(fails, fmt.Sprintf("term %d of %s handed out twice", h.Term(), m.Name()))
				}
				terms[key] = true
				mu.Unlock()
				if n != 1 {
					fail("%s: %d holders at once", m.Name(), n)
				}
				time.Sleep(time.Duration(rng.IntN(100)) * time.Microsecond)
				mu.Lock()
				holders[m.Name()]--
				mu.Unlock()
				if err := h.Unlock(ctx); err != nil {
					fail("%s: Unlock: %v", m.Name(), err)
				}
			}
		})
	}
	wg.Wait()
	for _, f := range fails {
		t.Error(f)
	}
	keys, err := rdb.Keys(ctx, "solo:{*}:lock").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Fatalf("locks left behind: %v (seed %d)", keys, seed)
	}
	if len(terms) < goroutines {
		t.Fatalf("only %d holds in the run: nothing was exercised", len(terms))
	}
}

// pipeGate holds the first script pipeline until release is closed.
type pipeGate struct {
	once    sync.Once
	held    chan struct{} // closed when the pipeline is held
	release chan struct{}
}

func newPipeGate() *pipeGate {
	return &pipeGate{held: make(chan struct{}), release: make(chan struct{})}
}

func (g *pipeGate) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (g *pipeGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (g *pipeGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() == "evalsha" {
			first := false
			g.once.Do(func() { first = true })
			if first {
				close(g.held)
				<-g.release
			}
		}
		return next(ctx, cmds)
	}
}

// TestBatch_ACallGivenUpInASendIsUndoneAfterIt: two acquires share a
// send that is slow to go out. One's context ends meanwhile: its TryLock
// returns at once (context deadline), and the other is not cut by that
// deadline (a batch carries the latest of its calls'). The given-up
// acquire still lands, and takes its lock; the abandon that undoes it
// waits for the send, so it cannot overtake it and leave the lock held by
// nobody until its TTL.
func TestBatch_ACallGivenUpInASendIsUndoneAfterIt(t *testing.T) {
	_, rdb := startRedis(t)
	g, pg := newGate(), newPipeGate()
	c := warmLockClient(t, rdb)
	rdb.AddHook(g)
	rdb.AddHook(pg)
	ctx := context.Background()
	// TryLock only: once they return, one lane is free while the other
	// carries the held pipeline, so an abandon that did not wait for the
	// send would go out at once, ahead of it.
	first := g.hold(func(i int) error {
		_, err := mustMutex(t, c, fmt.Sprintf("first%d", i)).TryLock(ctx)
		return err
	})
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	shortErr := make(chan error, 1)
	go func() {
		_, err := mustMutex(t, c, "short").TryLock(short)
		shortErr <- err
	}()
	waitQueued(t, c, 1)
	type result struct {
		h   *lock.Hold
		err error
	}
	long := make(chan result, 1)
	go func() {
		h, err := mustMutex(t, c, "long").TryLock(ctx)
		long <- result{h, err}
	}()
	waitQueued(t, c, 2)
	close(g.release) // the sends in flight return; the two leave as one pipeline
	<-pg.held
	if err := first(); err != nil {
		t.Fatal(err)
	}
	if err := <-shortErr; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryLock whose context ended in a held send: %v, want context.DeadlineExceeded", err)
	}
	time.Sleep(50 * time.Millisecond) // room for an abandon that does not wait to overtake
	close(pg.release)                 // the send lands: both acquires run
	r := <-long
	if r.err != nil {
		t.Fatalf("TryLock with a live context in the same batch: %v", r.err)
	}
	defer func() { _ = r.h.Unlock(ctx) }()
	// Far below the lock's TTL (10s), past which it would be gone anyway.
	deadline := time.Now().Add(3 * time.Second)
	for {
		n, err := rdb.Exists(ctx, "solo:{short}:lock").Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			pttl, _ := rdb.PTTL(ctx, "solo:{short}:lock").Result()
			t.Fatalf("the given-up acquire's lock is held by nobody (PTTL %v): its abandon overtook the send", pttl)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestBatch_CloseLeavesNoCallBehind: Close while sends are in flight and
// calls are queued. The queued acquires still go out once a send returns
// (on the returning goroutine: Close has waited for the batcher); each
// finds the Client closed, releases what it took and returns ErrClosed.
// No lock is left, and no goroutine (goleak).
func TestBatch_CloseLeavesNoCallBehind(t *testing.T) {
	_, rdb := startRedis(t)
	g := newGate()
	c, err := lock.NewClient(rdb)
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.EvictionGuardOf(c).Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(g)
	ctx := context.Background()
	first := g.hold(func(i int) error {
		_, err := mustMutex(t, c, fmt.Sprintf("first%d", i)).TryLock(ctx)
		return err
	})
	const n = 4
	errs := make(chan error, n)
	for i := range n {
		m := mustMutex(t, c, fmt.Sprintf("queued%d", i))
		go func() {
			_, err := m.TryLock(ctx)
			errs <- err
		}()
	}
	waitQueued(t, c, n)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	if err := first(); !errors.Is(err, lock.ErrClosed) {
		t.Fatalf("in-flight TryLocks after Close: %v, want ErrClosed", err)
	}
	for range n {
		if err := <-errs; !errors.Is(err, lock.ErrClosed) {
			t.Fatalf("queued TryLock after Close: %v, want ErrClosed", err)
		}
	}
	keys, err := rdb.Keys(ctx, "solo:{*}:lock").Result()
	if err != nil || len(keys) != 0 {
		t.Fatalf("locks left after Close: %v %v", keys, err)
	}
}
