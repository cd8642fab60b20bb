package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"go.uber.org/zap"

	"github.com/solo-run/solo/internal/lockseam"
	"github.com/solo-run/solo/internal/seeded"
	"github.com/solo-run/solo/leader/lock"
)

// RunLock simulates the lock schedule of seed (see lock_run.go). Like Run
// it must be called inside a testing/synctest bubble.
func RunLock(seed uint64, o Options) *Result {
	p := NewPlan(seed, o)
	// The lock takes no WAIT: its failovers are all lossy.
	p.Cfg.MinReplicas, p.Cfg.ReplicaTimeout = 0, 0
	w := newWorld(p, time.Now())
	lw := &lockWorld{w: w, tracks: map[string]*leaseRec{}, conns: map[*psConn]struct{}{}}
	w.lk = lw
	r := keyed(seed, uint64(opLPlan))
	cfg := lock.Config{TTL: p.Cfg.TTL, RenewInterval: p.Cfg.RenewInterval, RenewDeadline: p.Cfg.RenewDeadline,
		RetryInterval: p.Cfg.RetryInterval, Drift: p.Cfg.Drift}
	opts := []lock.Option{lock.WithConfig(cfg)}
	if r.chance(0.15) {
		lw.fixed = true
		opts = append(opts, lock.WithFixedLease(p.Cfg.TTL))
	}
	goroutines := make([]int, len(p.Cands))
	for i, cp := range p.Cands {
		goroutines[i] = 1 + r.intn(3)
		proc := &lockProc{w: w, lw: lw, idx: i, plan: cp, n: map[op]uint64{}}
		proc.rdb = redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", Dialer: proc.dial, Protocol: 2, DisableIdentity: true,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
			ReadTimeout:              cp.ReadTimeout, ContextTimeoutEnabled: cp.CtxTimeouts, PoolSize: 2})
		popts := append(append([]lock.Option(nil), opts...),
			lock.WithID(fmt.Sprintf("p%d", i)),
			lock.WithLogger(zap.New(&logCore{w: w, cand: i})),
			lockseam.WithStore(func(l lockseam.Lock) lockseam.Store {
				return &lockStore{p: proc, channel: l.Channel, ttl: l.TTL}
			}).(lock.Option))
		c, err := lock.NewClient(proc.rdb, popts...)
		if err != nil {
			panic(fmt.Sprintf("sim: seed %d: lock client: %v", seed, err))
		}
		m, err := c.Mutex(lockName)
		if err != nil {
			panic(fmt.Sprintf("sim: seed %d: mutex: %v", seed, err))
		}
		proc.client, proc.m = c, m
		lw.cfg = m.Config()
		lw.procs = append(lw.procs, proc)
	}
	w.mu.Lock()
	w.event(-1, evNote, 0, 0, 0, 0, fmt.Sprintf("(plan) lock: fixed lease %v, goroutines per process %v, timings %+v", lw.fixed, goroutines, lw.cfg))
	w.mu.Unlock()

	go w.loop()
	faultsDone := make(chan struct{})
	var faults sync.WaitGroup
	faults.Go(func() { w.injectServerFaults(faultsDone) })

	end := make(chan struct{})
	endCtx, endCancel := context.WithCancel(context.Background())
	var apps sync.WaitGroup
	for _, proc := range lw.procs {
		for g := range goroutines[proc.idx] {
			apps.Go(func() { proc.run(g, end, lockRand(endCtx, seed, proc.idx, uint64(g))) })
		}
		if r.chance(0.2) {
			// The process closes its Client while it may hold and wait.
			at := w.start.Add(r.dur(0, p.FaultEnd))
			w.mu.Lock()
			w.event(proc.idx, evNote, 0, 0, 0, 0, "(plan) Client.Close at "+fmtDur(at.Sub(w.start)))
			w.mu.Unlock()
			apps.Go(func() {
				if !sleepOrEnd(time.Until(at), nil, end) {
					return
				}
				proc.close()
			})
		}
	}
	sleepFake(w.faultEnd.Add(3*cfg.TTL+p.Cfg.RetryInterval), w.abort)
	close(end)
	endCancel()

	// L5: the application's goroutines end once their contexts ended, and
	// Close returns: the Clients' goroutines and watchdogs are gone.
	rd := lw.cfg.RenewDeadline
	bound := 8*rd + lw.cfg.RetryInterval + 100*time.Millisecond
	stall := time.Duration(0)
	for _, proc := range lw.procs {
		stall = max(stall, proc.logStalled(time.Now(), time.Now().Add(bound)))
	}
	if !waitBounded(&apps, bound+stall) {
		w.mu.Lock()
		w.violate(InvLockLeak, "lock calls or holds still running "+(bound+stall).String()+" after every context ended")
		w.mu.Unlock()
	}
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
	}
	close(faultsDone)
	faults.Wait()
	w.mu.Lock()
	lw.tornDown = true
	conns := make([]*psConn, 0, len(lw.conns))
	for c := range lw.conns {
		conns = append(conns, c)
	}
	sort.Slice(conns, func(i, j int) bool { return conns[i].id < conns[j].id })
	for _, c := range conns {
		c.closeLocked()
	}
	w.mu.Unlock()
	lw.wg.Wait()
	<-w.loopDone
	w.mu.Lock()
	w.sealed = true
	w.closeVM()
	st := lw.stats
	res := &Result{Seed: seed, Plan: p, Violations: w.viol, Stats: w.stats, log: w.ev, Lock: &st}
	w.mu.Unlock()
	return res
}

// close is L5 for Client.Close: it returns within RenewDeadline + 100ms,
// and every hold of the process has its context cancelled by then.
func (p *lockProc) close() {
	w, lw := p.w, p.lw
	var closed sync.WaitGroup
	closed.Go(func() { _ = p.client.Close() })
	// A watchdog blocked in a log write (a full stderr pipe) delays Close,
	// as it delays the elector's Run: the bound grows by the stall.
	bound := lw.cfg.RenewDeadline + 100*time.Millisecond
	bound += p.logStalled(time.Now(), time.Now().Add(bound))
	ok := waitBounded(&closed, bound)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.event(p.idx, evNote, 0, 0, 0, 0, "Client.Close returned")
	if !ok {
		w.violate(InvLockLeak, fmt.Sprintf("c%d: Client.Close did not return within RenewDeadline + 100ms + log stalls (%s)", p.idx, bound))
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
	ttl := p.lw.cfg.TTL
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
	ttl := p.lw.cfg.TTL
	var h *lock.Hold
	var err error
	switch x := r.float(); {
	case x < 0.5:
		ctx, cancel := parent, context.CancelFunc(func() {})
		if r.chance(0.4) {
			ctx, cancel = context.WithTimeout(parent, r.logDur(p.lw.cfg.RetryInterval/2, 4*ttl))
		}
		h, err = p.m.Lock(ctx)
		cancel()
	case x < 0.8:
		h, err = p.m.TryLock(parent)
	default:
		h, err = p.m.LockTimeout(parent, r.logDur(ttl/10, 3*ttl))
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
	ttl := p.lw.cfg.TTL
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
				h2, err = p.m.Lock(ctx)
			} else {
				h2, err = p.m.TryLock(ctx)
			}
			if err == nil {
				p.handed(h2, h)
				sub := keyed(r.u64(), k)
				p.hold(h2, &sub, end, endCtx, depth+1)
			}
		case x < 0.18 && depth < 2:
			sub := keyed(r.u64(), k)
			// A goroutine of its own: its own seeded source (a *rand.Rand
			// has one user).
			ctx := lockRand(h.Context(), p.w.p.Seed, p.idx, 1<<32|sub.u64())
			wg.Go(func() {
				h2, err := p.m.Lock(ctx)
				if err == nil {
					p.handed(h2, h)
					p.hold(h2, &sub, end, endCtx, depth+1)
				}
			})
		case x < 0.22:
			h3, err := p.m.TryLock(endCtx)
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
func (p *lockProc) unlock(h *lock.Hold, r *rng) {
	p.unlocking(h)
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	if r.chance(0.3) {
		ctx, cancel = context.WithTimeout(ctx, r.logDur(time.Millisecond, p.lw.cfg.TTL))
	}
	err := h.Unlock(ctx)
	cancel()
	if err != nil {
		p.w.mu.Lock()
		p.lw.stats.UnlockErrors++
		p.w.event(p.idx, evLog, 0, 0, int64(h.Term()), 0, "Unlock: "+err.Error())
		p.w.mu.Unlock()
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

// lockRand returns ctx carrying a *rand.Rand of its own, seeded by (seed,
// process, goroutine), through internal/seeded: leader/lock draws its
// jitter from it, so a lock replay repeats every sleep. Each application
// goroutine gets one; the lock draws from it only on the calling
// goroutine.
func lockRand(ctx context.Context, seed uint64, proc int, g uint64) context.Context {
	return seeded.With(ctx, rand.New(rand.NewPCG(seed^uint64(opLockCtx)<<56, uint64(proc)<<48^g)))
}
