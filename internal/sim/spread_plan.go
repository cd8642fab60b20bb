package sim

import (
	"fmt"
	"strings"
	"time"

	"github.com/solo-run/solo/worker"
)

// Spread schedules' own streams (above the lock's).
const (
	opSPlan op = 96 + iota // a spread schedule's plan
	opSJob                 // a spread job's step lengths
	opSRand                // the seed of a spread process's math/rand source
)

// SpreadPlan is a spread schedule: the election plan's timing, server
// clock and network faults (no data loss or failover: those are the
// election schedules'), with processes that are spread members (a real
// worker.Spread each) or, for a mode switch, elect-mode instances (a
// real worker.Worker on a leader.Elector of the group's name).
type SpreadPlan struct {
	Plan
	SC    worker.SpreadConfig // as configured (zero fields: defaults)
	Jobs  []string
	Drain map[string]time.Duration // slow drainers: how long they run on once cancelled
	Procs []SpreadProc             // Plan.Cands[i] is Procs[i]'s network and pauses

	// The scenario's weighting, drawn up front: a member holding every job
	// when the others join (so it sheds), mostly with slow drainers; a
	// rolling switch from mode elect to spread on the group's name; a
	// member that registers none of the jobs.
	Shed, Switch, Mixed bool
	// Back switches the other way, from spread to elect: elect-mode
	// instances of the group's name arrive while every member stops and
	// its jobs drain (for between nothing and past shutdown_timeout),
	// some members failing the leave that extends their exclusion entry.
	Back bool
	// Cron adds a cron job firing every second, registered by every
	// process that registers jobs (mode switch schedules only): in both
	// modes at once a tick fires twice.
	Cron bool
	// CalmFrom is when the calm phase begins: every planned event and its
	// effects are over. CalmBound is the longest a job may run nowhere in
	// it while a member that registered it is up.
	CalmFrom, CalmBound, End time.Duration
}

// spreadCron is the name of the cron job of SpreadPlan.Cron.
const spreadCron = "cron"

// SpreadProc is one process of a spread schedule.
type SpreadProc struct {
	Elect bool     // an elect-mode instance (mode switch)
	Jobs  []string // the jobs it registers
	Start time.Duration
	// Stop cancels Run's context (the member leaves); Restart, when
	// non-zero, runs it again.
	Stop, Restart time.Duration
	Die           time.Duration // frozen for good: nothing of it runs from then on (0: never)
	failLeave     bool          // its first leave extending the exclusion entry fails (CandPlan.FailLeave)
}

// drawBack makes p a switch from spread back to elect (SpreadPlan.Back),
// drawing from r: a longer shutdown timeout, drains from nothing to past
// it, every member stopping for good one after another, and one or two
// elect-mode instances of the name arriving as the first stops.
func (p *SpreadPlan) drawBack(r *rng, first int) {
	ttl := p.Cfg.TTL
	p.Back = true
	p.Cfg.ShutdownTimeout = r.dur(2*ttl, 5*ttl)
	sd := p.Cfg.ShutdownTimeout
	for _, j := range p.Jobs {
		p.Drain[j] = r.dur(0, sd*3/2)
	}
	at := time.Duration(0)
	for _, sp := range p.Procs {
		at = max(at, sp.Start)
	}
	at += r.dur(2*ttl, 4*ttl)
	// Each member's leave fails, or none: one that succeeds extends the
	// exclusion past every drain of the others (they stop within a TTL).
	fail := r.chance(0.6)
	for i := first; i < len(p.Procs); i++ {
		sp := &p.Procs[i]
		sp.Stop, sp.Restart, sp.Die = at+r.dur(0, ttl), 0, 0
		sp.failLeave = fail
	}
	for range r.between(1, 2) {
		p.Procs = append(p.Procs, SpreadProc{Elect: true, Jobs: p.Jobs, Start: at - r.dur(0, ttl)})
	}
}

// sc returns the spread config with the defaults applied.
func (p SpreadPlan) sc() worker.SpreadConfig {
	c := p.SC
	if c.Heartbeat == 0 {
		c.Heartbeat = p.Cfg.TTL / 3
	}
	if c.MemberTTL == 0 {
		c.MemberTTL = p.Cfg.TTL
	}
	if c.MinHold == 0 {
		c.MinHold = p.Cfg.TTL
	}
	return c
}

// NewSpreadPlan draws the spread plan of seed.
func NewSpreadPlan(seed uint64, o Options) SpreadPlan {
	base := NewPlan(seed, o)
	p := SpreadPlan{Plan: base, Drain: map[string]time.Duration{}}
	p.Cfg.MinReplicas, p.Cfg.ReplicaTimeout = 0, 0
	p.DataLoss, p.Failovers, p.ReplicaDown, p.Crons, p.Cands = nil, nil, nil, nil, nil
	p.Promote = 0 // no failover (the plan's Memory and Evictions stay)
	r := keyed(seed, uint64(opSPlan))
	cfg := p.Cfg
	ttl := cfg.TTL
	if r.chance(0.5) {
		hb := r.dur(ttl/6, ttl/2)
		p.SC = worker.SpreadConfig{Heartbeat: hb, MemberTTL: r.dur(2*hb, max(2*hb, 3*ttl/2)), MinHold: r.dur(ttl/4, 2*ttl)}
	}
	sc := p.sc()
	p.Shed, p.Switch, p.Mixed = r.chance(0.55), r.chance(0.35), r.chance(0.45)

	members := r.between(2, 4)
	nJobs := r.between(2, 5)
	if p.Mixed && r.chance(0.7) {
		// As many jobs as members, one of which registers none: the share
		// must count only the members able to run a job.
		members = max(members, 3)
		nJobs = members
	}
	for i := range nJobs {
		p.Jobs = append(p.Jobs, fmt.Sprintf("j%d", i))
	}
	// A drain longer than any timeout: the shutdown timeout plus a TTL
	// (what a resign waits), twice, and more.
	slowP := 0.15
	if p.Shed {
		slowP = 0.8
	}
	for _, j := range p.Jobs {
		if r.chance(slowP) {
			p.Drain[j] = 2*cfg.ShutdownTimeout + 4*ttl + r.dur(0, 4*ttl)
		}
	}

	at0 := time.Duration(0)
	if p.Switch {
		// Elect-mode instances of the group's name run every job; the
		// spread members start at the switch and the old instances stop
		// one by one after (a rolling deploy).
		at0 = r.dur(2*ttl, 4*ttl)
		for i := range r.between(1, 2) {
			p.Procs = append(p.Procs, SpreadProc{Elect: true, Jobs: p.Jobs, Stop: at0 + r.dur(2*ttl, 4*ttl) + time.Duration(i)*r.dur(0, 2*ttl)})
		}
	}
	if p.Shed {
		// Milder network faults: a member that loses its leases to them
		// has nothing left to shed.
		p.Intensity /= 2
	}
	empty := -1
	if p.Mixed {
		empty = members - 1
	}
	for i := range members {
		sp := SpreadProc{Jobs: p.Jobs, Start: at0 + r.dur(0, sc.Heartbeat)}
		switch {
		case i == empty:
			sp.Jobs = nil
		case p.Mixed && i > 0 && r.chance(0.3):
			var sub []string
			for _, j := range p.Jobs {
				if r.chance(0.5) {
					sub = append(sub, j)
				}
			}
			sp.Jobs = sub
		}
		if p.Shed && i > 0 {
			// The first member holds every job for MinHold and more when
			// the others join.
			sp.Start = at0 + sc.MinHold + sc.Heartbeat + r.dur(0, 3*ttl) + time.Duration(i-1)*r.dur(0, ttl)
		}
		p.Procs = append(p.Procs, sp)
	}

	// Faults: leaves (and rejoins), a death, freezes.
	last := time.Duration(0)
	for _, sp := range p.Procs {
		last = max(last, sp.Start, sp.Stop)
	}
	faultEnd := max(p.FaultEnd, last+2*ttl)
	first := 0
	if p.Switch {
		first = len(p.Procs) - members
	}
	for i := first; i < len(p.Procs); i++ {
		sp := &p.Procs[i]
		if i-first == empty || (p.Shed && i == first) || r.chance(0.75) {
			continue
		}
		sp.Stop = sp.Start + r.dur(ttl/2, max(faultEnd-sp.Start, ttl))
		if r.chance(0.7) {
			sp.Restart = sp.Stop + r.logDur(ttl/4, 4*ttl)
		}
	}
	if r.chance(0.2) {
		i := first + r.intn(members)
		if i-first != empty && !(p.Shed && i == first) {
			sp := &p.Procs[i]
			sp.Die = sp.Start + r.dur(0, max(faultEnd-sp.Start, ttl))
		}
	}
	if rb := keyed(seed, uint64(opSPlan), 3); !p.Switch && rb.chance(0.4) {
		p.drawBack(&rb, first)
	}
	for _, sp := range p.Procs {
		last = max(last, sp.Start, sp.Stop, sp.Restart, sp.Die)
	}
	p.FaultEnd = max(faultEnd, last+ttl)
	for i, sp := range p.Procs {
		c := CandPlan{ID: fmt.Sprintf("p%d", i), CtxTimeouts: r.chance(0.55)}
		switch x := r.float(); {
		case x < 0.5:
			c.ReadTimeout = 3 * time.Second
		default:
			// Never -1 (no timeout): a pipeline of the Hub that never
			// returns holds up every renewal of the process for good
			// (leader.Hub says so); the election schedules cover such
			// clients.
			c.ReadTimeout = r.logDur(50*time.Millisecond, 5*time.Second)
		}
		// The member that sheds is not frozen: a frozen one loses its
		// leases before it could shed them.
		if r.chance(0.2) && !(p.Shed && i == first) {
			a := r.dur(0, p.FaultEnd)
			budget := ttl - cfg.RenewDeadline
			l := r.dur(budget/10, budget*8/10)
			if r.chance(0.4) {
				l = r.dur(budget*12/10, 3*budget+ttl)
			}
			c.Pauses = append(c.Pauses, Window{a, a + l})
			last = max(last, a+l)
		}
		if sp.Die > 0 {
			c.Pauses = append(c.Pauses, Window{sp.Die, 1000 * time.Hour})
		}
		c.FailLeave = sp.failLeave
		p.Cands = append(p.Cands, c)
	}
	// Drawn from streams of their own, so the draws above stay as they
	// were: connection resets that make go-redis run a request twice, and
	// a shed whose release fails.
	rs := keyed(seed, uint64(opShape), 2)
	for i := range p.Cands {
		if rs.chance(0.3) {
			p.Cands[i].Resets = 0.01 + 0.05*rs.float()
		}
		p.Cands[i].FailRelease = p.Shed && rs.chance(0.4)
	}
	if rc := keyed(seed, uint64(opSPlan), 2); (p.Switch || p.Back) && !p.Mixed && rc.chance(0.7) {
		p.Cron = true
		p.Jobs = append(p.Jobs[:len(p.Jobs):len(p.Jobs)], spreadCron)
		for i := range p.Procs {
			if js := p.Procs[i].Jobs; len(js) > 0 {
				p.Procs[i].Jobs = append(js[:len(js):len(js)], spreadCron)
			}
		}
	}
	var drain time.Duration
	for _, d := range p.Drain {
		drain = max(drain, d)
	}
	for _, s := range p.Stalls {
		last = max(last, s.To)
	}
	// Every request of the fault phase has executed and been answered
	// (delays reach 5/2 TTL each way), every drain ended.
	p.CalmFrom = max(p.FaultEnd, last) + 6*ttl + drain + p.Cfg.ShutdownTimeout
	rate := min(p.Rate, 1)
	p.CalmBound = sc.MemberTTL + 4*sc.Heartbeat + time.Duration(float64(2*ttl)/rate) + 3*cfg.RetryInterval + cfg.ResignCooldown + 100*time.Millisecond
	p.End = p.CalmFrom + p.CalmBound + 2*ttl
	return p
}

// String describes the spread plan.
func (p SpreadPlan) String() string {
	var b strings.Builder
	c := p.Cfg
	sc := p.sc()
	fmt.Fprintf(&b, "spread seed %d: ttl %s renew_interval %s renew_deadline %s retry %s resign_cooldown %s shutdown %s drift %g\n",
		p.Seed, c.TTL, c.RenewInterval, c.RenewDeadline, c.RetryInterval, c.ResignCooldown, c.ShutdownTimeout, c.Drift)
	fmt.Fprintf(&b, "  heartbeat %s member_ttl %s min_hold %s; jobs %v drain %v; shed %v switch %v back %v mixed %v cron %v\n",
		sc.Heartbeat, sc.MemberTTL, sc.MinHold, p.Jobs, p.Drain, p.Shed, p.Switch, p.Back, p.Mixed, p.Cron)
	fmt.Fprintf(&b, "  faults until %s (intensity %.2f), server clock rate %.5f offset %s, stalls %v; calm from %s (bound %s) to %s\n",
		p.FaultEnd, p.Intensity, p.Rate, p.Offset, p.Stalls, p.CalmFrom, p.CalmBound, p.End)
	if p.Memory.Policy != "" {
		fmt.Fprintf(&b, "  maxmemory %d policy %s, evictions %v\n", p.Memory.Max, p.Memory.Policy, p.Evictions)
	}
	for i, sp := range p.Procs {
		cp := p.Cands[i]
		mode := "spread"
		if sp.Elect {
			mode = "elect"
		}
		fmt.Fprintf(&b, "  p%d: %s jobs %v start %s stop %s restart %s die %s; ctx_timeouts %v read_timeout %s pauses %v fail_leave %v fail_release %v resets %.3f\n",
			i, mode, sp.Jobs, sp.Start, sp.Stop, sp.Restart, sp.Die, cp.CtxTimeouts, cp.ReadTimeout, cp.Pauses, cp.FailLeave, cp.FailRelease, cp.Resets)
	}
	return b.String()
}
