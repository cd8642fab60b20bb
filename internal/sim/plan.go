package sim

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
)

// Plan is everything a schedule does that is decided up front, drawn from
// its seed alone. Per-call faults are not in it: they are drawn when the
// call is made, keyed by (seed, candidate, op, call counter).
type Plan struct {
	Seed uint64
	// Cfg is the election's configuration, shared by all candidates (one
	// program, many instances); only the ID differs.
	Cfg   leader.Config
	Cands []CandPlan
	Crons []CronPlan

	// FaultEnd is when faults stop (from the schedule's start); the calm
	// phase follows.
	FaultEnd time.Duration
	// Intensity scales the per-call fault probabilities, in (0, 1].
	Intensity float64

	// The server clock: server time = start + elapsed×Rate + Offset.
	Rate   float64
	Offset time.Duration

	Stalls      []Window        // requests arriving inside execute at its end
	DataLoss    []time.Duration // restart without persistence
	Failovers   []time.Duration // promote the (lagging) replica
	ReplicaDown []Window        // the replica applies nothing inside
	LongLagP    float64         // probability that one write replicates slowly

	WriteMin, WriteMax time.Duration // a pull job's write interval

	// Memory is the server's maxmemory setting, as `INFO memory` reports
	// it; Evictions are when the server, under memory pressure, evicts
	// keys its policy allows (a key with a TTL for volatile-*, any key
	// for allkeys-*): only with a limit and an evicting policy.
	Memory    Memory
	Evictions []time.Duration
	// Promote is how long clients go on talking to the old master after
	// a failover (they learn of the promotion one by one, each within
	// it): the old master takes their writes and replicates them nowhere.
	Promote time.Duration

	mutate map[string]string // Options.Mutate
}

// CandPlan is one candidate's part of a Plan.
type CandPlan struct {
	ID string
	// CtxTimeouts mirrors go-redis ContextTimeoutEnabled: with it a call
	// returns ctx.Err() when ctx ends; without it, only the reply or the
	// read timeout ends a call.
	CtxTimeouts bool
	// ReadTimeout as in go-redis: negative means none (a lost reply hangs
	// the call for ever).
	ReadTimeout time.Duration
	Pauses      []Window        // the process is frozen (SIGSTOP)
	LogStalls   []Window        // every log write blocks until the window ends (a full stderr pipe)
	Stops       []time.Duration // Run's context is cancelled; Run is called again once it returned
	Resigns     []time.Duration // Elector.Resign
	// FailRead, when non-zero, fails the first read of each checkpoint
	// key in the first term this candidate starts at or after it: a
	// single failed read at a term's start.
	FailRead time.Duration
	// FailLeave fails a spread member's first leave that extends its
	// exclusion entry over the drain (spread schedules).
	FailLeave bool
	// FailRelease fails the process's first release (a spread member's
	// shed or stop hands its lease back): the lease is left to expire.
	FailRelease bool
	// Resets is the probability that a call's connection resets after
	// the server executed it: go-redis sends it again (its MaxRetries),
	// so the server runs it twice.
	Resets float64
}

// Memory is a server's maxmemory configuration.
type Memory struct {
	Max    int64  // maxmemory in bytes; 0: no limit
	Policy string // maxmemory-policy
}

// Evicts reports whether the server may drop keys under memory pressure:
// a limit, and a policy other than noeviction.
func (m Memory) Evicts() bool { return m.Max > 0 && m.Policy != "" && m.Policy != "noeviction" }

// Unsafe reports whether the policy lets the server drop keys at all,
// should a limit be set: solo's keys are then not guaranteed, and a
// candidate may refuse to campaign.
func (m Memory) Unsafe() bool { return m.Policy != "" && m.Policy != "noeviction" }

// Streams of the shapes added to a plan, each its own so the draws before
// them stay as they were.
const (
	opShape op = 112 + iota // a plan's memory, boundary failures and promotion window
	opReset                 // whether a call's connection resets after it executed
	opEvict                 // which keys one eviction drops
)

// policies are the maxmemory-policy values a schedule draws from.
var policies = []string{"noeviction", "volatile-lru", "volatile-ttl", "volatile-random", "allkeys-lru", "allkeys-random"}

// drawShapes adds the shapes drawn from a stream of their own: the
// server's memory policy and evictions, a candidate's failed read at a
// term's start, connection resets that make go-redis send a request
// twice, and how long clients talk to the old master after a failover.
func (p *Plan) drawShapes() {
	r := keyed(p.Seed, uint64(opShape))
	ttl, faultLen := p.Cfg.TTL, p.FaultEnd
	if r.chance(0.15) {
		p.Memory = Memory{Max: 100 << 20, Policy: policies[1+r.intn(len(policies)-1)]}
		switch x := r.float(); {
		case x < 0.15:
			p.Memory.Policy = "noeviction"
		case x < 0.25:
			p.Memory.Max = 0 // a policy without a limit: nothing is evicted
		}
		if p.Memory.Evicts() {
			for range 1 + r.intn(3) {
				p.Evictions = append(p.Evictions, r.dur(0, faultLen))
			}
			sort.Slice(p.Evictions, func(i, j int) bool { return p.Evictions[i] < p.Evictions[j] })
		}
	}
	if len(p.Failovers) > 0 && r.chance(0.5) {
		p.Promote = r.logDur(ttl/20, 2*ttl)
	}
	for i := range p.Cands {
		if r.chance(0.25) {
			p.Cands[i].FailRead = r.dur(time.Millisecond, faultLen)
		}
		if r.chance(0.3) {
			p.Cands[i].Resets = 0.01 + 0.05*r.float()
		}
	}
}

// CronPlan is one cron job, registered on every candidate.
type CronPlan struct {
	Name    string
	Spec    string
	Misfire worker.Misfire
	// Delivery is the job's guarantee; at-least-once runs fail now and
	// then, so that owed ticks are run again.
	Delivery worker.Delivery
}

// Window is a span of fake time from the schedule's start.
type Window struct{ From, To time.Duration }

func (w Window) contains(d time.Duration) bool { return d >= w.From && d < w.To }

// cronPool holds the specs a schedule draws from. The last is impossible
// (February 30th): registration may refuse it, but nothing may spin on it.
var cronPool = []string{"* * * * * *", "*/2 * * * * *", "*/3 * * * * *", "@every 1500ms", "@every 2s", "0 0 0 30 2 *"}

// Options tunes the generator. The zero value is the CI profile.
type Options struct {
	// FaultTTLs is the fault phase's length range, in TTLs (default 6–12;
	// the calm phase adds 2–3 TTLs).
	MinFaultTTLs, MaxFaultTTLs int
	// Mutate replaces shipped scripts, by name ("leader/release.lua"),
	// with other source: the server runs it whenever a client sends the
	// shipped one. For tests that the simulator catches a broken script.
	Mutate map[string]string
	// LockConns runs the lock schedules (RunLock) on the connection model:
	// connections with their own fates, fair and Redlock schedules, and
	// invariants L6–L8 (lock_conn.go, lock_calls.go).
	LockConns bool
	// LockMode, with LockConns, runs every lock schedule in one mode:
	// "plain", "fair" or "redlock" (empty: drawn per seed).
	LockMode string
}

func (o Options) withDefaults() Options {
	if o.MinFaultTTLs <= 0 {
		o.MinFaultTTLs = 6
	}
	if o.MaxFaultTTLs < o.MinFaultTTLs {
		o.MaxFaultTTLs = max(o.MinFaultTTLs, 12)
	}
	return o
}

// NewPlan draws the plan of seed.
func NewPlan(seed uint64, o Options) Plan {
	o = o.withDefaults()
	r := keyed(seed, uint64(opPlan))
	p := Plan{Seed: seed, mutate: o.Mutate}

	// Timing: legal per leader.Config.Validate, TTL in whole milliseconds
	// (Redis's PX resolution, so the server keeps exactly the TTL asked).
	ttl := r.logDur(200*time.Millisecond, 5*time.Second).Truncate(time.Millisecond)
	drift := 0.0
	if r.chance(0.7) {
		drift = 0.001 + r.float()*0.05
	}
	limit := time.Duration(float64(ttl) * (1 - max(drift, leader.DefaultDrift)))
	deadline := time.Duration(float64(limit) * (0.4 + 0.55*r.float()))
	interval := time.Duration(float64(deadline) * (0.15 + 0.7*r.float()))
	cfg := leader.Config{
		Name:            "sim",
		TTL:             ttl,
		RenewDeadline:   deadline,
		RenewInterval:   interval,
		RetryInterval:   r.dur(ttl/20, ttl/2),
		ShutdownTimeout: r.dur(ttl/5, 2*ttl),
		Drift:           drift,
	}
	if r.chance(0.5) {
		cfg.ResignCooldown = r.dur(ttl/10, ttl)
	}
	if r.chance(0.45) {
		cfg.MinReplicas = 1
		rt := min(interval/2, 500*time.Millisecond)
		if room := deadline - interval; rt >= room {
			rt = room / 2
		}
		cfg.ReplicaTimeout = max(rt, time.Millisecond)
	}
	if err := cfg.Validate(); err != nil {
		panic(fmt.Sprintf("sim: generated an invalid config: %v", err))
	}
	p.Cfg = cfg
	d := p.Cfg.Drift
	if d == 0 {
		d = leader.DefaultDrift
	}
	p.Rate = 1 + (2*r.float()-1)*d*0.999
	p.Offset = r.dur(-time.Hour, time.Hour)
	p.Intensity = 0.15 + 0.85*r.float()
	faultLen := time.Duration(r.between(o.MinFaultTTLs, o.MaxFaultTTLs)) * ttl
	faultLen += r.dur(0, ttl)
	p.FaultEnd = faultLen
	p.WriteMin = max(ttl/25, time.Millisecond)
	p.WriteMax = max(ttl/6, 2*time.Millisecond)
	p.LongLagP = 0.02 + 0.1*r.float()

	at := func() time.Duration { return r.dur(0, faultLen) }
	for range r.intn(3) {
		if r.chance(0.5) {
			a := at()
			p.Stalls = append(p.Stalls, Window{a, min(a+r.logDur(ttl/50, 2*ttl), faultLen)})
		}
	}
	if r.chance(0.08) {
		p.DataLoss = append(p.DataLoss, at())
	}
	pf := 0.15
	if cfg.MinReplicas > 0 {
		pf = 0.6
	}
	for r.chance(pf) && len(p.Failovers) < 3 {
		p.Failovers = append(p.Failovers, at())
	}
	if r.chance(0.2) {
		a := at()
		p.ReplicaDown = append(p.ReplicaDown, Window{a, min(a+r.logDur(ttl/20, 3*ttl), faultLen)})
	}
	// Weighting (its own stream, so the draws above stay as they were):
	// 80% of the schedules under min_replicas get at least one failover,
	// each preceded by a replica that stops applying writes a tenth to
	// one and a half TTLs before it, so that failovers lose unreplicated
	// writes, checkpoints among them, in a good share of schedules
	// (Stats.Exercised). Without it a checkpoint that skipped its WAIT
	// showed in 1–3 of 5,000 schedules.
	rw := keyed(seed, uint64(opPlan), 2)
	if cfg.MinReplicas > 0 && rw.chance(0.8) {
		if len(p.Failovers) == 0 {
			p.Failovers = append(p.Failovers, rw.dur(0, faultLen))
		}
		for i, f := range p.Failovers {
			if rw.chance(0.8) {
				// Just before a whole second of the server clock (where
				// most cron ticks fall, so a checkpoint is written in
				// the window), with the failover a half to one and a
				// half TTLs later: the lease the replica has may expire
				// meanwhile, and the next term's run-once catch-up may
				// offer the tick whose checkpoint the failover lost.
				// Both inside the fault phase: the calm phase's bound
				// (invariant 6) assumes no failover after it.
				tick, ok := p.serverSecond(rw.dur(0, faultLen))
				if fa := tick + rw.dur(ttl/2, 3*ttl/2); ok && fa+time.Millisecond < faultLen {
					from := max(tick-rw.dur(0, min(50*time.Millisecond, ttl/10)), 0)
					p.Failovers[i] = fa
					p.ReplicaDown = append(p.ReplicaDown, Window{from, fa + time.Millisecond})
					continue
				}
			}
			d := rw.logDur(ttl/10, 3*ttl/2)
			p.ReplicaDown = append(p.ReplicaDown, Window{max(f-d, 0), min(f+time.Millisecond, faultLen)})
		}
		sort.Slice(p.Failovers, func(i, j int) bool { return p.Failovers[i] < p.Failovers[j] })
	}

	n := r.between(2, 5)
	for i := range n {
		c := CandPlan{ID: fmt.Sprintf("c%d", i), CtxTimeouts: r.chance(0.55)}
		switch x := r.float(); {
		case x < 0.5:
			c.ReadTimeout = 3 * time.Second // go-redis default
		case x < 0.8:
			c.ReadTimeout = r.logDur(50*time.Millisecond, 5*time.Second)
		default:
			c.ReadTimeout = -1
		}
		if r.chance(0.2) {
			a := at()
			budget := cfg.TTL - cfg.RenewDeadline
			l := r.dur(budget/10, budget*8/10)
			if r.chance(0.4) {
				l = r.dur(budget*12/10, 3*budget+ttl)
			}
			c.Pauses = append(c.Pauses, Window{a, a + l})
		}
		if r.chance(0.25) {
			// A log sink that blocks (a stalled log shipper, Ctrl-S): the
			// elector and the worker log from their own goroutines, and the
			// renew deadline must not wait for them.
			a := at()
			c.LogStalls = append(c.LogStalls, Window{a, a + r.dur(ttl/10, 3*ttl)})
		}
		t := time.Duration(0)
		for r.chance(0.6) {
			t += r.logDur(ttl/4, 6*ttl)
			if t >= faultLen {
				break
			}
			c.Stops = append(c.Stops, t)
		}
		for range r.intn(3) {
			if r.chance(0.4) {
				c.Resigns = append(c.Resigns, at())
			}
		}
		p.Cands = append(p.Cands, c)
	}
	if r.chance(0.1) {
		p.Cands[1].ID = p.Cands[0].ID // two processes configured with one ID
	}

	for i := range 1 + r.intn(2) {
		spec := cronPool[r.intn(len(cronPool)-1)]
		if r.chance(0.02) {
			spec = cronPool[len(cronPool)-1]
		}
		m := worker.MisfireSkip
		if r.chance(0.6) {
			m = worker.MisfireRunOnce
		}
		d := worker.AtMostOnce
		if r.chance(0.35) {
			d = worker.AtLeastOnce
		}
		p.Crons = append(p.Crons, CronPlan{Name: fmt.Sprintf("cron%d", i), Spec: spec, Misfire: m, Delivery: d})
	}
	p.drawShapes()
	return p
}

// serverSecond returns the first fake time from the schedule's start at or
// after `after` at which the server clock shows a whole second, assuming
// the schedule starts on a whole second (synctest bubbles start at
// midnight).
func (p Plan) serverSecond(after time.Duration) (time.Duration, bool) {
	if p.Rate <= 0 {
		return 0, false
	}
	// Server time at fake elapsed el: Offset + el×Rate (mod 1s).
	srv := p.Offset + time.Duration(float64(after)*p.Rate)
	next := (srv/time.Second + 1) * time.Second
	if srv < 0 {
		next = srv / time.Second * time.Second
	}
	return time.Duration(float64(next-p.Offset) / p.Rate), true
}

// String describes the plan in a few lines.
func (p Plan) String() string {
	var b strings.Builder
	c := p.Cfg
	fmt.Fprintf(&b, "seed %d: ttl %s renew_interval %s renew_deadline %s retry %s resign_cooldown %s shutdown %s drift %g min_replicas %d replica_timeout %s\n",
		p.Seed, c.TTL, c.RenewInterval, c.RenewDeadline, c.RetryInterval, c.ResignCooldown, c.ShutdownTimeout, c.Drift, c.MinReplicas, c.ReplicaTimeout)
	fmt.Fprintf(&b, "  faults until %s (intensity %.2f), server clock rate %.5f offset %s, stalls %v, data loss %v, failovers %v (old master kept %s), replica down %v\n",
		p.FaultEnd, p.Intensity, p.Rate, p.Offset, p.Stalls, p.DataLoss, p.Failovers, p.Promote, p.ReplicaDown)
	if p.Memory.Policy != "" {
		fmt.Fprintf(&b, "  maxmemory %d policy %s, evictions %v\n", p.Memory.Max, p.Memory.Policy, p.Evictions)
	}
	for _, cr := range p.Crons {
		fmt.Fprintf(&b, "  cron %s %q misfire %s delivery %s\n", cr.Name, cr.Spec, cr.Misfire, cr.Delivery)
	}
	for i, cp := range p.Cands {
		fmt.Fprintf(&b, "  c%d: id %s ctx_timeouts %v read_timeout %s pauses %v log_stalls %v stops %v resigns %v fail_read %s resets %.3f\n",
			i, cp.ID, cp.CtxTimeouts, cp.ReadTimeout, cp.Pauses, cp.LogStalls, cp.Stops, cp.Resigns, cp.FailRead, cp.Resets)
	}
	return b.String()
}
