package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/solo-run/solo/internal/hooks"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
)

// Spread schedules' invariants, as printed.
const (
	InvSpreadOne   = "P1 one runner per job at any instant"
	InvSpreadCover = "P2 every job runs within its bound while a member that registered it is up"
	InvSpreadTick  = "P3 a cron tick fires at most once"
)

// Tags of spread violations, naming the precondition they met.
const (
	TagShedDrain  = "shed-slow-drain"  // the earlier runner was shed (resigned) and still drained
	TagModeSwitch = "elect-and-spread" // one runner in mode elect, the other in mode spread
	TagMixedJobs  = "mixed-job-sets"   // members registered different jobs
	TagEmpty      = "member-registers-none"
	TagSameProc   = "same-process"          // both runs on one process: a Run again while its last one's job still ran
	TagToElect    = "spread-drain-to-elect" // a spread member's run still draining as an elect-mode instance starts the job
	TagEvicted    = "after-eviction"        // the server evicted keys under maxmemory before it
)

// SpreadStats are what a spread schedule did.
type SpreadStats struct {
	Plan SpreadPlan
	// Met are the preconditions met: a shed job that drained past
	// ShutdownTimeout + TTL, elect and spread members up on one name,
	// members with different job sets in the calm phase.
	Met map[string]bool
	// Tags are the tags of every violation (w.viol keeps the first of each
	// invariant only), by invariant.
	Tags map[string]map[string]bool
	Runs int
}

// Preconditions counted in SpreadStats.Met.
const (
	MetShedDrain = "a shed job drained past shutdown_timeout + ttl"
	MetSwitch    = "a spread member started while an elect-mode instance of its name ran"
	MetMixed     = "calm phase with members of different job sets"
	MetBack      = "a stopped spread member drained while an elect-mode instance of its name ran"
)

// spreadRun is one spread schedule: the world (server, network, event
// log) plus the processes and the witness.
type spreadRun struct {
	w     *world
	p     SpreadPlan
	procs []*sproc
	group string

	// Under w.mu.
	active  map[string][]*jobRun // job → runs not ended
	runs    map[string][]*jobRun // job → every run
	lost    map[lostKey]bool
	met     map[string]bool
	tags    map[string]map[string]bool
	ticks   map[int64]*jobRun // cron tick (Unix ms) → its first run
	nRuns   int
	electUp int            // elect-mode processes whose Run runs
	jobs    sync.WaitGroup // job goroutines, which may outlive Run
}

type lostKey struct {
	proc     int
	election string
	term     uint64
}

// jobRun is one run of a job function on one process.
type jobRun struct {
	proc      *sproc
	job       string
	election  string
	term      uint64
	begin     time.Time
	end       time.Time // zero while it runs
	cancelled time.Time
	cause     error
}

// sproc is one process: a spread member or an elect-mode instance.
type sproc struct {
	r    *spreadRun
	idx  int
	plan SpreadProc
	cl   *client
	sp   *worker.Spread
	wk   *worker.Worker
	dead chan struct{} // closed at its death

	// The campaigns of the current Run by election, for campaignRand.
	randMu    sync.Mutex
	run       int
	campaigns map[string]uint64

	// Under w.mu.
	stops    []time.Time // Run's context cancelled
	isDead   bool
	diedAt   time.Time
	jobSteps map[string]uint64 // each job's write steps
}

// RunSpread simulates the spread schedule of seed inside a
// testing/synctest bubble.
func RunSpread(seed uint64, o Options) *Result {
	p := NewSpreadPlan(seed, o)
	w := newWorld(p.Plan, time.Now())
	r := &spreadRun{w: w, p: p, group: p.Cfg.Name, active: map[string][]*jobRun{}, runs: map[string][]*jobRun{},
		lost: map[lostKey]bool{}, met: map[string]bool{}, tags: map[string]map[string]bool{}, ticks: map[int64]*jobRun{}}
	for i, sp := range p.Procs {
		pr, err := r.newProc(i, sp)
		if err != nil {
			panic(fmt.Sprintf("sim: spread seed %d: p%d: %v", seed, i, err))
		}
		r.procs = append(r.procs, pr)
	}
	go w.loop()
	end := make(chan struct{})
	var drivers sync.WaitGroup
	for _, pr := range r.procs {
		drivers.Go(func() { pr.drive(end) })
	}
	faultsDone := make(chan struct{})
	var faults sync.WaitGroup
	faults.Go(func() { w.injectServerFaults(faultsDone) }) // evictions (the plan has no loss or failover)
	sleepFake(w.start.Add(p.End), w.abort)
	close(end)
	running := make(chan struct{})
	go func() { drivers.Wait(); close(running) }()
	grace := time.NewTimer(p.Cfg.ShutdownTimeout + p.Cfg.RenewDeadline + time.Second)
	select {
	case <-running:
	case <-grace.C:
	}
	grace.Stop()
	w.mu.Lock()
	now := time.Now()
	r.finish(w.start.Add(p.End))
	w.stats.FakeTime = now.Sub(w.start)
	// Judged: what the teardown does (calls failing with errClosed,
	// retried at that instant as often as the scheduler lets them) is
	// neither logged nor judged.
	w.sealed = true
	w.mu.Unlock()
	close(w.stop)
	<-running
	close(faultsDone)
	faults.Wait()
	r.jobs.Wait()
	<-w.loopDone
	for _, pr := range r.procs {
		_ = pr.cl.rdb.Close()
	}
	// Goroutines nothing waits for (a lock call's, a call still in its
	// keyed send delay) may still be finishing: the bubble must not end
	// before they do, nor before the settler.
	time.Sleep(time.Millisecond)
	w.stopSettler()
	w.mu.Lock()
	w.closeVM()
	st := &SpreadStats{Plan: p, Met: r.met, Tags: r.tags, Runs: r.nRuns}
	res := &Result{Seed: seed, Plan: p.Plan, Violations: w.viol, Stats: w.stats, Spread: st, log: w.ev}
	w.mu.Unlock()
	return res
}

func (r *spreadRun) newProc(i int, sp SpreadProc) (*sproc, error) {
	w := r.w
	cp := r.p.Cands[i]
	pr := &sproc{r: r, idx: i, plan: sp, dead: make(chan struct{}), campaigns: map[string]uint64{}}
	c := &candidate{w: w, idx: i, plan: cp}
	pr.cl = &client{w: w, c: c, idx: i, plan: cp, byKey: true}
	pr.cl.rdb = newRDB(pr.cl)
	// The random parts of this process's elector IDs (its member ID and
	// every job's holder ID) come from a count of its own per election,
	// not from crypto/rand, nor from the order its goroutines make
	// electors in: a replay gives the same IDs, so the same rendezvous
	// hashing of the jobs. Unique per election: the process's index leads.
	var idsMu sync.Mutex
	ids := map[string]uint32{}
	idToken := func(election string) string {
		idsMu.Lock()
		defer idsMu.Unlock()
		ids[election]++
		return fmt.Sprintf("%04x%08x", i, ids[election])
	}
	cfg := r.p.Cfg
	cfg.ID = cp.ID
	log := zap.New(&spreadLog{r: r, proc: i})
	// The worker's hooks (and, through a Spread, its electors' and Hub's):
	// the same settle, IDs and sources as above.
	h := hooks.Hooks{Settle: w.decider(pr.idx), IDToken: idToken, Rand: pr.campaignRand}
	opts := []worker.Option{worker.WithLogger(log), worker.WithLocation(time.UTC), worker.WithHooks(h)}
	if sp.Elect {
		e, err := leader.New(pr.cl.rdb, cfg, leader.WithLogger(log), leader.WithHooks(h))
		if err != nil {
			return nil, err
		}
		wk, err := worker.New(e, opts...)
		if err != nil {
			return nil, err
		}
		for _, j := range sp.Jobs {
			if err := pr.register(wk, j); err != nil {
				return nil, err
			}
		}
		pr.wk = wk
		return pr, nil
	}
	s, err := worker.NewSpread(pr.cl.rdb, cfg, r.p.SC, append(opts, worker.WithMode(worker.ModeSpread))...)
	if err != nil {
		return nil, err
	}
	for _, j := range sp.Jobs {
		if err := pr.register(s, j); err != nil {
			return nil, err
		}
	}
	pr.sp = s
	return pr, nil
}

// register adds job j to a Worker or a Spread: the plan's cron job, or a
// pull job.
func (pr *sproc) register(to interface {
	Pull(string, func(context.Context) error, ...worker.JobOption) error
	Cron(string, string, func(context.Context) error, ...worker.JobOption) error
}, j string) error {
	if j == spreadCron {
		return to.Cron(j, "* * * * * *", pr.cronJob())
	}
	return to.Pull(j, pr.job(j))
}

// cronJob is the cron job's function: a run of a millisecond, checked by
// P1 like any run, and its tick by P3.
func (pr *sproc) cronJob() func(ctx context.Context) error {
	r := pr.r
	return func(ctx context.Context) error {
		term, _ := leader.TermFrom(ctx)
		tick, _ := worker.TickFrom(ctx)
		election := r.group
		if e, ok := worker.ElectorFrom(ctx); ok {
			election = e.Config().Name
		}
		jr := r.begin(pr, spreadCron, election, term)
		if jr == nil {
			return nil
		}
		r.fired(jr, tick)
		t := time.NewTimer(time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
		case <-pr.dead:
		}
		t.Stop()
		r.end(jr)
		return nil
	}
}

// fired is invariant P3: a tick fires at most once (at-most-once is the
// default delivery, and no data is ever lost in a spread schedule).
func (r *spreadRun) fired(jr *jobRun, tick time.Time) {
	w := r.w
	w.mu.Lock()
	defer w.mu.Unlock()
	ms := tick.UnixMilli()
	w.event(jr.proc.idx, evTick, 0, 0, int64(jr.term), ms, spreadCron)
	p := r.ticks[ms]
	if p == nil {
		r.ticks[ms] = jr
		return
	}
	var tags []string
	if (p.proc.wk != nil) != (jr.proc.wk != nil) {
		tags = append(tags, TagModeSwitch)
	}
	r.tagged(InvSpreadTick, tags)
	w.violate(InvSpreadTick, fmt.Sprintf("cron tick %s fired twice: by p%d (%s term %d) at %s and by p%d (%s term %d)",
		tick.UTC().Format("15:04:05.000"), p.proc.idx, p.election, p.term, fmtDur(p.begin.Sub(w.start)), jr.proc.idx, jr.election, jr.term), tags...)
}

// drive runs the process's plan: start, stop, restart, death.
func (pr *sproc) drive(end <-chan struct{}) {
	w := pr.r.w
	sp := pr.plan
	if sp.Die > 0 {
		t := time.AfterFunc(time.Until(w.start.Add(sp.Die)), pr.die)
		defer t.Stop()
	}
	if !pr.waitUntil(sp.Start, end) {
		return
	}
	for run := 1; ; run++ {
		pr.randMu.Lock()
		pr.run, pr.campaigns = run, map[string]uint64{}
		pr.randMu.Unlock()
		ctx, cancel := context.WithCancel(withRun(context.Background(), run))
		done := make(chan error, 1)
		w.mu.Lock()
		w.event(pr.idx, evRun, 0, 0, int64(run), 0, "")
		if pr.wk != nil {
			pr.r.electUp++
		} else if pr.r.electUp > 0 {
			pr.r.met[MetSwitch] = true
		}
		w.mu.Unlock()
		go func() {
			if pr.sp != nil {
				done <- pr.sp.Run(ctx)
			} else {
				done <- pr.wk.Run(ctx)
			}
		}()
		stopAt := sp.Stop
		if run > 1 {
			stopAt = 0
		}
		var stopC <-chan time.Time
		if stopAt > 0 {
			t := time.NewTimer(time.Until(w.start.Add(stopAt)))
			defer t.Stop()
			stopC = t.C
		}
		var err error
		stopped := false
		select {
		case err = <-done:
		case <-stopC:
			stopped = true
		case <-end:
			stopped = true
		}
		if stopped {
			w.mu.Lock()
			pr.stops = append(pr.stops, time.Now())
			w.event(pr.idx, evStop, 0, 0, int64(run), 0, "")
			w.mu.Unlock()
			cancel()
			err = <-done
		}
		cancel()
		w.mu.Lock()
		w.event(pr.idx, evRunEnd, 0, 0, int64(run), 0, fmt.Sprint(err))
		if pr.wk != nil {
			pr.r.electUp--
		}
		w.mu.Unlock()
		if run > 1 || sp.Restart == 0 || !pr.waitUntil(sp.Restart, end) {
			return
		}
	}
}

// campaignRand returns the source of one campaign of election, keyed by
// (process, Run, election, how many campaigns of that election came
// before in this Run): a Spread runs every elector under one Run, and a
// shared source would be drawn from in goroutine order.
func (pr *sproc) campaignRand(election string) *rand.Rand {
	pr.randMu.Lock()
	pr.campaigns[election]++
	n, run := pr.campaigns[election], pr.run
	pr.randMu.Unlock()
	return rand.New(rand.NewPCG(pr.r.w.p.Seed^hashKey(election)<<20^n, uint64(opSRand)<<40|uint64(pr.idx)<<20|uint64(run)))
}

// waitUntil sleeps until d from the start; false when the schedule ends
// first.
func (pr *sproc) waitUntil(d time.Duration, end <-chan struct{}) bool {
	// By the clock, not by which channel is seen first: end closes at the
	// schedule's last instant, and a timer due then (or a wait that
	// starts then) races it.
	endAt := pr.r.w.start.Add(pr.r.p.End)
	if !time.Now().Before(endAt) {
		return false
	}
	t := time.NewTimer(time.Until(pr.r.w.start.Add(d)))
	defer t.Stop()
	select {
	case <-t.C:
		return time.Now().Before(endAt)
	case <-end:
		return false
	}
}

// die freezes the process for good: its calls never leave (a pause to
// the end of time in its plan) and its jobs end now.
func (pr *sproc) die() {
	w := pr.r.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if pr.isDead || w.sealed {
		return
	}
	pr.isDead, pr.diedAt = true, time.Now()
	close(pr.dead)
	w.event(pr.idx, evFault, 0, 0, 0, 0, "process dies (frozen for good)")
	for job, runs := range pr.r.active {
		keep := runs[:0]
		for _, jr := range runs {
			if jr.proc == pr {
				jr.end = pr.diedAt
				continue
			}
			keep = append(keep, jr)
		}
		pr.r.active[job] = keep
	}
}

// job is the function of job name on this process: it runs until its
// context ends, then drains (a slow drainer for Drain more), and tells
// the witness when it begins and ends.
func (pr *sproc) job(name string) func(ctx context.Context) error {
	r := pr.r
	w := r.w
	return func(ctx context.Context) error {
		term, _ := leader.TermFrom(ctx)
		election := r.group
		if e, ok := worker.ElectorFrom(ctx); ok {
			election = e.Config().Name
		}
		jr := r.begin(pr, name, election, term)
		if jr == nil {
			return nil
		}
		r.jobs.Add(1)
		defer r.jobs.Done()
		// The cancellation is seen here, at its instant (the loop always
		// waits on ctx), not by a context.AfterFunc, whose goroutine races
		// the job's own return at that instant.
		noteCancel := func() {
			w.mu.Lock()
			jr.cancelled, jr.cause = time.Now(), context.Cause(ctx)
			w.event(pr.idx, evCancelled, 0, 0, int64(term), 0, name+": "+fmt.Sprint(jr.cause))
			w.mu.Unlock()
		}
		for ctx.Err() == nil {
			w.mu.Lock()
			// Counted per job: jobs of one process woken at one instant
			// draw in any order.
			if pr.jobSteps == nil {
				pr.jobSteps = map[string]uint64{}
			}
			pr.jobSteps[name]++
			rs := keyed(w.p.Seed, uint64(opSJob), uint64(pr.idx), hashKey(name)<<32|pr.jobSteps[name])
			d := rs.dur(w.p.WriteMin, w.p.WriteMax)
			w.mu.Unlock()
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
			case <-t.C:
			case <-pr.dead:
			case <-w.stop:
			}
			t.Stop()
			select {
			case <-pr.dead:
				return nil
			case <-w.stop:
				r.end(jr)
				return nil
			default:
			}
		}
		noteCancel()
		if d := r.p.Drain[name]; d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-pr.dead:
			case <-w.stop:
			}
			t.Stop()
		}
		r.end(jr)
		return nil
	}
}

// begin records a run's start: invariant P1 against every run of the job
// not ended. It returns nil on a dead process (nothing of it runs).
func (r *spreadRun) begin(pr *sproc, job, election string, term uint64) *jobRun {
	w := r.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if pr.isDead || w.sealed {
		return nil
	}
	now := time.Now()
	jr := &jobRun{proc: pr, job: job, election: election, term: term, begin: now}
	w.event(pr.idx, evElected, 0, 0, int64(term), 0, "")
	w.event(pr.idx, evNote, 0, 0, 0, 0, fmt.Sprintf("job %s begins (%s term %d)", job, election, term))
	for _, o := range r.active[job] {
		if why := r.excuse(o, pr, now); why != "" {
			w.outOfModel(why)
			continue
		}
		var tags []string
		if o.cause != nil && errors.Is(o.cause, leader.ErrResigned) && o.proc.sp != nil && pr.sp != nil {
			tags = append(tags, TagShedDrain)
		}
		if (o.proc.wk != nil) != (pr.wk != nil) {
			tags = append(tags, TagModeSwitch)
		}
		if o.proc.sp != nil && pr.wk != nil && len(o.proc.stops) > 0 {
			tags = append(tags, TagToElect)
		}
		if o.proc == pr {
			tags = append(tags, TagSameProc)
		}
		if len(w.evictions) > 0 {
			tags = append(tags, TagEvicted)
		}
		cancelled := "not cancelled"
		if !o.cancelled.IsZero() {
			cancelled = fmt.Sprintf("cancelled %s ago: %v", now.Sub(o.cancelled), o.cause)
		}
		r.tagged(InvSpreadOne, tags)
		w.violate(InvSpreadOne, fmt.Sprintf("job %s starts on p%d (%s term %d) while p%d still runs it (%s term %d, since %s, %s)",
			job, pr.idx, election, term, o.proc.idx, o.election, o.term, fmtDur(o.begin.Sub(w.start)), cancelled), tags...)
	}
	r.active[job] = append(r.active[job], jr)
	r.runs[job] = append(r.runs[job], jr)
	r.nRuns++
	return jr
}

// excuse says why an earlier run o still going as process pr starts the
// job is out of the model, or "". Nothing excuses two runs on one
// process: a Run waits for its last one's stragglers.
func (r *spreadRun) excuse(o *jobRun, pr *sproc, now time.Time) string {
	w := r.w
	if o.proc == pr {
		return ""
	}
	for _, pw := range r.p.Cands[o.proc.idx].Pauses {
		if w.start.Add(pw.From).Before(now) && w.start.Add(pw.To).After(o.begin) {
			return "a job's process was frozen while it ran"
		}
	}
	draining := false // stopped, and within shutdown_timeout: its lease is renewed while it drains
	for _, s := range o.proc.stops {
		if s.After(o.begin) && now.Sub(s) >= r.p.Cfg.ShutdownTimeout {
			return "a job drained past shutdown_timeout after its process was stopped"
		}
		draining = draining || s.After(o.begin)
	}
	if r.lost[lostKey{o.proc.idx, o.election, o.term}] {
		return "a job ran on after its lease was lost (renew deadline)"
	}
	if !o.cancelled.IsZero() && !errors.Is(o.cause, leader.ErrResigned) && !draining && now.Sub(o.cancelled) > w.budget() {
		return "a job ignored cancellation past its stop budget"
	}
	return ""
}

// end records a run's return.
func (r *spreadRun) end(jr *jobRun) {
	w := r.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if !jr.end.IsZero() {
		return
	}
	now := time.Now()
	jr.end = now
	w.event(jr.proc.idx, evFnEnd, 0, 0, int64(jr.term), 0, "")
	w.event(jr.proc.idx, evNote, 0, 0, 0, 0, "job "+jr.job+" ends")
	if !jr.cancelled.IsZero() && errors.Is(jr.cause, leader.ErrResigned) && jr.proc.sp != nil &&
		now.Sub(jr.cancelled) > r.p.Cfg.ShutdownTimeout+r.p.Cfg.TTL {
		stopped := false
		for _, s := range jr.proc.stops {
			stopped = stopped || s.After(jr.begin)
		}
		if !stopped {
			r.met[MetShedDrain] = true
		}
	}
	if jr.proc.sp != nil && len(jr.proc.stops) > 0 && r.electUp > 0 {
		r.met[MetBack] = true
	}
	runs := r.active[jr.job]
	for i, o := range runs {
		if o == jr {
			r.active[jr.job] = append(runs[:i], runs[i+1:]...)
			break
		}
	}
}

// finish is invariant P2, over the calm phase [CalmFrom, End]: for each
// job some member registered and that member is up then (started, not
// stopped for good, not dead), the job runs nowhere for at most CalmBound.
func (r *spreadRun) finish(end time.Time) {
	w := r.w
	if w.aborted {
		return
	}
	if r.p.Memory.Unsafe() {
		// As invariant 6: a member that refuses to campaign under a policy
		// that may evict its keys runs nothing, which is right.
		w.event(-1, evNote, 0, 0, 0, 0, "maxmemory-policy "+r.p.Memory.Policy+" may evict the leases: no job running (refused) is allowed; P2 not checked")
		return
	}
	from := w.start.Add(r.p.CalmFrom)
	sets := map[string]bool{}
	upFor := map[string][]int{}
	for _, pr := range r.procs {
		sp := pr.plan
		if sp.Elect || pr.isDead || (sp.Stop > 0 && sp.Restart == 0) {
			continue
		}
		sets[strings.Join(sp.Jobs, " ")] = true
		for _, j := range sp.Jobs {
			upFor[j] = append(upFor[j], pr.idx)
		}
	}
	if len(sets) > 1 {
		r.met[MetMixed] = true
	}
	jobs := append([]string(nil), r.p.Jobs...)
	sort.Strings(jobs)
	for _, j := range jobs {
		if len(upFor[j]) == 0 || j == spreadCron { // a cron job runs a moment each tick
			continue
		}
		type iv struct{ a, b time.Time }
		var ivs []iv
		for _, jr := range r.runs[j] {
			b := jr.end
			if b.IsZero() {
				b = end
			}
			ivs = append(ivs, iv{jr.begin, b})
		}
		sort.Slice(ivs, func(a, b int) bool { return ivs[a].a.Before(ivs[b].a) })
		cur := from
		worst, worstAt := time.Duration(0), from
		for _, x := range ivs {
			if !x.b.After(cur) {
				continue
			}
			if x.a.After(cur) {
				if g := minTime(x.a, end).Sub(cur); g > worst {
					worst, worstAt = g, cur
				}
			}
			cur = maxTime(cur, x.b)
			if !cur.Before(end) {
				break
			}
		}
		if g := end.Sub(cur); g > worst {
			worst, worstAt = g, cur
		}
		if worst > r.p.CalmBound {
			var tags []string
			if len(sets) > 1 {
				tags = append(tags, TagMixedJobs)
			}
			if sets[""] {
				tags = append(tags, TagEmpty)
			}
			r.tagged(InvSpreadCover, tags)
			w.violate(InvSpreadCover, fmt.Sprintf("job %s ran nowhere for %s from %s (bound %s; calm phase %s–%s) while p%v, which registered it, were up",
				j, worst, fmtDur(worstAt.Sub(w.start)), r.p.CalmBound, fmtDur(r.p.CalmFrom), fmtDur(end.Sub(w.start)), upFor[j]), tags...)
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// spreadLog records the log messages (Info and above) in the schedule's
// log, and the leases the electors report lost, by election and term.
type spreadLog struct {
	r      *spreadRun
	proc   int
	fields []zapcore.Field
}

func (l *spreadLog) Enabled(lvl zapcore.Level) bool { return lvl >= zapcore.InfoLevel }
func (l *spreadLog) With(fs []zapcore.Field) zapcore.Core {
	return &spreadLog{r: l.r, proc: l.proc, fields: append(append([]zapcore.Field(nil), l.fields...), fs...)}
}
func (l *spreadLog) Sync() error { return nil }

func (l *spreadLog) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if l.Enabled(e.Level) {
		return ce.AddCore(e, l)
	}
	return ce
}

func (l *spreadLog) Write(e zapcore.Entry, fs []zapcore.Field) error {
	var election, job string
	var term uint64
	msg := e.LoggerName + ": " + e.Message
	for _, f := range append(append([]zapcore.Field(nil), l.fields...), fs...) {
		switch {
		case f.Key == "election" && f.Type == zapcore.StringType:
			election = f.String
		case f.Key == "job" && f.Type == zapcore.StringType:
			job = f.String
		case f.Key == "term" && f.Type == zapcore.Uint64Type:
			term = uint64(f.Integer)
		case f.Type == zapcore.ErrorType:
			if err, ok := f.Interface.(error); ok {
				msg += " (" + f.Key + ": " + err.Error() + ")"
			}
		}
	}
	if election != "" {
		msg += " [" + election
		if term != 0 {
			msg += fmt.Sprintf(" term %d", term)
		}
		msg += "]"
	}
	if job != "" {
		msg += " job " + job
	}
	w := l.r.w
	w.mu.Lock()
	if e.Message == "leadership lost" && election != "" {
		l.r.lost[lostKey{l.proc, election, term}] = true
	}
	w.event(l.proc, evLog, 0, 0, 0, 0, msg)
	w.mu.Unlock()
	return nil
}

// tagged records a violation's tags ("" for none).
func (r *spreadRun) tagged(inv string, tags []string) {
	if r.w.sealed {
		return
	}
	m := r.tags[inv]
	if m == nil {
		m = map[string]bool{}
		r.tags[inv] = m
	}
	if len(tags) == 0 {
		m[""] = true
	}
	for _, t := range tags {
		m[t] = true
	}
}
