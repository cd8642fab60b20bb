package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/solo-run/solo/internal/hooks"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
)

// candidate is one instance: an Elector on its own client view of the
// store, a Worker with a pull job and the plan's cron jobs, and a driver
// that runs, stops and resigns it.
type candidate struct {
	w    *world
	idx  int
	plan CandPlan
	id   string // the Elector's ID as it reports it
	cl   *client
	e    *leader.Elector
	wk   *worker.Worker
	rnd  atomic.Pointer[rand.Rand] // the jitter source of the current Run

	// Under w.mu:
	stuck     bool      // a call of it never returns
	lastFnEnd time.Time // when its last leader function returned
	jobRuns   uint64
	// Diagnosis of starts: the last answered acquire and the first failed
	// one before it.
	lastAcqSent, lastAcqRet time.Time
	lastAcqOutcome          leader.Outcome
	lastAcqUnconfirmed      time.Time
	acqErrSince             time.Time
	// Invariant 8: the first acquire of a Run.
	runStart        time.Time
	runWaitsFn      bool // a function of an earlier Run still ran when this Run started
	firstAcqPending bool
	// infoWait is the time this Run spent in INFO calls (a check of the
	// server's configuration, which may come before the first acquire).
	infoWait time.Duration
}

func newCandidate(w *world, idx int) (*candidate, error) {
	cp := w.p.Cands[idx]
	c := &candidate{w: w, idx: idx, plan: cp}
	c.cl = &client{w: w, c: c, idx: idx, plan: cp}
	cfg := w.p.Cfg
	cfg.ID = cp.ID
	c.cl.rdb = newRDB(c.cl)
	rl, err := leader.NewRedisStore(c.cl.rdb, cfg)
	if err != nil {
		return nil, err
	}
	c.cl.rl = rl
	log := zap.New(&logCore{w: w, cand: idx})
	e, err := leader.NewWithStore(c.cl, cfg, leader.WithLogger(log), leader.WithMetrics(metrics{c: c}), leader.WithHooks(c.hooks()))
	if err != nil {
		return nil, err
	}
	c.e, c.id = e, e.ID()
	wk, err := worker.New(e, worker.WithLogger(log), worker.WithLocation(time.UTC), worker.WithHooks(hooks.Hooks{Settle: w.decider(idx)}))
	if err != nil {
		return nil, err
	}
	c.wk = wk
	if err := wk.Pull("pull", c.pull); err != nil {
		return nil, err
	}
	for _, cr := range w.p.Crons {
		if err := wk.Cron(cr.Name, cr.Spec, c.cronJob(cr), worker.WithMisfire(cr.Misfire), worker.WithDelivery(cr.Delivery)); err != nil {
			// Refusing an impossible spec is correct behaviour.
			w.mu.Lock()
			w.stats.CronRefused++
			w.event(idx, evNote, 0, 0, 0, 0, "cron registration refused: "+err.Error())
			w.mu.Unlock()
		}
	}
	return c, nil
}

// hooks are the elector's: the random part of its ID from the seed, not
// crypto/rand, so a replay prints the same lease values; the jitter source
// of the Run drive started last; and the world's decider as its settle.
func (c *candidate) hooks() hooks.Hooks {
	w, idx := c.w, c.idx
	return hooks.Hooks{
		IDToken: func(string) string {
			r := keyed(w.p.Seed, uint64(idx)+1, uint64(opElector), 1<<40)
			return fmt.Sprintf("%012x", r.u64()>>16)
		},
		Rand:   func(string) *rand.Rand { return c.rnd.Load() },
		Settle: w.decider(idx),
	}
}

func (c *candidate) acquireSent(now time.Time) {
	if !c.firstAcqPending {
		return
	}
	c.firstAcqPending = false
	base, ok := c.firstAcqBase()
	if ok && now.Sub(base)-c.logStalled(base, now)-c.infoWait > firstAcqSlop {
		c.w.violate(InvFirstAcq, fmt.Sprintf("c%d sent its first acquire %s after Run started (or its previous function returned)", c.idx, now.Sub(base)), "watch-before-acquire")
	}
}

// logStalled is how much of [from, to] falls inside this candidate's log
// stalls, counting a stall that begins in it to its end.
func (c *candidate) logStalled(from, to time.Time) time.Duration {
	var d time.Duration
	for _, s := range c.w.p.Cands[c.idx].LogStalls {
		a, b := c.w.start.Add(s.From), c.w.start.Add(s.To)
		if b.After(from) && !a.After(to) {
			d += b.Sub(maxTime(a, from))
		}
	}
	return d
}

// firstAcqBase is when a Run's first acquire is due: its start, or, when a
// function of an earlier Run still ran then, that function's return. ok is
// false while that function still runs.
func (c *candidate) firstAcqBase() (time.Time, bool) {
	base := c.runStart
	if c.runWaitsFn {
		if c.activeFn() {
			return time.Time{}, false
		}
		if c.lastFnEnd.After(base) {
			base = c.lastFnEnd
		}
	}
	return base, true
}

func (c *candidate) activeFn() bool {
	for k, f := range c.w.fns {
		if k.cand == c.idx && !f.ended {
			return true
		}
	}
	return false
}

func (c *candidate) acquireReturned(sent time.Time, out leader.Outcome, err error) {
	if err != nil {
		if c.acqErrSince.IsZero() {
			c.acqErrSince = sent
		}
		return
	}
	c.lastAcqSent, c.lastAcqRet, c.lastAcqOutcome = sent, time.Now(), out
	c.lastAcqUnconfirmed, c.acqErrSince = c.acqErrSince, time.Time{}
}

// diagnoseStart tags a function start with what led to it.
func (c *candidate) diagnoseStart(now time.Time, deadline time.Duration) []string {
	var tags []string
	if d := c.lastAcqRet.Sub(c.lastAcqSent); d > deadline {
		tags = append(tags, fmt.Sprintf("late-acquire-reply(%s, ctx_timeouts=%v)", d.Round(time.Millisecond), c.plan.CtxTimeouts))
	}
	if c.lastAcqOutcome == leader.Adopted && !c.lastAcqUnconfirmed.IsZero() {
		tags = append(tags, fmt.Sprintf("adopted-after-failed-acquire(first sent %s before)", now.Sub(c.lastAcqUnconfirmed).Round(time.Millisecond)))
	}
	for _, o := range c.w.cands {
		if o != nil && o != c && o.id == c.id {
			tags = append(tags, "id-shared")
			break
		}
	}
	return tags
}

// pull is the pull job: it claims its term in the fenced store, then
// writes every few milliseconds. When cancelled it may ignore that for a
// while; a frozen process makes the write it was in at wake-up, before it
// looks at its context.
func (c *candidate) pull(ctx context.Context) error {
	w := c.w
	term, _ := leader.TermFrom(ctx)
	w.mu.Lock()
	c.jobRuns++
	r := keyed(w.p.Seed, uint64(c.idx)+1, uint64(opJob), c.jobRuns)
	f := w.fn(c.idx, term)
	watchCancel := !f.started
	w.jobStart(c.idx, term, "at its start")
	claimed := w.claim(c.idx, term)
	w.mu.Unlock()
	if watchCancel {
		// The term's context is always cancelled in the end (the elector
		// cancels it when the term ends), so this never leaks.
		context.AfterFunc(ctx, func() {
			w.mu.Lock()
			w.cancelled(c.idx, term, context.Cause(ctx))
			w.mu.Unlock()
		})
	}
	ignoring := false
	var ignoreUntil time.Time
	defer func() {
		// A job's end waits for the instant's other goroutines: a call
		// the function's cron runner makes at this instant (counted as
		// part of the function) is counted before the job ends, in
		// whatever order the scheduler ran the two.
		w.quiesceKey(prioDecide, fmt.Sprintf("%03d job end pull", c.idx))
		w.mu.Lock()
		if ignoring {
			w.ignoring--
			w.settle()
		}
		w.jobEnd(c.idx, term, "at its return")
		w.mu.Unlock()
	}()
	if !claimed {
		return fmt.Errorf("fence refused term %d: %w", term, leader.ErrResigned)
	}
	for {
		t := time.NewTimer(r.dur(w.p.WriteMin, w.p.WriteMax))
		done := ctx.Done()
		if ignoring {
			done = nil
		}
		select {
		case <-t.C:
		case <-done:
			t.Stop()
		}
		wrote := false
		if wk := c.cl.wake(time.Now()); wk.After(time.Now()) {
			w.sleepUntil(wk)
			w.mu.Lock()
			w.write(c.idx, term)
			w.mu.Unlock()
			wrote = true
		}
		if ctx.Err() != nil && !ignoring {
			d, ign := c.decideIgnore()
			if !ign {
				return nil
			}
			ignoring, ignoreUntil = true, time.Now().Add(d)
		}
		if ignoring && !time.Now().Before(ignoreUntil) {
			return nil
		}
		if !wrote {
			w.mu.Lock()
			w.write(c.idx, term)
			w.mu.Unlock()
		}
	}
}

// decideIgnore draws, at a cancellation, whether the job ignores it and
// for how long: within the stop budget, or beyond it (and beyond the
// shutdown timeout), which is out of the model.
func (c *candidate) decideIgnore() (time.Duration, bool) {
	w := c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	r := keyed(w.p.Seed, uint64(c.idx)+1, uint64(opCancel), c.jobRuns)
	if !w.faulty(now) || !r.chance(0.2*w.p.Intensity) {
		return 0, false
	}
	b := w.budget()
	d := r.dur(b/10, b*8/10)
	if r.chance(0.5) {
		long := max(b, w.p.Cfg.ShutdownTimeout)
		d = r.dur(long*12/10, 3*long)
	}
	w.ignoring++
	w.event(c.idx, evNote, 0, 0, 0, 0, fmt.Sprintf("pull job ignores its cancellation for %s (stop budget %s, shutdown timeout %s)", d, b, w.p.Cfg.ShutdownTimeout))
	return d, true
}

// cronJob records each fired tick. An at-least-once run fails now and
// then (decided per tick and attempt), so that owed ticks are run again.
func (c *candidate) cronJob(cr CronPlan) func(ctx context.Context) error {
	name := cr.Name
	attempts := map[int64]uint64{} // tick → attempts by this candidate, under w.mu
	return func(ctx context.Context) error {
		w := c.w
		term, _ := leader.TermFrom(ctx)
		tick, _ := worker.TickFrom(ctx)
		w.mu.Lock()
		f := w.fn(c.idx, term)
		f.jobs++
		f.ended = false
		w.fired(c.idx, term, name, tick)
		attempts[tick.UnixMilli()]++
		r := keyed(w.p.Seed, uint64(c.idx)+1, uint64(opCronRun), uint64(tick.UnixMilli()), attempts[tick.UnixMilli()])
		fail := cr.Delivery == worker.AtLeastOnce && r.chance(0.25)
		w.mu.Unlock()
		t := time.NewTimer(time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		// As the pull job's end, but before the cron loop's decision
		// ("NNN cron …"): a run that ends at a tick's instant has ended
		// when the loop looks.
		w.quiesceKey(prioDecide, fmt.Sprintf("%03d %s %s %d", c.idx, "a cron run ends", name, tick.UnixMilli()))
		w.mu.Lock()
		w.jobEnd(c.idx, term, "at a cron run's return")
		if !fail {
			w.completed[tickKey{name, tick.UnixMilli()}] = true
		}
		w.mu.Unlock()
		if fail {
			return errors.New("sim: the run failed")
		}
		return nil
	}
}

// drive runs the candidate until end: Run, cancelled at the plan's stop
// times and called again as soon as it returned; Resign at the plan's
// resign times.
func (c *candidate) drive(end <-chan struct{}) {
	w := c.w
	var resigns sync.WaitGroup
	defer resigns.Wait()
	stops, rsg := c.plan.Stops, c.plan.Resigns
	// Candidates start a few microseconds apart, so that even their first
	// steps do not coincide.
	r := keyed(w.p.Seed, uint64(c.idx)+1, uint64(opPlan))
	time.Sleep(r.dur(time.Microsecond, 500*time.Microsecond))
	for run := 0; ; run++ {
		// This Run's jitter source (the elector's Rand hook).
		c.rnd.Store(rand.New(rand.NewPCG(w.p.Seed, uint64(c.idx)<<32|uint64(run)|uint64(opElector)<<56)))
		ctx, cancel := context.WithCancel(withRun(context.Background(), run))
		w.mu.Lock()
		c.runStart, c.runWaitsFn, c.firstAcqPending, c.infoWait = time.Now(), c.activeFn(), true, 0
		w.event(c.idx, evRun, 0, 0, int64(run), 0, "")
		if run > 0 {
			w.driverBusy--
			w.settle()
		}
		w.mu.Unlock()
		errc := make(chan error, 1)
		go func() { errc <- c.wk.Run(ctx) }()

		final := false
		var runErr error
		returned := false
	wait:
		for {
			// A stop or Resign already due (planned while the previous Run
			// could not return, its log stalled) is taken once the instant
			// is quiet, the earlier planned first: through a timer already
			// due the select below would take it at once, racing the new
			// Run's own goroutines, and pick at random between two.
			if due := func(ts []time.Duration) bool { return len(ts) > 0 && !w.start.Add(ts[0]).After(time.Now()) }; due(stops) || due(rsg) {
				w.quiesceKey(prioAct, fmt.Sprintf("%03d drive", c.idx))
				select {
				case runErr = <-errc:
					returned = true
					break wait
				default:
				}
				if first := func() bool { return due(rsg) && (!due(stops) || rsg[0] < stops[0]) }; first() {
					for first() {
						rsg = rsg[1:]
						c.resign(&resigns)
					}
					continue
				}
				stops = stops[1:]
				break wait
			}
			var stopC, resignC <-chan time.Time
			var st, rt *time.Timer
			if len(stops) > 0 {
				st = time.NewTimer(time.Until(w.start.Add(stops[0])))
				stopC = st.C
			}
			if len(rsg) > 0 {
				rt = time.NewTimer(time.Until(w.start.Add(rsg[0])))
				resignC = rt.C
			}
			stopped := false
			select {
			case runErr = <-errc:
				returned = true
				stopped = true
			case <-stopC:
				stops = stops[1:]
				stopped = true
			case <-resignC:
				rsg = rsg[1:]
				c.resign(&resigns)
				// A resign planned at or before now is called now too
				// (the due check above would take it next, after the
				// instant settles).
				for len(rsg) > 0 && !w.start.Add(rsg[0]).After(time.Now()) {
					rsg = rsg[1:]
					c.resign(&resigns)
				}
			case <-end:
				final, stopped = true, true
			case <-w.abort:
				final, stopped = true, true
			}
			if st != nil {
				st.Stop()
			}
			if rt != nil {
				rt.Stop()
			}
			if stopped {
				break wait
			}
		}
		cancel()
		w.mu.Lock()
		cancelAt := time.Now()
		if !returned {
			w.event(c.idx, evStop, 0, 0, int64(run), 0, "")
		}
		if c.firstAcqPending {
			if base, ok := c.firstAcqBase(); ok && cancelAt.Sub(base)-c.logStalled(base, cancelAt)-c.infoWait > firstAcqSlop {
				c.firstAcqPending = false
				w.violate(InvFirstAcq, fmt.Sprintf("c%d sent no acquire in the %s between Run's start and its stop", c.idx, cancelAt.Sub(base)), "watch-before-acquire")
			}
		}
		if !final {
			w.driverBusy++
		}
		bound := w.p.Cfg.ShutdownTimeout + w.p.Cfg.RenewDeadline + 10*time.Millisecond
		if wk := c.cl.wake(cancelAt); wk.After(cancelAt) {
			bound += wk.Sub(cancelAt)
		}
		// A blocked log sink delays Run's way out (it logs as it steps
		// down; the cancel itself never waits for a log write). A liveness
		// cost of that fault, not of the elector.
		bound += c.logStalled(cancelAt, cancelAt.Add(bound))
		w.mu.Unlock()
		if !returned {
			t := time.NewTimer(bound)
			select {
			case runErr = <-errc:
			case <-t.C:
				w.mu.Lock()
				if !w.aborted {
					w.violate(InvShutdown, fmt.Sprintf("c%d's Run has not returned %s after its context ended (shutdown_timeout %s + renew_deadline %s + 10ms)",
						c.idx, bound, w.p.Cfg.ShutdownTimeout, w.p.Cfg.RenewDeadline), c.hangTags()...)
				}
				w.mu.Unlock()
				runErr = <-errc // teardown makes every pending call return
			}
			t.Stop()
		}
		w.mu.Lock()
		w.event(c.idx, evRunEnd, 0, 0, int64(run), 0, fmt.Sprint(runErr))
		if runErr != nil && !errors.Is(runErr, leader.ErrStopTimeout) {
			w.event(c.idx, evNote, 0, 0, 0, 0, "Run returned an unexpected error: "+runErr.Error())
		}
		w.mu.Unlock()
		if final {
			return
		}
		if returned {
			// Run ended by itself (a configuration it refuses): called
			// again a retry interval later, as a supervisor would.
			t := time.NewTimer(w.p.Cfg.RetryInterval)
			select {
			case <-t.C:
			case <-end:
			case <-w.abort:
			}
			t.Stop()
		}
		select {
		case <-end:
			w.mu.Lock()
			w.driverBusy--
			w.mu.Unlock()
			return
		case <-w.abort:
			return
		default:
		}
	}
}

func (c *candidate) hangTags() []string {
	tags := []string{fmt.Sprintf("ctx_timeouts=%v", c.plan.CtxTimeouts), fmt.Sprintf("read_timeout=%s", c.plan.ReadTimeout)}
	if c.stuck {
		tags = append(tags, "a-call-never-returns")
	}
	return tags
}

// resign calls Elector.Resign in a goroutine the driver waits for.
func (c *candidate) resign(wg *sync.WaitGroup) {
	w := c.w
	w.mu.Lock()
	w.driverBusy++
	w.lastResign = time.Now()
	w.event(c.idx, evResign, 0, 0, 0, 0, "called")
	w.mu.Unlock()
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*w.p.Cfg.TTL+w.p.Cfg.ShutdownTimeout)
		defer cancel()
		// Resign once the instant is quiet, before the code under test
		// decides anything at it: a term ending at the instant it is
		// called would otherwise be resigned or not as the scheduler ran
		// the two.
		w.quiesceKey(prioAct, fmt.Sprintf("%03d resign", c.idx))
		err := c.e.Resign(ctx)
		w.mu.Lock()
		w.event(c.idx, evResign, 0, 0, 0, 0, fmt.Sprintf("returned %v", err))
		w.driverBusy--
		w.settle()
		w.mu.Unlock()
	})
}

// metrics hooks the elector's transitions: Elected is the leader
// function's start, reported just before the elector calls it.
type metrics struct {
	leader.NopMetrics
	c *candidate
}

func (m metrics) Transition(t leader.Transition, term uint64) {
	w := m.c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if t == leader.TransitionElected {
		w.elected(m.c.idx, term)
		return
	}
	w.event(m.c.idx, evLog, 0, 0, int64(term), 0, fmt.Sprintf("transition %s (term %d)", t.Label(), term))
}

func (m metrics) Overrun(term uint64) {
	w := m.c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	w.event(m.c.idx, evLog, 0, 0, int64(term), 0, fmt.Sprintf("overrun reported (term %d)", term))
}

// logCore records the elector's and the worker's log messages (Info and
// above) in the schedule's log; every entry also counts towards spin
// detection.
type logCore struct {
	w    *world
	cand int
	with []zapcore.Field // the logger's own fields (With): they key a stalled write
}

func (l *logCore) Enabled(lvl zapcore.Level) bool { return lvl >= zapcore.InfoLevel }
func (l *logCore) Sync() error                    { return nil }

func (l *logCore) With(fs []zapcore.Field) zapcore.Core {
	c := *l
	c.with = append(slices.Clip(l.with), fs...)
	return &c
}

func (l *logCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if l.Enabled(e.Level) {
		return ce.AddCore(e, l)
	}
	return ce
}

func (l *logCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	// A blocked sink: the write waits for the stall to end, as a write to a
	// full stderr pipe does.
	since := time.Since(l.w.start)
	stalled := false
	for _, s := range l.w.p.Cands[l.cand].LogStalls {
		if s.contains(since) {
			time.Sleep(s.To - since)
			stalled = true
		}
	}
	msg := e.LoggerName + ": " + e.Message
	for _, f := range fs {
		if f.Type == zapcore.ErrorType {
			if err, ok := f.Interface.(error); ok {
				msg += " (" + f.Key + ": " + err.Error() + ")"
			}
		}
	}
	if stalled {
		// Every write blocked by the stall returns at its end: they go
		// on one at a time, by what they write, so that what their
		// goroutines do next (a job's run ends, a cron loop checks
		// whether it still runs) happens in one order.
		enc := zapcore.NewMapObjectEncoder()
		for _, f := range append(slices.Clip(l.with), fs...) {
			f.AddTo(enc)
		}
		// Which way a context ended is itself a race at one instant.
		key := fmt.Sprintf("%03d log %s %v", l.cand, msg, enc.Fields)
		key = strings.ReplaceAll(key, context.DeadlineExceeded.Error(), "context ended")
		key = strings.ReplaceAll(key, context.Canceled.Error(), "context ended")
		l.w.quiesceKey(prioProgress, key)
	}
	l.w.mu.Lock()
	l.w.event(l.cand, evLog, 0, 0, 0, 0, msg)
	l.w.mu.Unlock()
	return nil
}
