package sim

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing/synctest"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
)

// Invariant names, as printed.
const (
	InvLease     = "1 lease held by the running leader"
	InvOne       = "2 at most one leader function"
	InvDeadline  = "3 function started past its renew deadline"
	InvTerms     = "4 terms strictly increase"
	InvTicks     = "5 cron ticks"
	InvFailover  = "6 leader after faults stop"
	InvShutdown  = "7 Run returns in time"
	InvFirstAcq  = "8 first acquire at once"
	InvSpin      = "9 no spin"
	InvFence     = "10 fenced store refuses stale writes"
	InvScript    = "S scripts run without error"
	spinLimit    = 500 // events at one fake instant that count as a spin (a busy instant has < 100)
	firstAcqSlop = 5 * time.Millisecond
)

// Violation is one broken invariant.
type Violation struct {
	Invariant string
	At        time.Duration // fake time from the schedule's start
	Msg       string
	// Tags name what the checker saw around it (a late acquire reply, an
	// ID shared by two candidates…): diagnosis only, never used to decide.
	Tags []string
}

func (v Violation) String() string {
	s := fmt.Sprintf("invariant %s at %s: %s", v.Invariant, fmtDur(v.At), v.Msg)
	if len(v.Tags) > 0 {
		s += " [" + strings.Join(v.Tags, ", ") + "]"
	}
	return s
}

// Stats are a schedule's counters.
type Stats struct {
	FakeTime      time.Duration
	Calls         int
	Starts        int
	Writes        int
	StaleRefused  int            // writes with a term below the highest claimed, refused
	StaleAccepted int            // writes accepted although another leader claimed since
	OutOfModel    map[string]int // events the model does not cover, by reason
	Exercised     map[string]int // rare preconditions met (exercise.go), by name
	CronRefused   int            // cron specs registration refused
	// CalmFailover is the time from the calm phase's start (faults stopped
	// and their effects settled) to a leader running its function; -1 if
	// not measured.
	CalmFailover time.Duration
	CalmBound    time.Duration
}

type fnKey struct {
	cand int
	term uint64
}

// fnState is one leader function: from its start (the elector's Elected
// transition) until its last job returned.
type fnState struct {
	elected   time.Time
	seen      bool      // the elector reported its start
	cancelled time.Time // zero until its context is cancelled
	cause     error
	// lateAtCancel: how far past its last true renewal + RenewDeadline
	// the cancellation came (0 if not), as the server stood then.
	lateAtCancel time.Duration
	jobs         int // its jobs running, and its calls to the store in flight
	started      bool
	ended        bool
	// endLogged: its end was logged. Jobs of the term that start and end
	// at the instant of its cancellation (a cron run, a call) bring the
	// count back to zero once or more as the scheduler orders them: the
	// log says it once.
	endLogged bool
	affected  string // data loss or failover while it ran: out of model
	oomSeen   map[string]bool
	loads     map[string]loadSeen // cron key → what LoadCheckpoint returned
	cpSent    map[string][]int64  // cron key → Checkpoint values sent
	tags      []string            // diagnosis of its start
}

type loadSeen struct {
	n  int64
	ok bool
	at time.Time
}

type tickKey struct {
	job string
	ms  int64
}

type tickFire struct {
	cand int
	term uint64
	at   time.Time
}

// world is one schedule: the simulated Redis server and the checker's
// history, under one mutex.
type world struct {
	mu       sync.Mutex
	p        Plan
	start    time.Time
	faultEnd time.Time
	stop     chan struct{} // teardown: every pending call returns
	abort    chan struct{} // a spin: stop the schedule early
	aborted  bool
	sealed   bool    // the schedule is over: late events are dropped
	muted    bool    // the teardown: events are not logged (violations still are)
	queue    actions // the network's and the server's pending actions
	seq      uint64
	kick     chan struct{}
	loopDone chan struct{}

	// The settler (quiesce).
	settleReq   chan settleReq
	settlerStop chan struct{}
	settlerDone chan struct{}

	// server
	prim, rep state
	repQ      []repWrite
	lastApply time.Time
	writes    uint64
	epoch     uint64
	vm        *luaVM             // the server's script interpreter, made at its first script
	mutated   map[string]*script // Options.Mutate's scripts, compiled
	watches   map[*watch]struct{}
	failovers []time.Time
	losses    []time.Time
	lossWhy   []string
	mintedAt  map[uint64]time.Time // fake time each term's lease was created
	maxMinted uint64               // the highest term acquire.lua minted
	trueAt    map[string]time.Time // last true renewal of each lease or lock field (deadline.go)
	before    string               // the lease before the running script (server.go)
	evictions []time.Time          // when the server evicted keys (shapes.go)
	// The old master after a failover (Plan.Promote; shapes.go): its data,
	// until when each candidate still talks to it, whether a request runs
	// on it now, and the terms it granted without MinReplicas.
	old      *state
	oldUntil []time.Time
	onOld    bool
	oldTerms map[uint64]bool
	// evictLocks lets Plan.Evictions strike lock schedules too (the lock
	// schedules' code sets it; off, they run without evictions).
	evictLocks bool

	cands []*candidate
	lk    *lockWorld // lock schedules only (lock_run.go)

	// history
	ev        []event
	fns       map[fnKey]*fnState
	lastStart fnKey
	fenceTerm uint64
	fenceBy   fnKey
	ticks     map[tickKey][]tickFire
	recorded  map[tickKey][]tickFire // each fired record a server took: term and time (completed.go)
	completed map[tickKey]bool       // at-least-once ticks whose run returned nil
	viol      []Violation
	violN     map[string]int // violations by invariant; viol keeps the first of each
	stats     Stats
	spinAt    time.Time
	spinN     int
	scheds    map[string]cron.Schedule

	// calm phase
	pendingFault int
	driverBusy   int
	ignoring     int
	pauseEnd     time.Time
	settleAt     time.Time
	settled      chan struct{}
	firstLead    time.Time
	lastResign   time.Time
}

func newWorld(p Plan, start time.Time) *world {
	w := &world{
		p:         p,
		start:     start,
		faultEnd:  start.Add(p.FaultEnd),
		stop:      make(chan struct{}),
		kick:      make(chan struct{}, 1),
		loopDone:  make(chan struct{}),
		abort:     make(chan struct{}),
		watches:   map[*watch]struct{}{},
		fns:       map[fnKey]*fnState{},
		ticks:     map[tickKey][]tickFire{},
		recorded:  map[tickKey][]tickFire{},
		completed: map[tickKey]bool{},
		violN:     map[string]int{},
		settled:   make(chan struct{}),
		scheds:    map[string]cron.Schedule{},
		ev:        make([]event, 0, 1024),

		settleReq:   make(chan settleReq),
		settlerStop: make(chan struct{}),
		settlerDone: make(chan struct{}),
	}
	go w.settler()
	w.lastApply = start
	w.stats.OutOfModel = map[string]int{}
	w.stats.CalmFailover = -1
	parser := cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	for _, c := range p.Crons {
		if s, err := parser.Parse(c.Spec); err == nil {
			w.scheds[c.Name] = s
		}
	}
	for _, c := range p.Cands {
		for _, pw := range append(append([]Window(nil), c.Pauses...), c.LogStalls...) {
			if e := start.Add(pw.To); e.After(w.pauseEnd) {
				w.pauseEnd = e
			}
		}
	}
	return w
}

// faulty reports whether faults are on at fake time now.
func (w *world) faulty(now time.Time) bool { return now.Before(w.faultEnd) }

// calmFrom is the earliest the calm phase can begin (world.settle): the
// fault phase's end, the last pause's, the replica's last apply, and the
// old master's window after a failover.
func (w *world) calmFrom() time.Time {
	return maxTime(maxTime(w.faultEnd, w.pauseEnd), maxTime(w.lastApply, w.oldMasterEnd()))
}

// event appends to the log; the caller holds w.mu. It also watches for a
// spin: too many events at one fake instant.
func (w *world) event(cand int, kind evKind, o op, n uint64, a, b int64, s string) {
	if w.aborted || w.sealed || w.muted {
		return
	}
	now := time.Now()
	if now.Equal(w.spinAt) {
		w.spinN++
		if w.spinN > spinLimit {
			w.violate(InvSpin, fmt.Sprintf("more than %d calls, fires and log entries at one fake instant: something spins without letting time advance", spinLimit))
			w.aborted = true
			close(w.abort)
			return
		}
	} else {
		w.spinAt, w.spinN = now, 0
	}
	w.ev = append(w.ev, event{at: now.Sub(w.start), cand: int8(cand), kind: kind, op: o, n: n, a: a, b: b, s: s})
}

// eventExec logs an execution, formatted only if the log is printed.
func (w *world) eventExec(cand int, o op, n uint64, res execResult) {
	w.event(cand, evExec, o, n, 0, 0, "")
	if !w.aborted && !w.sealed && !w.muted && len(w.ev) > 0 {
		w.ev[len(w.ev)-1].x = &res
	}
}

func (w *world) violate(inv, msg string, tags ...string) {
	if w.sealed {
		return
	}
	now := time.Now()
	w.violN[inv]++
	if w.violN[inv] == 1 {
		w.viol = append(w.viol, Violation{Invariant: inv, At: now.Sub(w.start), Msg: msg, Tags: tags})
	}
	if !w.aborted {
		w.ev = append(w.ev, event{at: now.Sub(w.start), cand: -1, kind: evViolation, s: inv + ": " + msg})
	}
}

func (w *world) outOfModel(reason string) {
	w.stats.OutOfModel[reason]++
	w.event(-1, evNote, 0, 0, 0, 0, "out of model: "+reason)
}

// budget is the in-model stop budget: the lease outlives a cancellation by
// at least TTL×(1−Drift) − RenewDeadline.
func (w *world) budget() time.Duration {
	c := w.p.Cfg
	d := c.Drift
	if d == 0 {
		d = leader.DefaultDrift
	}
	return time.Duration(float64(c.TTL)*(1-d)) - c.RenewDeadline
}

// oom says why function f is out of the model now, or "".
func (w *world) oom(f *fnState, now time.Time) string {
	if f.affected != "" {
		return f.affected
	}
	// The server lost the lease's data between its creation and the
	// function's start: the elector cannot know (the fence is what holds).
	for _, k := range w.fnKeysOf(f) {
		if at, ok := w.mintedAt[k.term]; ok {
			for i, l := range w.losses {
				if !l.Before(at) {
					f.affected = w.lossWhy[i] + " (before the function started)"
					return f.affected
				}
			}
		}
	}
	if !f.cancelled.IsZero() && now.Sub(f.cancelled) > w.budget() {
		return "leader function ran past its stop budget (paused or ignoring cancellation)"
	}
	for _, k := range w.fnKeysOf(f) {
		if w.oldLease(k.term) {
			f.affected = "failover without min_replicas (a lease the old master granted)"
			return f.affected
		}
	}
	return ""
}

// fnKeysOf returns the key of f (functions are few; a scan is fine).
func (w *world) fnKeysOf(f *fnState) []fnKey {
	for k, g := range w.fns {
		if g == f {
			return []fnKey{k}
		}
	}
	return nil
}

func (w *world) noteOOM(f *fnState, reason string) {
	if f.oomSeen == nil {
		f.oomSeen = map[string]bool{}
	}
	if !f.oomSeen[reason] {
		f.oomSeen[reason] = true
		w.outOfModel(reason)
	}
}

// affectActive marks every running function as out of model: the server
// lost data they depend on.
func (w *world) affectActive(reason string) {
	for _, f := range w.fns {
		if !f.ended && f.affected == "" {
			f.affected = reason
		}
	}
	w.losses = append(w.losses, time.Now())
	w.lossWhy = append(w.lossWhy, reason)
}

// minted is called for every new term.
func (w *world) minted(l leader.Lease) {
	if w.mintedAt == nil {
		w.mintedAt = map[uint64]time.Time{}
	}
	w.mintedAt[l.Term] = time.Now()
	w.maxMinted = max(w.maxMinted, l.Term)
}

// checkLease is invariant 1 for function k at a checkpoint `where`.
func (w *world) checkLease(k fnKey, f *fnState, where string) {
	now := time.Now()
	want := leader.Lease{Term: k.term, ID: w.cands[k.cand].id}.String()
	got := w.leaseNow(now)
	if got == want {
		return
	}
	if r := w.oom(f, now); r != "" {
		w.noteOOM(f, r)
		if f.affected != "" {
			w.checkOwnDeadline(k, f, where, now)
		}
		return
	}
	tags := f.tags
	if len(w.evictions) > 0 && !slices.ContainsFunc(tags, func(t string) bool { return strings.HasPrefix(t, "after-eviction") }) {
		tags = append(slices.Clip(tags), "after-eviction("+w.p.Memory.Policy+")")
	}
	w.violate(InvLease, fmt.Sprintf("c%d's leader function of term %d runs (%s) but the server holds %s", k.cand, k.term, where, quoteVal(got)), tags...)
}

// elected records a function start: invariants 1, 2 and 4.
func (w *world) elected(c int, term uint64) {
	now := time.Now()
	k := fnKey{c, term}
	f := &fnState{loads: map[string]loadSeen{}, cpSent: map[string][]int64{}}
	if old, ok := w.fns[k]; ok {
		if old.seen && !old.ended {
			w.violate(InvOne, fmt.Sprintf("c%d starts term %d again while its function of that term still runs", c, term), "same-term-restart")
		}
		if !old.seen {
			f = old // its jobs started a moment before the elector reported the start
		}
	}
	f.elected, f.seen = now, true
	f.tags = w.cands[c].diagnoseStart(now, w.p.Cfg.RenewDeadline)
	if len(w.evictions) > 0 {
		f.tags = append(f.tags, "after-eviction("+w.p.Memory.Policy+")")
	}
	w.fns[k] = f
	w.stats.Starts++
	w.event(c, evElected, 0, 0, int64(term), 0, "")
	// Out of the model from its start: a lease the old master granted,
	// or one the server lost between its creation and this start (the
	// elector cannot know; the fence is what holds).
	selfWhy := w.oom(f, now)
	selfOOM := selfWhy != ""
	for ok2, o := range w.fns {
		if o.ended || ok2 == k {
			continue
		}
		if selfOOM {
			w.noteOOM(f, selfWhy)
			continue
		}
		if ok2.cand == c {
			w.violate(InvOne, fmt.Sprintf("two leader functions of one Elector (c%d) at once: term %d still runs as term %d starts", c, ok2.term, term),
				append([]string{"second-run-after-stop-timeout"}, f.tags...)...)
			continue
		}
		if r := w.oom(o, now); r != "" {
			w.noteOOM(o, r)
			if o.affected != "" {
				w.checkOwnDeadline(ok2, o, fmt.Sprintf("as c%d starts term %d", c, term), now)
			}
			continue
		}
		tags := append([]string(nil), f.tags...)
		if w.cands[ok2.cand].id == w.cands[c].id {
			tags = append(tags, "id-collision")
		}
		w.violate(InvOne, fmt.Sprintf("c%d starts term %d while c%d's function of term %d runs (cancelled: %v)", c, term, ok2.cand, ok2.term, !o.cancelled.IsZero()), tags...)
	}
	if w.stats.Starts > 1 && term <= w.lastStart.term && !selfOOM && !w.oldLease(w.lastStart.term) {
		tags := append([]string(nil), f.tags...)
		if term == w.lastStart.term && w.cands[w.lastStart.cand].id == w.cands[c].id {
			tags = append(tags, "id-collision")
		}
		w.violate(InvTerms, fmt.Sprintf("c%d starts term %d after c%d started term %d", c, term, w.lastStart.cand, w.lastStart.term), tags...)
	}
	if term > w.lastStart.term || w.stats.Starts == 1 {
		w.lastStart = k
	}
	w.checkLease(k, f, "at its start")
	if !w.settleAt.IsZero() && w.firstLead.IsZero() && w.leaseNow(now) == (leader.Lease{Term: term, ID: w.cands[c].id}).String() {
		w.firstLead = now
	}
}

// fn returns the function state of (c, term), creating a stand-in when the
// start was not seen (it always is; this keeps the checker total).
func (w *world) fn(c int, term uint64) *fnState {
	k := fnKey{c, term}
	f := w.fns[k]
	if f == nil {
		f = &fnState{elected: time.Now(), loads: map[string]loadSeen{}, cpSent: map[string][]int64{}}
		w.fns[k] = f
	}
	return f
}

// cancelled records a function's context cancellation: invariant 3.
func (w *world) cancelled(c int, term uint64, cause error) {
	now := time.Now()
	f := w.fn(c, term)
	if !f.cancelled.IsZero() {
		return
	}
	f.cancelled, f.cause = now, cause
	f.lateAtCancel = w.pastOwnDeadline(fmt.Sprintf("%d %s", term, w.cands[c].id), w.p.Cfg.RenewDeadline, now)
	w.event(c, evCancelled, 0, 0, int64(term), 0, fmt.Sprint(cause))
	if f.started && f.jobs == 0 && !f.ended {
		f.ended = true
		w.fnEnded(c, term, f)
		w.cands[c].lastFnEnd = now
		w.checkRunOnce(fnKey{c, term}, f)
	}
	if errors.Is(cause, leader.ErrRenewDeadline) && now.Equal(f.elected) {
		w.violate(InvDeadline, fmt.Sprintf("c%d's function of term %d was cancelled for %v at the instant it started", c, term, cause), f.tags...)
	}
}

// fnEnded logs the end of (c, term)'s function, once.
func (w *world) fnEnded(c int, term uint64, f *fnState) {
	if !f.endLogged {
		f.endLogged = true
		w.event(c, evFnEnd, 0, 0, int64(term), 0, "")
	}
}

func (w *world) jobStart(c int, term uint64, where string) {
	f := w.fn(c, term)
	f.jobs++
	f.started = true
	f.ended = false
	w.checkLease(fnKey{c, term}, f, where)
}

func (w *world) jobEnd(c int, term uint64, where string) {
	f := w.fn(c, term)
	if where != "" {
		w.checkLease(fnKey{c, term}, f, where)
	}
	f.jobs--
	if f.jobs == 0 && !f.cancelled.IsZero() {
		f.ended = true
		w.fnEnded(c, term, f)
		w.cands[c].lastFnEnd = time.Now()
		w.checkRunOnce(fnKey{c, term}, f)
	}
}

// claim and write are the fenced store: a claim raises the stored term
// (a lower one is refused), a write is accepted only at the stored term.
func (w *world) claim(c int, term uint64) bool {
	if term < w.fenceTerm {
		w.stats.StaleRefused++
		w.event(c, evWrite, 0, 0, int64(term), 0, " (claim refused: stale)")
		return false
	}
	w.fenceTerm, w.fenceBy = term, fnKey{c, term}
	return true
}

func (w *world) write(c int, term uint64) {
	w.stats.Writes++
	f := w.fn(c, term)
	ok := term == w.fenceTerm
	w.event(c, evWrite, 0, 0, int64(term), b2i(ok), "")
	switch {
	case ok && w.fenceBy != (fnKey{c, term}):
		w.stats.StaleAccepted++
		w.violate(InvFence, fmt.Sprintf("c%d's write with term %d accepted although c%d claimed term %d after it", c, term, w.fenceBy.cand, w.fenceTerm), f.tags...)
	case !ok && term < w.fenceTerm:
		w.stats.StaleRefused++
	}
	w.checkLease(fnKey{c, term}, f, "at a job write")
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// fired records a cron tick: invariant 5, at most once.
func (w *world) fired(c int, term uint64, job string, tick time.Time) {
	now := time.Now()
	k := tickKey{job, tick.UnixMilli()}
	w.event(c, evTick, 0, 0, int64(term), k.ms, job)
	prev := w.ticks[k]
	w.ticks[k] = append(prev, tickFire{c, term, now})
	f := w.fn(c, term)
	w.checkLease(fnKey{c, term}, f, "at a cron run")
	if len(prev) == 0 {
		return
	}
	p := prev[len(prev)-1]
	if w.atLeastOnce(job) {
		// Running a tick again is the point of at-least-once, as long as
		// its completion was never recorded.
		if done, ok := w.checkpointNow(now, "cron-done:"+job); !ok || done < k.ms {
			return
		}
	}
	// The two runs stand on records of the tick: a loss after the earlier
	// one explains both.
	rec := w.recordedAt(k, p)
	if r := w.recordedAt(k, tickFire{c, term, now}); r.Before(rec) {
		rec = r
	}
	for _, l := range w.losses {
		// (A loss is recorded as it happens, so before now; but for the
		// end of the old master's window after a failover, which is later.)
		if l.After(rec) {
			w.outOfModel("cron tick fired again after data loss or a failover without min_replicas")
			return
		}
	}
	tags := append([]string(nil), f.tags...)
	for _, fo := range w.failovers {
		if fo.After(p.at) && !fo.After(now) {
			tags = append(tags, "failover-lost-checkpoint")
			break
		}
	}
	what := "fired twice"
	if w.atLeastOnce(job) {
		what = "fired again after its completion was recorded"
	}
	w.violate(InvTicks, fmt.Sprintf("cron %s tick %s %s: by c%d term %d at %s and by c%d term %d", job,
		tick.UTC().Format("15:04:05.000"), what, p.cand, p.term, fmtDur(p.at.Sub(w.start)), c, term), tags...)
}

// atLeastOnce reports whether cron job name is at-least-once.
func (w *world) atLeastOnce(name string) bool {
	for _, cp := range w.p.Crons {
		if cp.Name == name {
			return cp.Delivery == worker.AtLeastOnce
		}
	}
	return false
}

// checkRunOnce is invariant 5's second half, when a function ended: a
// run-once job whose last recorded tick (as this term loaded it) lies
// before missed ticks must have offered the latest missed tick.
func (w *world) checkRunOnce(k fnKey, f *fnState) {
	for _, cp := range w.p.Crons {
		if cp.Delivery == worker.AtLeastOnce {
			// At-least-once reads its fired and completed ticks before every
			// run: under store faults a term may run nothing, and the next
			// term owes the same ticks. Its liveness is checked on terms
			// that begin once the faults stopped; its safety (never a
			// completed tick again) on every fire.
			if w.settleAt.IsZero() || f.elected.Before(w.settleAt) {
				continue
			}
			w.checkOwed(k, f, cp)
			if fired, done := f.loads["cron:"+cp.Name], f.loads["cron-done:"+cp.Name]; fired.ok && (!done.ok || done.n < fired.n) {
				// An owed tick runs first, retried until it completes, and
				// the job's later ticks wait behind it: the latest missed
				// one is the next term's to offer if this one ran out.
				continue
			}
		}
		if cp.Misfire != "run-once" {
			continue
		}
		key := "cron:" + cp.Name
		ld, ok := f.loads[key]
		s := w.scheds[cp.Name]
		if !ok || !ld.ok || s == nil {
			continue
		}
		if !f.cancelled.IsZero() && !f.cancelled.After(ld.at) {
			continue // the term ended before it could fire
		}
		now := f.elected.UTC()
		first := s.Next(time.UnixMilli(ld.n).UTC())
		if first.IsZero() || first.After(now) {
			continue
		}
		latest := first
		for i := 0; i < 100_000; i++ {
			n := s.Next(latest)
			if n.IsZero() || n.After(now) {
				break
			}
			latest = n
		}
		want := latest.UnixMilli()
		found := false
		for _, v := range f.cpSent[key] {
			// The latest missed tick, or a later one: a tick that fell due
			// while the catch-up was loading covers the gap as well.
			if v >= want {
				found = true
			}
		}
		if !found {
			w.violate(InvTicks, fmt.Sprintf("c%d term %d loaded last tick %s for run-once %s but never offered the latest missed tick %s",
				k.cand, k.term, time.UnixMilli(ld.n).UTC().Format("15:04:05.000"), cp.Name, latest.Format("15:04:05.000")), f.tags...)
		}
	}
}

// checkOwed is invariant 5 for an at-least-once job, when a function
// ended: a term that loaded a fired tick F above the last completed one
// (or none) owed F, and must have run it, unless it ended before it could.
func (w *world) checkOwed(k fnKey, f *fnState, cp CronPlan) {
	fired, ok := f.loads["cron:"+cp.Name]
	if !ok || !fired.ok {
		return
	}
	done, ok := f.loads["cron-done:"+cp.Name]
	if !ok || (done.ok && done.n >= fired.n) {
		return
	}
	if !f.cancelled.IsZero() && !f.cancelled.After(maxTime(fired.at, done.at)) {
		return // the term ended before it could run it
	}
	for _, fr := range w.ticks[tickKey{cp.Name, fired.n}] {
		if fr.cand == k.cand && fr.term == k.term {
			return
		}
	}
	if r := w.oom(f, time.Now()); r != "" {
		return
	}
	w.violate(InvTicks, fmt.Sprintf("c%d term %d owed at-least-once %s its unfinished tick %s and never ran it",
		k.cand, k.term, cp.Name, time.UnixMilli(fired.n).UTC().Format("15:04:05.000")), f.tags...)
}

// settle records the calm phase's start once every effect of the fault
// phase has played out: its requests executed or lost and answered, its
// stops, resigns and pauses over, no job overrunning its cancellation, the
// replica caught up, and no candidate still talking to the old master
// after a failover (Plan.Promote: it replicates nothing, so under
// MinReplicas every acquire there fails, however long after Plan.FaultEnd
// the window lasts).
func (w *world) settle() {
	now := time.Now()
	if !w.settleAt.IsZero() || now.Before(w.calmFrom()) ||
		w.pendingFault > 0 || w.driverBusy > 0 || w.ignoring > 0 {
		return
	}
	w.settleAt = now
	close(w.settled)
	w.event(-1, evNote, 0, 0, 0, 0, "calm: faults stopped and settled")
	cur := w.leaseNow(now)
	for k, f := range w.fns {
		if !f.ended && f.cancelled.IsZero() && cur == (leader.Lease{Term: k.term, ID: w.cands[k.cand].id}).String() {
			w.firstLead = now
		}
	}
}

// calmBound is invariant 6's bound, from the calm phase's start S.
//
// At S no request of the fault phase is pending (each has executed or is
// lost, and its caller has its answer), no candidate is stopping, paused,
// draining an overrunning job or talking to the old master of a failover
// (where, under MinReplicas, every acquire fails), and calls take at most 2×1ms + the WAIT for
// a replica that lags at most ReplicaTimeout/2. From S, in the elector's
// code (campaign.run, followWait, lead):
//   - a lease nobody renews (its holder lost it, stepped down without
//     releasing, or never learnt it won) expires at most TTL of server time
//     after its last write, which came before S: by S + TTL/rate in fake
//     time (rate = the server clock's rate);
//   - a live holder that did not start its function (a lost acquire reply)
//     retries after jitter(RetryInterval) ≤ 1.2×RetryInterval and adopts;
//   - a follower sleeps until the lease's reported PTTL runs out plus
//     1ms + up to min(TTL/100, 20ms), or RetryInterval when the PTTL was 0
//     or it has no live watch, or 1.2×RetryInterval after a failed acquire;
//     a resigned candidate sits out ResignCooldown, not woken by notices.
//
// So some candidate acquires by S + TTL/rate + max(1.2×RetryInterval, 22ms)
// (+ ResignCooldown after a resign just before), and starts its function
// one round trip (and WAIT) later.
func (w *world) calmBound() time.Duration {
	c := w.p.Cfg
	rate := w.p.Rate
	b := time.Duration(float64(c.TTL)/min(rate, 1)) + max(c.RetryInterval*6/5, 22*time.Millisecond)
	b += 4*time.Millisecond + c.ReplicaTimeout/2 + 5*time.Millisecond
	if !w.lastResign.IsZero() && w.settleAt.Sub(w.lastResign) < c.ResignCooldown+c.ShutdownTimeout+c.TTL {
		b += c.ResignCooldown
	}
	return b
}

// finish runs the checks that need the whole schedule.
func (w *world) finish(end time.Time) {
	w.stats.FakeTime = end.Sub(w.start)
	if w.aborted {
		return
	}
	keys := make([]fnKey, 0, len(w.fns))
	for k := range w.fns {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].term < keys[j].term })
	for _, k := range keys {
		if f := w.fns[k]; !f.ended {
			w.checkRunOnce(k, f)
		}
	}
	w.checkCompleted(end)
	if w.settleAt.IsZero() {
		w.event(-1, evNote, 0, 0, 0, 0, "the fault phase never settled: invariant 6 not checked")
		return
	}
	if w.p.Memory.Unsafe() {
		// A candidate that sees a policy able to evict its keys refuses to
		// campaign: no leader is then the right outcome, two the wrong one
		// (invariants 1, 2).
		w.event(-1, evNote, 0, 0, 0, 0, "maxmemory-policy "+w.p.Memory.Policy+" may evict the lease: no leader (refused) is allowed; invariant 6 not checked")
		return
	}
	live := 0
	for _, c := range w.cands {
		if !c.stuck {
			live++
		}
	}
	bound := w.calmBound()
	w.stats.CalmBound = bound
	if !w.firstLead.IsZero() {
		w.stats.CalmFailover = w.firstLead.Sub(w.settleAt)
	}
	switch {
	case live == 0:
		w.outOfModel("every candidate hangs in a call that never returns")
	case w.firstLead.IsZero() && end.Sub(w.settleAt) >= bound,
		!w.firstLead.IsZero() && w.firstLead.Sub(w.settleAt) > bound:
		var tags []string
		for i, c := range w.cands {
			if c.stuck {
				tags = append(tags, fmt.Sprintf("c%d-stuck-in-a-call", i))
			}
		}
		got := "none"
		if !w.firstLead.IsZero() {
			got = w.firstLead.Sub(w.settleAt).String()
		}
		w.violate(InvFailover, fmt.Sprintf("no leader running its function within %s after the calm phase began at %s (first: %s)",
			bound, fmtDur(w.settleAt.Sub(w.start)), got), tags...)
	}
}

// quiesce is the settle function the simulator gives the code it runs
// (its Settle hook, internal/hooks: decide) and uses itself (a call's
// send and its reply's wait: progress; a planned action: act): it returns
// once every other goroutine of the bubble is durably blocked, so what the
// caller does next does not depend on the order the scheduler ran the
// goroutines woken at this instant in. It takes no fake time, so a
// quiesce on one path and none on another cannot shift later times. The
// settler goroutine is the one caller of synctest.Wait (which two
// goroutines must not call at once). Callers at one instant are released
// one at a time, each running until it blocks before the next goes: every
// progress step first (a reply taken, a call sent), then the plan's
// actions (a Resign), then the decisions of the code under test (an
// elector's term loop, a cron loop's skip check, a batch's make-up), so a
// decision sees the instant's progress and actions whatever order the
// goroutines came in.
func (w *world) quiesce(prio int) { w.quiesceKey(prio, "") }

// quiesceKey is quiesce for a waiter named by key: waiters of one
// priority at one instant go in key order (those with equal keys in the
// order they came, which must not matter: the key names whatever does).
func (w *world) quiesceKey(prio int, key string) {
	r := make(chan struct{})
	select {
	case w.settleReq <- settleReq{r, prio, key}:
		<-r
	case <-w.settlerDone:
	}
}

// Quiesce priorities: released in this order at one instant.
const (
	prioProgress = iota
	prioAct
	prioDecide
	numPrio
)

// decide is quiesce for a decision of the code under test that names no
// decider (the lock's settle).
func (w *world) decide() { w.quiesce(prioDecide) }

// decider returns the settle function for process idx's code under test
// (the Settle hook of internal/hooks): each decider's key is the process and the name the
// code gives it, so the deciders of an instant go in one order.
func (w *world) decider(idx int) func(key string) {
	return func(key string) { w.quiesceKey(prioDecide, fmt.Sprintf("%03d %s", idx, key)) }
}

// settleReq is one quiesce waiting for its turn.
type settleReq struct {
	r    chan struct{}
	prio int
	key  string
}

// settler serves quiesce until stopSettler.
func (w *world) settler() {
	defer close(w.settlerDone)
	var queues [numPrio][]settleReq
	waiting := 0
	for {
		select {
		case <-w.settlerStop:
			return
		case q := <-w.settleReq:
			queues[q.prio] = append(queues[q.prio], q)
			waiting++
		}
		for waiting > 0 {
			synctest.Wait()
			for more := true; more; {
				select {
				case q := <-w.settleReq:
					queues[q.prio] = append(queues[q.prio], q)
					waiting++
				default:
					more = false
				}
			}
			k := 0
			for len(queues[k]) == 0 {
				k++
			}
			// The least key goes first; the first of equal keys.
			i := 0
			for j, q := range queues[k] {
				if q.key < queues[k][i].key {
					i = j
				}
			}
			close(queues[k][i].r)
			queues[k] = append(queues[k][:i], queues[k][i+1:]...)
			waiting--
		}
	}
}

// stopSettler ends the settler; later quiesces return at once.
func (w *world) stopSettler() {
	close(w.settlerStop)
	<-w.settlerDone
}
