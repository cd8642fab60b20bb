package lock

import (
	"context"
	"math/rand/v2"
	"reflect"
	"strconv"
	"time"
)

// rand returns a source of jitter for call seq of this Mutex: the
// simulator's (hooks.Hooks.Rand, by "NAME SEQ", so that its schedules
// replay exactly), or a new one.
func (m *Mutex) rand(seq uint64) *rand.Rand {
	if m.hooks.Rand != nil {
		return m.hooks.Rand(m.name + " " + strconv.FormatUint(seq, 10))
	}
	return newRand()
}

// The keys naming the places where a wait settles under the simulator
// (hooks.Hooks.Settle).
const (
	settleKeyCall   = "lock call"    // a store call's reply, its bound, ctx's end
	settleKeyReady  = "lock ready"   // a first wait's subscription, its bound, the end
	settleKeySleep  = "lock sleep"   // a sleep's grant, notice, timer, the end
	settleKeyFanOut = "lock fan-out" // Redlock's masters' replies, the timer, ctx's end
)

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
// Mutex.hooks) a wait that ended ready (ok) at the instant ctx or the
// Client ended reports the end, as the select might have.
func (m *Mutex) settled(ctx context.Context, ok bool) bool {
	if m.hooks.Settle == nil {
		return ok
	}
	m.hooks.Settle(settleKeyReady) // on every path: the instant's other goroutines have run
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
	if m.hooks.Settle == nil {
		return ok, g
	}
	// Under the simulator's settle, whatever else came at this instant
	// is taken too, in a fixed order: a grant, then the end of ctx or the
	// Client, then a notice (drained: the next attempt is the retry it
	// asks for) or the timer.
	m.hooks.Settle(settleKeySleep)
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

func newRand() *rand.Rand { return rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())) }

// jitter returns d plus up to 20%.
func jitter(r *rand.Rand, d time.Duration) time.Duration { return d + randDuration(r, d/5) }

func randDuration(r *rand.Rand, d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(r.Int64N(int64(d)))
}
