package lock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/hooks"
)

// quorumStore is the store of one Redlock lock: one master per server.
// The hold's field it hands out is "T0,T1,… OWNER", the term of every
// master (0: not confirmed), so renewals and releases need no state here.
type quorumStore struct {
	c       *Client
	masters []master
	all     []int // 0 … len(masters)-1
	quorum  int
	bound   time.Duration // a call's bound when its ctx has no deadline
	// acquireWait bounds an acquire's wait for the remaining masters once
	// one answered held or failed (Redlock's per-master timeout, small
	// against the TTL): a frozen master must not stall every contended
	// attempt until RenewDeadline. RenewDeadline/8.
	acquireWait time.Duration
	settle      func(key string) // the simulator's (hooks.Hooks.Settle); nil otherwise
}

var _ hooks.Store = (*quorumStore)(nil)

func newQuorumStore(m *Mutex, clients []redis.UniversalClient) *quorumStore {
	masters := make([]master, len(clients))
	for i, rdb := range clients {
		rs := newRedisStore(rdb, m.cfg, m.name)
		rs.eviction = m.c.evictionFor(rdb)
		masters[i] = redlockMaster{rs}
	}
	return newQuorumOf(m, masters)
}

func newQuorumOf(m *Mutex, masters []master) *quorumStore {
	q := &quorumStore{c: m.c, masters: masters, quorum: len(masters)/2 + 1, bound: m.cfg.RenewDeadline,
		acquireWait: max(m.cfg.RenewDeadline/8, time.Millisecond), settle: m.hooks.Settle}
	for i := range masters {
		q.all = append(q.all, i)
	}
	return q
}

// reply is one master's answer.
type reply[T any] struct {
	i   int
	v   T
	err error
}

// fanOut calls f on the masters idx in parallel and collects their replies
// until decided says the outcome is known, every master answered, ctx's
// deadline (or the store's bound) passed, wait passed since hurry first
// said so (a failure was seen: stop waiting for stragglers soon), or ctx
// ended before the outcome was decided (then with ctx's error). The
// replies come in arrival order; under the simulator's settle, in
// master order. Each call runs in
// a goroutine of the Client, bounded by ctx's deadline (or the store's
// bound) and wait on a timer of its own, and cancelled by Client.Close but
// not by ctx's cancellation: a call fanOut stops waiting for (a frozen
// master's) still reaches its master if it can, which releases and undos
// need.
func fanOut[T any](ctx context.Context, q *quorumStore, idx []int, f func(ctx context.Context, i int, s master) (T, error), decided, hurry func([]reply[T]) bool, wait time.Duration) ([]reply[T], error) {
	now := time.Now()
	dl, ok := ctx.Deadline()
	if !ok {
		dl = now.Add(q.bound)
	}
	// Give up a little before ctx's deadline, so that the verdict (which
	// masters failed, ErrNoQuorum) reaches the caller before its own
	// timer reports a bare timeout.
	dl = dl.Add(-dl.Sub(now) / 16)
	c := q.c
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	c.wg.Add(len(idx))
	c.mu.Unlock()
	ch := make(chan reply[T], len(idx)) // never blocks a sender
	for _, i := range idx {
		go func() {
			defer c.wg.Done()
			mctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), dl)
			defer cancel()
			stop := context.AfterFunc(c.ctx, cancel)
			defer stop()
			v, err := f(mctx, i, q.masters[i])
			ch <- reply[T]{i: i, v: v, err: err}
		}()
	}
	timer := time.NewTimer(time.Until(dl))
	defer timer.Stop()
	rs := make([]reply[T], 0, len(idx))
	hurried := false
	for len(rs) < len(idx) {
		fired, ended := false, false
		select {
		case r := <-ch:
			rs = append(rs, r)
		case <-timer.C:
			fired = true
		case <-ctx.Done():
			ended = true
		}
		if q.settle != nil {
			fired, ended = settleFanOut(ctx, q, ch, timer, &rs, len(idx), fired, ended)
		}
		switch {
		case decided != nil && decided(rs):
			return rs, nil
		case ended:
			return rs, ctx.Err()
		case fired:
			return rs, nil // the others count as failed
		}
		if hurry != nil && !hurried && hurry(rs) {
			hurried = true
			if soon := time.Now().Add(wait); soon.Before(dl) {
				timer.Reset(time.Until(soon))
			}
		}
	}
	return rs, nil
}

// settleFanOut is fanOut's wait under the simulator's settle: whatever
// else came at this instant is taken too — every reply (in master order),
// the timer, ctx's end — and fanOut decides in a fixed order (the
// replies, then ctx's end, then the timer), so that a replay decides the
// same way whichever channel Go's select took first.
func settleFanOut[T any](ctx context.Context, q *quorumStore, ch <-chan reply[T], timer *time.Timer, rs *[]reply[T], n int, fired, ended bool) (bool, bool) {
	q.settle(settleKeyFanOut)
	for len(*rs) < n {
		select {
		case r := <-ch:
			*rs = append(*rs, r)
			continue
		default:
		}
		break
	}
	slices.SortStableFunc(*rs, func(a, b reply[T]) int { return a.i - b.i })
	if !fired {
		select {
		case <-timer.C:
			fired = true
		default:
		}
	}
	return fired, ended || ctx.Err() != nil
}

// acquire takes the lock on a quorum. Without one it undoes its partial
// acquisitions and reports the holder when other owners hold the lock on
// enough masters to deny the quorum (or on any, when the other masters did
// not answer), or an error wrapping ErrNoQuorum.
//
// Every attempt has its own owner and never adopts (adopt is ignored): a
// failed attempt's undo, or its acquire on a master that answers late,
// acts on that attempt's owner only, so it can never count in, or take
// away from, a later attempt's quorum; and the undo leaves a tombstone,
// so an acquire of the failed attempt that lands after it takes nothing.
func (q *quorumStore) Acquire(ctx context.Context, owner string, _ []string, reenter string, _ bool) (hooks.AcquireReply, error) {
	if reenter != "" {
		return q.reenter(ctx, reenter)
	}
	n := len(q.masters)
	won := func(r reply[hooks.AcquireReply]) bool {
		return r.err == nil && (r.v.Code == hooks.CodeAcquired || r.v.Code == hooks.CodeAdopted)
	}
	// Success is decided by the first quorum; failure waits for every
	// master, or acquireWait after the first reply that was not a win,
	// so that most partial acquisitions are known. The undo goes to every
	// master all the same: one that answers later, or not at all, may
	// hold this attempt's key, or get its acquire after the undo (then
	// the tombstone refuses it).
	rs, ctxErr := fanOut(ctx, q, q.all, func(ctx context.Context, i int, s master) (hooks.AcquireReply, error) {
		return s.Acquire(ctx, owner, nil, "", false)
	}, func(rs []reply[hooks.AcquireReply]) bool {
		return countIf(rs, won) >= q.quorum
	}, func(rs []reply[hooks.AcquireReply]) bool {
		return countIf(rs, won) < len(rs) // held or failed somewhere
	}, q.acquireWait)
	if errors.Is(ctxErr, ErrClosed) {
		return hooks.AcquireReply{}, ErrClosed
	}
	terms := make([]uint64, n)
	var (
		top     uint64
		wins    int
		held    []hooks.AcquireReply
		errs    []error
		answers []int
	)
	for _, r := range rs {
		answers = append(answers, r.i)
		switch {
		case r.err != nil:
			errs = append(errs, r.err)
		case won(r):
			wins++
			terms[r.i] = r.v.Term
			top = max(top, r.v.Term)
		case r.v.Code == hooks.CodeHeld:
			held = append(held, r.v)
		default:
			errs = append(errs, fmt.Errorf("master %d: unexpected acquire outcome %d", r.i, r.v.Code))
		}
	}
	if wins >= q.quorum {
		return hooks.AcquireReply{Code: hooks.CodeAcquired, Term: top, Field: encodeField(terms, owner)}, nil
	}
	if wins > 0 || len(errs) > 0 || len(rs) < n {
		// Redlock's rule: a failed attempt unlocks at once on every
		// master (also where it failed or did not answer: its acquire
		// may still land there), or two contenders with a master each
		// would block one another until their TTLs. The delete sends no
		// release notice: these keys were never a hold, and a notice
		// would only wake the other contenders into the same collision.
		// It waits only for the masters that answered; the others get
		// it when they can, and it acts on this attempt's owner only.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), q.bound)
		q.undo(uctx, owner, answers)
		cancel()
	}
	if ctxErr == nil && len(held) > 0 {
		return heldReply(held, n, q.quorum), nil
	}
	err := fmt.Errorf("%w: %d of %d took the lock, %d needed", ErrNoQuorum, wins, n, q.quorum)
	return hooks.AcquireReply{}, errors.Join(append([]error{err, ctxErr}, errs...)...)
}

// heldReply reports the holder and when enough masters will be free for a
// quorum: the holds' expiries in order, assuming the masters that did not
// report a holder are free.
func heldReply(held []hooks.AcquireReply, n, quorum int) hooks.AcquireReply {
	slices.SortFunc(held, func(a, b hooks.AcquireReply) int { return int(a.PTTL - b.PTTL) })
	k := quorum - (n - len(held)) // holds that must end first
	r := held[max(k-1, 0)]
	return hooks.AcquireReply{Code: hooks.CodeHeld, Holder: r.Holder, PTTL: r.PTTL}
}

// undo abandons owner's acquisitions on every master, waiting only for
// the masters in wait.
func (q *quorumStore) undo(ctx context.Context, owner string, wait []int) {
	_, _ = fanOut(ctx, q, q.all, func(ctx context.Context, i int, s master) (struct{}, error) {
		return struct{}{}, s.undo(ctx, owner)
	}, func(rs []reply[struct{}]) bool {
		return countIf(rs, func(r reply[struct{}]) bool { return slices.Contains(wait, r.i) }) == len(wait)
	}, nil, 0)
}

// reenter adds a hold on the masters of field; a quorum of them must
// count it.
func (q *quorumStore) reenter(ctx context.Context, field string) (hooks.AcquireReply, error) {
	terms, owner, idx, err := q.decodeField(field)
	if err != nil {
		return hooks.AcquireReply{}, err
	}
	ok := func(r reply[hooks.AcquireReply]) bool { return r.err == nil && r.v.Code == hooks.CodeReentered }
	gone := func(r reply[hooks.AcquireReply]) bool { return r.err == nil && r.v.Code == hooks.CodeGone }
	rs, ctxErr := fanOut(ctx, q, idx, func(ctx context.Context, i int, s master) (hooks.AcquireReply, error) {
		return s.Acquire(ctx, "", nil, strconv.FormatUint(terms[i], 10)+" "+owner, false)
	}, func(rs []reply[hooks.AcquireReply]) bool {
		return countIf(rs, ok) >= q.quorum || countIf(rs, gone) > len(idx)-q.quorum
	}, nil, 0)
	var count int64
	for _, r := range rs {
		if ok(r) {
			count = max(count, r.v.Count)
		}
	}
	switch {
	case countIf(rs, ok) >= q.quorum:
		return hooks.AcquireReply{Code: hooks.CodeReentered, Count: count}, nil
	case countIf(rs, gone) > len(idx)-q.quorum:
		return hooks.AcquireReply{Code: hooks.CodeGone}, nil
	}
	return hooks.AcquireReply{}, noQuorum(q, "re-enter", rs, len(idx), ctxErr)
}

// renew renews on every master: by the exact hold on the masters that
// confirmed the acquire, by owner on the others (their acquire may have
// landed after the quorum answered: the key is this hold's all the same).
// It reports true with a quorum of renewals, false when too many masters
// deny the hold for a quorum to remain. So a hold that took every master
// survives the loss of any N − quorum of them, not only of those outside
// the quorum that answered first.
func (q *quorumStore) Renew(ctx context.Context, field string) (bool, error) {
	terms, owner, _, err := q.decodeField(field)
	if err != nil {
		return false, err
	}
	floor := strconv.FormatUint(slices.Max(terms), 10)
	ok := func(r reply[bool]) bool { return r.err == nil && r.v }
	lost := func(r reply[bool]) bool { return r.err == nil && !r.v }
	n := len(q.masters)
	rs, ctxErr := fanOut(ctx, q, q.all, func(ctx context.Context, i int, s master) (bool, error) {
		if terms[i] == 0 {
			return s.renewOwner(ctx, owner, floor)
		}
		return s.renewFloor(ctx, strconv.FormatUint(terms[i], 10)+" "+owner, floor)
	}, func(rs []reply[bool]) bool {
		return countIf(rs, ok) >= q.quorum || countIf(rs, lost) > n-q.quorum
	}, nil, 0)
	switch {
	case countIf(rs, ok) >= q.quorum:
		return true, nil
	case countIf(rs, lost) > n-q.quorum:
		return false, nil
	}
	return false, noQuorum(q, "renew", rs, n, ctxErr)
}

// release drops a hold. An inner hold's release counts on the masters
// that confirmed the acquire; the last one deletes the lock on every
// master (by owner where the acquire was never confirmed) and counts on
// all of them. It reports the holds left once a quorum agrees that the
// hold is theirs, -1 once too many deny it for a quorum to remain.
func (q *quorumStore) Release(ctx context.Context, field string, last bool) (int64, error) {
	terms, owner, idx, err := q.decodeField(field)
	if err != nil {
		return 0, err
	}
	floor := strconv.FormatUint(slices.Max(terms), 10)
	targets := idx
	if last {
		targets = q.all
	}
	ours := func(r reply[int64]) bool { return r.err == nil && r.v >= 0 }
	notOurs := func(r reply[int64]) bool { return r.err == nil && r.v < 0 }
	rs, ctxErr := fanOut(ctx, q, targets, func(ctx context.Context, i int, s master) (int64, error) {
		if terms[i] == 0 {
			return s.releaseOwner(ctx, owner, floor)
		}
		return s.releaseFloor(ctx, strconv.FormatUint(terms[i], 10)+" "+owner, last, floor)
	}, func(rs []reply[int64]) bool {
		return countIf(rs, ours) >= q.quorum || countIf(rs, notOurs) > len(targets)-q.quorum
	}, nil, 0)
	var left int64
	for _, r := range rs {
		if ours(r) {
			left = max(left, r.v)
		}
	}
	switch {
	case countIf(rs, ours) >= q.quorum:
		return left, nil
	case countIf(rs, notOurs) > len(targets)-q.quorum:
		return -1, nil
	}
	return 0, noQuorum(q, "release", rs, len(targets), ctxErr)
}

// abandon ends owners' attempts on every master (tombstones, and the lock
// deleted where one of them holds it), after acquires whose outcome is
// unknown; it waits for all of them (within ctx).
func (q *quorumStore) Abandon(ctx context.Context, call string, owners []string) error {
	rs, ctxErr := fanOut(ctx, q, q.all, func(ctx context.Context, i int, s master) (struct{}, error) {
		return struct{}{}, s.Abandon(ctx, call, owners)
	}, nil, nil, 0)
	errs := []error{ctxErr}
	for _, r := range rs {
		errs = append(errs, r.err)
	}
	return errors.Join(errs...)
}

// noQuorum is the error of a step that got no quorum either way.
func noQuorum[T any](q *quorumStore, op string, rs []reply[T], of int, ctxErr error) error {
	errs := []error{fmt.Errorf("%s: %w: %d of %d masters answered, %d needed", op, ErrNoQuorum, len(rs), of, q.quorum), ctxErr}
	for _, r := range rs {
		errs = append(errs, r.err)
	}
	return errors.Join(errs...)
}

// encodeField returns "T0,T1,… OWNER".
func encodeField(terms []uint64, owner string) string {
	var b strings.Builder
	for i, t := range terms {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(t, 10))
	}
	b.WriteByte(' ')
	b.WriteString(owner)
	return b.String()
}

// decodeField parses encodeField's result and returns the masters whose
// term is set.
func (q *quorumStore) decodeField(field string) (terms []uint64, owner string, idx []int, err error) {
	list, owner, ok := strings.Cut(field, " ")
	parts := strings.Split(list, ",")
	if !ok || len(parts) != len(q.masters) {
		return nil, "", nil, fmt.Errorf("lock: redlock field %q does not name %d masters", field, len(q.masters))
	}
	terms = make([]uint64, len(parts))
	for i, p := range parts {
		if terms[i], err = strconv.ParseUint(p, 10, 64); err != nil {
			return nil, "", nil, fmt.Errorf("lock: redlock field %q: %w", field, err)
		}
		if terms[i] != 0 {
			idx = append(idx, i)
		}
	}
	return terms, owner, idx, nil
}

func countIf[T any](rs []T, f func(T) bool) int {
	n := 0
	for _, r := range rs {
		if f(r) {
			n++
		}
	}
	return n
}
