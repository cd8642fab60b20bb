package worker

// Regression tests for the cron scheduler: impossible specs, schedules that
// run out of ticks, a late run's tick, ticks missed by a late scheduler
// loop, and the skip-if-still-running and panic behaviours. They run inside
// the package (the loop and its seams are unexported) and in
// testing/synctest bubbles, so every time below is fake and exact.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/solo-run/solo/internal/hooks"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/leadertest"
)

type cronRig struct {
	w    *Worker
	m    *countMetrics
	logs *observer.ObservedLogs
}

// newCronRig returns a worker on lock; TTL 3s, renew 1s, deadline 2s.
func newCronRig(t *testing.T, lock leader.Store, opts ...Option) *cronRig {
	t.Helper()
	m := &countMetrics{n: map[string]float64{}}
	core, logs := observer.New(zapcore.InfoLevel)
	log := zap.New(core)
	c := leader.Config{Name: "jobs", ID: "a", TTL: 3 * time.Second, RenewInterval: time.Second,
		RenewDeadline: 2 * time.Second, RetryInterval: 500 * time.Millisecond}
	e, err := leader.NewWithStore(lock, c, leader.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(e, append([]Option{WithLogger(log), WithMetrics(m), WithLocation(time.UTC)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return &cronRig{w: w, m: m, logs: logs}
}

// start runs the worker until the returned stop is called.
// countMetrics counts what a Worker reports, by "WHAT ELECTION JOB".
type countMetrics struct {
	NopMetrics
	mu sync.Mutex
	n  map[string]float64
}

func (m *countMetrics) add(key string, v float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n[key] += v
}

func (m *countMetrics) get(key string) float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n[key]
}

func (m *countMetrics) JobRan(election, job string, err error) {
	m.add("runs "+election+" "+job, 1)
	if err != nil {
		m.add("failures "+election+" "+job, 1)
	}
}

func (m *countMetrics) TicksSkipped(election, job string, n int) {
	m.add("skipped "+election+" "+job, float64(n))
}

func (r *cronRig) start() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		_ = r.w.Run(ctx)
		close(done)
	}()
	return func() { cancel(); <-done }
}

func (r *cronRig) skipped(job string) float64 {
	return r.m.get("skipped jobs " + job)
}

func (r *cronRig) count(msg string) int { return len(r.logs.FilterMessageSnippet(msg).All()) }

// record stores tick as the job's last fired tick, as an earlier term did.
func record(t *testing.T, lock *leadertest.Store, job string, tick time.Time) {
	t.Helper()
	recordKey(t, lock, cronKey(job), tick)
}

// ticks records the ticks a job ran for, in seconds after base.
type ticks struct {
	mu   sync.Mutex
	base time.Time
	ran  []int
}

func (k *ticks) run(ctx context.Context) error {
	tick, ok := TickFrom(ctx)
	if !ok {
		panic("no tick in a cron run's context")
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.ran = append(k.ran, int(tick.Sub(k.base).Seconds()))
	return nil
}

func (k *ticks) String() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return fmt.Sprint(k.ran)
}

// TestCron_ImpossibleSpecRefused: a spec robfig/cron parses but that never
// fires (Next returns the zero time) is refused when the job is registered
// and when the configuration file is validated.
func TestCron_ImpossibleSpecRefused(t *testing.T) {
	r := newCronRig(t, leadertest.New())
	nop := func(context.Context) error { return nil }
	for i, spec := range []string{"0 0 30 2 *", "0 0 0 30 2 *", "0 0 31 4 *", "CRON_TZ=UTC 0 0 30 2 *"} {
		name := fmt.Sprintf("never-%d", i)
		want := fmt.Sprintf(`worker: job %q: schedule %q never fires: no date in the next five years matches it`, name, spec)
		if err := r.w.Cron(name, spec, nop); err == nil || err.Error() != want {
			t.Errorf("Cron(%q): got %v\nwant %s", spec, err, want)
		}
		if err := r.w.Add(CronJob(name, spec, nop)); err == nil || err.Error() != want {
			t.Errorf("Add(CronJob(%q)): got %v\nwant %s", spec, err, want)
		}
	}
	// Rare but possible dates are fine.
	for _, spec := range []string{"0 0 29 2 *", "0 0 31 * *", "0 0 13 * 5"} {
		if err := r.w.Cron("ok "+spec, spec, nop); err != nil {
			t.Errorf("valid spec %q: %v", spec, err)
		}
	}
	if err := CheckSchedule("0 0 30 2 *"); !errors.Is(err, ErrNeverFires) {
		t.Errorf("CheckSchedule: got %v, want ErrNeverFires", err)
	}
}

// finite fires at the given ticks, then never again (Next returns zero), as
// an impossible spec does from the start.
type finite []time.Time

func (f finite) Next(t time.Time) time.Time {
	for _, tick := range f {
		if tick.After(t) {
			return tick
		}
	}
	return time.Time{}
}

// TestCron_ZeroNextDoesNotSpin drives the scheduler loop with schedules
// whose Next returns the zero time (defence in depth: registration refuses
// them). The loop must stop scheduling that job, say so once, and go on
// with the others; before, it spun, firing (and checkpointing) the zero
// time tens of thousands of times a second. A spinning loop is cut after 10
// fires so that the test ends.
func TestCron_ZeroNextDoesNotSpin(t *testing.T) {
	feb30, err := cronParser.Parse("0 0 30 2 *")
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"always", "elect"} {
		t.Run(mode, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lock := leadertest.New()
				base := time.Now().UTC()
				// A tick recorded by an earlier term sends catchUp looking
				// for missed ticks after it.
				record(t, lock, "feb30", base.Add(-time.Hour))
				record(t, lock, "ends", base.Add(-time.Hour))
				r := newCronRig(t, lock)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var fires atomic.Int64
				bound := func() {
					if fires.Add(1) >= 10 {
						cancel()
					}
				}
				var cp checkpointFunc
				var cps atomic.Int64
				if mode == "elect" {
					cp = func(ctx context.Context, key string, n int64) error {
						if time.UnixMilli(n).Before(base) {
							cps.Add(1)
							bound()
						}
						return nil
					}
				}
				ends := &ticks{base: base}
				every := &ticks{base: base}
				// A run for the zero time counts towards the bound.
				guard := func(k *ticks) func(context.Context) error {
					return func(ctx context.Context) error {
						if tick, _ := TickFrom(ctx); tick.Before(base) {
							bound()
							return nil
						}
						return k.run(ctx)
					}
				}
				every1s, _ := cronParser.Parse("@every 1s")
				jobs := []*job{
					{name: "ends", run: guard(ends), schedule: finite{base.Add(time.Second), base.Add(2 * time.Second)}, misfire: MisfireRunOnce},
					{name: "every", run: guard(every), schedule: every1s, misfire: MisfireSkip},
					{name: "feb30", run: guard(nil), spec: "0 0 30 2 *", schedule: feb30, misfire: MisfireRunOnce},
				}
				done := make(chan struct{})
				go func() {
					r.w.runCron(ctx, r.w.log, jobs, &runningSet{names: map[string]int{}}, cp, nil, nil)
					close(done)
				}()
				time.Sleep(5500 * time.Millisecond)
				cancel()
				<-done
				if n, c := fires.Load(), cps.Load(); n != 0 || c != 0 {
					t.Fatalf("the zero time fired %d runs and %d checkpoints, want none: the loop spins on a zero Next", n, c)
				}
				if got := ends.String(); got != "[1 2]" {
					t.Errorf("the schedule that ends ran %s, want [1 2]", got)
				}
				if got := every.String(); got != "[1 2 3 4 5]" {
					t.Errorf("the other job ran %s, want [1 2 3 4 5]", got)
				}
				if n := r.count("has no further ticks"); n != 2 {
					t.Errorf("logged %d times that a schedule has no further ticks, want 2 (once per job)", n)
				}
			})
		})
	}
}

// TestCron_LateRunGetsItsOwnTick: a run-once catch-up run whose goroutine
// starts late (here: after the next tick fired) must run and record the tick
// it was fired for. Before, the tick sat in a field shared by every run of
// the job: the late run read the next tick instead, the catch-up tick was
// never run nor recorded, and the next tick's own run found it recorded.
func TestCron_LateRunGetsItsOwnTick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := leadertest.New()
		base := time.Now().UTC()
		record(t, lock, "report", base.Add(-30*time.Second))
		r := newCronRig(t, lock)
		k := &ticks{base: base}
		if err := r.w.Cron("report", "*/10 * * * * *", k.run, WithMisfire(MisfireRunOnce)); err != nil {
			t.Fatal(err)
		}
		hold := make(chan struct{})
		var held atomic.Bool
		testHookRunStart = func(string) {
			if held.CompareAndSwap(false, true) {
				<-hold // only the first run: the catch-up run for tick 0
			}
		}
		defer func() { testHookRunStart = nil }()

		time.Sleep(5 * time.Second)
		stop := r.start() // 0:05: ticks -20, -10 and 0 were missed; run-once fires 0
		time.Sleep(6 * time.Second)
		synctest.Wait() // 0:11: tick 10 fired while the run for 0 had not started
		close(hold)
		time.Sleep(14 * time.Second) // 0:25
		stop()

		if got := k.String(); got != "[0 20]" {
			t.Errorf("ticks run %s, want [0 20]: the catch-up run runs tick 0; tick 10 is skipped, that run still going", got)
		}
		if n := r.count("tick skipped: the previous run is still going"); n != 1 {
			t.Errorf("logged %d skipped ticks, want 1 (tick 10)", n)
		}
		if got := r.skipped("report"); got != 1 {
			t.Errorf("skipped-ticks metric %v, want 1", got)
		}
	})
}

// stallLoad is a lock whose checkpoint reads for key fail until release
// closes: a Redis that cannot answer holds the scheduler loop at the
// start of a term (a run-once job's catch-up read is made again until it
// is answered), which then starts late, as after a GC pause or a
// suspended host.
type stallLoad struct {
	*leadertest.Store
	key     string
	release chan struct{}
}

func (s *stallLoad) LoadCheckpoint(ctx context.Context, key string) (int64, bool, error) {
	if key == s.key {
		select {
		case <-s.release:
		default:
			return 0, false, errors.New("injected: no reply")
		}
	}
	return s.Store.LoadCheckpoint(ctx, key)
}

// TestCron_LateLoopAppliesMisfirePolicy: when the scheduler loop runs late
// by several ticks, the ticks between the due one and now follow the job's
// misfire policy: skip counts and logs them, run-once runs the latest of
// them once (after the due tick). Before, they were dropped silently.
func TestCron_LateLoopAppliesMisfirePolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := &stallLoad{Store: leadertest.New(), key: cronKey("c-stall"), release: make(chan struct{})}
		base := time.Now().UTC()
		// Reads made again every 100ms: the loop starts within 100ms of 0:35.
		r := newCronRig(t, lock, WithPolicy(Policy{RestartBackoff: 100 * time.Millisecond, RestartBackoffMax: 100 * time.Millisecond}))
		skip, once := &ticks{base: base}, &ticks{base: base}
		nop := func(context.Context) error { return nil }
		for _, err := range []error{
			r.w.Cron("a-skip", "*/10 * * * * *", skip.run, WithMisfire(MisfireSkip)),
			r.w.Cron("b-once", "*/10 * * * * *", once.run, WithMisfire(MisfireRunOnce)),
			r.w.Cron("c-stall", "@hourly", nop, WithMisfire(MisfireRunOnce)),
		} {
			if err != nil {
				t.Fatal(err)
			}
		}
		stop := r.start()
		time.Sleep(35 * time.Second) // the loop is held until 0:35; ticks 10, 20, 30 are due
		close(lock.release)
		time.Sleep(20500 * time.Millisecond) // 0:55.5
		stop()

		if got := skip.String(); got != "[10 40 50]" {
			t.Errorf("skip: ran %s, want [10 40 50]", got)
		}
		if got := r.skipped("a-skip"); got != 2 {
			t.Errorf("skip: skipped-ticks metric %v, want 2 (ticks 20 and 30)", got)
		}
		if got := once.String(); got != "[10 30 40 50]" {
			t.Errorf("run-once: ran %s, want [10 30 40 50] (the latest missed tick, 30, once)", got)
		}
		if got := r.skipped("b-once"); got != 0 {
			t.Errorf("run-once: skipped-ticks metric %v, want 0", got)
		}
		if n := r.count("scheduler ran late"); n != 2 {
			t.Errorf("logged %d late-scheduler misfires, want 2 (one per job)", n)
		}
	})
}

// TestCron_SkipIfStillRunning: a tick that comes while the job's previous
// run is still going is skipped, logged and counted.
func TestCron_SkipIfStillRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newCronRig(t, leadertest.New())
		k := &ticks{base: time.Now().UTC()}
		var first atomic.Bool
		if err := r.w.Cron("slow", "@every 1s", func(ctx context.Context) error {
			if first.CompareAndSwap(false, true) {
				time.Sleep(2500 * time.Millisecond) // through ticks 2 and 3
			}
			return k.run(ctx)
		}); err != nil {
			t.Fatal(err)
		}
		stop := r.start()
		time.Sleep(4500 * time.Millisecond)
		stop()
		if got := k.String(); got != "[1 4]" {
			t.Errorf("ran %s, want [1 4]", got)
		}
		if n := r.count("tick skipped: the previous run is still going"); n != 2 {
			t.Errorf("logged %d skipped ticks, want 2", n)
		}
		if got := r.skipped("slow"); got != 2 {
			t.Errorf("skipped-ticks metric %v, want 2", got)
		}
	})
}

// TestCron_SettleBeforeSkipCheck: with the simulator's settle in the
// worker's hooks (WithHooks), a run that ends at the very
// instant of the next tick has ended when the loop checks it, so the tick
// runs, in every one of 20 runs; without it which of the two goroutines
// the scheduler ran first decided.
//
// Mutation check: without the settle call in runCron, "run 0 ran [1],
// want [1 2]: the tick at the instant the previous run ended was skipped"
// (or in a later run).
func TestCron_SettleBeforeSkipCheck(t *testing.T) {
	for i := range 20 {
		synctest.Test(t, func(t *testing.T) {
			r := newCronRig(t, leadertest.New(), WithHooks(hooks.Hooks{Settle: func(string) { time.Sleep(time.Nanosecond) }}))
			k := &ticks{base: time.Now().UTC()}
			if err := r.w.Cron("edge", "@every 1s", func(ctx context.Context) error {
				tick, _ := TickFrom(ctx)
				if err := k.run(ctx); err != nil {
					return err
				}
				if tick.Sub(k.base) == time.Second {
					time.Sleep(time.Until(tick.Add(time.Second))) // ends at the next tick
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { _ = r.w.Run(ctx); close(done) }()
			time.Sleep(2500 * time.Millisecond)
			cancel()
			<-done
			if got := k.String(); got != "[1 2]" {
				t.Fatalf("run %d ran %s, want [1 2]: the tick at the instant the previous run ended was skipped", i, got)
			}
		})
	}
}

// TestCron_PanicRecovered: a cron run that panics is logged with its stack
// and counted as a failure; the next tick runs. (Before, the panic skipped
// the release of cron.SkipIfStillRunning's semaphore, so every later tick of
// the term was "skipped: still running".)
func TestCron_PanicRecovered(t *testing.T) {
	for _, mode := range []Mode{ModeElect, ModeAlways} {
		t.Run(string(mode), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newCronRig(t, leadertest.New(), WithMode(mode))
				k := &ticks{base: time.Now().UTC()}
				var first atomic.Bool
				if err := r.w.Cron("fragile", "@every 1s", func(ctx context.Context) error {
					if first.CompareAndSwap(false, true) {
						panic("bad row")
					}
					return k.run(ctx)
				}); err != nil {
					t.Fatal(err)
				}
				stop := r.start()
				time.Sleep(3500 * time.Millisecond)
				stop()
				if got := k.String(); got != "[2 3]" {
					t.Errorf("ran %s after the panic, want [2 3]", got)
				}
				runs := r.m.get("runs jobs fragile")
				failures := r.m.get("failures jobs fragile")
				if runs != 3 || failures != 1 {
					t.Errorf("runs %v failures %v, want 3 and 1", runs, failures)
				}
				var stacks int
				for _, e := range r.logs.FilterLevelExact(zapcore.ErrorLevel).All() {
					s, _ := e.ContextMap()["stack"].(string)
					if strings.Contains(s, "goroutine") && strings.Contains(fmt.Sprint(e.ContextMap()), "bad row") {
						stacks++
					}
				}
				if stacks != 1 {
					t.Errorf("%d error logs carry the panic and its stack, want 1", stacks)
				}
			})
		})
	}
}
