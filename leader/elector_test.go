package leader_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/leadertest"
)

// These tests drive the elector's state machine against the in-memory lock
// inside testing/synctest bubbles: time is fake and advances only when
// every goroutine is blocked, so the timing rules are checked to the
// nanosecond without sleeping and without flakes.

// fastConfig: TTL 3s, renew every 1s, deadline 2s, stop budget 1s.
func fastConfig(id string) leader.Config {
	return leader.Config{
		Name:          "jobs",
		ID:            id,
		TTL:           3 * time.Second,
		RenewInterval: time.Second,
		RenewDeadline: 2 * time.Second,
		RetryInterval: 500 * time.Millisecond,
	}
}

// span is one call of a leader function as the function itself saw it.
type span struct {
	id         string
	term       uint64
	start, end time.Time
	cause      error
}

// recorder is a leader function factory that records every call.
type recorder struct {
	mu    sync.Mutex
	spans []span
	// hold, when set, is how long the function keeps running after its
	// context is cancelled (a job that ignores cancellation).
	hold    time.Duration
	started chan span
}

func newRecorder() *recorder { return &recorder{started: make(chan span, 100)} }

func (r *recorder) fn(id string) func(context.Context) error {
	return func(ctx context.Context) error {
		term, ok := leader.TermFrom(ctx)
		if !ok {
			return errors.New("no term in context")
		}
		s := span{id: id, term: term, start: time.Now()}
		r.started <- s
		<-ctx.Done()
		s.cause = context.Cause(ctx)
		time.Sleep(r.hold)
		s.end = time.Now()
		r.mu.Lock()
		r.spans = append(r.spans, s)
		r.mu.Unlock()
		return nil
	}
}

func (r *recorder) ended() []span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]span(nil), r.spans...)
}

// metrics records what the elector reports.
type metrics struct {
	leader.NopMetrics
	mu          sync.Mutex
	transitions []leader.Transition
	overruns    int
	renews      int
}

func (m *metrics) Transition(t leader.Transition, _ uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.transitions = append(m.transitions, t)
}

func (m *metrics) Renew(time.Duration, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.renews++
}

func (m *metrics) Overrun(uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.overruns++
}

// run starts e.Run in the bubble and returns a function that cancels it and
// returns its error.
func run(t *testing.T, e *leader.Elector, fn func(context.Context) error) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx, fn) }()
	return func() error {
		cancel()
		return <-done
	}
}

func newElector(t *testing.T, lock leader.Store, cfg leader.Config, opts ...leader.Option) *leader.Elector {
	t.Helper()
	e, err := leader.NewWithStore(lock, cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestElector_RenewDeadlineCancelsWhileRenewHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := leadertest.New()
		cfg := fastConfig("a")
		m := &metrics{}
		e := newElector(t, lock, cfg, leader.WithMetrics(m))
		rec := newRecorder()
		// Every renew round trip takes 300ms, so send and reply times differ.
		hang := make(chan struct{})
		var hanging sync.Once
		armed := make(chan struct{})
		lock.SetBefore(func(ctx context.Context, op leadertest.Op) error {
			if op != leadertest.OpRenew {
				return nil
			}
			select {
			case <-armed:
				<-hang // a stalled Redis: ignores the context
			default:
				time.Sleep(300 * time.Millisecond)
			}
			return nil
		})
		stop := run(t, e, rec.fn("a"))

		s := <-rec.started
		// Let the first renewal (sent at +1s, answered at +1.3s) succeed,
		// then make every renew hang.
		time.Sleep(1500 * time.Millisecond)
		sentAt := s.start.Add(cfg.RenewInterval)
		lastRenew := e.Status().LastRenew
		if !lastRenew.Equal(sentAt) {
			t.Fatalf("LastRenew = +%s, want the renewal's send time +%s", lastRenew.Sub(s.start), sentAt.Sub(s.start))
		}
		hanging.Do(func() { close(armed) })

		// The next renew (at +2s) hangs; the deadline is the renewal's send
		// time + RenewDeadline = +3s, while the key lives until +4s.
		time.Sleep(2 * time.Second)
		synctest.Wait()
		ended := rec.ended()
		if len(ended) != 1 {
			t.Fatalf("leader function still running at +3.5s; spans %+v", ended)
		}
		if got := ended[0].end.Sub(sentAt); got != cfg.RenewDeadline {
			t.Fatalf("cancelled %s after the last successful renewal's send time, want exactly %s", got, cfg.RenewDeadline)
		}
		if !errors.Is(ended[0].cause, leader.ErrRenewDeadline) {
			t.Fatalf("cause = %v, want ErrRenewDeadline", ended[0].cause)
		}
		if e.IsLeader() || e.Term() != 0 {
			t.Fatal("still reports leadership after the deadline")
		}
		// Cancelled before the key expired on the "server", and nothing
		// was released after the missed deadline.
		if l, left, ok := lock.Holder(); !ok || l.ID != e.ID() || left <= 0 {
			t.Fatalf("lease at cancel = %v %v %v, want still ours with time left", l, left, ok)
		}
		if n := lock.Calls(leadertest.OpRelease); n != 0 {
			t.Fatalf("released %d times after a missed deadline", n)
		}
		close(hang)
		if err := stop(); err != nil {
			t.Fatalf("Run() = %v", err)
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if len(m.transitions) < 2 || m.transitions[0] != leader.TransitionElected || m.transitions[1] != leader.TransitionExpired {
			t.Fatalf("transitions = %v, want elected then lost", m.transitions)
		}
	})
}

func TestElector_LeaseLostBehindItsBack(t *testing.T) {
	chaos := []struct {
		name  string
		do    func(l *leadertest.Store)
		after func(t *testing.T, l *leadertest.Store)
	}{
		{
			name: "deleted",
			do:   func(l *leadertest.Store) { l.Expire() },
			after: func(t *testing.T, l *leadertest.Store) {
				// Renewing never re-creates the key.
				if h, _, ok := l.Holder(); ok {
					t.Fatalf("lease re-created by the old leader: %v", h)
				}
			},
		},
		{
			name: "overwritten",
			do:   func(l *leadertest.Store) { l.Steal("intruder", time.Hour) },
			after: func(t *testing.T, l *leadertest.Store) {
				if h, _, ok := l.Holder(); !ok || h.ID != "intruder" {
					t.Fatalf("holder = %v %v, want the intruder untouched", h, ok)
				}
			},
		},
	}
	for _, tt := range chaos {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lock := leadertest.New()
				cfg := fastConfig("a")
				e := newElector(t, lock, cfg)
				rec := newRecorder()
				stop := run(t, e, rec.fn("a"))
				s := <-rec.started
				time.Sleep(300 * time.Millisecond)
				tt.do(lock)
				time.Sleep(800 * time.Millisecond) // past the renewal at +1s
				synctest.Wait()
				ended := rec.ended()
				if len(ended) != 1 || !errors.Is(ended[0].cause, leader.ErrLeaseLost) {
					t.Fatalf("spans = %+v, want one cancelled with ErrLeaseLost", ended)
				}
				if got := ended[0].end.Sub(s.start); got != cfg.RenewInterval {
					t.Fatalf("noticed after %s, want at the next renewal (%s)", got, cfg.RenewInterval)
				}
				tt.after(t, lock)
				if n := lock.Calls(leadertest.OpRelease); n != 0 {
					t.Fatalf("release called %d times on a lease that is not ours", n)
				}
				if err := stop(); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

func TestElector_ResignKeepsRenewingWhileDraining(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := leadertest.New()
		cfg := fastConfig("a")
		ma := &metrics{}
		a := newElector(t, lock, cfg, leader.WithMetrics(ma))
		b := newElector(t, lock, fastConfig("b"))
		recA, recB := newRecorder(), newRecorder()
		recA.hold = 4 * cfg.TTL // ignores cancellation for 12s
		stopA := run(t, a, recA.fn("a"))
		sa := <-recA.started
		stopB := run(t, b, recB.fn("b"))
		time.Sleep(100 * time.Millisecond)

		resigned := make(chan error, 1)
		resignAt := time.Now()
		go func() { resigned <- a.Resign(context.Background()) }()
		// While a's function drains, a keeps the lease: b never leads.
		for range 10 {
			time.Sleep(cfg.TTL / 3)
			if b.IsLeader() {
				t.Fatal("b leads while a's function still runs")
			}
			if h, _, ok := lock.Holder(); !ok || h.ID != a.ID() || h.Term != sa.term {
				t.Fatalf("lease during drain = %v %v, want a's term %d", h, ok, sa.term)
			}
			if n := lock.Calls(leadertest.OpRelease); n != 0 {
				t.Fatal("released while the function runs")
			}
		}
		if a.IsLeader() {
			t.Fatal("a still reports leadership after Resign cancelled its term")
		}
		sb := <-recB.started
		endA := recA.ended()
		if len(endA) != 1 || !errors.Is(endA[0].cause, leader.ErrResigned) {
			t.Fatalf("a's spans = %+v, want one ended by ErrResigned", endA)
		}
		// b starts at the very instant a released (a pub/sub notice, not a
		// poll): same fake time as a's function end, since release is instant.
		if !sb.start.Equal(endA[0].end) {
			t.Fatalf("b started at %v, a's function ended at %v: handoff not immediate", sb.start.Sub(resignAt), endA[0].end.Sub(resignAt))
		}
		if sb.term <= sa.term {
			t.Fatalf("b's term %d not above a's %d", sb.term, sa.term)
		}
		if err := <-resigned; err != nil {
			t.Fatalf("Resign() = %v", err)
		}
		ma.mu.Lock()
		overruns := ma.overruns
		ma.mu.Unlock()
		if overruns != 1 {
			t.Fatalf("overruns reported = %d, want 1 (the function ran past its stop budget)", overruns)
		}
		if err := stopB(); err != nil {
			t.Fatal(err)
		}
		if err := stopA(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestElector_ResignCooldownLetsAnotherWin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := leadertest.New()
		a := newElector(t, lock, fastConfig("a"))
		b := newElector(t, lock, fastConfig("b"))
		recA, recB := newRecorder(), newRecorder()
		stopA := run(t, a, recA.fn("a"))
		<-recA.started
		stopB := run(t, b, recB.fn("b"))
		synctest.Wait()
		if err := a.Resign(context.Background()); err != nil {
			t.Fatal(err)
		}
		sb := <-recB.started
		if sb.id != "b" {
			t.Fatal("b did not take over")
		}
		if err := a.Resign(context.Background()); !errors.Is(err, leader.ErrNotLeader) {
			t.Fatalf("Resign() by a follower = %v, want ErrNotLeader", err)
		}
		// b resigns too: a comes back after its cool-down expired.
		time.Sleep(time.Second)
		if err := b.Resign(context.Background()); err != nil {
			t.Fatal(err)
		}
		if s := <-recA.started; s.id != "a" {
			t.Fatal("a did not come back")
		}
		_ = stopA()
		_ = stopB()
	})
}

func TestElector_ShutdownWithStuckFunctionLeavesLeaseToExpire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := leadertest.New()
		cfg := fastConfig("a")
		cfg.ShutdownTimeout = 5 * time.Second
		e := newElector(t, lock, cfg)
		release := make(chan struct{})
		started := make(chan uint64, 1)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- e.Run(ctx, func(ctx context.Context) error {
				term, _ := leader.TermFrom(ctx)
				started <- term
				<-release // ignores cancellation
				return nil
			})
		}()
		term := <-started
		cancel()
		t0 := time.Now()
		err := <-done
		if !errors.Is(err, leader.ErrStopTimeout) {
			t.Fatalf("Run() = %v, want ErrStopTimeout", err)
		}
		if got := time.Since(t0); got != cfg.ShutdownTimeout {
			t.Fatalf("Run returned %s after shutdown, want shutdown_timeout %s", got, cfg.ShutdownTimeout)
		}
		// It kept renewing while draining, then stopped; never released.
		if h, _, ok := lock.Holder(); !ok || h.Term != term {
			t.Fatalf("lease at return = %v %v, want still ours (left to expire)", h, ok)
		}
		if n := lock.Calls(leadertest.OpRelease); n != 0 {
			t.Fatalf("released %d times under a running function", n)
		}
		time.Sleep(cfg.TTL)
		if _, _, ok := lock.Holder(); ok {
			t.Fatal("lease still held a TTL after renewing stopped")
		}
		close(release)
	})
}

func TestElector_LostAcquireReplyNeverStartsUnconfirmed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := leadertest.New()
		cfg := fastConfig("a")
		var once sync.Once
		lock.SetAfter(func(_ context.Context, op leadertest.Op) error {
			var err error
			if op == leadertest.OpAcquire {
				once.Do(func() { err = errors.New("i/o timeout (reply lost)") })
			}
			return err
		})
		e := newElector(t, lock, cfg)
		b := newElector(t, lock, fastConfig("b"))
		rec := newRecorder()
		t0 := time.Now()
		stop := run(t, e, rec.fn("a"))
		synctest.Wait()
		// The acquire took effect on the store, but its reply was lost.
		h, _, ok := lock.Holder()
		if !ok || h.ID != e.ID() {
			t.Fatalf("store holder = %v %v, want a's unconfirmed lease", h, ok)
		}
		if e.IsLeader() || len(rec.started) != 0 {
			t.Fatal("started leading on an unconfirmed acquire")
		}
		// A rival sees the lease held and does not lead either.
		recB := newRecorder()
		stopB := run(t, b, recB.fn("b"))
		s := <-rec.started
		if s.term != h.Term {
			t.Fatalf("adopted term %d, want the unconfirmed acquire's term %d", s.term, h.Term)
		}
		if waited := s.start.Sub(t0); waited < cfg.RetryInterval {
			t.Fatalf("started %s after the lost reply, before the retry at %s", waited, cfg.RetryInterval)
		}
		// The adopted term's deadline runs from the adopting attempt's send
		// time: its script refreshed the TTL after that instant, and the
		// lease was this elector's all along. (From the first attempt's
		// send time, a retry after a long stall would start its function
		// past the deadline.) No fake time passes between the send and the
		// start here.
		if st := e.Status(); !st.Since.Equal(s.start) || !st.LastRenew.Equal(s.start) || st.Since.Equal(t0) {
			t.Fatalf("adopted term dates from +%s, want the adopting attempt at +%s", st.Since.Sub(t0), s.start.Sub(t0))
		}
		if b.IsLeader() {
			t.Fatal("two leaders")
		}
		_ = stopB()
		_ = stop()
	})
}

func TestElector_AdoptedEndedTermIsReplacedByNewTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := leadertest.New()
		cfg := fastConfig("a")
		e := newElector(t, lock, cfg)
		rec := newRecorder()
		stop := run(t, e, rec.fn("a"))
		first := <-rec.started
		// Renewals hang until past the deadline (at +2s); the key itself
		// lives until +3s, so the next campaign finds its own ended lease.
		hang := make(chan struct{})
		lock.SetBefore(func(ctx context.Context, op leadertest.Op) error {
			if op == leadertest.OpRenew {
				<-hang
			}
			return nil
		})
		time.Sleep(2100 * time.Millisecond)
		lock.SetBefore(nil)
		close(hang)
		second := <-rec.started
		if second.term <= first.term {
			t.Fatalf("second term %d not above the first %d: an ended term was reused", second.term, first.term)
		}
		if second.start.Sub(first.start) >= cfg.TTL {
			t.Fatalf("came back after %s: the ended lease was not handed back early", second.start.Sub(first.start))
		}
		if n := lock.Calls(leadertest.OpRelease); n != 1 {
			t.Fatalf("release calls = %d, want 1 (the ended term's lease)", n)
		}
		_ = stop()
	})
}

func TestElector_FunctionFailureBacksOffAndIsLogged(t *testing.T) {
	for _, tt := range []struct {
		name string
		fn   func(context.Context) error
		want string
	}{
		{"error", func(context.Context) error { return errors.New("upstream down") }, "upstream down"},
		{"panic", func(context.Context) error { panic("boom") }, "leader function panicked: boom"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				core, logs := observer.New(zapcore.InfoLevel)
				lock := leadertest.New()
				cfg := fastConfig("a")
				var mu sync.Mutex
				var starts []time.Time
				e := newElector(t, lock, cfg, leader.WithLogger(zap.New(core)))
				stop := run(t, e, func(ctx context.Context) error {
					mu.Lock()
					starts = append(starts, time.Now())
					mu.Unlock()
					return tt.fn(ctx)
				})
				time.Sleep(2 * time.Second)
				_ = stop()
				mu.Lock()
				defer mu.Unlock()
				if len(starts) < 2 {
					t.Fatalf("function ran %d times in 2s, want restarts", len(starts))
				}
				for i := 1; i < len(starts); i++ {
					gap := starts[i].Sub(starts[i-1])
					if gap < cfg.RetryInterval || gap > cfg.RetryInterval*6/5 {
						t.Fatalf("restart gap %s outside back-off [%s, %s]", gap, cfg.RetryInterval, cfg.RetryInterval*6/5)
					}
				}
				failed := logs.FilterMessage("leader function failed").All()
				if len(failed) != len(starts) || failed[0].Level != zapcore.ErrorLevel {
					t.Fatalf("logged %d failures for %d runs", len(failed), len(starts))
				}
				if msg := failed[0].ContextMap()["error"].(string); len(msg) < len(tt.want) || msg[:len(tt.want)] != tt.want {
					t.Fatalf("logged error %q, want prefix %q", msg, tt.want)
				}
				if n := lock.Calls(leadertest.OpRelease); n != len(starts) {
					t.Fatalf("released %d times for %d terms", n, len(starts))
				}
			})
		})
	}
}

func TestElector_FollowerTakesOverWhenLeaseExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := leadertest.New()
		cfg := fastConfig("b")
		// A crashed holder: its lease is never renewed nor released.
		dead := lock.Steal("crashed", cfg.TTL)
		expiry := time.Now().Add(cfg.TTL)
		e := newElector(t, lock, cfg)
		rec := newRecorder()
		stop := run(t, e, rec.fn("b"))
		synctest.Wait()
		if got := e.Status().Holder; got != dead {
			t.Fatalf("observed leader %v, want %v", got, dead)
		}
		s := <-rec.started
		late := s.start.Sub(expiry)
		if late < 0 || late > 25*time.Millisecond {
			t.Fatalf("took over %s after expiry, want within [0, 25ms]", late)
		}
		// It slept through the lease instead of polling. The watch is set up
		// beside the first acquire, never before it, so one more acquire at
		// RetryInterval may come before the watch is ready.
		if n := lock.Calls(leadertest.OpAcquire); n < 2 || n > 3 {
			t.Fatalf("acquire calls = %d, want 2 or 3 (one to see the holder, at most one before the watch was ready, one at expiry)", n)
		}
		_ = stop()
	})
}

func TestElector_GracefulStopWakesFollowerByNotice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := leadertest.New()
		a := newElector(t, lock, fastConfig("a"))
		b := newElector(t, lock, fastConfig("b"))
		recA, recB := newRecorder(), newRecorder()
		stopA := run(t, a, recA.fn("a"))
		<-recA.started
		stopB := run(t, b, recB.fn("b"))
		time.Sleep(700 * time.Millisecond)
		acquiresBefore := lock.Calls(leadertest.OpAcquire)
		stoppedAt := time.Now()
		if err := stopA(); err != nil {
			t.Fatal(err)
		}
		sb := <-recB.started
		if !sb.start.Equal(stoppedAt) {
			t.Fatalf("b started %s after a stopped, want at once", sb.start.Sub(stoppedAt))
		}
		if n := lock.Calls(leadertest.OpAcquire) - acquiresBefore; n != 1 {
			t.Fatalf("b made %d acquire calls to take over, want 1", n)
		}
		_ = stopB()
	})
}

func TestElector_RemoteResignRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := leadertest.New()
		a := newElector(t, lock, fastConfig("a"))
		b := newElector(t, lock, fastConfig("b"))
		recA, recB := newRecorder(), newRecorder()
		stopA := run(t, a, recA.fn("a"))
		sa := <-recA.started
		stopB := run(t, b, recB.fn("b"))
		synctest.Wait()
		// A request for another term is ignored.
		if _, err := lock.RequestResign(context.Background(), sa.term+1); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if !a.IsLeader() {
			t.Fatal("a stepped down on a resign request for another term")
		}
		if _, err := lock.RequestResign(context.Background(), sa.term); err != nil {
			t.Fatal(err)
		}
		sb := <-recB.started
		if sb.id != "b" || sb.term <= sa.term {
			t.Fatalf("after remote resign: %+v", sb)
		}
		if ended := recA.ended(); len(ended) != 1 || !errors.Is(ended[0].cause, leader.ErrResigned) {
			t.Fatalf("a's spans = %+v", ended)
		}
		_ = stopA()
		_ = stopB()
	})
}

func TestElector_RunTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newElector(t, leadertest.New(), fastConfig("a"))
		rec := newRecorder()
		stop := run(t, e, rec.fn("a"))
		<-rec.started
		if err := e.Run(context.Background(), rec.fn("a")); !errors.Is(err, leader.ErrAlreadyRunning) {
			t.Fatalf("second Run() = %v, want ErrAlreadyRunning", err)
		}
		st := e.Status()
		if !st.Leading || st.Term == 0 || st.Holder.ID != e.ID() || !strings.HasPrefix(st.ID, "a-") {
			t.Fatalf("Status() = %+v", st)
		}
		_ = stop()
	})
}

// nopLock satisfies leader.Store for constructor tests.
type nopLock struct{ leader.Store }
