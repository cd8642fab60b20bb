// Package leadertest provides an in-memory leader.Store for tests of code
// built on package leader: state-machine tests of the elector, of workers,
// and of users' own jobs. It keeps the Redis store's semantics (exact-value
// renew and release, terms that only grow, adopt on a retried acquire) and
// lets a test inject errors, lost replies, hangs and chaos (steal, expire).
// TestStore checks any store, this one and RedisStore among them, against
// the contract package leader states for it.
//
// Expiry is computed from time.Now, so inside a testing/synctest bubble the
// lease expires on the bubble's fake clock.
package leadertest

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/solo-run/solo/leader"
)

// Op names a Store operation for hooks and call counts.
type Op string

// The operations of leader.Store.
const (
	OpAcquire       Op = "acquire"
	OpRenew         Op = "renew"
	OpRelease       Op = "release"
	OpInspect       Op = "inspect"
	OpWatch         Op = "watch"
	OpRequestResign Op = "request_resign"
	OpCheckpoint    Op = "checkpoint"
	OpLoad          Op = "load_checkpoint"
	OpProclaim      Op = "proclaim"
	OpWithdraw      Op = "withdraw"
)

// Hook runs around an operation. A Before hook's error aborts the operation
// (the store is untouched); an After hook's error is returned although the
// operation took effect, as when a reply is lost. A hook may block, for
// instance until a channel closes, to simulate a hung call.
type Hook func(ctx context.Context, op Op) error

// Store is an in-memory leader.Store, safe for concurrent use by many
// electors of one election.
type Store struct {
	mu       sync.Mutex
	lease    leader.Lease
	held     bool
	expires  time.Time
	term     uint64
	before   Hook
	after    Hook
	calls    map[Op]int
	watchers map[*watch]struct{}
	cps      map[string]int64
	info     leader.Record        // what the current lease's holder recorded
	value    string               // proclaimed with the next lease
	cands    map[string]time.Time // waiting candidates and when they drop out
}

var (
	_ leader.Store        = (*Store)(nil)
	_ leader.Checkpointer = (*Store)(nil)
	_ leader.Proclaimer   = (*Store)(nil)
	_ leader.Withdrawer   = (*Store)(nil)
)

// New returns an empty Store.
func New() *Store {
	return &Store{calls: map[Op]int{}, watchers: map[*watch]struct{}{}, cps: map[string]int64{}, cands: map[string]time.Time{}}
}

// SetBefore installs a hook run before every operation (nil removes it).
func (l *Store) SetBefore(h Hook) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.before = h
}

// SetAfter installs a hook run after every operation (nil removes it).
func (l *Store) SetAfter(h Hook) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.after = h
}

// Calls returns how many times op was called.
func (l *Store) Calls(op Op) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls[op]
}

// Holder returns the current lease and its time left, if any.
func (l *Store) Holder() (leader.Lease, time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expireLocked()
	if !l.held {
		return leader.Lease{}, 0, false
	}
	return l.lease, time.Until(l.expires), true
}

// LastTerm returns the last term handed out.
func (l *Store) LastTerm() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.term
}

// Steal gives the lease to id under a new term, as a competing writer
// would, without any notice. It returns the new lease.
func (l *Store) Steal(id string, ttl time.Duration) leader.Lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.term++
	l.lease, l.held, l.expires = leader.Lease{Term: l.term, ID: id}, true, time.Now().Add(ttl)
	l.info = leader.Record{LeaseTTL: ttl, Since: time.Now()}
	return l.lease
}

// Expire deletes the lease without any notice, as an early expiry or a
// data loss would.
func (l *Store) Expire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held = false
}

// Acquire implements leader.Store.
func (l *Store) Acquire(ctx context.Context, id string, ttl time.Duration) (leader.Outcome, leader.Record, error) {
	var out leader.Outcome
	var rec leader.Record
	err := l.do(ctx, OpAcquire, func() {
		l.expireLocked()
		switch {
		case l.held && l.lease.ID == id:
			l.expires = time.Now().Add(ttl)
			l.info.LeaseTTL = ttl
			delete(l.cands, id)
			out, rec = leader.Adopted, leader.Record{Lease: l.lease, TTLLeft: ttl}
		case l.held:
			// Listed as RedisStore lists it: until the holder's time left
			// plus two TTLs (RedisStore adds RetryInterval, unknown here).
			left := time.Until(l.expires)
			l.cands[id] = time.Now().Add(left + 2*ttl)
			for len(l.cands) > leader.MaxCandidates { // bounded as RedisStore's: drop the soonest gone
				var first string
				for c, until := range l.cands {
					if first == "" || until.Before(l.cands[first]) {
						first = c
					}
				}
				delete(l.cands, first)
			}
			out, rec = leader.Held, leader.Record{Lease: l.lease, TTLLeft: left}
		default:
			l.term++
			l.lease, l.held, l.expires = leader.Lease{Term: l.term, ID: id}, true, time.Now().Add(ttl)
			l.info = leader.Record{LeaseTTL: ttl, Value: l.value, Since: time.Now()}
			delete(l.cands, id)
			out, rec = leader.Acquired, leader.Record{Lease: l.lease, TTLLeft: ttl}
			l.publishLocked(leader.Event{Kind: leader.EventElected, Lease: l.lease})
		}
	})
	return out, rec, err
}

// Renew implements leader.Store.
func (l *Store) Renew(ctx context.Context, lease leader.Lease, ttl time.Duration) error {
	lost := false
	err := l.do(ctx, OpRenew, func() {
		l.expireLocked()
		if !l.held || l.lease != lease {
			lost = true
			return
		}
		l.expires = time.Now().Add(ttl)
	})
	if err == nil && lost {
		return leader.ErrLeaseLost
	}
	return err
}

// Release implements leader.Store.
func (l *Store) Release(ctx context.Context, lease leader.Lease) error {
	lost := false
	err := l.do(ctx, OpRelease, func() {
		l.expireLocked()
		if !l.held || l.lease != lease {
			lost = true
			return
		}
		l.held = false
		delete(l.cands, lease.ID)
		l.publishLocked(leader.Event{Kind: leader.EventReleased, Lease: lease})
	})
	if err == nil && lost {
		return leader.ErrLeaseLost
	}
	return err
}

// Inspect implements leader.Store.
func (l *Store) Inspect(ctx context.Context) (leader.Record, error) {
	var rec leader.Record
	none := false
	err := l.do(ctx, OpInspect, func() {
		l.expireLocked()
		now := time.Now()
		for id, until := range l.cands {
			if now.Before(until) {
				rec.Candidates = append(rec.Candidates, id)
			}
		}
		// Soonest gone first, as RedisStore lists them (ties by ID).
		slices.SortFunc(rec.Candidates, func(a, b string) int {
			return cmp.Or(l.cands[a].Compare(l.cands[b]), strings.Compare(a, b))
		})
		if !l.held {
			none = true
			return
		}
		cands := rec.Candidates
		rec = l.info
		rec.Lease, rec.TTLLeft, rec.Candidates = l.lease, time.Until(l.expires), cands
	})
	if err == nil && none {
		return rec, leader.ErrNoLeader
	}
	return rec, err
}

// RequestResign implements leader.Store.
func (l *Store) RequestResign(ctx context.Context, term uint64) (int64, error) {
	var n int64
	err := l.do(ctx, OpRequestResign, func() {
		n = int64(len(l.watchers))
		l.publishLocked(leader.Event{Kind: leader.EventResign, Lease: leader.Lease{Term: term}})
	})
	return n, err
}

// Watch implements leader.Store. Its channel holds up to 64 pending notices;
// more are dropped, as a slow pub/sub subscriber's would be.
func (l *Store) Watch(ctx context.Context) (leader.Watch, error) {
	w := &watch{l: l, ch: make(chan leader.Event, 64)}
	err := l.do(ctx, OpWatch, func() { l.watchers[w] = struct{}{} })
	if err != nil {
		return nil, err
	}
	return w, nil
}

// Proclaim implements leader.Proclaimer. With a zero Lease it only sets
// the value the next lease proclaims (the fake does not know Config.Value).
// The value is kept per Store, shared by every candidate on it (each
// RedisStore keeps its own).
func (l *Store) Proclaim(ctx context.Context, lease leader.Lease, value string) error {
	lost := false
	err := l.do(ctx, OpProclaim, func() {
		l.expireLocked()
		l.value = value
		if !l.held || l.lease != lease {
			lost = true
			return
		}
		l.info.Value = value
	})
	if err == nil && lost && lease != (leader.Lease{}) {
		return leader.ErrLeaseLost
	}
	return err
}

// Withdraw implements leader.Withdrawer.
func (l *Store) Withdraw(ctx context.Context, id string) error {
	return l.do(ctx, OpWithdraw, func() { delete(l.cands, id) })
}

// Checkpoint implements leader.Checkpointer.
func (l *Store) Checkpoint(ctx context.Context, lease leader.Lease, key string, n int64) error {
	var res error
	err := l.do(ctx, OpCheckpoint, func() {
		l.expireLocked()
		cur, ok := l.cps[key]
		switch {
		case !l.held || l.lease != lease:
			res = leader.ErrLeaseLost
		case ok && cur >= n:
			res = leader.ErrCheckpointNotAdvanced
		default:
			l.cps[key] = n
		}
	})
	if err != nil {
		return err
	}
	return res
}

// LoadCheckpoint implements leader.Checkpointer.
func (l *Store) LoadCheckpoint(ctx context.Context, key string) (int64, bool, error) {
	var n int64
	var ok bool
	err := l.do(ctx, OpLoad, func() { n, ok = l.cps[key] })
	return n, ok, err
}

func (l *Store) do(ctx context.Context, op Op, f func()) error {
	l.mu.Lock()
	l.calls[op]++
	before, after := l.before, l.after
	l.mu.Unlock()
	if before != nil {
		if err := before(ctx, op); err != nil {
			return err
		}
	}
	l.mu.Lock()
	f()
	l.mu.Unlock()
	if after != nil {
		return after(ctx, op)
	}
	return nil
}

func (l *Store) expireLocked() {
	if l.held && !time.Now().Before(l.expires) {
		l.held = false
	}
	now := time.Now()
	for id, until := range l.cands {
		if !now.Before(until) {
			delete(l.cands, id)
		}
	}
}

func (l *Store) publishLocked(ev leader.Event) {
	for w := range l.watchers {
		select {
		case w.ch <- ev:
		default:
		}
	}
}

type watch struct {
	l    *Store
	ch   chan leader.Event
	once sync.Once
}

func (w *watch) Events() <-chan leader.Event { return w.ch }

func (w *watch) Live() bool { return true }

func (w *watch) Close() error {
	w.once.Do(func() {
		w.l.mu.Lock()
		delete(w.l.watchers, w)
		close(w.ch)
		w.l.mu.Unlock()
	})
	return nil
}
