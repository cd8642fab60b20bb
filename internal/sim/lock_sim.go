package sim

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"go.uber.org/zap"

	"github.com/solo-run/solo/internal/hooks"
	"github.com/solo-run/solo/leader/lock"
)

// RunLock simulates the lock schedule of seed (see lock_run.go). Like Run
// it must be called inside a testing/synctest bubble.
func RunLock(seed uint64, o Options) *Result {
	p := NewPlan(seed, o)
	mode := lockMode{}
	if o.LockConns {
		mode = drawLockMode(seed, o.LockMode)
	}
	if !o.LockConns || mode.redlock {
		// Redlock takes no WAIT (its masters are independent primaries),
		// nor does the per-call model: their failovers are all lossy.
		p.Cfg.MinReplicas, p.Cfg.ReplicaTimeout = 0, 0
	}
	if o.LockConns {
		if mode.redlock {
			// Redlock's masters are independent servers, not replicas.
			// Every attempt costs a call per master and an undo per
			// master when it fails: three processes at most keep its
			// schedules near the others' cost.
			p.DataLoss, p.Failovers, p.Stalls = nil, nil, nil
			p.Cands = p.Cands[:min(len(p.Cands), 3)]
		}
	}
	w := newWorld(p, time.Now())
	lw := &lockWorld{w: w, tracks: map[string]*leaseRec{}, conns: map[*psConn]struct{}{},
		connModel: o.LockConns, redlock: mode.redlock, owners: map[string]*callRec{}, calls: map[string]*callRec{}, byField: map[string][]*callRec{},
		rlSent: map[string]time.Time{}, rlRenew: map[string]time.Time{}}
	w.lk = lw
	if mode.fair {
		lw.fair = newFairTrack()
	}
	if mode.redlock {
		lw.newMasters(mode.masters)
	}
	r := keyed(seed, uint64(opLPlan))
	cfg := lock.Config{TTL: p.Cfg.TTL, RenewInterval: p.Cfg.RenewInterval, RenewDeadline: p.Cfg.RenewDeadline,
		RetryInterval: p.Cfg.RetryInterval, Drift: p.Cfg.Drift, MinReplicas: p.Cfg.MinReplicas, ReplicaTimeout: p.Cfg.ReplicaTimeout}
	var opts []lock.Option
	if r.chance(0.15) {
		lw.fixed = true
	}
	if mode.fair {
		opts = append(opts, lock.WithFair())
	}
	if mode.inline {
		lw.inline = true
		opts = append(opts, lock.WithInlineCalls())
	}
	lw.stats.Mode = mode.String()
	goroutines := make([]int, len(p.Cands))
	maxRead := time.Duration(0)
	for i := range p.Cands {
		// WithInlineCalls over a client that never times out hangs the
		// caller with the call, and Redlock's Close waits for its calls
		// to the masters, as documented: not modelled.
		ri := keyed(seed, uint64(opLMode), uint64(i))
		if mode.inline && p.Cands[i].CtxTimeouts && ri.chance(0.8) {
			// WithInlineCalls changes nothing for a client that honours
			// deadlines (its calls are inline anyway): mostly not one.
			p.Cands[i].CtxTimeouts = false
		}
		if (mode.inline || mode.redlock) && p.Cands[i].ReadTimeout < 0 {
			p.Cands[i].ReadTimeout = 3 * time.Second
		}
		if (mode.inline || mode.redlock) && !p.Cands[i].CtxTimeouts {
			maxRead = max(maxRead, p.Cands[i].ReadTimeout)
		}
	}
	w.p.Cands = p.Cands
	for i, cp := range p.Cands {
		ri := keyed(seed, uint64(opLMode), uint64(i), 1)
		goroutines[i] = 1 + r.intn(3)
		if mode.redlock {
			goroutines[i] = 1 + goroutines[i]%2
		}
		proc := &lockProc{w: w, lw: lw, idx: i, plan: cp, n: map[op]uint64{}, psN: map[int]uint64{}, sends: map[string]uint64{}}
		dial := proc.dial
		if mode.redlock {
			dial = proc.dialEp(1)
		}
		proc.rdb = redis.NewClient(proc.redisOptions(dial))
		proc.pools = make([]*connPool, 1+len(lw.masters))
		for k := range proc.pools {
			proc.pools[k] = &connPool{}
		}
		if o.LockConns {
			proc.blips = lw.blips(i)
		}
		pcfg := lw.timings(cfg, i)
		popts := append(append([]lock.Option{lock.WithConfig(pcfg)}, opts...),
			lock.WithID(fmt.Sprintf("p%d", i)),
			lock.WithLogger(zap.New(&logCore{w: w, cand: i})))
		hk := hooks.Hooks{
			// A wait that could end two ways at one instant settles and
			// decides by a fixed order (replays).
			Settle: func(string) { w.decide() },
			Rand:   lockRand(seed, i),
		}
		if lw.fixed {
			popts = append(popts, lock.WithFixedLease(pcfg.TTL))
		}
		// A fair process takes grants, as leader/lock's Redis store does,
		// but one in ten queues as an older client (no grants).
		grants := mode.fair && !ri.chance(0.1)
		var c *lock.Client
		var err error
		if mode.redlock {
			c, err = lock.NewRedlockClient(proc.redlockClients(), append(popts, lock.WithHooks(hk))...)
		} else {
			hk.NewLockStore = func(l hooks.Lock) hooks.Store {
				lw.channel = l.Channel
				return &lockStore{p: proc, channel: l.Channel, ttl: l.TTL, fair: l.Fair, grants: grants}
			}
			c, err = lock.NewClient(proc.rdb, append(popts, lock.WithHooks(hk))...)
		}
		if err != nil {
			panic(fmt.Sprintf("sim: seed %d: lock client: %v", seed, err))
		}
		m, err := c.Mutex(lockName)
		if err != nil {
			panic(fmt.Sprintf("sim: seed %d: mutex: %v", seed, err))
		}
		proc.client, proc.m, proc.cfg, proc.grants = c, m, m.Config(), grants
		lw.cfg = longest(lw.cfg, proc.cfg)
		lw.procs = append(lw.procs, proc)
	}
	if lw.channel == "" {
		lw.channel = lw.cfg.KeyPrefix + ":{" + lockName + "}:lock.events"
	}
	// L7 and L8 judge once faults stopped and every process woke and its
	// log flows (a half-open pub/sub connection may still linger: L7
	// counts only the notices that arrived, and expiries).
	lw.calmAt = maxTime(w.faultEnd, w.pauseEnd).Add(lw.cfg.TTL)
	w.mu.Lock()
	w.event(-1, evNote, 0, 0, 0, 0, fmt.Sprintf("(plan) lock: mode %s, fixed lease %v, goroutines per process %v, timings %+v", mode, lw.fixed, goroutines, cfg))
	for _, proc := range lw.procs {
		if proc.cfg.TTL != cfg.TTL || !proc.grants && mode.fair {
			w.event(proc.idx, evNote, 0, 0, 0, 0, fmt.Sprintf("(plan) timings of its own: TTL %v, renew interval %v, deadline %v, retry %v; takes grants %v",
				proc.cfg.TTL, proc.cfg.RenewInterval, proc.cfg.RenewDeadline, proc.cfg.RetryInterval, proc.grants))
		}
	}
	for i, m := range lw.masters {
		w.event(-1, evNote, 0, 0, 0, 0, fmt.Sprintf("(plan) master %d frozen %v", i, m.frozen))
	}
	for _, proc := range lw.procs {
		if len(proc.blips) > 0 {
			w.event(proc.idx, evNote, 0, 0, 0, 0, fmt.Sprintf("(plan) network blips %v", proc.blips))
		}
	}
	w.mu.Unlock()

	// Every plan note is written before a goroutine starts, and the
	// application's goroutines start at distinct instants after the
	// fault injector's (lockProc.run): goroutines woken at one fake
	// instant run in any order, so a replay repeats only what happens at
	// distinct instants.
	closeAt := make([]time.Time, len(lw.procs))
	for _, proc := range lw.procs {
		if r.chance(0.2) {
			// The process closes its Client while it may hold and wait.
			closeAt[proc.idx] = w.start.Add(r.dur(0, p.FaultEnd))
			w.mu.Lock()
			w.event(proc.idx, evNote, 0, 0, 0, 0, "(plan) Client.Close at "+fmtDur(closeAt[proc.idx].Sub(w.start)))
			w.mu.Unlock()
		}
	}
	go w.loop()
	faultsDone := make(chan struct{})
	var faults sync.WaitGroup
	faults.Go(func() { w.injectServerFaults(faultsDone) })

	end := make(chan struct{})
	endCtx, endCancel := context.WithCancel(context.Background())
	var apps sync.WaitGroup
	for _, proc := range lw.procs {
		for g := range goroutines[proc.idx] {
			apps.Go(func() { proc.run(g, end, endCtx) })
		}
		if at := closeAt[proc.idx]; !at.IsZero() {
			apps.Go(func() {
				if !sleepOrEnd(time.Until(at), nil, end) {
					return
				}
				proc.close()
			})
		}
	}
	endAt := w.faultEnd.Add(3*lw.cfg.TTL + lw.cfg.RetryInterval)
	if o.LockConns {
		endAt = maxTime(endAt, lw.calmAt.Add(2*lw.cfg.TTL+lw.cfg.RetryInterval))
	}
	sleepFake(endAt, w.abort)
	w.mu.Lock()
	calls := make([]*callRec, 0, len(lw.calls))
	seen := map[*callRec]bool{}
	for _, rec := range lw.calls {
		if !seen[rec] {
			seen[rec] = true
			calls = append(calls, rec)
		}
	}
	sort.Slice(calls, func(i, j int) bool { return calls[i].id < calls[j].id })
	lw.endWaiters(time.Now(), calls)
	w.mu.Unlock()
	close(end)
	endCancel()

	// L5: the application's goroutines end once their contexts ended, and
	// Close returns: the Clients' goroutines and watchdogs are gone.
	rd := lw.cfg.RenewDeadline
	bound := 8*rd + lw.cfg.RetryInterval + 100*time.Millisecond + 3*maxRead // an inline call returns at its read timeout
	stall := time.Duration(0)
	for _, proc := range lw.procs {
		stall = max(stall, proc.logStalled(time.Now(), time.Now().Add(bound)))
	}
	if !waitBounded(&apps, bound+stall) {
		w.mu.Lock()
		w.violate(InvLockLeak, "lock calls or holds still running "+(bound+stall).String()+" after every context ended")
		w.mu.Unlock()
	}
	// The teardown (Close, calls failing with errClosed, retried at one
	// instant as often as the scheduler lets them) is not logged: its
	// lines' presence would depend on goroutine order. Violations are
	// still judged.
	w.mu.Lock()
	w.muted = true
	w.mu.Unlock()
	for _, proc := range lw.procs {
		proc.close()
	}
	w.mu.Lock()
	w.stats.FakeTime = time.Since(w.start)
	w.mu.Unlock()
	close(w.stop) // every simulated call returns
	apps.Wait()
	for _, proc := range lw.procs {
		_ = proc.client.Close()
		_ = proc.rdb.Close()
		for _, rdb := range proc.rdbs {
			_ = rdb.Close()
		}
	}
	close(faultsDone)
	faults.Wait()
	w.mu.Lock()
	lw.tornDown = true
	conns := make([]*psConn, 0, len(lw.conns))
	for c := range lw.conns {
		conns = append(conns, c)
	}
	sortConns(conns)
	for _, c := range conns {
		c.closeLocked()
	}
	w.mu.Unlock()
	lw.wg.Wait()
	<-w.loopDone
	w.mu.Lock()
	w.sealed = true
	w.mu.Unlock()
	// Goroutines nothing waits for (a lock call's, a call still in its
	// keyed send delay) may still be finishing: the bubble must not end
	// before they do, nor before the settler.
	time.Sleep(time.Millisecond)
	w.stopSettler()
	w.mu.Lock()
	w.closeVM()
	st := lw.stats
	ids := lockIDs(seed)
	for i := range w.viol {
		w.viol[i].Msg = ids(w.viol[i].Msg)
	}
	res := &Result{Seed: seed, Plan: p, Violations: w.viol, Stats: w.stats, log: w.ev, Lock: &st, ids: ids}
	w.mu.Unlock()
	return res
}

// lockIDRandom matches an ID with a random part: a lock Client appends
// 12 hex digits of crypto/rand to its ID ("p0"), so owners are
// "p0-RANDOM-SEQ.N"; an Elector of a spread member does the same
// ("p0-RANDOM").
var lockIDRandom = regexp.MustCompile(`\bp(\d+)-[0-9a-f]{12}\b`)

// lockIDs returns a function that replaces the random part of every lock
// owner ID (or spread member's elector ID) in a text by one derived from (seed, process), so that a
// replay prints the same log. The random part decides nothing in a
// schedule: a process's owners share it, and owners of two processes
// differ before it ("p0-" and "p1-"), so every comparison of owners (a
// sorted set's members of one score, the fair queue) comes out the same.
func lockIDs(seed uint64) func(string) string {
	return func(s string) string {
		return lockIDRandom.ReplaceAllStringFunc(s, func(m string) string {
			proc, _ := strconv.ParseUint(m[1:strings.IndexByte(m, '-')], 10, 64)
			r := keyed(seed, uint64(opLockCtx), proc)
			return fmt.Sprintf("p%d-%012x", proc, r.u64()>>16)
		})
	}
}

// lockMode is a lock schedule's mode under the connection model.
type lockMode struct {
	fair, redlock, inline bool
	masters               int
}

func (m lockMode) String() string {
	s := "plain"
	switch {
	case m.fair:
		s = "fair"
	case m.redlock:
		s = fmt.Sprintf("redlock(%d)", m.masters)
	}
	if m.inline {
		s += "+inline"
	}
	return s
}

// drawLockMode draws seed's mode (force: "plain", "fair" or "redlock"
// decides it): a fifth fair, 15% Redlock (3 masters, a tenth of them 5),
// a third with WithInlineCalls.
func drawLockMode(seed uint64, force string) lockMode {
	r := keyed(seed, uint64(opLMode))
	var m lockMode
	x := r.float()
	switch force {
	case "plain":
		x = 1
	case "fair":
		x = 0
	case "redlock":
		x = 0.25
	}
	switch {
	case x < 0.2:
		m.fair = true
	case x < 0.35:
		m.redlock = true
		m.masters = 3
		if r.chance(0.1) {
			m.masters = 5
		}
	}
	m.inline = r.chance(0.35)
	return m
}

// redisOptions are the go-redis options of a process's client (pub/sub
// through dial; lock scripts through the store).
func (p *lockProc) redisOptions(dial func(context.Context, string, string) (net.Conn, error)) *redis.Options {
	return &redis.Options{Addr: "127.0.0.1:6379", Dialer: dial, Protocol: 2, DisableIdentity: true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		ReadTimeout:              p.plan.ReadTimeout, ContextTimeoutEnabled: p.plan.CtxTimeouts, PoolSize: 2}
}

// redlockClients returns p's clients of the Redlock masters.
func (p *lockProc) redlockClients() []redis.UniversalClient {
	var out []redis.UniversalClient
	for i := range p.lw.masters {
		var rdb *redis.Client
		if i == 0 {
			rdb = p.rdb // dialled to master 0
		} else {
			rdb = redis.NewClient(p.redisOptions(p.dialEp(1 + i)))
			p.rdbs = append(p.rdbs, rdb)
		}
		out = append(out, &rlClient{Client: rdb, p: p, ep: 1 + i})
	}
	return out
}

// close is L5 for Client.Close: it returns within RenewDeadline + 100ms,
// and every hold of the process has its context cancelled by then.
func (p *lockProc) close() {
	w, lw := p.w, p.lw
	w.mu.Lock()
	if p.closing.IsZero() {
		p.closing = time.Now()
	}
	w.mu.Unlock()
	var closed sync.WaitGroup
	closed.Go(func() { _ = p.client.Close() })
	// A watchdog blocked in a log write (a full stderr pipe) delays Close,
	// as it delays the elector's Run: the bound grows by the stall.
	bound := p.cfg.RenewDeadline + 100*time.Millisecond
	if lw.redlock && !p.plan.CtxTimeouts {
		bound += p.plan.ReadTimeout // Close waits for the masters' calls
	}
	bound += p.logStalled(time.Now(), time.Now().Add(bound))
	base, extra := bound, time.Duration(0)
	for range 4 { // a pause inside the grown bound grows it again
		extra = p.paused(time.Now(), time.Now().Add(base+extra))
	}
	bound += extra
	ok := waitBounded(&closed, bound)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.event(p.idx, evNote, 0, 0, 0, 0, "Client.Close returned")
	if !ok {
		w.violate(InvLockLeak, fmt.Sprintf("c%d: Client.Close did not return within RenewDeadline + 100ms + log stalls + pauses (%s)", p.idx, bound))
		return
	}
	for _, r := range lw.tracks {
		if r.proc == p.idx && r.started && r.ctx.Err() == nil {
			w.violate(InvLockLeak, fmt.Sprintf("c%d: the context of its hold of term %d is live after Client.Close returned", p.idx, r.term))
		}
	}
}

// logStalled is how much of [from, to] falls inside the process's log
// stalls (candidate.logStalled).
func (p *lockProc) logStalled(from, to time.Time) time.Duration {
	return (&candidate{w: p.w, idx: p.idx}).logStalled(from, to)
}

// paused returns how long p is frozen (Pauses) between from and to: the
// calls Close waits for (Redlock's) get their replies only once it wakes.
func (p *lockProc) paused(from, to time.Time) time.Duration {
	var d time.Duration
	a, b := from.Sub(p.w.start), to.Sub(p.w.start)
	for _, pw := range p.plan.Pauses {
		if pw.To > a && pw.From < b {
			d += min(pw.To, b) - max(pw.From, a)
		}
	}
	return d
}

// waitBounded waits for wg at most d of fake time.
func waitBounded(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		// The waiting goroutine ends with wg (after the teardown).
		return false
	}
}

// run is one application goroutine of a process: lock, hold, unlock, again.
func (p *lockProc) run(g int, end <-chan struct{}, endCtx context.Context) {
	ttl := p.cfg.TTL
	// A start of its own, after the schedule's first instant (see RunLock).
	first := keyed(p.w.p.Seed, uint64(opLProc), uint64(p.idx), uint64(g), 1<<40)
	if !sleepOrEnd(first.dur(time.Microsecond, time.Millisecond), nil, end) {
		return
	}
	for iter := uint64(0); ; iter++ {
		select {
		case <-end:
			return
		default:
		}
		r := keyed(p.w.p.Seed, uint64(opLProc), uint64(p.idx), uint64(g), iter)
		h, err := p.attempt(&r, endCtx)
		if errors.Is(err, lock.ErrClosed) {
			return
		}
		if err == nil {
			p.handed(h, nil)
			p.hold(h, &r, end, endCtx, 0)
		}
		if !sleepOrEnd(r.logDur(time.Millisecond, ttl), nil, end) {
			return
		}
	}
}

// attempt is one Lock, TryLock or LockTimeout with a context of its own.
func (p *lockProc) attempt(r *rng, parent context.Context) (*lock.Hold, error) {
	ttl := p.cfg.TTL
	var h *lock.Hold
	var err error
	switch x := r.float(); {
	case x < 0.55:
		ctx, cancel := parent, context.CancelFunc(func() {})
		if r.chance(0.3) {
			ctx, cancel = context.WithTimeout(parent, r.logDur(p.cfg.RetryInterval/2, 4*ttl))
		}
		h, err = p.lockCall(ctx, r, "Lock", true, p.m.Lock)
		cancel()
	case x < 0.8:
		h, err = p.lockCall(parent, r, "TryLock", false, p.m.TryLock)
	default:
		d := r.logDur(ttl/10, 3*ttl)
		h, err = p.lockCall(parent, r, "LockTimeout", true, func(ctx context.Context) (*lock.Hold, error) { return p.m.LockTimeout(ctx, d) })
	}
	p.w.mu.Lock()
	switch {
	case err == nil:
	case errors.Is(err, lock.ErrNotObtained):
		p.lw.stats.NotObtained++
	default:
		p.lw.stats.LockErrors++
	}
	p.w.mu.Unlock()
	return h, err
}

// hold keeps h for a while, writing under it, re-entering it (nested, or
// from a goroutine sharing its context) and trying the lock with a
// context that does not carry it, then unlocks it.
func (p *lockProc) hold(h *lock.Hold, r *rng, end <-chan struct{}, endCtx context.Context, depth int) {
	ttl := p.cfg.TTL
	var wg sync.WaitGroup
	until := time.Now().Add(r.logDur(ttl/20, 3*ttl))
	for k := uint64(0); time.Now().Before(until); k++ {
		step := min(r.logDur(ttl/50, ttl/2), time.Until(until))
		if !sleepOrEnd(step, h.Context().Done(), end) {
			break
		}
		p.write(h)
		switch x := r.float(); {
		case x < 0.1 && depth < 2:
			ctx := h.Context()
			if r.chance(0.5) {
				ctx = lock.WithHold(endCtx, h)
			}
			var h2 *lock.Hold
			var err error
			if r.chance(0.5) {
				h2, err = p.lockCall(ctx, r, "Lock (re-entry)", true, p.m.Lock)
			} else {
				h2, err = p.lockCall(ctx, r, "TryLock (re-entry)", false, p.m.TryLock)
			}
			if err == nil {
				p.handed(h2, h)
				sub := keyed(r.u64(), k)
				p.hold(h2, &sub, end, endCtx, depth+1)
			}
		case x < 0.18 && depth < 2:
			sub := keyed(r.u64(), k)
			ctx := h.Context()
			wg.Go(func() {
				h2, err := p.lockCall(ctx, &sub, "Lock (re-entry, another goroutine)", true, p.m.Lock)
				if err == nil {
					p.handed(h2, h)
					p.hold(h2, &sub, end, endCtx, depth+1)
				}
			})
		case x < 0.22:
			h3, err := p.lockCall(endCtx, r, "TryLock (without the hold)", false, p.m.TryLock)
			if err == nil {
				p.handed(h3, nil)
				p.unlock(h3, r)
			}
		}
	}
	p.unlock(h, r)
	wg.Wait()
}

// unlock gives h up, with a bounded context or none.
//
// It unlocks 1–999ns later, keyed as lockCall's start: holds of one term
// unlocked from two goroutines at one instant would otherwise reach the
// lock, and take its last hold's release, in goroutine order.
func (p *lockProc) unlock(h *lock.Hold, r *rng) {
	k := keyed(r.s, uint64(opLCallStart), 1)
	time.Sleep(time.Duration(1 + k.intn(999)))
	p.unlocking(h)
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	if r.chance(0.3) {
		ctx, cancel = context.WithTimeout(ctx, r.logDur(time.Millisecond, p.cfg.TTL))
	}
	err := h.Unlock(ctx)
	cancel()
	p.unlocked(h, err)
	if err != nil {
		p.w.mu.Lock()
		p.lw.stats.UnlockErrors++
		p.w.event(p.idx, evLog, 0, 0, int64(h.Term()), 0, "Unlock: "+err.Error())
		p.w.mu.Unlock()
	}
}

// lockCall runs one Lock, TryLock or LockTimeout (f) with a context that
// carries the checker's record of the call (L6, L7).
//
// The call begins 1–999ns later, keyed by the state of its goroutine's
// stream r (read, not advanced): calls of two goroutines woken at one
// instant would otherwise get their Client's call IDs, which name their
// attempts' owners, hence their fates, in goroutine order.
func (p *lockProc) lockCall(ctx context.Context, r *rng, kind string, wait bool, f func(context.Context) (*lock.Hold, error)) (*lock.Hold, error) {
	k := keyed(r.s, uint64(opLCallStart))
	time.Sleep(time.Duration(1 + k.intn(999)))
	lw := p.lw
	if !lw.connModel {
		return f(ctx)
	}
	ctx, rec := lw.newCall(ctx, p.idx, kind, wait)
	h, err := f(ctx)
	field := ""
	if err == nil {
		field = fieldOf(h)
	}
	p.w.mu.Lock()
	lw.callReturned(rec, field, err)
	p.w.mu.Unlock()
	return h, err
}

// unlocked records the return of h's Unlock: the term is over for the
// checker once its last hold went (L6).
func (p *lockProc) unlocked(h *lock.Hold, err error) {
	lw := p.lw
	if !lw.connModel {
		return
	}
	p.w.mu.Lock()
	defer p.w.mu.Unlock()
	field := fieldOf(h)
	if lw.rec(field).app == 0 {
		lw.termEnded(field, err == nil)
	}
}

// sleepOrEnd sleeps d; false when done or end closes first.
func sleepOrEnd(d time.Duration, done <-chan struct{}, end <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	case <-end:
		return false
	}
}

// lockRand returns process proc's sources of jitter (hooks.Hooks.Rand):
// one per lock call, named by leader/lock ("NAME SEQ"), seeded by (seed,
// process, call), so a lock replay repeats every sleep.
func lockRand(seed uint64, proc int) func(call string) *rand.Rand {
	return func(call string) *rand.Rand {
		h := fnv.New64a()
		_, _ = h.Write([]byte(call))
		r := keyed(seed, uint64(opLockCtx), uint64(proc), h.Sum64())
		return rand.New(rand.NewPCG(r.u64(), r.u64()))
	}
}
