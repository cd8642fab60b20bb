package lock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/solo-run/solo/internal/hooks"
	"github.com/solo-run/solo/leader"
)

// lockCall is one Lock or TryLock call. Its attempts have owners of their
// own, "BASE-SEQ.N"; the call is "BASE-SEQ" (a fair lock's queue holds
// calls).
type lockCall struct {
	m    *Mutex
	seq  uint64
	n    uint64 // attempts made
	wait bool   // Lock: wait while held (TryLock: one attempt)
	// since is when the call began: how long its waiter has waited.
	since time.Time
	// grantOwn is, for a fair call that waits, the owner a release grants
	// it the lock under ("CALL.0"), else "".
	grantOwn string
	w        *waiter // the call's waiter, once it joined the Client's
	queued   bool    // fair: the call has a slot in the queue
	held     bool    // the call returns a hold: its waiter passes no wake-up on
	lastErr  error   // the last Redis error, joined to a wait's end
	rng      *rand.Rand
	// heldSent, heldSeen: the send time of the last attempt that found
	// the lock held, and the last term minted then (fair).
	heldSent time.Time
	heldSeen uint64
	// unknown lists the owners of the attempts whose outcome is unknown
	// (no reply) and that nothing has undone: they may still land. The
	// next attempt may adopt what one of them took; when the call ends,
	// they are abandoned.
	unknown []string
	// retired lists the owners taken out of unknown because the call
	// handed their hold back (confirmed too late, too few replicas): a
	// release of that exact field may still be on its way, so no attempt
	// adopts them again, but a copy of their request may still land, so
	// the call's end abandons them too.
	retired []string
	// spent lists the grant fields this call handed back (confirmed too
	// late, or too few replicas): never held by it, as the hand-back may
	// land after any later attempt. Only a grant can come back: its owner
	// "CALL.0" is adoptable by every attempt of the call.
	spent []string
}

// lock is Lock (wait) and TryLock: a re-entry when ctx carries a hold of
// the lock, else one call of attempts until one holds or the call ends.
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
	c := lockCall{m: m, seq: m.c.seq.Add(1), wait: wait, since: time.Now()}
	defer c.leave()
	if m.grants && wait {
		c.grantOwn = grantOwner(m.c.callID(c.seq))
	}
	if wait {
		if err := c.join(ctx); err != nil {
			return nil, err
		}
	}
	for {
		if h, err, done := c.attempt(ctx); done {
			return h, err
		}
	}
}

// join joins the Client's waiters for the lock now when its subscription
// is live already (others wait): the first attempt then needs no second
// one once subscribed, as no notice can fall between it and the wait.
func (c *lockCall) join(ctx context.Context) error {
	m := c.m
	var starving bool
	c.w, starving = m.c.join(m.channel, grantCall(c.grantOwn), m.fair, c.since, starveAfter)
	if !starving {
		return nil
	}
	// A waiter of this Client has waited longer than starveAfter: go
	// behind it, as sync.Mutex does in starvation mode, so that a holder
	// that locks again at once cannot pass it forever. The release wakes
	// the queue's head; this call waits to be the head (RetryInterval
	// bounds a wake-up that never comes).
	if c.w == nil {
		var err error
		if c.w, err = m.c.subscribe(m.channel, "", false, c.since); err != nil {
			return err
		}
	}
	if ok, _ := m.sleep(ctx, c.w, jitter(c.rand(), m.cfg.RetryInterval)); !ok {
		return m.waitErr(ctx)
	}
	return nil
}

// leave takes the call's waiter out of the Client's waiters.
func (c *lockCall) leave() {
	if c.w != nil {
		c.m.c.unsubscribe(c.w, !c.held)
	}
}

// rand returns the source of the call's jitter, made on first use.
func (c *lockCall) rand() *rand.Rand {
	if c.rng == nil {
		c.rng = c.m.rand(c.seq)
	}
	return c.rng
}

// attempt makes one attempt and acts on its answer: done reports that
// the call ends with h or err; otherwise the next attempt follows.
func (c *lockCall) attempt(ctx context.Context) (h *Hold, err error, done bool) {
	m := c.m
	// Every attempt has an owner of its own, so that nothing aimed at one
	// attempt (the release of a late acquire, an undo, an abandon, the
	// attempt itself landing late) can act on another's hold, or on the
	// lock after this call's Unlock.
	owner := m.c.owner(c.seq, &c.n)
	adopt := c.unknown
	if c.grantOwn != "" {
		// A grant to this call is adopted as the hold of an earlier
		// attempt would be.
		adopt = append(slices.Clip(adopt), c.grantOwn)
	}
	// A notice sent after this attempt lands reaches w (when set) if its
	// subscription is live now.
	live := c.w != nil && c.w.live()
	// The send time is taken before the request: the server sets the
	// expiry later still, so a deadline measured from here is safe.
	sent := time.Now()
	rep, err := m.acquire(ctx, owner, adopt, c.wait)
	if err = leader.RedisConfig(err); err != nil {
		return c.failed(ctx, owner, rep, err)
	}
	switch {
	case rep.Code == hooks.CodeAdopted && slices.Contains(c.spent, rep.Field):
		// A grant ("TERM CALL.0", adoptable by every attempt) that this
		// call handed back already, and whose hand-back may still land:
		// held now, it would be deleted under the hold. Handed back
		// again, never held.
		m.releaseField(ctx, rep.Field)
		return nil, nil, false
	case rep.Code == hooks.CodeAcquired || rep.Code == hooks.CodeAdopted:
		return c.took(ctx, owner, rep, sent)
	case rep.Code != hooks.CodeHeld:
		return c.giveUp(ctx, fmt.Errorf("lock %s: unexpected acquire outcome %d", m.name, rep.Code))
	}
	return c.heldElsewhere(ctx, rep, sent, live)
}

// failed handles an attempt that got an error instead of an answer: the
// call ends (ctx ended, TryLock, a configuration error) or retries after
// a back-off.
func (c *lockCall) failed(ctx context.Context, owner string, rep hooks.AcquireReply, err error) (*Hold, error, bool) {
	m := c.m
	switch {
	case errors.Is(err, ErrNotReplicated):
		// Taken (or adopted), but too few replicas have it: a failover
		// could lose it. Handed back by its exact field, never held; its
		// outcome is known.
		field := fieldOf(rep, owner)
		c.retire(ownerOf(field))
		c.spend(field)
		m.releaseField(ctx, field)
	case !errors.Is(err, errNotSent):
		// A call the batcher never sent took nothing; any other may
		// still land.
		c.unknown = append(c.unknown, owner)
	}
	if ctx.Err() != nil {
		return c.giveUp(ctx, errors.Join(ctx.Err(), c.lastErr))
	}
	if !c.wait || errors.Is(err, leader.ErrRedisConfig) {
		// A configuration error (an ACL without a command, key or
		// channel the scripts need): retrying cannot cure it.
		return c.giveUp(ctx, err)
	}
	if c.lastErr == nil {
		m.log.Warn("acquire failed; retrying", zap.Error(err))
	}
	c.lastErr = err
	if ok, _ := m.sleep(ctx, c.w, jitter(c.rand(), m.cfg.RetryInterval)); !ok {
		return c.giveUp(ctx, errors.Join(m.waitErr(ctx), c.lastErr))
	}
	return nil, nil, false
}

// took handles an attempt that took the lock (or adopted an earlier
// attempt's hold, or a grant): the call returns the hold, or tries again
// when it was confirmed too late.
func (c *lockCall) took(ctx context.Context, owner string, rep hooks.AcquireReply, sent time.Time) (*Hold, error, bool) {
	// An earlier attempt's hold, adopted: a copy of that attempt's
	// request (go-redis re-sends one after a dropped connection) may
	// still land, after the hold ended too. The hold's lease abandons
	// that owner when its term ends; the call never does, as the abandon
	// would delete the hold. If no hold is made (held released it), the
	// call's end abandons it.
	var stray string
	holdOwner := ownerOf(fieldOf(rep, owner))
	if rep.Code == hooks.CodeAdopted && slices.Contains(c.unknown, holdOwner) {
		stray = holdOwner
	}
	h, err := c.m.held(ctx, owner, rep, sent, c.strays(holdOwner, stray))
	if err == nil {
		c.unknown = slices.DeleteFunc(c.unknown, func(o string) bool { return o == stray })
		return c.hold(ctx, h)
	}
	c.retire(stray)
	c.spend(fieldOf(rep, owner)) // held handed it back
	if !c.wait || ctx.Err() != nil || errors.Is(err, ErrClosed) {
		return c.giveUp(ctx, err)
	}
	return nil, nil, false // confirmed too late: released; try again
}

// heldElsewhere handles an attempt that found the lock held (fair: or
// another waiter's turn): TryLock ends; Lock waits for a notice, a grant
// or the holder's time left, and takes a grant without another round trip
// when that is safe.
func (c *lockCall) heldElsewhere(ctx context.Context, rep hooks.AcquireReply, sent time.Time, live bool) (*Hold, error, bool) {
	m := c.m
	if !c.wait {
		if rep.Holder == "" {
			return c.giveUp(ctx, fmt.Errorf("%w: %s: waiters are queued (fair)", ErrNotObtained, m.name))
		}
		return c.giveUp(ctx, fmt.Errorf("%w: %s held by %s", ErrNotObtained, m.name, rep.Holder))
	}
	c.queued = m.fair
	c.heldSent, c.heldSeen = sent, rep.Seen
	if !live {
		return c.firstWait(ctx, rep.PTTL)
	}
	ok, grant := m.sleep(ctx, c.w, m.heldWait(rep.PTTL, c.rand()))
	if !ok {
		return c.giveUp(ctx, errors.Join(m.waitErr(ctx), c.lastErr))
	}
	if grant == "" || slices.Contains(c.spent, grant) {
		return nil, nil, false
	}
	h, err, done := m.granted(ctx, grant, c.heldSent, c.heldSeen, c.strays(ownerOf(grant), ""))
	if !done {
		// Not provably after the last attempt, or that attempt is too
		// old: the next attempt adopts the grant, its deadline counted
		// from its own send time.
		return nil, nil, false
	}
	if err != nil {
		return c.giveUp(ctx, err)
	}
	return c.hold(ctx, h)
}

// firstWait subscribes the call, and waits until the subscription is live
// (at most pttl) before the next attempt, so no release notice can fall
// between the attempt and the wait.
func (c *lockCall) firstWait(ctx context.Context, pttl time.Duration) (*Hold, error, bool) {
	m := c.m
	if c.w == nil {
		var err error
		if c.w, err = m.c.subscribe(m.channel, grantCall(c.grantOwn), m.fair, c.since); err != nil {
			return c.giveUp(ctx, err)
		}
	}
	if !m.waitReady(ctx, c.w, pttl) {
		return c.giveUp(ctx, errors.Join(m.waitErr(ctx), c.lastErr))
	}
	return nil, nil, false
}

// hold ends the call with h.
func (c *lockCall) hold(ctx context.Context, h *Hold) (*Hold, error, bool) {
	c.held = true
	// An attempt still on its way may queue the finished call, and a
	// release grant it the lock: unless the hold is that grant owner's
	// own (its lease abandons it at the term's end: strays), the
	// abandon deletes such a grant too.
	c.m.endCall(ctx, c, c.grantOwn != "" && c.grantOwn != ownerOf(h.l.field) && len(c.unknown)+len(c.retired) > 0)
	return h, nil, true
}

// strays returns the owners a hold held by holdOwner abandons when its
// term ends (lease.strays): stray, an adopted attempt whose request may
// still land (else ""), and, when the hold is the call's grant owner's
// while attempts may still land (one may queue the call again once the
// hold ended, and a release grant it "CALL.0" anew), the grant owner and
// those attempts.
func (c *lockCall) strays(holdOwner, stray string) []string {
	var out []string
	if stray != "" {
		out = append(out, stray)
	}
	if c.grantOwn == "" || holdOwner != c.grantOwn || len(c.unknown)+len(c.retired) == 0 {
		return out
	}
	out = append(out, c.grantOwn)
	for _, o := range c.unknown {
		if o != stray {
			out = append(out, o)
		}
	}
	return append(out, c.retired...)
}

// giveUp ends the call with err and nothing held. An attempt whose
// outcome is unknown may have queued the call (and a release granted it
// the lock since): its grant goes too.
func (c *lockCall) giveUp(ctx context.Context, err error) (*Hold, error, bool) {
	c.m.endCall(ctx, c, c.queued || (c.grantOwn != "" && len(c.unknown)+len(c.retired) > 0))
	return nil, err, true
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
func (m *Mutex) granted(ctx context.Context, field string, sent time.Time, seen uint64, strays []string) (h *Hold, err error, done bool) {
	t, _, _ := strings.Cut(field, " ")
	term, perr := strconv.ParseUint(t, 10, 64)
	if perr != nil || seen == 0 || term <= seen || time.Since(sent) >= m.cfg.RenewInterval || m.cfg.MinReplicas > 0 ||
		!m.grantable() {
		return nil, nil, false
	}
	h, err = m.held(ctx, ownerOf(field), hooks.AcquireReply{Code: hooks.CodeAdopted, Term: term, Field: field}, sent, strays)
	return h, err, true
}

// spend records field, handed back by the call, in spent when its owner is
// the call's grant owner: no other field can be adopted again, so spent
// does not grow with every failed attempt.
func (c *lockCall) spend(field string) {
	if c.grantOwn != "" && ownerOf(field) == c.grantOwn {
		c.spent = append(c.spent, field)
	}
}

// retire moves owner, when among the call's unknown attempts, to retired:
// its hold was handed back, so it is never adopted again, and it is
// abandoned when the call ends.
func (c *lockCall) retire(owner string) {
	if i := slices.Index(c.unknown, owner); i >= 0 {
		c.unknown = slices.Delete(c.unknown, i, i+1)
		c.retired = append(c.retired, owner)
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
	if len(call.unknown) == 0 && len(call.retired) == 0 && !queued {
		return
	}
	id, owners := m.c.callID(call.seq), append(call.unknown, call.retired...)
	call.unknown, call.retired = nil, nil
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

// held turns a confirmed acquire into a hold, unless its reply came too
// late (or ctx ended meanwhile): then the lock is handed back. The lease
// abandons strays (lockCall.strays) when its term ends.
func (m *Mutex) held(ctx context.Context, owner string, rep hooks.AcquireReply, sent time.Time, strays []string) (*Hold, error) {
	term, field := rep.Term, fieldOf(rep, owner)
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
	l := newLease(m, term, field)
	l.strays = strays
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
