package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/leadertest"
)

// timing is the lease timing every peer uses within a figure: solo's
// defaults for one TTL.
type timing struct {
	ttl   time.Duration // lease length on the server
	renew time.Duration // a leader renews this often (solo: RenewInterval)
	retry time.Duration // a polling follower retries this often (solo: RetryInterval)
}

// String describes the timing for the report.
func (t timing) String() string {
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return fmt.Sprintf("TTL %s (RenewInterval %s, RetryInterval %s)", r(t.ttl), r(t.renew), r(t.retry))
}

// timingFor reads solo's derived intervals for ttl off an elector's
// configuration, so the peers follow solo's defaults exactly.
func timingFor(ttl time.Duration) (timing, error) {
	e, err := leader.NewWithStore(leadertest.New(), leader.Config{Name: "timing", TTL: ttl})
	if err != nil {
		return timing{}, err
	}
	cfg := e.Config()
	return timing{ttl: cfg.TTL, renew: cfg.RenewInterval, retry: cfg.RetryInterval}, nil
}

// peer is one way to elect a leader through Redis: solo or one of the
// alternatives it is compared with.
type peer struct {
	name  string
	about string // one line for the report
	nodes int    // Redis servers it needs
	// ours marks solo's own rows: they are compared with the best of the
	// others, never counted as a peer.
	ours bool
	// lockOnly marks a peer of the lock figures (1 and 6) only: it is not
	// an election, so figures 2–4 leave it out.
	lockOnly bool

	// mutex returns the lock on key for client cs (one per node).
	mutex func(cs clients, key, id string, t timing) mutex
	// group, when set, returns the locks on keys for the goroutines of
	// one process in the lock cycle (figure 1), and what closes them: a
	// peer whose process-wide object matters (leader/lock's Client,
	// which lets concurrent calls share round trips) makes it once.
	group func(cs clients, keys []string, id string, t timing) ([]mutex, func() error, error)
	// leaseKey returns the Redis key that holds election name's lease.
	leaseKey func(name string) string
	// elector, when set, returns the peer's own candidate (solo); other
	// peers run their mutex in pollCandidate.
	elector func(cs clients, name, id string, t timing, h hooks) (candidate, error)
}

// mutex is one peer's lease on one key.
type mutex interface {
	// tryAcquire makes one attempt to take the lease.
	tryAcquire(ctx context.Context) (bool, error)
	// renew extends the lease held; an error means it is lost or unknown.
	renew(ctx context.Context) error
	// release gives the lease back.
	release(ctx context.Context) error
}

// waiter is a mutex with the peer's own idiomatic blocking acquire: retry
// every t.retry until the lease is ours or ctx ends.
type waiter interface {
	mutex
	wait(ctx context.Context) error
}

// candidate campaigns in one election: Run blocks until ctx is done and
// calls lead each time it wins, with a context that ends with the term.
type candidate interface {
	Run(ctx context.Context, lead func(ctx context.Context) error) error
}

// hooks lets a figure look inside a candidate.
type hooks struct {
	// released, if set, is called right before a release is sent.
	released func()
}

// peers returns solo and its peers in report order.
func peers() []peer {
	plain := func(name string) string { return name }
	return []peer{
		{
			name:  "solo",
			about: "`leader.RedisStore` (cycle) and `leader.Elector` (figures 2–4): Lua acquire with fencing term, renew, release + PUBLISH; followers wake on the release notice or at the holder's PTTL",
			nodes: 1,
			mutex: newSoloMutex,
			leaseKey: func(name string) string {
				return leader.Config{Name: name}.LeaseKey()
			},
			elector: newSoloElector,
			ours:    true,
		},
		{
			name:     "solo-lock",
			about:    "`leader/lock` `Mutex.TryLock` / `Hold.Unlock` (lock figures only): Lua acquire into a hash with fencing term and hold count, watchdog renewal, release + PUBLISH; waiters in `Mutex.Lock` woken by the release notice",
			nodes:    1,
			mutex:    newLockMutex,
			group:    newLockGroup,
			ours:     true,
			lockOnly: true,
		},
		{
			name:     "solo-lock-unbatched",
			about:    "the same with a `lock.Client` per goroutine in the lock cycle (all over the one go-redis client), so no two calls share a round trip: what solo-lock costs without batching",
			nodes:    1,
			mutex:    newLockMutex,
			ours:     true,
			lockOnly: true,
		},
		{
			name:     "redislock",
			about:    "github.com/bsm/redislock `Obtain` (Lua SET NX PX) / `Refresh` / `Release`; followers `Obtain` with `LinearBackoff(RetryInterval)`",
			nodes:    1,
			mutex:    newRedislockMutex,
			leaseKey: plain,
		},
		{
			name:     "redsync-1",
			about:    "github.com/go-redsync/redsync/v4 on one node: `SETNX` / `Extend` / `Unlock` (Lua); followers `LockContext` with `WithRetryDelay(RetryInterval)`; a failed attempt also sends its release",
			nodes:    1,
			mutex:    newRedsyncMutex,
			leaseKey: plain,
		},
		{
			name:     "redsync-3",
			about:    "the same with three redis-servers (quorum 2); each operation goes to all three in parallel",
			nodes:    3,
			mutex:    newRedsyncMutex,
			leaseKey: plain,
		},
		{
			name:     "setnx",
			about:    "hand-rolled `SET key token NX PX ttl`, Lua compare-and-PEXPIRE renew, Lua compare-and-DEL release; followers retry every RetryInterval (the one-round-trip floor)",
			nodes:    1,
			mutex:    newSetnxMutex,
			leaseKey: plain,
		},
		{
			name:     "polling",
			about:    "client-go style elector: `GET` the record, then create (`SET NX PX`) or compare-and-update it; release is `GET` + compare-and-DEL; followers call tryAcquireOrRenew every RetryInterval, no notifications",
			nodes:    1,
			mutex:    newPollingMutex,
			leaseKey: plain,
		},
	}
}

// electionPeers returns the peers of the election figures (2–4).
func electionPeers() []peer {
	var out []peer
	for _, p := range peers() {
		if !p.lockOnly {
			out = append(out, p)
		}
	}
	return out
}

// others returns the peers of ps that are not solo's.
func others(ps []peer) []peer {
	var out []peer
	for _, p := range ps {
		if !p.ours {
			out = append(out, p)
		}
	}
	return out
}

func peerByName(name string) (peer, bool) {
	for _, p := range peers() {
		if p.name == name {
			return p, true
		}
	}
	return peer{}, false
}

// candidate returns a candidate of p in election name.
func (p peer) candidate(cs clients, name, id string, t timing, h hooks) (candidate, error) {
	if p.elector != nil {
		return p.elector(cs, name, id, t, h)
	}
	w, ok := p.mutex(cs, p.leaseKey(name), id, t).(waiter)
	if !ok {
		return nil, fmt.Errorf("%s: no blocking acquire", p.name)
	}
	return &pollCandidate{m: w, t: t, h: h}, nil
}

// ---- solo ----

type soloMutex struct {
	lock  *leader.RedisStore
	id    string
	ttl   time.Duration
	lease leader.Lease
}

func newSoloMutex(cs clients, key, id string, t timing) mutex {
	// key is the election name here; RedisStore derives its keys from it.
	l, err := leader.NewRedisStore(cs[0], leader.Config{Name: key, ID: id, TTL: t.ttl})
	if err != nil {
		return errMutex{err}
	}
	return &soloMutex{lock: l, id: id, ttl: t.ttl}
}

func (m *soloMutex) tryAcquire(ctx context.Context) (bool, error) {
	out, rec, err := m.lock.Acquire(ctx, m.id, m.ttl)
	if err != nil || out == leader.Held {
		return false, err
	}
	m.lease = rec.Lease
	return true, nil
}

func (m *soloMutex) renew(ctx context.Context) error { return m.lock.Renew(ctx, m.lease, m.ttl) }

func (m *soloMutex) release(ctx context.Context) error { return m.lock.Release(ctx, m.lease) }

// newSoloElector returns a leader.Elector with solo's defaults for t.ttl,
// on a RedisStore wrapped so the figures can time the release.
func newSoloElector(cs clients, name, id string, t timing, h hooks) (candidate, error) {
	cfg := leader.Config{Name: name, ID: id, TTL: t.ttl}
	l, err := leader.NewRedisStore(cs[0], cfg)
	if err != nil {
		return nil, err
	}
	return leader.NewWithStore(&soloStore{Store: l, h: h}, cfg)
}

// soloStore is a leader.Store that calls the figure's hooks and otherwise
// does exactly what the RedisStore inside it does.
type soloStore struct {
	leader.Store
	h hooks
}

func (l *soloStore) Release(ctx context.Context, lease leader.Lease) error {
	if l.h.released != nil {
		l.h.released()
	}
	return l.Store.Release(ctx, lease)
}

// ---- bsm/redislock ----

type redislockMutex struct {
	c    *redislock.Client
	key  string
	t    timing
	lock *redislock.Lock
}

func newRedislockMutex(cs clients, key, _ string, t timing) mutex {
	return &redislockMutex{c: redislock.New(cs[0]), key: key, t: t}
}

func (m *redislockMutex) tryAcquire(ctx context.Context) (bool, error) {
	l, err := m.c.Obtain(ctx, m.key, m.t.ttl, nil)
	if errors.Is(err, redislock.ErrNotObtained) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	m.lock = l
	return true, nil
}

func (m *redislockMutex) wait(ctx context.Context) error {
	for {
		// Obtain retries on its own until the lease is ours or its
		// deadline (one TTL, when ctx has none) passes; then go again.
		l, err := m.c.Obtain(ctx, m.key, m.t.ttl, &redislock.Options{RetryStrategy: redislock.LinearBackoff(m.t.retry)})
		if err == nil {
			m.lock = l
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !errors.Is(err, redislock.ErrNotObtained) && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
	}
}

func (m *redislockMutex) renew(ctx context.Context) error { return m.lock.Refresh(ctx, m.t.ttl, nil) }

func (m *redislockMutex) release(ctx context.Context) error { return m.lock.Release(ctx) }

// ---- go-redsync/redsync ----

type redsyncMutex struct{ m *redsync.Mutex }

func newRedsyncMutex(cs clients, key, _ string, t timing) mutex {
	pools := make([]redsyncredis.Pool, len(cs))
	for i, c := range cs {
		pools[i] = goredis.NewPool(c)
	}
	return &redsyncMutex{m: redsync.New(pools...).NewMutex(key,
		redsync.WithExpiry(t.ttl),
		redsync.WithTries(math.MaxInt32),
		redsync.WithRetryDelay(t.retry),
	)}
}

func (m *redsyncMutex) tryAcquire(ctx context.Context) (bool, error) {
	err := m.m.TryLockContext(ctx)
	var taken *redsync.ErrTaken
	if errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) {
		return false, nil
	}
	return err == nil, err
}

func (m *redsyncMutex) wait(ctx context.Context) error {
	for {
		err := m.m.LockContext(ctx)
		if err == nil || ctx.Err() != nil {
			return err
		}
	}
}

func (m *redsyncMutex) renew(ctx context.Context) error {
	ok, err := m.m.ExtendContext(ctx)
	if err == nil && !ok {
		err = redsync.ErrExtendFailed
	}
	return err
}

func (m *redsyncMutex) release(ctx context.Context) error {
	ok, err := m.m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: unlock failed")
	}
	return err
}

// ---- hand-rolled SET NX PX ----

var (
	setnxRenew   = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0`)
	setnxRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
)

type setnxMutex struct {
	c     *redis.Client
	key   string
	token string
	t     timing
}

func newSetnxMutex(cs clients, key, id string, t timing) mutex {
	return &setnxMutex{c: cs[0], key: key, token: id + "-" + randomToken(), t: t}
}

func (m *setnxMutex) tryAcquire(ctx context.Context) (bool, error) {
	err := m.c.Do(ctx, "SET", m.key, m.token, "NX", "PX", m.t.ttl.Milliseconds()).Err()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	return err == nil, err
}

func (m *setnxMutex) wait(ctx context.Context) error {
	return retryEvery(ctx, m.t.retry, m.tryAcquire)
}

func (m *setnxMutex) renew(ctx context.Context) error {
	return expectOne(setnxRenew.Run(ctx, m.c, []string{m.key}, m.token, m.t.ttl.Milliseconds()))
}

func (m *setnxMutex) release(ctx context.Context) error {
	return expectOne(setnxRelease.Run(ctx, m.c, []string{m.key}, m.token))
}

// ---- client-go style polling elector ----

var (
	pollingUpdate = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) end return false`)
	pollingDelete = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
)

// pollingMutex keeps a client-go style leader record "HOLDER ACQUIRED_MS"
// under key. Every step reads the record first and then writes it
// conditionally (client-go's Get + Create/Update against the API server).
// The record carries a PX TTL, so a crashed holder's record goes away on
// the server; followers only find out when they next poll.
type pollingMutex struct {
	c      *redis.Client
	key    string
	id     string
	t      timing
	record string // the record we wrote, while we hold it
}

func newPollingMutex(cs clients, key, id string, t timing) mutex {
	return &pollingMutex{c: cs[0], key: key, id: id + "-" + randomToken(), t: t}
}

// tryAcquireOrRenew is client-go's step of the same name.
func (m *pollingMutex) tryAcquireOrRenew(ctx context.Context) (bool, error) {
	cur, err := m.c.Get(ctx, m.key).Result()
	switch {
	case errors.Is(err, redis.Nil):
		rec := fmt.Sprintf("%s %d", m.id, time.Now().UnixMilli())
		ok, err := m.c.SetNX(ctx, m.key, rec, m.t.ttl).Result()
		if ok {
			m.record = rec
		}
		return ok, err
	case err != nil:
		return false, err
	case strings.HasPrefix(cur, m.id+" ") && cur == m.record:
		err := pollingUpdate.Run(ctx, m.c, []string{m.key}, cur, cur, m.t.ttl.Milliseconds()).Err()
		if errors.Is(err, redis.Nil) {
			return false, nil
		}
		return err == nil, err
	default:
		return false, nil
	}
}

func (m *pollingMutex) tryAcquire(ctx context.Context) (bool, error) { return m.tryAcquireOrRenew(ctx) }

func (m *pollingMutex) wait(ctx context.Context) error {
	return retryEvery(ctx, m.t.retry, m.tryAcquireOrRenew)
}

func (m *pollingMutex) renew(ctx context.Context) error {
	ok, err := m.tryAcquireOrRenew(ctx)
	if err == nil && !ok {
		err = errors.New("polling: lease lost")
	}
	return err
}

func (m *pollingMutex) release(ctx context.Context) error {
	cur, err := m.c.Get(ctx, m.key).Result()
	if err != nil {
		return err
	}
	return expectOne(pollingDelete.Run(ctx, m.c, []string{m.key}, cur))
}

// ---- the generic campaign of the peers ----

// pollCandidate campaigns with a peer's mutex: block in the peer's own
// wait, lead until lead returns or a renewal fails, release, and pause
// one RetryInterval (+ up to 20%, as solo) before campaigning again.
type pollCandidate struct {
	m waiter
	t timing
	h hooks
}

func (c *pollCandidate) Run(ctx context.Context, lead func(ctx context.Context) error) error {
	for {
		if err := c.m.wait(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !sleepCtx(ctx, c.t.retry) {
				return nil
			}
			continue
		}
		lost := c.term(ctx, lead)
		if !lost {
			if c.h.released != nil {
				c.h.released()
			}
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.t.ttl)
			_ = c.m.release(rctx)
			cancel()
		}
		if !sleepCtx(ctx, c.t.retry+randDuration(c.t.retry/5)) {
			return nil
		}
	}
}

// term runs lead and renews every t.renew until lead returns (after ctx
// ends, lead's context is cancelled too) or a renewal fails. It returns
// whether the lease was lost; lead has returned either way.
func (c *pollCandidate) term(ctx context.Context, lead func(ctx context.Context) error) (lost bool) {
	termCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = lead(termCtx)
	}()
	tick := time.NewTicker(c.t.renew)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return false
		case <-tick.C:
			rctx, rcancel := context.WithTimeout(termCtx, c.t.renew)
			err := c.m.renew(rctx)
			rcancel()
			if err != nil && termCtx.Err() == nil {
				cancel()
				<-done
				return true
			}
		}
	}
}

// ---- helpers ----

// errMutex is a mutex whose every call fails with err.
type errMutex struct{ err error }

func (m errMutex) tryAcquire(context.Context) (bool, error) { return false, m.err }
func (m errMutex) renew(context.Context) error              { return m.err }
func (m errMutex) release(context.Context) error            { return m.err }

// retryEvery calls try until it succeeds, sleeping every between attempts.
func retryEvery(ctx context.Context, every time.Duration, try func(context.Context) (bool, error)) error {
	for {
		ok, err := try(ctx)
		if ok {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		_ = err // a failed attempt is retried like a refused one
		if !sleepCtx(ctx, every) {
			return ctx.Err()
		}
	}
}

// expectOne turns a script reply other than 1 into an error.
func expectOne(cmd *redis.Cmd) error {
	n, err := cmd.Int64()
	if err != nil {
		return err
	}
	if n != 1 {
		return errors.New("lease not held")
	}
	return nil
}

// sleepCtx sleeps d and reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func randomToken() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// once returns a func that runs f the first time it is called.
func once(f func()) func() {
	var o sync.Once
	return func() { o.Do(f) }
}
