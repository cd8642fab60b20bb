package worker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/leadertest"
	"github.com/solo-run/solo/worker"
	"github.com/solo-run/solo/worker/workerprom"
)

// Worker tests run in testing/synctest bubbles against the in-memory lock:
// fake time makes back-offs, stop budgets and cron ticks exact.

// TTL 3s, renew 1s, deadline 2s: stop budget 1s.
func cfg(id string) leader.Config {
	return leader.Config{Name: "jobs", ID: id, TTL: 3 * time.Second, RenewInterval: time.Second,
		RenewDeadline: 2 * time.Second, RetryInterval: 500 * time.Millisecond}
}

type instance struct {
	e    *leader.Elector
	w    *worker.Worker
	m    *workerprom.Metrics
	reg  *prometheus.Registry
	logs *observer.ObservedLogs
	stop func() error
}

func newInstance(t *testing.T, lock leader.Store, id string, opts ...worker.Option) *instance {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := workerprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	log := zap.New(core)
	c := cfg(id)
	e, err := leader.NewWithStore(lock, c, leader.WithLogger(log), leader.WithMetrics(m.Elector(c.Name)))
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(e, append([]worker.Option{worker.WithLogger(log), worker.WithMetrics(m),
		worker.WithLocation(time.UTC)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return &instance{e: e, w: w, m: m, reg: reg, logs: logs}
}

func (in *instance) start() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.w.Run(ctx) }()
	var once sync.Once
	var err error
	in.stop = func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
}

func counter(t *testing.T, in *instance, name, job string) float64 {
	t.Helper()
	mfs, err := in.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "job" && l.GetValue() == job {
					if m.Counter != nil {
						return m.GetCounter().GetValue()
					}
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}

func TestWorker_PullJobRestartsWithCappedBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		in := newInstance(t, leadertest.New(), "a", worker.WithPolicy(worker.Policy{
			MaxFailures: 10, RestartBackoff: time.Second, RestartBackoffMax: 4 * time.Second}))
		var starts []time.Time
		var terms []uint64
		healthy := make(chan struct{})
		if err := in.w.Pull("consume", func(ctx context.Context) error {
			term, _ := leader.TermFrom(ctx)
			terms = append(terms, term)
			starts = append(starts, time.Now())
			switch len(starts) {
			case 1, 2, 3, 4:
				return fmt.Errorf("upstream down (%d)", len(starts))
			case 5:
				panic("bad message")
			}
			close(healthy)
			<-ctx.Done()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		in.start()
		<-healthy
		var gaps []time.Duration
		for i := 1; i < len(starts); i++ {
			gaps = append(gaps, starts[i].Sub(starts[i-1]))
		}
		want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second}
		if fmt.Sprint(gaps) != fmt.Sprint(want) {
			t.Fatalf("restart gaps %v, want capped exponential %v", gaps, want)
		}
		for _, term := range terms {
			if term == 0 || term != terms[0] {
				t.Fatalf("job contexts carried terms %v, want the one term of the leadership", terms)
			}
		}
		if got := counter(t, in, "solo_job_failures_total", "consume"); got != 5 {
			t.Fatalf("failures metric %v, want 5 (4 errors + 1 panic)", got)
		}
		if got := counter(t, in, "solo_job_restarts_total", "consume"); got != 5 {
			t.Fatalf("restarts metric %v, want 5", got)
		}
		if err := in.stop(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestWorker_RepeatedFailuresHandTheJobToAHealthyInstance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := leadertest.New()
		policy := worker.WithPolicy(worker.Policy{MaxFailures: 3, RestartBackoff: 100 * time.Millisecond, RestartBackoffMax: time.Second})
		sick := newInstance(t, lock, "sick", policy)
		well := newInstance(t, lock, "well", policy)
		var sickRuns int
		_ = sick.w.Pull("consume", func(ctx context.Context) error {
			sickRuns++
			return errors.New("local disk full")
		})
		wellRunning := make(chan uint64, 1)
		_ = well.w.Pull("consume", func(ctx context.Context) error {
			term, _ := leader.TermFrom(ctx)
			wellRunning <- term
			<-ctx.Done()
			return nil
		})
		sick.start()
		synctest.Wait()
		if !sick.e.IsLeader() {
			t.Fatal("sick instance should lead first")
		}
		well.start()
		term := <-wellRunning
		if sickRuns != 3 {
			t.Fatalf("sick instance ran the job %d times, want 3 (max_failures) before resigning", sickRuns)
		}
		// Long after the sick one's cool-down, the healthy one still leads.
		time.Sleep(10 * time.Second)
		if !well.e.IsLeader() || well.e.Term() != term || sick.e.IsLeader() {
			t.Fatalf("leadership moved back: well=%v sick=%v", well.e.IsLeader(), sick.e.IsLeader())
		}
		if n := len(sick.logs.FilterMessage("job failed repeatedly; resigning so another instance tries").All()); n != 1 {
			t.Fatalf("resign logged %d times", n)
		}
		_ = sick.stop()
		_ = well.stop()
	})
}

func TestWorker_LossCancelsEveryJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := leadertest.New()
		in := newInstance(t, lock, "a")
		var mu sync.Mutex
		cancelled := map[string]error{}
		for _, name := range []string{"p1", "p2"} {
			_ = in.w.Pull(name, func(ctx context.Context) error {
				<-ctx.Done()
				mu.Lock()
				cancelled[name] = context.Cause(ctx)
				mu.Unlock()
				return nil
			})
		}
		cronStarted := make(chan struct{}, 1)
		_ = in.w.Cron("slow-report", "@every 1s", func(ctx context.Context) error {
			select {
			case cronStarted <- struct{}{}:
			default:
			}
			<-ctx.Done()
			mu.Lock()
			cancelled["slow-report"] = context.Cause(ctx)
			mu.Unlock()
			return nil
		})
		in.start()
		<-cronStarted
		lock.Steal("intruder", time.Hour)
		time.Sleep(time.Second) // the next renewal notices
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, name := range []string{"p1", "p2", "slow-report"} {
			if !errors.Is(cancelled[name], leader.ErrLeaseLost) {
				t.Fatalf("job %s cancelled with %v, want ErrLeaseLost", name, cancelled[name])
			}
		}
		if in.e.IsLeader() {
			t.Fatal("still leader")
		}
		go in.stop()
	})
}

func TestWorker_JobIgnoringCancellationIsReportedAndKeepsTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := leadertest.New()
		in := newInstance(t, lock, "a")
		other := newInstance(t, lock, "b")
		var returned time.Time
		_ = in.w.Pull("stubborn", func(ctx context.Context) error {
			<-ctx.Done()
			time.Sleep(10 * time.Second) // ignores cancellation
			returned = time.Now()
			return nil
		})
		_ = other.w.Pull("stubborn", func(ctx context.Context) error { <-ctx.Done(); return nil })
		in.start()
		synctest.Wait()
		term := in.e.Term()
		other.start()
		resignedAt := time.Now()
		go func() { _ = in.e.Resign(context.Background()) }()
		for range 9 {
			time.Sleep(time.Second)
			if h, _, ok := lock.Holder(); !ok || h.Term != term {
				t.Fatalf("lease %v %v while the stubborn job runs, want a's term %d kept", h, ok, term)
			}
		}
		synctest.Wait()
		if n := len(in.logs.FilterMessage("job ignores cancellation: still running past the stop budget").All()); n != 1 {
			t.Fatalf("overrun logged %d times, want 1", n)
		}
		if got := counter(t, in, "solo_job_overruns_total", "stubborn"); got != 1 {
			t.Fatalf("overrun metric %v", got)
		}
		time.Sleep(2 * time.Second)
		if !other.e.IsLeader() {
			t.Fatal("b did not take over after the job returned")
		}
		if returned.Sub(resignedAt) != 10*time.Second || lock.Calls(leadertest.OpRelease) != 1 {
			t.Fatalf("released %d times; job returned after %s", lock.Calls(leadertest.OpRelease), returned.Sub(resignedAt))
		}
		_ = in.stop()
		_ = other.stop()
	})
}

// TestWorker_CronAcrossFailover forces a failover over a cron tick: the old
// leader stalls (its Redis calls hang), steps down at its renew deadline;
// the new leader takes over when the lease expires, after a tick fell into
// the gap. No tick may run twice, and the gap follows the misfire policy.
func TestWorker_CronAcrossFailover(t *testing.T) {
	for _, tt := range []struct {
		misfire worker.Misfire
		want    []string // "tick@runner"
	}{
		{worker.MisfireSkip, []string{"10@a", "20@a", "30@a", "50@b", "60@b"}},
		{worker.MisfireRunOnce, []string{"10@a", "20@a", "30@a", "40@b", "50@b", "60@b"}},
	} {
		t.Run(string(tt.misfire), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lock := leadertest.New()
				base := time.Now().UTC()
				var mu sync.Mutex
				var ran []string
				stall := make(chan struct{})
				var stalled sync.Once
				stallA := func() { stalled.Do(func() { close(stall) }) }
				release := make(chan struct{})
				// a's calls hang once stalled (b's go through): a separate
				// Lock view per instance, sharing one store.
				aLock := &stallable{Store: lock, stall: stall, release: release}
				a := newInstance(t, aLock, "a")
				b := newInstance(t, lock, "b")
				for _, in := range []*instance{a, b} {
					id := configuredID(in.e.ID())
					if err := in.w.Cron("report", "*/10 * * * * *", func(ctx context.Context) error {
						mu.Lock()
						defer mu.Unlock()
						// The tick the run is for, not the time it runs at: a
						// late run-once run at 40.0x reports 40.
						tick, ok := worker.TickFrom(ctx)
						if !ok {
							t.Error("no tick in a cron job's context")
						}
						ran = append(ran, fmt.Sprintf("%d@%s", int(tick.Sub(base).Seconds()), id))
						return nil
					}, worker.WithMisfire(tt.misfire)); err != nil {
						t.Fatal(err)
					}
				}
				a.start()
				synctest.Wait()
				b.start()
				defer func() {
					close(release)
					_ = a.stop()
					_ = b.stop()
				}()
				// a leads through the ticks at 10, 20, 30 and stalls at 37.5,
				// after its renewal at 37: deadline 39, lease gone at 40.
				time.Sleep(37500 * time.Millisecond)
				stallA()
				time.Sleep(25 * time.Second) // b takes over when a's lease expires (40.0x)
				mu.Lock()
				got := fmt.Sprint(ran)
				mu.Unlock()
				if got != fmt.Sprint(tt.want) {
					t.Fatalf("ticks run %v, want %v", got, tt.want)
				}
				if !b.e.IsLeader() {
					t.Fatal("b does not lead")
				}
			})
		})
	}
}

// stallable makes one instance's lock calls hang after stall closes, until
// release closes: a leader cut off from Redis.
type stallable struct {
	*leadertest.Store
	stall, release chan struct{}
}

func (s *stallable) wait() {
	select {
	case <-s.stall:
		<-s.release
	default:
	}
}

func (s *stallable) Renew(ctx context.Context, l leader.Lease, ttl time.Duration) error {
	s.wait()
	select {
	case <-s.release:
		return errors.New("connection reset")
	default:
	}
	return s.Store.Renew(ctx, l, ttl)
}

func (s *stallable) Acquire(ctx context.Context, id string, ttl time.Duration) (leader.Outcome, leader.Record, error) {
	s.wait()
	return s.Store.Acquire(ctx, id, ttl)
}

func (s *stallable) Checkpoint(ctx context.Context, l leader.Lease, key string, n int64) error {
	s.wait()
	return s.Store.Checkpoint(ctx, l, key, n)
}

func TestWorker_CronFiresOnlyOnLeaderWithTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := leadertest.New()
		a := newInstance(t, lock, "a")
		b := newInstance(t, lock, "b")
		var mu sync.Mutex
		runs := map[string]int{}
		for _, in := range []*instance{a, b} {
			id := configuredID(in.e.ID())
			_ = in.w.Cron("tick", "@every 2s", func(ctx context.Context) error {
				term, ok := leader.TermFrom(ctx)
				if !ok || term == 0 {
					t.Errorf("cron job context without term")
				}
				mu.Lock()
				runs[id]++
				mu.Unlock()
				return nil
			})
		}
		a.start()
		synctest.Wait()
		b.start()
		time.Sleep(21 * time.Second)
		mu.Lock()
		defer mu.Unlock()
		if runs["a"] != 10 || runs["b"] != 0 {
			t.Fatalf("runs %v, want 10 on the leader and none on the follower", runs)
		}
		go a.stop()
		go b.stop()
	})
}

func TestWorker_Modes(t *testing.T) {
	t.Run("standby never leads", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			lock := leadertest.New()
			in := newInstance(t, lock, "s", worker.WithMode(worker.ModeStandby))
			ran := false
			_ = in.w.Pull("p", func(ctx context.Context) error { ran = true; <-ctx.Done(); return nil })
			in.start()
			time.Sleep(time.Minute)
			if ran || in.e.IsLeader() || lock.Calls(leadertest.OpAcquire) != 0 {
				t.Fatalf("standby ran=%v leader=%v acquires=%d", ran, in.e.IsLeader(), lock.Calls(leadertest.OpAcquire))
			}
			leaderIn := newInstance(t, lock, "l")
			_ = leaderIn.w.Pull("p", func(ctx context.Context) error { <-ctx.Done(); return nil })
			leaderIn.start()
			time.Sleep(2 * time.Second)
			if n := len(in.logs.FilterMessage("leader observed").All()); n != 1 {
				t.Fatalf("standby logged %d leader observations, want 1", n)
			}
			_ = in.stop()
			_ = leaderIn.stop()
		})
	})
	t.Run("always runs without election, loudly", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			lock := leadertest.New()
			in := newInstance(t, lock, "x", worker.WithMode(worker.ModeAlways))
			running := make(chan bool, 1)
			_ = in.w.Pull("p", func(ctx context.Context) error {
				_, hasTerm := leader.TermFrom(ctx)
				running <- hasTerm
				<-ctx.Done()
				return nil
			})
			in.start()
			if hasTerm := <-running; hasTerm {
				t.Fatal("mode always must not pretend to have a fencing term")
			}
			if lock.Calls(leadertest.OpAcquire) != 0 {
				t.Fatal("mode always took part in the election")
			}
			if logs := in.logs.FilterLevelExact(zapcore.ErrorLevel).All(); len(logs) != 1 {
				t.Fatalf("mode always logged %d errors, want the one loud warning", len(logs))
			}
			_ = in.stop()
		})
	})
}

func TestWorker_RegistrationErrors(t *testing.T) {
	in := newInstance(t, leadertest.New(), "a")
	nop := func(context.Context) error { return nil }
	tests := []struct {
		name string
		add  func() error
		want string
	}{
		{"bad spec", func() error { return in.w.Cron("report", "0 25 * * *", nop) }, `worker: job "report": invalid schedule "0 25 * * *": end of range (25) above maximum (23): 25`},
		{"garbage spec", func() error { return in.w.Cron("report", "every day", nop) }, `worker: job "report": invalid schedule "every day": expected 5 to 6 fields, found 2: [every day]`},
		{"empty name", func() error { return in.w.Pull("", nop) }, `worker: job name must not be empty`},
		{"bad misfire", func() error { return in.w.Cron("c", "@hourly", nop, worker.WithMisfire("later")) }, `worker: job "c": invalid misfire "later": want skip or run-once`},
		{"bad restart", func() error { return in.w.Pull("p", nop, worker.WithRestart("sometimes")) }, `worker: job "p": invalid restart "sometimes": want always, on-failure or never`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.add(); err == nil || err.Error() != tt.want {
				t.Fatalf("got %v\nwant %s", err, tt.want)
			}
		})
	}
	for _, spec := range []string{"0 2 * * *", "*/5 * * * * *", "@every 10s", "@daily"} {
		if err := in.w.Cron("ok "+spec, spec, nop); err != nil {
			t.Fatalf("valid spec %q: %v", spec, err)
		}
	}
	if err := in.w.Cron("ok @daily", "@daily", nop); err == nil {
		t.Fatal("duplicate name accepted")
	}
}

func TestMetrics_Elector(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := workerprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	em := m.Elector("jobs")
	em.Transition(leader.TransitionElected, 42)
	em.Renew(time.Millisecond, nil)
	em.Renew(time.Millisecond, leader.ErrLeaseLost)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP solo_election_leader 1 while this instance leads the election.
# TYPE solo_election_leader gauge
solo_election_leader{election="jobs"} 1
# HELP solo_election_term Fencing term of this instance's current or last leadership.
# TYPE solo_election_term gauge
solo_election_term{election="jobs"} 42
`), "solo_election_leader", "solo_election_term"); err != nil {
		t.Fatal(err)
	}
	em.Transition(leader.TransitionExpired, 42)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP solo_election_leader 1 while this instance leads the election.
# TYPE solo_election_leader gauge
solo_election_leader{election="jobs"} 0
`), "solo_election_leader"); err != nil {
		t.Fatal(err)
	}
}

// TestWorker_CronNeverRepeatsARecordedTick: a tick recorded by another
// term (say a leader whose clock ran ahead) is not run again here.
func TestWorker_CronNeverRepeatsARecordedTick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := leadertest.New()
		base := time.Now().UTC()
		ctx := context.Background()
		_, rec, _ := lock.Acquire(ctx, "ahead", time.Second)
		if err := lock.Checkpoint(ctx, rec.Lease, "cron:report", base.Add(10*time.Second).UnixMilli()); err != nil {
			t.Fatal(err)
		}
		_ = lock.Release(ctx, rec.Lease)
		in := newInstance(t, lock, "a")
		var ran []int
		_ = in.w.Cron("report", "*/10 * * * * *", func(ctx context.Context) error {
			ran = append(ran, int(time.Since(base).Seconds()))
			return nil
		})
		in.start()
		time.Sleep(35 * time.Second)
		_ = in.stop()
		if fmt.Sprint(ran) != "[20 30]" {
			t.Fatalf("ticks run %v, want [20 30]: tick 10 was already recorded", ran)
		}
	})
}

func TestWorker_PullJobReturningErrResignedResignsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := leadertest.New()
		a := newInstance(t, lock, "a")
		b := newInstance(t, lock, "b")
		runsA := 0
		_ = a.w.Pull("consume", func(ctx context.Context) error {
			runsA++
			return fmt.Errorf("stale term seen: %w", leader.ErrResigned)
		})
		bRunning := make(chan struct{}, 1)
		_ = b.w.Pull("consume", func(ctx context.Context) error { bRunning <- struct{}{}; <-ctx.Done(); return nil })
		a.start()
		synctest.Wait()
		b.start()
		<-bRunning
		if runsA != 1 {
			t.Fatalf("a ran the job %d times, want 1: ErrResigned resigns without retries", runsA)
		}
		if _, ok := worker.TickFrom(context.Background()); ok {
			t.Fatal("TickFrom outside a cron run")
		}
		_ = a.stop()
		_ = b.stop()
	})
}

// configuredID is an elector's ID without the random part every elector
// appends to the configured one.
func configuredID(id string) string {
	if i := strings.LastIndex(id, "-"); i > 0 {
		return id[:i]
	}
	return id
}

// TestWorker_OnLeaderChange: the hook sees this instance elected, then
// released when Run ends, and has returned by the time Run has.
func TestWorker_OnLeaderChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var seen []string
		in := newInstance(t, leadertest.New(), "a", worker.WithOnLeaderChange(func(c leader.Change) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, fmt.Sprintf("%s %s", c.Kind, c.Holder.ID))
		}))
		started := make(chan struct{})
		_ = in.w.Pull("p", func(ctx context.Context) error { close(started); <-ctx.Done(); return nil },
			worker.WithRestart(worker.RestartNever))
		in.start()
		<-started
		time.Sleep(time.Second) // the elected notice reaches the observer
		if err := in.stop(); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		got := slices.Clone(seen)
		mu.Unlock()
		id := in.e.ID()
		if len(got) == 0 || got[0] != "elected "+id {
			t.Fatalf("changes %q, want elected %s first", got, id)
		}
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(seen, got) {
			t.Fatalf("the hook ran after Run returned: %q then %q", got, seen)
		}
	})
}

// TestWorker_CronJobReturningErrResignedResignsAtOnce: a cron run whose
// error wraps leader.ErrResigned gives up the term, as a pull job's does,
// at most once and at least once: every term runs it once, never again in
// the same term. Before, the at-least-once tick ran again with back-off in
// the same term and the at-most-once one failed every tick, at warn.
func TestWorker_CronJobReturningErrResignedResignsAtOnce(t *testing.T) {
	for _, d := range []worker.Delivery{worker.AtMostOnce, worker.AtLeastOnce} {
		t.Run(string(d), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lock := leadertest.New()
				var mu sync.Mutex
				perTerm := map[uint64]int{}
				job := func(ctx context.Context) error {
					term, _ := leader.TermFrom(ctx)
					mu.Lock()
					perTerm[term]++
					mu.Unlock()
					return fmt.Errorf("stale term seen: %w", leader.ErrResigned)
				}
				var ins []*instance
				for _, id := range []string{"a", "b"} {
					in := newInstance(t, lock, id)
					if err := in.w.Cron("report", "* * * * *", job, worker.WithDelivery(d)); err != nil {
						t.Fatal(err)
					}
					in.start()
					ins = append(ins, in)
				}
				time.Sleep(3 * time.Minute)
				for _, in := range ins {
					_ = in.stop()
				}
				mu.Lock()
				defer mu.Unlock()
				if len(perTerm) < 2 {
					t.Errorf("runs per term %v, want runs in more than one term: the run resigns its term", perTerm)
				}
				for term, n := range perTerm {
					if n != 1 {
						t.Errorf("term %d ran the job %d times, want once: ErrResigned resigns without retries (all: %v)", term, n, perTerm)
					}
				}
			})
		})
	}
}
