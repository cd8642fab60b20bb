package lock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/solo-run/solo/internal/seeded"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/fence"
)

// Mutex is one named lock. Make it with Client.Mutex; it is safe for
// concurrent use.
type Mutex struct {
	c     *Client
	name  string
	cfg   Config
	fixed bool
	// inline: Lock, TryLock and Unlock send their calls on the caller's
	// goroutine (WithInlineCalls, or a client that honours deadlines).
	inline bool
	// ctxBound: the client honours context deadlines, so an inline call
	// gets one at RenewDeadline.
	ctxBound bool
	fair     bool // WithFair
	// grants: a fair release may grant the lock to the queue's head
	// (the Redis store; not the simulator's).
	grants  bool
	key     any // holdKey, boxed once (a context lookup would box it every time)
	channel string
	st      store
	log     *zap.Logger
	// settle is nil but in the module's simulator
	// (internal/lockseam.WithSettle): a wait that could end in two ways
	// at one fake instant settles, then decides by a fixed order.
	settle func()
}

// holdKey is the context key of a hold: one per Client and lock (prefix
// and name), so a context can carry holds of several locks, and a hold is
// re-entered only through the Client that made it (another Client may
// talk to another Redis, where the hold does not exist).
type holdKey struct {
	c    *Client
	lock string
}

// Name returns the lock's name.
func (m *Mutex) Name() string { return m.name }

// Config returns the timings in use, defaults applied.
func (m *Mutex) Config() Config { return m.cfg }

// WithHold returns a copy of ctx that carries h, so that Lock and TryLock
// with it re-enter h's lock instead of waiting for it. Hold.Context already
// carries its hold.
func WithHold(ctx context.Context, h *Hold) context.Context {
	return context.WithValue(ctx, h.l.m.key, h)
}

// HoldFrom returns the hold of m's lock carried by ctx, if any.
func (m *Mutex) HoldFrom(ctx context.Context) (*Hold, bool) {
	h, ok := ctx.Value(m.key).(*Hold)
	return h, ok
}

// Lock blocks until it holds the lock or ctx ends, and returns the hold.
//
// If ctx carries a hold of this lock (Hold.Context, WithHold) that is
// still held, Lock re-enters it: the hold count in Redis grows by one and
// the new Hold shares the term; the lock is released only when every hold
// of the term was unlocked. A context that does not carry the hold never
// re-enters: it waits like any other owner. If the carried hold was lost,
// Lock returns an error wrapping ErrLockLost.
//
// While another owner holds the lock, Lock waits for the release notice or
// the holder's remaining TTL, whichever comes first; it never polls at a
// fixed interval. ctx bounds only the wait: the hold's context does not
// inherit its cancellation. Lock returns ctx's error (joined with the
// last Redis error, if any) when ctx ends first, and ErrClosed after the
// Client was closed. Redis errors are retried. Every Redis call is bounded
// by RenewDeadline (see WithInlineCalls for how); an acquire confirmed
// after its send time + RenewDeadline is released, never held.
func (m *Mutex) Lock(ctx context.Context) (*Hold, error) { return m.lock(ctx, true) }

// TryLock makes one attempt: it returns the hold, or ErrNotObtained when
// another owner holds the lock, or another error (Redis, ctx) with nothing
// held. With a context carrying a hold of this lock it re-enters, as Lock.
func (m *Mutex) TryLock(ctx context.Context) (*Hold, error) { return m.lock(ctx, false) }

// LockTimeout is Lock that gives up after d (or when ctx ends).
func (m *Mutex) LockTimeout(ctx context.Context, d time.Duration) (*Hold, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return m.lock(ctx, true)
}

func (m *Mutex) lock(ctx context.Context, wait bool) (*Hold, error) {
	if h, ok := m.HoldFrom(ctx); ok {
		held, err := m.reenter(ctx, h)
		if held != nil || err != nil {
			return held, err
		}
		// The carried hold's term was released: take the lock anew.
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	call := lockCall{seq: m.c.seq.Add(1)}
	var (
		w       *waiter
		queued  bool // fair: this call has a slot in the queue
		held    bool // the call returns a hold: its waiter passes no wake-up on
		lastErr error
		rng     *rand.Rand
		// heldSent, heldSeen: the send time of the last attempt that
		// found the lock held, and the last term minted then (fair).
		heldSent time.Time
		heldSeen uint64
	)
	since := time.Now()
	defer func() {
		if w != nil {
			m.c.unsubscribe(w, !held)
		}
	}()
	var grantOwn string // fair: the owner a release grants this call the lock under
	if m.grants && wait {
		grantOwn = grantOwner(m.c.callID(call.seq))
	}
	giveUp := func(err error) (*Hold, error) {
		// An attempt whose outcome is unknown may have queued the call
		// (and a release granted it the lock since): its grant goes too.
		m.endCall(ctx, &call, queued || (grantOwn != "" && len(call.unknown) > 0))
		return nil, err
	}
	if wait {
		// Join the Client's waiters for the lock now when its
		// subscription is live already (others wait): the first attempt
		// then needs no second one once subscribed, as no notice can fall
		// between it and the wait.
		var starving bool
		w, starving = m.c.join(m.channel, grantCall(grantOwn), m.fair, since, starveAfter)
		if starving {
			// A waiter of this Client has waited longer than starveAfter:
			// go behind it, as sync.Mutex does in starvation mode, so that
			// a holder that locks again at once cannot pass it forever.
			// The release wakes the queue's head; this call waits to be
			// the head (RetryInterval bounds a wake-up that never comes).
			if w == nil {
				var err error
				if w, err = m.c.subscribe(m.channel, "", false, since); err != nil {
					return nil, err
				}
			}
			rng = m.rand(ctx)
			if ok, _ := m.sleep(ctx, w, jitter(rng, m.cfg.RetryInterval)); !ok {
				return nil, m.waitErr(ctx)
			}
		}
	}
	for {
		// Every attempt has an owner of its own, so that nothing aimed at
		// one attempt (the release of a late acquire, an undo, an
		// abandon, the attempt itself landing late) can act on another's
		// hold, or on the lock after this call's Unlock.
		owner := m.c.owner(call.seq, &call.n)
		adopt := call.unknown
		if grantOwn != "" {
			// A grant to this call is adopted as the hold of an earlier
			// attempt would be.
			adopt = append(slices.Clip(adopt), grantOwn)
		}
		// A notice sent after this attempt lands reaches w (when set) if
		// its subscription is live now.
		live := w != nil && w.live()
		// The send time is taken before the request: the server sets the
		// expiry later still, so a deadline measured from here is safe.
		sent := time.Now()
		rep, err := m.acquire(ctx, owner, adopt, wait)
		err = leader.RedisConfig(err)
		if err != nil {
			switch {
			case errors.Is(err, ErrNotReplicated):
				// Taken (or adopted), but too few replicas have it: a
				// failover could lose it. Handed back by its exact
				// field, never held; its outcome is known.
				field := rep.fieldOf(owner)
				call.unknown = slices.DeleteFunc(call.unknown, func(o string) bool { return o == ownerOf(field) })
				call.spend(field, grantOwn)
				m.releaseField(ctx, field)
			case !errors.Is(err, errNotSent):
				// A call the batcher never sent took nothing; any other
				// may still land.
				call.unknown = append(call.unknown, owner)
			}
			if ctx.Err() != nil {
				return giveUp(errors.Join(ctx.Err(), lastErr))
			}
			if !wait || errors.Is(err, leader.ErrRedisConfig) {
				// A configuration error (an ACL without a command, key
				// or channel the scripts need): retrying cannot cure it.
				return giveUp(err)
			}
			if lastErr == nil {
				m.log.Warn("acquire failed; retrying", zap.Error(err))
			}
			lastErr = err
			if rng == nil {
				rng = m.rand(ctx)
			}
			if ok, _ := m.sleep(ctx, w, jitter(rng, m.cfg.RetryInterval)); !ok {
				return giveUp(errors.Join(m.waitErr(ctx), lastErr))
			}
			continue
		}
		if rep.code == codeAdopted && slices.Contains(call.spent, rep.field) {
			// A grant ("TERM CALL.0", adoptable by every attempt) that
			// this call handed back already, and whose hand-back may
			// still land: held now, it would be deleted under the hold.
			// Handed back again, never held.
			m.releaseField(ctx, rep.field)
			continue
		}
		if rep.code == codeAcquired || rep.code == codeAdopted {
			if rep.code == codeAdopted {
				// An earlier attempt's hold, from now on this call's
				// hold (or released by held): never abandoned.
				call.unknown = slices.DeleteFunc(call.unknown, func(o string) bool { return o == ownerOf(rep.field) })
			}
			h, err := m.held(ctx, owner, rep, sent)
			if err == nil {
				held = true
				m.endCall(ctx, &call, false)
				return h, nil
			}
			call.spend(rep.fieldOf(owner), grantOwn) // held handed it back
			if !wait || ctx.Err() != nil || errors.Is(err, ErrClosed) {
				return giveUp(err)
			}
			continue // confirmed too late: released; try again
		}
		if rep.code != codeHeld {
			return giveUp(fmt.Errorf("lock %s: unexpected acquire outcome %d", m.name, rep.code))
		}
		if !wait {
			if rep.holder == "" {
				return giveUp(fmt.Errorf("%w: %s: waiters are queued (fair)", ErrNotObtained, m.name))
			}
			return giveUp(fmt.Errorf("%w: %s held by %s", ErrNotObtained, m.name, rep.holder))
		}
		queued = m.fair
		heldSent, heldSeen = sent, rep.seen
		if !live {
			// First wait: subscribe, and try once more when the
			// subscription is live, so no release notice can fall between
			// the attempt and the wait.
			if w == nil {
				if w, err = m.c.subscribe(m.channel, grantCall(grantOwn), m.fair, since); err != nil {
					return giveUp(err)
				}
			}
			if !m.waitReady(ctx, w, rep.pttl) {
				return giveUp(errors.Join(m.waitErr(ctx), lastErr))
			}
			continue
		}
		if rng == nil {
			rng = m.rand(ctx)
		}
		ok, grant := m.sleep(ctx, w, m.heldWait(rep.pttl, rng))
		if !ok {
			return giveUp(errors.Join(m.waitErr(ctx), lastErr))
		}
		if grant == "" || slices.Contains(call.spent, grant) {
			continue
		}
		if h, err, done := m.granted(ctx, grant, heldSent, heldSeen); done {
			if err != nil {
				return giveUp(err)
			}
			held = true
			m.endCall(ctx, &call, false)
			return h, nil
		}
		// Not provably after the last attempt, or that attempt is too
		// old: the next attempt adopts the grant, its deadline counted
		// from its own send time.
	}
}

// isClosed reports whether ch is closed.
func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// starveAfter is how long a waiter may wait before new Lock calls of its
// Client go behind it instead of trying first (sync.Mutex: 1 ms).
const starveAfter = time.Millisecond

// grantCall is the call of a grant owner ("CALL.0"), "" for "".
func grantCall(owner string) string {
	if owner == "" {
		return ""
	}
	return callOf(owner)
}

// granted turns a fair release's grant to this call (field "TERM CALL.0")
// into a hold without another round trip, when that is safe: done reports
// whether it did (or failed with err). The hold's deadline is counted
// from sent, the send time of the call's last attempt, which found the
// lock held when the last term minted was seen. A grant with a higher
// term was minted after that attempt landed, so after sent: its expiry on
// the server, grant time + TTL, is later than sent + TTL, which is all
// the timing rule asks (docs/design.md, Timing). A grant whose term is
// not above seen (a grant that lapsed before that attempt, reported
// late), or an attempt older than RenewInterval (the hold would have to
// renew at once), is left to the next attempt, which adopts it. So is
// every grant under MinReplicas: a release never waits for replicas, and
// the adopting attempt pipelines its WAIT, as every acquire does. So is a
// grant while the Client's last read of the server's eviction policy was
// not safe (grantable): the adopting attempt's acquire checks it.
func (m *Mutex) granted(ctx context.Context, field string, sent time.Time, seen uint64) (h *Hold, err error, done bool) {
	t, _, _ := strings.Cut(field, " ")
	term, perr := strconv.ParseUint(t, 10, 64)
	if perr != nil || seen == 0 || term <= seen || time.Since(sent) >= m.cfg.RenewInterval || m.cfg.MinReplicas > 0 ||
		!m.grantable() {
		return nil, nil, false
	}
	h, err = m.held(ctx, ownerOf(field), acquireReply{code: codeAdopted, term: term, field: field}, sent)
	return h, err, true
}

// lockCall is one Lock or TryLock call. Its attempts have owners of their
// own, "BASE-SEQ.N"; the call is "BASE-SEQ" (a fair lock's queue holds
// calls).
type lockCall struct {
	seq uint64
	n   uint64 // attempts made
	// unknown lists the owners of the attempts whose outcome is unknown
	// (no reply) and that nothing has undone: they may still land. The
	// next attempt may adopt what one of them took; when the call ends,
	// they are abandoned.
	unknown []string
	// spent lists the grant fields this call handed back (confirmed too
	// late, or too few replicas): never held by it, as the hand-back may
	// land after any later attempt. Only a grant can come back: its owner
	// "CALL.0" is adoptable by every attempt of the call.
	spent []string
}

// spend records field, handed back by the call, in spent when its owner is
// the call's grant owner grantOwn: no other field can be adopted again, so
// spent does not grow with every failed attempt.
func (c *lockCall) spend(field, grantOwn string) {
	if grantOwn != "" && ownerOf(field) == grantOwn {
		c.spent = append(c.spent, field)
	}
}

// ownerOf returns the owner of a field "TERM OWNER".
func ownerOf(field string) string { return field[strings.IndexByte(field, ' ')+1:] }

// endCall ends call: the attempts that may still land are abandoned (a
// fair call also leaves the queue: queued), on a goroutine of the
// Client's, so the caller returns at once. The abandon leaves a tombstone
// per attempt, so it is right in either order with a request still on
// its way: one that lands after it takes nothing, one that landed before
// is undone. It never names the hold the call returns.
func (m *Mutex) endCall(ctx context.Context, call *lockCall, queued bool) {
	if len(call.unknown) == 0 && !queued {
		return
	}
	id, owners := m.c.callID(call.seq), call.unknown
	call.unknown = nil
	if queued && m.grants {
		// A release may have granted the lock to the call just now: the
		// abandon deletes that grant too (and leaves it a tombstone).
		owners = append(slices.Clip(owners), grantOwner(id))
	}
	ctx = context.WithoutCancel(ctx)
	if !m.c.spawn(func() { m.abandon(ctx, id, owners) }) {
		m.abandon(ctx, id, owners) // closed: at once, best effort
	}
}

// rand returns the source of the call's jitter: the one the module's
// simulator carries in ctx (internal/seeded), so that its schedules
// replay exactly, or a new one.
func (m *Mutex) rand(ctx context.Context) *rand.Rand {
	if r, ok := seeded.From(ctx); ok {
		return r
	}
	return newRand()
}

// heldWait is how long a waiter sleeps, unless a notice comes first,
// after an attempt that found the lock held with pttl left (fair: or free
// but another waiter's turn, pttl then being the time left to the queue
// head's slot): until the holder's lease runs out (a crashed holder never
// sends a notice), plus a little jitter so that waiters do not all hit
// Redis in the same millisecond; RetryInterval without a pttl.
//
// A fair waiter sleeps at most its own TTL (plus the jitter), for two
// reasons. When it was not its turn, the head may take the lock at once
// and die holding it, which no notice tells: the lock then expires a TTL
// later, long before the head's slot would have lapsed (up to
// 2×TTL + RetryInterval). And its own slot, refreshed by each attempt to
// 2×TTL + RetryInterval, must outlast the sleep, or the waiter is dropped
// from the queue and joins it again at the tail; the head's slot, or a
// holder with a longer lease than this Mutex's TTL, could outlast it.
func (m *Mutex) heldWait(pttl time.Duration, rng *rand.Rand) time.Duration {
	if pttl <= 0 {
		return m.cfg.RetryInterval
	}
	if m.fair {
		pttl = min(pttl, m.cfg.TTL)
	}
	return pttl + time.Millisecond + randDuration(rng, min(m.cfg.TTL/100, 20*time.Millisecond))
}

// waitErr is ctx's error, or ErrClosed once the Client is closed.
func (m *Mutex) waitErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return ErrClosed
}

// waitReady waits until w's subscription is live, at most bound (the
// holder's time left, capped by RetryInterval): a subscription that is
// slow to come only costs that wait. Redlock: until the subscription on
// any master is live (a release notices every master it reaches), so a
// master down does not cost the first wait its whole bound.
func (m *Mutex) waitReady(ctx context.Context, w *waiter, bound time.Duration) bool {
	if bound <= 0 || bound > m.cfg.RetryInterval {
		bound = m.cfg.RetryInterval
	}
	t := time.NewTimer(bound)
	defer t.Stop()
	if len(w.also) > 0 {
		cases := []reflect.SelectCase{
			{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
			{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(m.c.ctx.Done())},
			{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(t.C)},
			{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.ready)},
		}
		for _, x := range w.also {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(x.ready)})
		}
		chosen, _, _ := reflect.Select(cases)
		return m.settled(ctx, chosen >= 2)
	}
	select {
	case <-w.ready:
		return m.settled(ctx, true)
	case <-t.C:
		return m.settled(ctx, true)
	case <-ctx.Done():
		return m.settled(ctx, false)
	case <-m.c.ctx.Done():
		return m.settled(ctx, false)
	}
}

// settled returns ok, except that under the simulator's settle (see
// Mutex.settle) a wait that ended ready (ok) at the instant ctx or the
// Client ended reports the end, as the select might have.
func (m *Mutex) settled(ctx context.Context, ok bool) bool {
	if m.settle == nil {
		return ok
	}
	m.settle() // on every path: the instant's other goroutines have run
	return ok && ctx.Err() == nil && m.c.ctx.Err() == nil
}

// sleep waits d, or until a release notice or a grant (its field) when
// w is set. It returns false when ctx ends or the Client closes.
func (m *Mutex) sleep(ctx context.Context, w *waiter, d time.Duration) (bool, string) {
	t := time.NewTimer(d)
	defer t.Stop()
	var (
		notify chan struct{}
		grant  chan string
	)
	if w != nil {
		notify, grant = w.notify, w.grant
	}
	var (
		ok bool
		g  string
	)
	select {
	case <-t.C:
		ok = true
	case <-notify:
		ok = true
	case g = <-grant:
		ok = true
	case <-ctx.Done():
	case <-m.c.ctx.Done():
	}
	if m.settle == nil {
		return ok, g
	}
	// Under the simulator's settle, whatever else came at this instant
	// is taken too, in a fixed order: a grant, then the end of ctx or the
	// Client, then a notice (drained: the next attempt is the retry it
	// asks for) or the timer.
	m.settle()
	if g == "" {
		select {
		case g = <-grant:
		default:
		}
	}
	if notify != nil {
		select {
		case <-notify:
		default:
		}
	}
	if g != "" {
		return true, g
	}
	if ctx.Err() != nil || m.c.ctx.Err() != nil {
		return false, ""
	}
	return true, ""
}

// call runs f in a goroutine of its own, bounded by a local deadline of
// RenewDeadline and by ctx, whatever the Redis client's timeouts: the
// goroutine reports into a one-slot channel, so it never blocks and ends
// when the client returns, even after call gave up on it. The bound's
// context is the one timer: its Done ends the wait at the bound or when
// ctx ends; only the caller cancels it, so a result never races its own
// cancel.
//
// settle is the simulator's (Mutex.settle), nil otherwise: with it, a
// reply that comes at the instant the bound passes, or ctx ends, is
// taken.
func call[T any](ctx context.Context, bound time.Duration, settle func(), f func(ctx context.Context) (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	cctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	ch := make(chan result, 1)
	go func() {
		v, err := f(cctx)
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		if settle != nil {
			settle() // on every path: the instant's other goroutines have run
		}
		return r.v, r.err
	case <-cctx.Done():
		if settle != nil {
			settle()
			select {
			case r := <-ch:
				return r.v, r.err
			default:
			}
		}
		var zero T
		err := errCallBound
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		// The request may still go out until f returns: its outcome is
		// unknown.
		return zero, err
	}
}

// inlineCtx returns the context of an inline call: ctx with a deadline
// at RenewDeadline from now when the client honours deadlines and ctx has
// none as early. cancel is never nil.
func (m *Mutex) inlineCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if m.ctxBound {
		d := time.Now().Add(m.cfg.RenewDeadline)
		if dl, ok := ctx.Deadline(); !ok || dl.After(d) {
			return context.WithDeadline(ctx, d)
		}
	}
	return ctx, func() {}
}

// The store calls of Lock, TryLock and Unlock: inline (no goroutine, no
// closure), or on a goroutine of their own bounded by RenewDeadline.

func (m *Mutex) acquire(ctx context.Context, owner string, adopt []string, wait bool) (acquireReply, error) {
	if m.inline {
		cctx, cancel := m.inlineCtx(ctx)
		defer cancel()
		return m.st.acquire(cctx, owner, adopt, "", wait)
	}
	return call(ctx, m.cfg.RenewDeadline, m.settle, func(ctx context.Context) (acquireReply, error) {
		return m.st.acquire(ctx, owner, adopt, "", wait)
	})
}

func (m *Mutex) reacquire(ctx context.Context, field string) (acquireReply, error) {
	if m.inline {
		cctx, cancel := m.inlineCtx(ctx)
		defer cancel()
		return m.st.acquire(cctx, "", nil, field, false)
	}
	return call(ctx, m.cfg.RenewDeadline, m.settle, func(ctx context.Context) (acquireReply, error) {
		return m.st.acquire(ctx, "", nil, field, false)
	})
}

func (m *Mutex) release(ctx context.Context, field string, last bool) (int64, error) {
	if m.inline {
		sent := time.Now()
		cctx, cancel := m.inlineCtx(ctx)
		defer cancel()
		n, err := m.st.release(cctx, field, last)
		if err == nil && n < 0 && last && time.Since(sent) > m.cfg.RenewDeadline {
			// "Not held", answered after the bound a call on a goroutine
			// has (a client that ignores deadlines): a second run of the
			// release landing after its first run's mark lapsed (a TTL)
			// answers so too. Its outcome is unknown, as there.
			return 0, errCallBound
		}
		return n, err
	}
	return call(ctx, m.cfg.RenewDeadline, m.settle, func(ctx context.Context) (int64, error) {
		return m.st.release(ctx, field, last)
	})
}

// makeField returns "TERM OWNER", built in one allocation.
func makeField(term uint64, owner string) string {
	var buf [96]byte
	b := strconv.AppendUint(buf[:0], term, 10)
	b = append(b, ' ')
	b = append(b, owner...)
	return string(b)
}

// held turns a confirmed acquire into a hold, unless its reply came too
// late (or ctx ended meanwhile): then the lock is handed back.
func (m *Mutex) held(ctx context.Context, owner string, rep acquireReply, sent time.Time) (*Hold, error) {
	term, field := rep.term, rep.fieldOf(owner)
	if late := time.Since(sent.Add(m.cfg.RenewDeadline)); late >= 0 {
		// The lock may already have expired and passed to another owner.
		// Never hold on it; the release compares the exact field, so it
		// cannot hit another owner's hold.
		m.log.Warn("acquire confirmed after its renew deadline; not holding it",
			zap.Uint64("term", term), zap.Duration("late_by", late))
		m.releaseField(ctx, field)
		return nil, errLate
	}
	if err := ctx.Err(); err != nil {
		m.releaseField(ctx, field)
		return nil, err
	}
	l := newLease(m, term, field, sent)
	if !m.c.track(l) {
		l.end(ErrClosed)
		m.releaseField(ctx, field)
		return nil, ErrClosed
	}
	h := l.newHold(ctx, &l.first)
	l.start(sent)
	if ce := m.log.Check(zap.DebugLevel, "acquired"); ce != nil {
		ce.Write(zap.Uint64("term", term))
	}
	return h, nil
}

// releaseField hands back a lock this process will not hold, within
// RenewDeadline.
func (m *Mutex) releaseField(ctx context.Context, field string) {
	_, err := call(context.WithoutCancel(ctx), m.cfg.RenewDeadline, m.settle, func(ctx context.Context) (int64, error) {
		return m.st.release(ctx, field, true)
	})
	if err != nil {
		m.log.Debug("release of a lock not held on", zap.Error(err))
	}
}

// abandon ends the attempts owners of call, which may still land (see
// endCall), within RenewDeadline.
func (m *Mutex) abandon(ctx context.Context, id string, owners []string) {
	_, err := call(ctx, m.cfg.RenewDeadline, m.settle, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, m.st.abandon(ctx, id, owners)
	})
	if ce := leader.RedisConfig(err); errors.Is(ce, leader.ErrRedisConfig) {
		// Not an outage: no retry cures it (the entries lapse on their
		// own). Asynchronous, so logged rather than returned.
		m.log.Error("abandon refused by redis: a configuration error, retrying will not cure it; fix it", zap.Error(ce))
	} else if err != nil {
		m.log.Debug("abandon of attempts whose outcome is unknown", zap.Error(err))
	}
}

// reenter adds one hold to the term of h. It returns (nil, nil) when that
// term was released: the caller takes the lock anew.
func (m *Mutex) reenter(ctx context.Context, h *Hold) (*Hold, error) {
	l := h.l
	l.mu.Lock()
	switch {
	case l.lostCause != nil:
		cause := l.lostCause
		l.mu.Unlock()
		return nil, heldLostError(m.name, cause)
	case l.released || l.ended || l.refs == 0:
		// The term is over, or its last Unlock is under way (it counted
		// the last hold out, and its release deletes whatever the count):
		// a re-entry now would be deleted with it.
		l.mu.Unlock()
		return nil, nil
	}
	l.refs++ // counted before the request, so no Unlock thinks it is the last
	l.mu.Unlock()
	rep, err := m.reacquire(ctx, l.field)
	if err == nil && rep.code == codeReentered {
		l.mu.Lock()
		cause, ended := l.lostCause, l.ended
		l.mu.Unlock()
		switch {
		case cause != nil:
			// Answered after the hold was lost: the term is over.
			l.unref(ctx)
			return nil, heldLostError(m.name, cause)
		case ended:
			// Never a dead hold with a nil error: the term ended while
			// the re-entry was on its way.
			l.unref(ctx)
			return nil, fmt.Errorf("lock %s: hold in context: %w", m.name, ErrLockLost)
		}
		return l.newHold(ctx, new(Hold)), nil
	}
	// Not re-entered (or unknown: a count Redis may have added is dropped
	// by the last Unlock, which deletes whatever the count).
	l.unref(ctx)
	if err != nil {
		return nil, leader.RedisConfig(fmt.Errorf("lock %s: re-enter: %w", m.name, err))
	}
	if rep.code == codeGone {
		l.expire(ErrLockLost)
		return nil, fmt.Errorf("lock %s: hold in context: %w", m.name, ErrLockLost)
	}
	return nil, fmt.Errorf("lock %s: unexpected re-enter outcome %d", m.name, rep.code)
}

func newRand() *rand.Rand { return rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())) }

// jitter returns d plus up to 20%.
func jitter(r *rand.Rand, d time.Duration) time.Duration { return d + randDuration(r, d/5) }

func randDuration(r *rand.Rand, d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(r.Int64N(int64(d)))
}

// lease is one term's holding of a lock, shared by the term's holds (the
// first and its re-entries). It owns its watchdog: two timers, one that
// renews every RenewInterval from the last successful renewal's send time
// and one that ends the lease at that send time + RenewDeadline. Neither
// holds a goroutine between firings, so an uncontended hold costs no
// goroutine start and no join; a renewal runs on its timer's goroutine
// and is awaited by stopWatchdog. The deadline timer is armed by the
// first renewal, before its request is sent (a fixed lease arms it at
// once): until then the renewal timer, due earlier, is the only one, so a
// hold shorter than RenewInterval costs one timer. The watchdog stops
// when the last hold is unlocked, when the lease is lost, or when the
// Client closes.
type lease struct {
	m     *Mutex
	term  uint64
	field string // "TERM OWNER": the hash field in Redis
	ctx   context.Context
	// cancel ends ctx, which bounds a renewal in flight: every
	// stopWatchdog comes after it. end calls it, then ends every hold.
	cancel context.CancelCauseFunc
	first  Hold // the first hold of the term, allocated with the lease

	deadline *time.Timer // at last successful renewal's send time + RenewDeadline; nil until armed
	expired  atomic.Bool // set by the deadline timer before it cancels

	wmu      sync.Mutex // guards the watchdog fields below
	stopped  bool
	renewAt  *time.Timer // nil for a fixed lease
	lastOK   time.Time   // send time of the last successful renewal (or the acquire)
	failing  bool
	inflight sync.WaitGroup

	mu        sync.Mutex         // guards the fields below
	ended     bool               // end was called: holds made from now on start ended
	firstMade bool               // first is a hold (its cancel is set)
	more      map[*Hold]struct{} // the re-entries' holds not unlocked (made on the first)
	refs      int                // holds not unlocked, plus re-entries in flight
	released  bool               // the last Unlock deleted the lock
	lostCause error              // non-nil once the lease is lost
}

func newLease(m *Mutex, term uint64, field string, sent time.Time) *lease {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &lease{m: m, term: term, field: field, ctx: ctx, cancel: cancel, lastOK: sent}
}

// start arms the renewals, or the deadline of a fixed lease.
func (l *lease) start(sent time.Time) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.m.fixed {
		l.deadline = time.AfterFunc(time.Until(sent.Add(l.m.cfg.RenewDeadline)), l.onDeadline)
		return
	}
	l.renewAt = time.AfterFunc(time.Until(sent.Add(l.m.cfg.RenewInterval)), l.renew)
}

// onDeadline runs on the deadline timer's goroutine: the lease is over.
func (l *lease) onDeadline() {
	cause := ErrRenewDeadline
	if l.m.fixed {
		cause = ErrLeaseExpired
	}
	l.expired.Store(true)
	l.expire(cause)
	l.logLoss() // after the cancel: a slow log sink cannot delay it
}

// expire marks the lease lost with cause and cancels every hold's context.
func (l *lease) expire(cause error) {
	l.mu.Lock()
	if l.lostCause == nil && !l.released {
		l.lostCause = cause
	}
	l.mu.Unlock()
	l.end(cause)
}

// end cancels the lease's context and every hold's, synchronously (the
// holds' contexts are not children of the lease's: a child would cost
// the lease a Done channel and a children map per hold). A hold made
// after end starts cancelled (newHold).
func (l *lease) end(cause error) {
	l.cancel(cause)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ended = true
	// Under mu, so no hold is missed or made meanwhile. A cancel only
	// cancels the context's children and starts its AfterFuncs: it never
	// calls back into the lease. The re-entries go first: whoever sees
	// the first hold end (a caller waiting on its Done) finds every hold
	// of the term ended already.
	for h := range l.more {
		h.cancel(cause)
	}
	if l.firstMade {
		l.first.cancel(cause)
	}
}

// stopWatchdog stops the timers and waits for a renewal in flight, which
// the lease's cancel (always before stopWatchdog) has cancelled.
func (l *lease) stopWatchdog() {
	l.wmu.Lock()
	l.stopped = true
	if l.deadline != nil {
		l.deadline.Stop()
	}
	if l.renewAt != nil {
		l.renewAt.Stop()
	}
	l.wmu.Unlock()
	l.inflight.Wait()
}

// renew runs on the renewal timer's goroutine: one renewal, bounded by
// the time left to the deadline; then it arms the next one (after
// RenewInterval from this send time on success, a quarter of it after a
// failure, until the deadline timer ends the lease).
func (l *lease) renew() {
	cfg := l.m.cfg
	// Logged last, after wmu is released and inflight is done (defers run
	// in reverse): Unlock and Close stop the watchdog under wmu and wait
	// for inflight, and a blocked log sink (a full stderr pipe) must not
	// delay them.
	var logf func()
	defer func() {
		if logf != nil {
			logf()
		}
	}()
	l.wmu.Lock()
	if l.stopped || l.ctx.Err() != nil {
		l.wmu.Unlock()
		return
	}
	l.inflight.Add(1) // under wmu, before stopped is read as false: Wait sees it
	lastOK := l.lastOK
	if l.deadline == nil {
		// Armed before the request: the deadline never waits on it.
		l.deadline = time.AfterFunc(time.Until(lastOK.Add(cfg.RenewDeadline)), l.onDeadline)
	}
	l.wmu.Unlock()
	defer l.inflight.Done()
	defer l.refreshEviction() // after the renewal was handled: never delays one

	now := time.Now()
	left := lastOK.Add(cfg.RenewDeadline).Sub(now)
	if left <= 0 {
		return // the deadline timer is ending the lease
	}
	ok, err := call(l.ctx, left, l.m.settle, func(ctx context.Context) (bool, error) { return l.m.st.renew(ctx, l.field) })

	l.wmu.Lock()
	if l.stopped || l.ctx.Err() != nil {
		l.wmu.Unlock()
		return // stopped, or answered after the deadline ended the lease
	}
	switch {
	case err == nil && ok && !l.expired.Load():
		if l.failing {
			l.failing = false
			logf = func() { l.m.log.Info("renew succeeded again", zap.Uint64("term", l.term)) }
		}
		l.lastOK = now
		l.deadline.Reset(time.Until(now.Add(cfg.RenewDeadline)))
		l.renewAt.Reset(time.Until(now.Add(cfg.RenewInterval)))
	case err == nil && !ok:
		l.expire(ErrLockLost)
		logf = l.logLoss
	case errors.Is(leader.RedisConfig(err), leader.ErrRedisConfig):
		// Refused, and every renewal until the deadline would be too: end
		// the hold now (its key expires on the server; the holds' contexts
		// are cancelled with the error as the cause).
		cerr := leader.RedisConfig(err)
		l.expire(cerr)
		logf = func() {
			l.m.log.Error("renew refused by redis: a configuration error, retrying will not cure it; the hold ends now", zap.Uint64("term", l.term), zap.Error(cerr))
		}
	case err != nil:
		if !l.failing {
			l.failing = true
			logf = func() {
				l.m.log.Warn("renew failed; retrying until the renew deadline", zap.Uint64("term", l.term), zap.Error(err))
			}
		}
		l.renewAt.Reset(max(cfg.RenewInterval/4, time.Millisecond))
	}
	l.wmu.Unlock()
}

func (l *lease) logLoss() {
	cause := context.Cause(l.ctx)
	if errors.Is(cause, ErrUnlocked) || errors.Is(cause, ErrClosed) || errors.Is(cause, ErrLeaseExpired) {
		return
	}
	l.m.log.Error("lock lost", zap.Uint64("term", l.term), zap.NamedError("cause", cause))
}

// newHold makes h (zero; &l.first for the first) a hold of the lease;
// parent gives its context's values.
func (l *lease) newHold(parent context.Context, h *Hold) *Hold {
	h.l = l
	// The hold's context takes its values from parent (and itself), never
	// its cancellation; the lease ends it through end, synchronously, with
	// no goroutine in between: registered under mu, or born ended.
	h.vals = holdValues{Context: context.Background(), parent: fence.WithToken(parent, h.Token()), h: h}
	h.ctx, h.cancel = context.WithCancelCause(&h.vals)
	l.mu.Lock()
	if l.refs == 0 {
		l.refs = 1 // the first hold; a re-entry counted itself before its request
	}
	if h == &l.first {
		l.firstMade = true
	} else {
		if l.more == nil {
			l.more = map[*Hold]struct{}{}
		}
		l.more[h] = struct{}{}
	}
	ended := l.ended
	l.mu.Unlock()
	if ended {
		h.cancel(context.Cause(l.ctx))
	}
	return h
}

// unref drops one reference without a release of its own (a re-entry that
// did not happen). If it was the last, the lease is released as by Unlock.
func (l *lease) unref(ctx context.Context) {
	l.mu.Lock()
	l.refs--
	last := l.refs == 0 && !l.released && l.lostCause == nil
	l.mu.Unlock()
	if last {
		_, _ = l.releaseLast(ctx)
	}
}

// finish records a release's answer: the term is over once its last hold
// went (whatever Redis said: an unconfirmed release leaves the key to
// expire) or Redis deleted the lock.
func (l *lease) finish(n int64, err error) {
	if err == nil && n < 0 {
		l.expire(ErrLockLost)
	}
	l.mu.Lock()
	end := l.refs == 0 || (err == nil && n <= 0)
	if end && l.lostCause == nil {
		l.released = true
	}
	l.mu.Unlock()
	if end {
		l.end(ErrUnlocked)
		l.stopWatchdog()
		l.m.c.untrack(l)
		if err == nil && n == 0 {
			if ce := l.m.log.Check(zap.DebugLevel, "released"); ce != nil {
				ce.Write(zap.Uint64("term", l.term))
			}
		}
	}
}

// Hold is one holding of a lock: the first Lock of a term or a re-entry.
// Its methods are safe for concurrent use.
type Hold struct {
	l        *lease
	ctx      context.Context
	cancel   context.CancelCauseFunc
	unlocked atomic.Bool
	vals     holdValues // the parent of ctx
}

// holdValues is the parent of a hold's context: never done (Done, Err
// and Deadline of Background, so the context package links it to no
// parent), with the hold itself under its lock's key and the values of
// the context Lock was given.
type holdValues struct {
	context.Context // Background
	parent          context.Context
	h               *Hold
}

func (c *holdValues) Value(key any) any {
	if key == c.h.l.m.key {
		return c.h
	}
	return c.parent.Value(key)
}

// Term returns the fencing token: it grows with every new holding of the
// lock (re-entries share their term) and is never reused, even when Redis
// lost its data (the term's floor is the Redis server's clock).
func (h *Hold) Term() uint64 { return h.l.term }

// Holder returns the term's holder ID: unique per acquire attempt (an
// adopted hold keeps the holder ID of the attempt that took it), the holder
// a fence guard checks beside the term (fence.Token.Holder).
func (h *Hold) Holder() string { return ownerOf(h.l.field) }

// Name returns the lock's name.
func (h *Hold) Name() string { return h.l.m.name }

// FenceElection returns the name under which a lock's terms are claimed
// and checked in a fence (leader/fence): "lock:" + the lock's name, apart
// from the election of the same name, whose terms are counted apart.
func FenceElection(lock string) string { return "lock:" + lock }

// Token returns the hold's fencing token: the fence election
// FenceElection(name), the term and the owner. Context carries it, so that
// fence.Guard.Do(h.Context(), fn) writes fenced by this hold (claiming the
// term at its first write).
func (h *Hold) Token() fence.Token {
	return fence.Token{Election: FenceElection(h.l.m.name), Term: h.l.term, Holder: h.Holder()}
}

// Context returns a context that carries the hold (so that Lock with it
// re-enters), its fencing token (Token, for fence.Guard.Do) and the
// values of the context Lock was given, and that is
// cancelled when the hold ends: with ErrUnlocked by Unlock, with
// ErrRenewDeadline when no renewal succeeded within RenewDeadline of the
// last one's send time, with ErrLockLost when a renewal found the lock
// gone, with ErrLeaseExpired at the end of a fixed lease, with ErrClosed
// by Client.Close. context.Cause tells which. It is cancelled before the
// lock can pass to another owner, at least TTL − RenewDeadline (the stop
// budget) before.
func (h *Hold) Context() context.Context { return h.ctx }

// Unlock gives up this hold. The lock is released (deleted, and waiters
// notified) when it was its term's last hold; before that only the count
// in Redis goes down. It returns ErrNotHeld when the hold was already
// unlocked, and an error wrapping ErrLockLost (and the cause, such as
// ErrRenewDeadline) when the hold was lost: nothing is then released, as
// another owner may hold the lock already. ctx bounds the call (as does
// RenewDeadline); the hold counts as unlocked either way, and a lock whose
// release did not go through expires after its TTL. The last release is
// sent even when ctx is done: when ctx's deadline is less than
// RenewDeadline away (or past), it goes on a goroutine of the Client,
// bounded by RenewDeadline, and Unlock returns by ctx's deadline, with
// its error if no answer came by then.
func (h *Hold) Unlock(ctx context.Context) error {
	if !h.unlocked.CompareAndSwap(false, true) {
		return ErrNotHeld
	}
	// The hold ends before any release is sent: a release may let another
	// owner in before its reply comes back — the last one, and also one
	// that is not the last when a re-entry is in flight (counted here, not
	// yet in Redis), which brings Redis's count to zero.
	h.cancel(ErrUnlocked)
	if errors.Is(context.Cause(ctx), ErrUnlocked) {
		ctx = context.WithoutCancel(ctx) // Unlock(h.Context()) still sends its release
	}
	l := h.l
	l.mu.Lock()
	delete(l.more, h) // an unlocked re-entry is not kept until the term ends
	l.refs--
	last := l.refs == 0
	cause := l.lostCause
	l.mu.Unlock()
	if cause != nil {
		if last {
			l.finish(-2, nil)
		}
		return lostError(l.m.name, cause)
	}
	var (
		n   int64
		err error
	)
	if last {
		n, err = l.releaseLast(ctx)
	} else {
		n, err = l.m.release(ctx, l.field, false)
		l.finish(n, err)
	}
	switch {
	case err != nil:
		return leader.RedisConfig(fmt.Errorf("unlock %s: %w", l.m.name, err))
	case n < 0:
		return lostError(l.m.name, ErrLockLost)
	}
	return nil
}

// heldLostError is Lock's error for a carried hold that was lost: it
// wraps ErrLockLost and the cause (such as ErrRenewDeadline).
func heldLostError(name string, cause error) error {
	if errors.Is(cause, ErrLockLost) {
		return fmt.Errorf("lock %s: hold in context: %w", name, cause)
	}
	return fmt.Errorf("lock %s: hold in context: %w (%w)", name, ErrLockLost, cause)
}

func lostError(name string, cause error) error {
	if errors.Is(cause, ErrLockLost) {
		return fmt.Errorf("unlock %s: %w", name, cause)
	}
	return fmt.Errorf("unlock %s: %w (%w)", name, ErrLockLost, cause)
}
