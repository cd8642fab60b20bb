package leader_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/leadertest"
)

// Regression tests for holes found in the elector.
// Each failed on the code before its fix; the failure it gave is quoted.

// overlapWitness records leader functions of several electors and counts
// instants at which two ran at once.
type overlapWitness struct {
	mu       sync.Mutex
	running  map[string]uint64 // elector → term
	overlaps []string
	starts   []witnessStart
}

type witnessStart struct {
	who       string
	term      uint64
	at        time.Time
	cancelled bool // its context was already cancelled by the renew deadline when it started
}

func newOverlapWitness() *overlapWitness { return &overlapWitness{running: map[string]uint64{}} }

// fn returns a leader function for who that stays until its context ends.
func (w *overlapWitness) fn(who string) func(context.Context) error {
	return func(ctx context.Context) error {
		term, _ := leader.TermFrom(ctx)
		w.mu.Lock()
		// Only the renew deadline counts: a term may legitimately be told
		// to stop (shutdown, resign) before its function's first line runs.
		late := errors.Is(context.Cause(ctx), leader.ErrRenewDeadline)
		w.starts = append(w.starts, witnessStart{who: who, term: term, at: time.Now(), cancelled: late})
		for other, t := range w.running {
			w.overlaps = append(w.overlaps, who+" started term "+strconv.FormatUint(term, 10)+" while "+other+" ran term "+strconv.FormatUint(t, 10))
		}
		w.running[who] = term
		w.mu.Unlock()
		<-ctx.Done()
		w.mu.Lock()
		delete(w.running, who)
		w.mu.Unlock()
		return nil
	}
}

func (w *overlapWitness) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.overlaps) > 0 {
		t.Fatalf("two leader functions at once: %v", w.overlaps)
	}
	for _, s := range w.starts {
		if s.cancelled {
			t.Fatalf("%s started term %d with its context already cancelled (past its renew deadline)", s.who, s.term)
		}
	}
}

// Bug 1(a): a client that does not bound calls by their context gets the
// acquire reply after the lease expired and another candidate took it.
// Before the fix: "a started term 1 while b ran term 2".
func TestElector_LateAcquireReplyNeverStartsPastDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := leadertest.New()
		cfg := fastConfig("a") // TTL 3s, deadline 2s
		var first atomic.Bool
		lock.SetAfter(func(_ context.Context, op leadertest.Op) error {
			if op == leadertest.OpAcquire && first.CompareAndSwap(false, true) {
				// Taken on the store at +0; the reply arrives at +3.5s,
				// ignoring the call's context, as go-redis does without
				// ContextTimeoutEnabled.
				time.Sleep(3500 * time.Millisecond)
			}
			return nil
		})
		w := newOverlapWitness()
		a := newElector(t, lock, cfg)
		stopA := run(t, a, w.fn("a"))
		synctest.Wait()
		b := newElector(t, lock, fastConfig("b"))
		stopB := run(t, b, w.fn("b"))
		time.Sleep(10 * time.Second)
		_ = stopA()
		_ = stopB()
		w.check(t)
		if len(w.starts) == 0 {
			t.Fatal("nobody led")
		}
	})
}

// Bug 1(b): an acquire times out, Redis carries it out later (after a
// stall), and the retry adopts the lease. Before the fix the adopted term's
// deadline ran from the first attempt's send time, already past: "a
// started term 1 with its context already cancelled".
func TestElector_AcquireCarriedOutAfterTimeoutIsAdoptedWithLiveDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := leadertest.New()
		cfg := fastConfig("a")
		var first atomic.Bool
		lock.SetBefore(func(ctx context.Context, op leadertest.Op) error {
			if op == leadertest.OpAcquire && first.CompareAndSwap(false, true) {
				<-ctx.Done() // the request sits in a stalled server
				return ctx.Err()
			}
			return nil
		})
		w := newOverlapWitness()
		a := newElector(t, lock, cfg)
		stop := run(t, a, w.fn("a"))
		// The stalled request is carried out at +2.2s, after the client gave
		// up at +2s and before its retry (+2.5s at the earliest).
		time.Sleep(2200 * time.Millisecond)
		if out, _, err := lock.Acquire(context.Background(), a.ID(), cfg.TTL); err != nil || out != leader.Acquired {
			t.Fatalf("late acquire = %v %v", out, err)
		}
		time.Sleep(3 * time.Second)
		if !a.IsLeader() {
			t.Fatal("a does not lead on the lease it adopted")
		}
		_ = stop()
		w.check(t)
		if len(w.starts) != 1 || w.starts[0].term != 1 {
			t.Fatalf("starts = %+v, want one start of the adopted term 1", w.starts)
		}
	})
}

// Bug 2: two processes given the same configured ID both led with one term:
// the second "adopted" the first's live lease. Before the fix: "b started
// term 1 while a ran term 1".
func TestElector_SharedConfiguredIDNeverMakesTwoLeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := leadertest.New()
		core, logs := observer.New(zapcore.InfoLevel)
		w := newOverlapWitness()
		a := newElector(t, lock, fastConfig("same"))
		b := newElector(t, lock, fastConfig("same"), leader.WithLogger(zap.New(core)))
		if a.ID() == b.ID() {
			t.Fatalf("two electors got one ID %q", a.ID())
		}
		stopA := run(t, a, w.fn("a"))
		synctest.Wait()
		stopB := run(t, b, w.fn("b"))
		time.Sleep(10 * time.Second)
		w.check(t)
		if !a.IsLeader() || b.IsLeader() {
			t.Fatalf("a leads %v, b leads %v; want a only", a.IsLeader(), b.IsLeader())
		}
		if n := logs.FilterMessageSnippet("configured with this candidate's id").FilterLevelExact(zapcore.ErrorLevel).Len(); n != 1 {
			t.Fatalf("collision logged %d times at error level, want once", n)
		}
		_ = stopA()
		_ = stopB()
	})
}

// Bug 3: Run after ErrStopTimeout led a new term while the first
// function still ran. Before the fix: "a started term 2 while a ran term 1"
// (as two functions of one elector).
func TestElector_RunAfterStopTimeoutWaitsForTheStraggler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := leadertest.New()
		cfg := fastConfig("a")
		cfg.ShutdownTimeout = 500 * time.Millisecond
		e := newElector(t, lock, cfg)
		var running, maxRunning atomic.Int32
		release := make(chan struct{})
		starts := make(chan uint64, 10)
		fn := func(ctx context.Context) error {
			n := running.Add(1)
			defer running.Add(-1)
			if n > maxRunning.Load() {
				maxRunning.Store(n)
			}
			term, _ := leader.TermFrom(ctx)
			starts <- term
			<-ctx.Done()
			<-release // ignores cancellation until the test lets go
			return nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- e.Run(ctx, fn) }()
		<-starts
		cancel()
		if err := <-done; !errors.Is(err, leader.ErrStopTimeout) {
			t.Fatalf("Run() = %v, want ErrStopTimeout", err)
		}
		// Run again at once: the lease expires after TTL, but the first
		// function still runs, so no new term may start.
		ctx2, cancel2 := context.WithCancel(context.Background())
		done2 := make(chan error, 1)
		go func() { done2 <- e.Run(ctx2, fn) }()
		time.Sleep(3 * cfg.TTL)
		if n := maxRunning.Load(); n != 1 || len(starts) != 0 {
			t.Fatalf("%d functions of one elector at once (%d new starts)", n, len(starts))
		}
		close(release)
		<-starts // now it leads again
		cancel2()
		if err := <-done2; err != nil {
			t.Fatalf("second Run() = %v", err)
		}
		if n := maxRunning.Load(); n != 1 {
			t.Fatalf("%d functions of one elector at once", n)
		}
	})
}

// Suspected: shutdown hangs when the client never returns (ReadTimeout -1
// and no context timeouts): the stop path waited for the renew goroutine.
// Before the fix: "Run did not return within 5s of its context ending".
func TestElector_ShutdownDoesNotWaitForAHungCall(t *testing.T) {
	for _, op := range []leadertest.Op{leadertest.OpRenew, leadertest.OpAcquire} {
		t.Run(string(op), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lock := leadertest.New()
				cfg := fastConfig("a")
				hang := make(chan struct{})
				defer close(hang) // lets the abandoned call end before the bubble does
				e := newElector(t, lock, cfg)
				rec := newRecorder()
				if op == leadertest.OpAcquire {
					// Someone else holds the lease; our next acquire hangs.
					lock.Steal("other", time.Hour)
				}
				var armed atomic.Bool
				lock.SetBefore(func(_ context.Context, o leadertest.Op) error {
					if o == op && armed.Load() {
						<-hang // ignores its context
					}
					return nil
				})
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- e.Run(ctx, rec.fn("a")) }()
				if op == leadertest.OpRenew {
					<-rec.started
				} else {
					synctest.Wait()
				}
				armed.Store(true)
				time.Sleep(cfg.TTL) // a call is now hanging
				cancel()
				bound := e.Config().ShutdownTimeout + cfg.RenewDeadline
				select {
				case <-done:
				case <-time.After(bound):
					t.Fatalf("Run did not return within %s of its context ending", bound)
				}
			})
		})
	}
}

// Suspected: Run's context ends during an acquire that the store still
// carries out, and the lease is left behind for a whole TTL. Before the
// fix: "lease left behind after Run returned: 1 a".
func TestElector_UnknownAcquireAtShutdownIsReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := leadertest.New()
		cfg := fastConfig("a")
		var first atomic.Bool
		lock.SetAfter(func(ctx context.Context, op leadertest.Op) error {
			if op == leadertest.OpAcquire && first.CompareAndSwap(false, true) {
				<-ctx.Done() // carried out; the reply never comes
				return ctx.Err()
			}
			return nil
		})
		e := newElector(t, lock, cfg)
		rec := newRecorder()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- e.Run(ctx, rec.fn("a")) }()
		synctest.Wait()
		if _, _, ok := lock.Holder(); !ok {
			t.Fatal("the acquire did not take effect")
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run() = %v", err)
		}
		if l, _, ok := lock.Holder(); ok {
			t.Fatalf("lease left behind after Run returned: %v", l)
		}
		if len(rec.started) != 0 {
			t.Fatal("led on an unconfirmed acquire")
		}
	})
}

// Suspected: Run waited for SUBSCRIBE before its first acquire (about 5s
// over a slow link). Notices are an optimisation and must never delay
// campaigning. Here the pub/sub connection's dial hangs until the test
// lets it through; the pooled connection for scripts is already open.
// Before the fix: "Run did not lead while the SUBSCRIBE connection was
// still dialling".
func TestRedis_FirstAcquireDoesNotWaitForSubscribe(t *testing.T) {
	srv := redistest.Start(t)
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	defer open()
	var dials atomic.Int32
	c := newClient(t, srv.Addr(), func(o *redis.Options) {
		o.DialTimeout = time.Minute
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if dials.Add(1) > 1 {
				select {
				case <-gate:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
	})
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	e := mustNew(t, c, redisConfig(t, "a"))
	started := make(chan struct{})
	stop := runRedis(t, e, func(ctx context.Context) error { close(started); <-ctx.Done(); return nil })
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not lead while the SUBSCRIBE connection was still dialling")
	}
	open()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// Bug 1 asks for a warning when a client's timeouts exceed the renew
// budget (the elector no longer depends on them for safety).
func TestNew_WarnsWhenClientTimeoutsExceedTheRenewBudget(t *testing.T) {
	cfg := leader.Config{Name: "warn", TTL: 2 * time.Second}
	tests := []struct {
		name string
		opts redis.Options
		warn bool
	}{
		{name: "go-redis defaults (3s, context ignored)", opts: redis.Options{}, warn: true},
		{name: "no read timeout", opts: redis.Options{ReadTimeout: -1, WriteTimeout: 100 * time.Millisecond}, warn: true},
		{name: "short timeouts", opts: redis.Options{ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond}},
		{name: "context honoured", opts: redis.Options{ContextTimeoutEnabled: true, ReadTimeout: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.opts
			o.Addr = "127.0.0.1:1" // never dialled: New does not contact Redis
			c := redis.NewClient(&o)
			defer c.Close()
			core, logs := observer.New(zapcore.WarnLevel)
			if _, err := leader.New(c, cfg, leader.WithLogger(zap.New(core))); err != nil {
				t.Fatal(err)
			}
			if got := logs.FilterMessageSnippet("outlast the renew budget").Len() == 1; got != tt.warn {
				t.Fatalf("warned %v, want %v", got, tt.warn)
			}
		})
	}
}

// Healthy is a liveness check of this process: a renewal that
// hangs (Redis frozen) or fails (Redis down) keeps it nil up to the renew
// deadline, where the elector steps down; only a wedged renewal loop fails
// it.
func TestElector_HealthyIgnoresRedisFailures(t *testing.T) {
	for _, mode := range []string{"frozen", "down"} {
		t.Run(mode, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lock := leadertest.New()
				e := newElector(t, lock, fastConfig("a")) // renew every 1s, deadline 2s
				if err := e.Healthy(0); err != nil {
					t.Fatalf("follower: Healthy() = %v", err)
				}
				rec := newRecorder()
				stop := run(t, e, rec.fn("a"))
				<-rec.started
				time.Sleep(3500 * time.Millisecond) // renewing fine (last at +3s)
				if err := e.Healthy(200 * time.Millisecond); err != nil {
					t.Fatalf("renewing leader: Healthy() = %v", err)
				}
				hang := make(chan struct{})
				lock.SetBefore(func(_ context.Context, op leadertest.Op) error {
					if op != leadertest.OpRenew {
						return nil
					}
					if mode == "down" {
						return errors.New("connection refused")
					}
					<-hang
					return nil
				})
				// The last renewal succeeded at +3s; the next ones hang or
				// fail. At +4.8s it is 1.8s old, and the deadline is +5s.
				time.Sleep(1300 * time.Millisecond)
				if err := e.Healthy(200 * time.Millisecond); err != nil || !e.IsLeader() {
					t.Fatalf("leader, Redis %s: Healthy() = %v (leading %v), want nil", mode, err, e.IsLeader())
				}
				time.Sleep(500 * time.Millisecond) // past the deadline: stepped down
				if err := e.Healthy(200 * time.Millisecond); err != nil || e.IsLeader() {
					t.Fatalf("after stepping down: Healthy() = %v (leading %v)", err, e.IsLeader())
				}
				close(hang)
				lock.SetBefore(nil)
				_ = stop()
			})
		})
	}
}

// wedgingLogger returns a logger whose "renewed" entry blocks, once wedge
// is set, until unwedge is closed: a renewal loop stuck in a blocked log
// sink.
func wedgingLogger(wedge *atomic.Bool, unwedge <-chan struct{}) *zap.Logger {
	core, _ := observer.New(zapcore.DebugLevel)
	return zap.New(zapcore.RegisterHooks(core, func(ent zapcore.Entry) error {
		if ent.Message == "renewed" && wedge.Load() {
			<-unwedge
		}
		return nil
	}))
}

func TestElector_HealthyFailsWhileRenewalLoopIsWedged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var wedge atomic.Bool
		unwedge := make(chan struct{})
		e := newElector(t, leadertest.New(), fastConfig("a"), leader.WithLogger(wedgingLogger(&wedge, unwedge)))
		rec := newRecorder()
		stop := run(t, e, rec.fn("a"))
		<-rec.started
		time.Sleep(3500 * time.Millisecond)
		if err := e.Healthy(200 * time.Millisecond); err != nil {
			t.Fatalf("renewing leader: Healthy() = %v", err)
		}
		// The loop blocks handling the renewal at +4s: at +5s the renew
		// deadline stops the job and the leading; the loop never handles
		// it.
		wedge.Store(true)
		time.Sleep(3 * time.Second) // +6.5s
		if err := e.Healthy(200 * time.Millisecond); !errors.Is(err, leader.ErrRenewStuck) || e.IsLeader() {
			t.Fatalf("wedged loop: Healthy() = %v (leading %v), want ErrRenewStuck", err, e.IsLeader())
		}
		close(unwedge)
		_ = stop()
	})
}

// Found by the simulator (seed 394): Run's way-out cleanup released a
// lease that an acquire of unknown outcome had left, but the release was
// still in flight when its bound ended; the next Run adopted that same
// lease, and the late release then deleted it under a running function.
// A term this elector asked to release is never led on. Before the fix:
// "the second Run leads on term 1, which it asked to release".
func TestElector_ReleaseInFlightNeverHitsAnAdoptedLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := leadertest.New()
		cfg := fastConfig("a") // deadline 2s
		var acquires, releases atomic.Int32
		releaseSent := make(chan struct{})
		lock.SetAfter(func(ctx context.Context, op leadertest.Op) error {
			if op == leadertest.OpAcquire && acquires.Add(1) == 1 {
				<-ctx.Done() // carried out; the reply never comes
				return ctx.Err()
			}
			return nil
		})
		lock.SetBefore(func(_ context.Context, op leadertest.Op) error {
			if op == leadertest.OpRelease && releases.Add(1) == 1 {
				close(releaseSent)
				time.Sleep(3 * time.Second) // in flight past the cleanup's bound
			}
			return nil
		})
		e := newElector(t, lock, cfg)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- e.Run(ctx, func(ctx context.Context) error { <-ctx.Done(); return nil }) }()
		synctest.Wait()
		cancel()
		<-releaseSent
		if err := <-done; err != nil {
			t.Fatalf("first Run() = %v", err)
		}
		terms := make(chan uint64, 4)
		stop := run(t, e, func(ctx context.Context) error {
			term, _ := leader.TermFrom(ctx)
			terms <- term
			<-ctx.Done()
			return nil
		})
		term := <-terms
		if term == 1 {
			t.Fatal("the second Run leads on term 1, which it asked to release")
		}
		time.Sleep(4 * time.Second) // the late release has landed
		if h, _, ok := lock.Holder(); !ok || h.Term != term || !e.IsLeader() {
			t.Fatalf("lease %v %v while leading term %d", h, ok, term)
		}
		_ = stop()
	})
}
