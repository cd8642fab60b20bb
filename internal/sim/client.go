package sim

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/leader"
)

var (
	errReadTimeout = errors.New("sim: i/o timeout (read timeout)")
	errClosed      = errors.New("sim: client closed")
	errSubscribe   = errors.New("sim: subscribe: connection refused")
)

// client is one candidate's connection to the simulated Redis: the real
// leader.RedisStore (rdb.go) over a network that delays, loses and
// reorders, as a leader.Store and leader.Checkpointer (neither Proclaimer
// nor Withdrawer), with its own model of SUBSCRIBE (Watch).
type client struct {
	w    *world
	c    *candidate
	idx  int
	plan CandPlan
	rdb  *redis.Client
	rl   *leader.RedisStore
	// The apply time of the last write of this client's requests, in
	// epoch lastEpoch (WAIT waits for it), under w.mu.
	lastApply time.Time
	lastEpoch uint64
	n         [numOps]uint64 // call counters, under w.mu
	// Checkpoint and load calls count per key: cron jobs firing at one
	// instant call concurrently, and the order of their calls must not
	// decide which one meets which fault.
	nKey map[string]uint64
	// byKey: every call counts per key (a spread member's; classify).
	byKey bool
	// The plan's boundary failures (shapes.go: boundary), under w.mu: the
	// term whose first reads fail, and what failed already.
	failTerm uint64
	failed   map[string]bool
}

var (
	_ leader.Store        = (*client)(nil)
	_ leader.Checkpointer = (*client)(nil)
)

// callPlan is the network's decision about one call.
type callPlan struct {
	lostReq, lostRep bool
	req, rep         time.Duration
}

// drawCall decides one call's fate from (seed, candidate, op, counter).
func (w *world) drawCall(cand int, o op, n uint64, now time.Time) callPlan {
	r := keyed(w.p.Seed, uint64(cand)+1, uint64(o), n)
	if !w.faulty(now) {
		return callPlan{req: r.dur(20*time.Microsecond, time.Millisecond), rep: r.dur(20*time.Microsecond, time.Millisecond)}
	}
	in := w.p.Intensity
	cp := callPlan{lostReq: r.chance(0.02 * in), lostRep: r.chance(0.03 * in)}
	cp.req = w.delay(&r)
	cp.rep = w.delay(&r)
	return cp
}

// delay draws a one-way delay in the fault phase: mostly sub-millisecond,
// sometimes up to half the renew deadline, rarely past every deadline.
func (w *world) delay(r *rng) time.Duration {
	c := w.p.Cfg
	switch x := r.float(); {
	case x < 0.04*w.p.Intensity:
		return r.dur(c.RenewDeadline/2, 5*c.TTL/2)
	case x < 0.15:
		return r.logDur(time.Millisecond, max(c.RenewDeadline/2, 2*time.Millisecond))
	default:
		return r.dur(20*time.Microsecond, time.Millisecond)
	}
}

// wake returns when a frozen process sees time t: the end of a pause that
// covers t (order kept within the pause), else t.
func (cl *client) wake(t time.Time) time.Time {
	return cl.plan.wake(cl.w.start, t)
}

// wake returns when a process of plan p, in a world started at start, sees
// time t: the end of a pause that covers t (order kept within the pause),
// else t.
func (p CandPlan) wake(start, t time.Time) time.Time {
	d := t.Sub(start)
	for _, pw := range p.Pauses {
		if pw.contains(d) {
			return start.Add(pw.To + (d-pw.From)/1024)
		}
	}
	return t
}

// awaitReply waits, without w.mu, for the reply of a simulated call of a
// process of plan p sent at depart (now: when the caller started it) on
// done, bounded by p's read timeout, by ctx when p's client honours
// context deadlines, and by the world's teardown (errClosed). key names
// the call among the settler's waiters (quiesceKey).
func awaitReply[T any](ctx context.Context, w *world, p CandPlan, depart, now time.Time, done <-chan T, key string) (T, error) {
	var timeout <-chan time.Time
	if rt := p.ReadTimeout; rt > 0 {
		t := time.NewTimer(depart.Add(rt).Sub(now))
		defer t.Stop()
		timeout = t.C
	}
	var ctxDone <-chan struct{}
	if p.CtxTimeouts {
		ctxDone = ctx.Done()
	}
	var res T
	var err error
	select {
	case res = <-done:
	case <-ctxDone:
		err = ctx.Err()
	case <-timeout:
		err = errReadTimeout
	case <-w.stop:
		err = errClosed
	}
	if err != nil && err != errClosed {
		// A reply that lands at the instant the context or the read
		// timeout ends is taken, whichever channel the select saw first:
		// once every goroutine woken at this instant has run, a reply
		// delivered then is in done.
		w.quiesceKey(prioProgress, key)
		select {
		case res = <-done:
			return res, nil
		default:
		}
	}
	if err != nil && err != errClosed {
		// A frozen process learns of its timeout only when it wakes up.
		if wk := p.wake(w.start, time.Now()); wk.After(time.Now()) {
			w.sleepUntil(wk)
		}
	}
	return res, err
}

// sleepUntil waits until fake time t; false on teardown.
func (w *world) sleepUntil(t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		select {
		case <-w.stop:
			return false
		default:
			return true
		}
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-w.stop:
		return false
	}
}

// pending counts what is left of one fault-phase call (sent before
// Plan.FaultEnd, or while its candidate talks to the old master: its
// execution, its return to the caller) for the calm phase's start.
type pending struct{ left int }

func (w *world) settlePart(p *pending) {
	if p == nil || p.left <= 0 {
		return
	}
	p.left--
	if p.left == 0 {
		w.pendingFault--
		w.settle()
	}
}

// counted says which ops hold up the calm phase while pending: all but
// SUBSCRIBE, which only ends with Run.
func counted(o op) bool { return o != opWatch }

// roundTripKey sends one request and waits for its reply as a go-redis
// client with this candidate's options would.
func (cl *client) roundTripKey(ctx context.Context, o op, key string, exec func(now time.Time) execResult) (execResult, error) {
	w := cl.w
	// Sent once the instant is quiet: a context cancelled at the instant
	// of the send (a term ending as its job calls) is then always seen,
	// whatever order the scheduler ran the two goroutines in. Calls sent
	// at one instant go in order of Run, op and key (a Run's subscribe
	// still in flight as the next Run subscribes is numbered first), not
	// in the order their goroutines came.
	w.quiesceKey(prioProgress, fmt.Sprintf("%03d call %06d %02d %s", cl.idx, runOf(ctx), o, key))
	w.mu.Lock()
	if err := ctx.Err(); err != nil {
		// go-redis checks the context before it takes a connection. Not
		// counted, and logged as a log line: whether a caller whose
		// context ended at this instant still tries is a race between
		// its goroutines, and must not shift the numbering (so the fates)
		// of later calls.
		w.event(cl.idx, evLog, o, 0, 0, 0, o.String()+" not sent: "+err.Error())
		w.mu.Unlock()
		return execResult{}, err
	}
	var n uint64
	if key == "" {
		cl.n[o]++
		n = cl.n[o]
	} else {
		if cl.nKey == nil {
			cl.nKey = map[string]uint64{}
		}
		k := o.String() + " " + key
		cl.nKey[k]++
		n = cl.nKey[k] | hashKey(key)<<32
	}
	w.stats.Calls++
	now := time.Now()
	cp := w.drawCall(cl.idx, o, n, now)
	depart := cl.wake(now)
	execAt := w.execAt(depart.Add(cp.req))
	never := (cp.lostReq || cp.lostRep) && !cl.plan.CtxTimeouts && cl.plan.ReadTimeout < 0
	// A connection reset after the server ran it (go-redis sends it again:
	// do), from a stream of its own.
	reset := false
	if rs := keyed(w.p.Seed, uint64(cl.idx)+1, uint64(opReset), uint64(o), n); cl.plan.Resets > 0 && w.faulty(now) && !cp.lostReq && !cp.lostRep {
		reset = rs.chance(cl.plan.Resets)
	}
	var pend *pending
	if (w.faulty(now) || w.talksToOld(cl.idx, now)) && counted(o) {
		pend = &pending{left: 2}
		if never {
			pend.left--
		}
		w.pendingFault++
	}
	if never && !cl.c.stuck {
		cl.c.stuck = true
	}
	flags := ""
	switch {
	case cp.lostReq:
		flags = " LOST-REQUEST"
	case cp.lostRep:
		flags = " LOST-REPLY"
	case reset:
		flags = " RESET-AFTER-EXEC"
	}
	if depart.After(now) {
		flags += " (paused: sent at wake-up)"
	}
	if !execAt.Equal(depart.Add(cp.req)) {
		flags += " (stalled)"
	}
	if never {
		flags += " (no timeout: hangs for ever)"
	}
	w.event(cl.idx, evSend, o, n, int64(cp.req), int64(cp.rep), flags)

	done := make(chan execResult, 1)
	w.at(execAt, func(t time.Time) {
		if cp.lostReq {
			w.settlePart(pend)
			return
		}
		res := exec(t)
		w.eventExec(cl.idx, o, n, res)
		w.settlePart(pend)
		w.at(cl.wake(t.Add(res.wait+cp.rep)), func(time.Time) {
			switch {
			case cp.lostRep:
			case res.epoch != w.epoch:
				w.event(cl.idx, evReturn, o, n, 0, 0, "reply lost: the connection dropped (failover or restart)")
				if !cl.plan.CtxTimeouts && cl.plan.ReadTimeout < 0 {
					cl.c.stuck = true
					w.settlePart(pend)
				}
			default:
				res.reset = reset
				done <- res // buffered: the caller may have given up
			}
		})
	})
	w.mu.Unlock()

	res, err := awaitReply(ctx, w, cl.plan, depart, now, done, fmt.Sprintf("%03d reply %06d %02d %s %d", cl.idx, runOf(ctx), o, key, n))
	if err == nil && res.reset {
		err = errReset
	}
	w.mu.Lock()
	if o == opOther && key == "info" {
		cl.c.infoWait += time.Since(now) // invariant 8: a check before the first acquire
	}
	if err != nil {
		w.event(cl.idx, evReturn, o, n, 0, 0, "error: "+err.Error())
	} else {
		w.event(cl.idx, evReturn, o, n, 0, 0, "ok")
	}
	if !never {
		w.settlePart(pend)
	}
	w.mu.Unlock()
	return res, err
}

// String describes an execution for the log.
func (r execResult) String(o op) string {
	parts := make([]string, len(r.replies))
	for i, x := range r.replies {
		parts[i] = fmtReply(x)
	}
	s := strings.Join(parts, " | ")
	if r.wait > 0 {
		s += fmt.Sprintf(" (WAIT %s, acked %d)", r.wait, r.acked)
	}
	return s
}

// fmtReply renders a reply for the log.
func fmtReply(r any) string {
	switch v := r.(type) {
	case nil:
		return "(nil)"
	case string:
		return strconv.Quote(v)
	case []any:
		parts := make([]string, len(v))
		for i, x := range v {
			parts[i] = fmtReply(x)
		}
		return "[" + strings.Join(parts, " ") + "]"
	case error:
		return "(error) " + v.Error()
	}
	return fmt.Sprint(r)
}

// Acquire implements leader.Store: RedisStore's, with the diagnosis of
// starts around it.
func (cl *client) Acquire(ctx context.Context, id string, ttl time.Duration) (leader.Outcome, leader.Record, error) {
	sent := time.Now()
	cl.w.mu.Lock()
	cl.c.acquireSent(sent)
	cl.w.mu.Unlock()
	out, rec, err := cl.rl.Acquire(ctx, id, ttl)
	cl.w.mu.Lock()
	derr := err
	if errors.Is(err, leader.ErrNotReplicated) {
		derr = nil // answered: the diagnosis counts it as a reply
	}
	cl.c.acquireReturned(sent, out, derr)
	cl.w.mu.Unlock()
	return out, rec, err
}

// Renew implements leader.Store.
func (cl *client) Renew(ctx context.Context, l leader.Lease, ttl time.Duration) error {
	return cl.rl.Renew(ctx, l, ttl)
}

// Release implements leader.Store.
func (cl *client) Release(ctx context.Context, l leader.Lease) error {
	return cl.rl.Release(ctx, l)
}

// Inspect implements leader.Store.
func (cl *client) Inspect(ctx context.Context) (leader.Record, error) {
	return cl.rl.Inspect(ctx)
}

// RequestResign implements leader.Store.
func (cl *client) RequestResign(ctx context.Context, term uint64) (int64, error) {
	return cl.rl.RequestResign(ctx, term)
}

// Checkpoint implements leader.Checkpointer.
func (cl *client) Checkpoint(ctx context.Context, l leader.Lease, key string, n int64) error {
	cl.w.mu.Lock()
	f := cl.w.fn(cl.idx, l.Term)
	f.cpSent[key] = append(f.cpSent[key], n)
	cl.w.mu.Unlock()
	done := cl.partOfFunction(ctx, l.Term)
	err := cl.rl.Checkpoint(ctx, l, key, n)
	done()
	return err
}

// partOfFunction counts a store call made by the worker's cron goroutine
// as part of the term's function while its caller waits for it: until the
// call returns, or the term's context ends (leader.Elector abandons such a
// call then, so the function no longer waits for it; the request may still
// execute, fenced by the lease value like any late request). The returned
// func ends it; it and the context's end may both come, once counts.
func (cl *client) partOfFunction(ctx context.Context, term uint64) (done func()) {
	cl.w.mu.Lock()
	f := cl.w.fn(cl.idx, term)
	f.jobs++
	f.ended = false
	cl.w.mu.Unlock()
	var once sync.Once
	end := func() {
		once.Do(func() {
			cl.w.mu.Lock()
			cl.w.jobEnd(cl.idx, term, "")
			cl.w.mu.Unlock()
		})
	}
	stop := context.AfterFunc(ctx, end)
	return func() {
		stop()
		end()
	}
}

// LoadCheckpoint implements leader.Checkpointer.
func (cl *client) LoadCheckpoint(ctx context.Context, key string) (int64, bool, error) {
	term, inTerm := leader.TermFrom(ctx)
	done := func() {}
	if inTerm {
		done = cl.partOfFunction(ctx, term)
	}
	n, ok, err := cl.rl.LoadCheckpoint(ctx, key)
	if inTerm {
		cl.w.mu.Lock()
		// A reply after ctx ended reaches nobody: the elector's bound
		// (leader.Elector.LoadCheckpoint) returned ctx's error already.
		if err == nil && ctx.Err() == nil {
			cl.w.fn(cl.idx, term).loads[key] = loadSeen{n: n, ok: ok, at: time.Now()}
		}
		cl.w.mu.Unlock()
	}
	done()
	return n, ok, err
}

// Watch implements leader.Store: SUBSCRIBE, which may be slow (a dial that
// takes long or never completes until ctx ends) or fail.
func (cl *client) Watch(ctx context.Context) (leader.Watch, error) {
	w := cl.w
	// Numbered in order of Run among the subscribes of one instant (as
	// roundTripKey's calls are), not in the order their goroutines came.
	w.quiesceKey(prioProgress, fmt.Sprintf("%03d call %06d %02d", cl.idx, runOf(ctx), opWatch))
	w.mu.Lock()
	cl.n[opWatch]++
	n := cl.n[opWatch]
	now := time.Now()
	r := keyed(w.p.Seed, uint64(cl.idx)+1, uint64(opWatch), n)
	var fail, hang bool
	d := r.dur(20*time.Microsecond, time.Millisecond)
	if w.faulty(now) {
		in := w.p.Intensity
		fail = r.chance(0.1 * in)
		switch x := r.float(); {
		case x < 0.03*in:
			hang = true
		case x < 0.15*in:
			d = r.logDur(w.p.Cfg.RenewDeadline/2, 3*w.p.Cfg.TTL)
		}
	}
	desc := fmt.Sprintf("subscribe takes %s", d)
	if hang {
		desc = "subscribe hangs until Run's context ends"
	}
	if fail {
		desc += ", then fails"
	}
	w.event(cl.idx, evSend, opWatch, n, int64(d), 0, " "+desc)
	w.mu.Unlock()

	var tc <-chan time.Time
	if !hang {
		t := time.NewTimer(cl.wake(now.Add(d)).Sub(now))
		defer t.Stop()
		tc = t.C
	}
	select {
	case <-tc:
	case <-ctx.Done():
		return nil, fmt.Errorf("subscribe: %w", ctx.Err())
	case <-w.stop:
		return nil, errClosed
	}
	if fail {
		return nil, errSubscribe
	}
	wt := &watch{w: w, cand: cl.idx, events: make(chan leader.Event), stop: make(chan struct{}), done: make(chan struct{}), kick: make(chan struct{}, 1)}
	w.mu.Lock()
	w.watches[wt] = struct{}{}
	w.event(cl.idx, evReturn, opWatch, n, 0, 0, "subscribed")
	w.mu.Unlock()
	go wt.loop()
	return wt, nil
}

// watch delivers the notices published while it is connected, each
// delayed or lost by the network; it is not live for a while after the
// server restarted or failed over.
type watch struct {
	w         *world
	cand      int
	events    chan leader.Event
	stop      chan struct{}
	done      chan struct{}
	kick      chan struct{}
	once      sync.Once
	q         []queued // under w.mu, by due time
	notices   uint64   // under w.mu
	downUntil time.Time
}

type queued struct {
	at time.Time
	ev leader.Event
}

func (wt *watch) Events() <-chan leader.Event { return wt.events }

func (wt *watch) Live() bool {
	wt.w.mu.Lock()
	defer wt.w.mu.Unlock()
	return !time.Now().Before(wt.downUntil)
}

func (wt *watch) Close() error {
	wt.once.Do(func() {
		close(wt.stop)
		<-wt.done
		wt.w.mu.Lock()
		delete(wt.w.watches, wt)
		wt.w.mu.Unlock()
		close(wt.events)
	})
	return nil
}

// loop is the watch's one goroutine, stopped by Close or teardown.
func (wt *watch) loop() {
	defer close(wt.done)
	w := wt.w
	for {
		w.mu.Lock()
		var next *queued
		if len(wt.q) > 0 {
			next = &wt.q[0]
		}
		var at time.Time
		if next != nil {
			at = next.at
		}
		w.mu.Unlock()
		var tc <-chan time.Time
		var t *time.Timer
		if next != nil {
			t = time.NewTimer(time.Until(at))
			tc = t.C
		}
		fired := false
		select {
		case <-wt.stop:
		case <-w.stop:
		case <-wt.kick:
			fired = true
		case <-tc:
			fired = true
		}
		if t != nil {
			t.Stop()
		}
		if !fired {
			return
		}
		w.mu.Lock()
		if len(wt.q) == 0 || time.Now().Before(wt.q[0].at) {
			w.mu.Unlock()
			continue
		}
		ev := wt.q[0].ev
		wt.q = wt.q[1:]
		w.mu.Unlock()
		select {
		case wt.events <- ev:
		case <-wt.stop:
			return
		case <-w.stop:
			return
		}
	}
}

// publish sends a notice to every watch, under w.mu.
func (w *world) publish(now time.Time, ev leader.Event) {
	for _, wt := range w.sortedWatches() {
		wt.notices++
		r := keyed(w.p.Seed, uint64(wt.cand)+1, uint64(opNotice), wt.notices)
		if now.Before(wt.downUntil) {
			continue
		}
		d := r.dur(20*time.Microsecond, time.Millisecond)
		if w.faulty(now) {
			if r.chance(0.05 * w.p.Intensity) {
				w.event(wt.cand, evFault, opNotice, wt.notices, 0, 0, "notice lost")
				continue
			}
			if r.chance(0.05 * w.p.Intensity) {
				d = r.logDur(time.Millisecond, w.p.Cfg.TTL)
			}
		}
		q := queued{at: now.Add(d), ev: ev}
		i := sort.Search(len(wt.q), func(i int) bool { return wt.q[i].at.After(q.at) })
		wt.q = append(wt.q, queued{})
		copy(wt.q[i+1:], wt.q[i:])
		wt.q[i] = q
		select {
		case wt.kick <- struct{}{}:
		default:
		}
	}
}

func (w *world) sortedWatches() []*watch {
	ws := make([]*watch, 0, len(w.watches))
	for wt := range w.watches {
		ws = append(ws, wt)
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].cand < ws[j].cand })
	return ws
}

// disconnectWatches drops every subscription for a while (a restart or a
// failover closes connections); notices published meanwhile are lost.
func (w *world) disconnectWatches(now time.Time) {
	for _, wt := range w.sortedWatches() {
		r := keyed(w.p.Seed, uint64(wt.cand)+1, uint64(opWatch), 1<<40+w.epoch)
		wt.downUntil = now.Add(r.dur(time.Millisecond, w.p.Cfg.TTL))
	}
}

// hashKey is FNV-1a of key, folded to 31 bits.
func hashKey(key string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	return (h ^ h>>32) & 0x7fffffff
}

// runTag is the context key of the number of the Run a call belongs to.
type runTag struct{}

// withRun tags ctx with the number of the driver's Run it is for.
func withRun(ctx context.Context, run int) context.Context {
	return context.WithValue(ctx, runTag{}, run)
}

// runOf is the Run number withRun put in ctx, or 0.
func runOf(ctx context.Context) int {
	n, _ := ctx.Value(runTag{}).(int)
	return n
}
