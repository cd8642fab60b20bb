package leader

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// ErrEvictionPolicy is wrapped by the *RedisConfigError of a call refused
// because the Redis server may evict solo's keys: maxmemory is set and
// maxmemory-policy is not noeviction (why that is unsafe: docs/design.md,
// "Deployments").
var ErrEvictionPolicy = errors.New("leader: redis may evict solo's keys (maxmemory set, maxmemory-policy not noeviction)")

// EvictionFix is what to change when Redis may evict solo's keys.
const EvictionFix = "set maxmemory-policy noeviction on the server (CONFIG SET maxmemory-policy noeviction, and persist it: " +
	"CONFIG REWRITE, the redis.conf line, or the managed service's parameter group), or give it no maxmemory; see docs/operations.md#memory"

// EvictionPeriod is how long an EvictionGuard trusts a safe answer before
// it reads the policy again: a policy changed live is seen within it.
const EvictionPeriod = time.Minute

// EvictionState is what an EvictionGuard last read of the server's policy.
type EvictionState int

const (
	// EvictionUnknown: not read yet (a read that got no answer keeps the
	// state before it).
	EvictionUnknown EvictionState = iota
	// EvictionSafe: no maxmemory, or maxmemory-policy noeviction.
	EvictionSafe
	// EvictionUnverified: INFO was refused (an ACL without +info: NOPERM;
	// an unknown command; a section not served) or did not carry the two
	// fields; calls go on. A passing error reply (BUSY, LOADING) is no
	// answer.
	EvictionUnverified
	// EvictionUnsafe: the server may evict solo's keys; calls are refused.
	EvictionUnsafe
)

// EvictionGuard checks, with INFO memory, that the Redis server behind a
// client cannot evict solo's keys; on Cluster every master is read, and one
// that may evict makes the answer unsafe. A guard is shared by the users of
// one client (RedisStore, Hub, lock.Client) and is safe for concurrent use.
type EvictionGuard struct {
	client  redis.UniversalClient
	reading chan struct{} // size one: held while a Refresh (shared: any read) reads
	shared  bool          // concurrent Checks share one read (newSharedGuard)

	mu       sync.Mutex
	period   time.Duration
	at       time.Time     // when the state was last read; zero: never
	partial  bool          // a Cluster master did not answer the last read: not fresh
	state    EvictionState // as last read
	err      error         // EvictionUnsafe: the *RedisConfigError calls return
	why      error         // EvictionUnverified: INFO's refusal or the fields' absence
	reported bool          // why was handed to Unverified's caller
}

// NewEvictionGuard returns the guard of client's server. It does not
// contact Redis.
func NewEvictionGuard(client redis.UniversalClient) *EvictionGuard {
	return &EvictionGuard{client: client, period: EvictionPeriod, reading: make(chan struct{}, 1)}
}

// newSharedGuard is NewEvictionGuard for an election's lock or a Hub:
// concurrent Checks share one read.
func newSharedGuard(client redis.UniversalClient) *EvictionGuard {
	g := NewEvictionGuard(client)
	g.shared = true
	return g
}

// SetPeriod sets how long a safe answer is trusted (default
// EvictionPeriod; values below 1ms keep it): a shorter period sees a
// policy changed live sooner, at one INFO per period per guard.
func (g *EvictionGuard) SetPeriod(d time.Duration) {
	if d >= time.Millisecond {
		g.mu.Lock()
		g.period = d
		g.mu.Unlock()
	}
}

// Check returns a *RedisConfigError wrapping ErrEvictionPolicy while the
// server may evict solo's keys, and nil while it cannot or INFO cannot
// tell. It reads INFO memory (one round trip) unless a safe or unverified
// answer younger than the period (EvictionPeriod) is at hand. An INFO that
// got no answer (an outage, BUSY) returns its error and keeps the last
// answer. See docs/design.md, "Deployments".
func (g *EvictionGuard) Check(ctx context.Context) error {
	begun := time.Now()
	if g.fresh(begun, false) {
		return nil
	}
	if g.shared {
		// An election guard, shared by a hub's elections: concurrent
		// checks (every job of a spread group at start) share one read,
		// and a call that waited takes its answer.
		select {
		case g.reading <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		defer func() { <-g.reading }()
		if g.fresh(begun, true) {
			return g.Err()
		}
	}
	return g.read(ctx)
}

// fresh reports whether the last answer may be used by a call begun at
// begun: a safe or unverified one younger than the period, or (waited)
// any answer read after the call began.
func (g *EvictionGuard) fresh(begun time.Time, waited bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.at.IsZero() {
		return false
	}
	if waited && g.at.After(begun) {
		return true
	}
	return g.state != EvictionUnsafe && !g.partial && begun.Sub(g.at) < g.period
}

// Refresh reads the policy again when the last answer is older than the
// period or partial (a Cluster master did not answer) and no other
// Refresh is reading; it is for holders, whose renewals (Err) never wait
// for INFO. Its outcome is kept for Err.
func (g *EvictionGuard) Refresh(ctx context.Context) {
	g.mu.Lock()
	due := g.partial || time.Since(g.at) >= g.period
	g.mu.Unlock()
	if !due {
		return
	}
	select {
	case g.reading <- struct{}{}:
	default:
		return // another Refresh is reading
	}
	defer func() { <-g.reading }()
	_ = g.read(ctx) // kept in the guard; an outage is the renewals' to meet
}

// Err returns the last answer's error while it was unsafe, else nil,
// without a round trip.
func (g *EvictionGuard) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// State returns the last answer.
func (g *EvictionGuard) State() EvictionState {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.state
}

// Unverified returns, once per episode, why the policy cannot be verified
// (INFO refused, or without the fields), for the caller to log; nil
// otherwise and after the first call of an episode.
func (g *EvictionGuard) Unverified() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state != EvictionUnverified || g.reported {
		return nil
	}
	g.reported = true
	return g.why
}

// read reads every master's INFO memory and records the outcome. A
// Cluster master that does not answer is left out while another does (its
// own slots' calls fail anyway): one master down must not stop the
// elections of the others. Such a partial answer is recorded but not
// trusted for the period: every call reads again until each master has
// answered, so that a call on the silent master's slots is never let
// through on an old "safe".
func (g *EvictionGuard) read(ctx context.Context) error {
	state, found := EvictionSafe, error(nil)
	var failed error
	var partial bool
	if cc, ok := g.client.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		var answered bool
		var unanswered error
		failed = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			s, err := evictionOf(ctx, c)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case s == EvictionUnknown:
				unanswered = err
			case s > state: // unsafe beats unverified beats safe
				state, found = s, err
			}
			answered = answered || s != EvictionUnknown
			return nil
		})
		if failed == nil && !answered {
			failed = unanswered
		}
		partial = unanswered != nil
	} else if s, err := evictionOf(ctx, g.client); s == EvictionUnknown {
		failed = err
	} else {
		state, found = s, err
	}
	if failed != nil {
		return fmt.Errorf("read the eviction policy (INFO memory): %w", failed)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.at, g.partial, g.state, g.err, g.why = time.Now(), partial, state, nil, nil
	switch state {
	case EvictionUnsafe:
		g.err = found
	case EvictionUnverified:
		g.why = found
	default:
		g.reported = false
	}
	return g.err
}

// evictionOf reads one server's INFO memory: its state, with the
// *RedisConfigError when unsafe, why when unverified (INFO refused: by
// the ACL, not a command there, a server or proxy that does not serve
// the section), and the call's error when INFO got no answer
// (EvictionUnknown): an outage, or a passing error reply (BUSY while
// another client's script runs, LOADING), which says nothing of the
// policy.
func evictionOf(ctx context.Context, c redis.Cmdable) (EvictionState, error) {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		if infoRefused(err) {
			return EvictionUnverified, fmt.Errorf("INFO memory refused (%w); the ACL user needs +info to let solo verify maxmemory-policy", err)
		}
		return EvictionUnknown, err
	}
	return ParseEviction(info)
}

// infoRefused reports whether err is the server's lasting refusal of
// INFO: an error reply other than the passing ones a server gives while
// busy, loading, or between masters (NOPERM, an unknown command, a
// section it does not serve).
func infoRefused(err error) bool {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return false // no reply at all
	}
	for _, passing := range []string{"BUSY", "LOADING", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "NOREPLICAS"} {
		if redis.HasErrorPrefix(err, passing) {
			return false
		}
	}
	return true
}

// ParseEviction reads INFO memory's text: EvictionUnsafe with a
// *RedisConfigError wrapping ErrEvictionPolicy (naming maxmemory and the
// policy) when maxmemory > 0 and maxmemory_policy is not noeviction;
// EvictionSafe with nil; or EvictionUnverified with why when a field is
// missing.
func ParseEviction(info string) (EvictionState, error) {
	var maxmem, policy string
	var haveMax, havePolicy bool
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		switch {
		case !ok:
		case k == "maxmemory":
			maxmem, haveMax = v, true
		case k == "maxmemory_policy":
			policy, havePolicy = v, true
		}
	}
	n, err := strconv.ParseInt(maxmem, 10, 64)
	if !haveMax || !havePolicy || err != nil {
		return EvictionUnverified, fmt.Errorf("INFO memory has no maxmemory and maxmemory_policy fields (maxmemory %q, policy %q)", maxmem, policy)
	}
	if n == 0 || policy == "noeviction" {
		return EvictionSafe, nil
	}
	return EvictionUnsafe, &RedisConfigError{
		Err: fmt.Errorf("redis maxmemory %d with maxmemory-policy %s: %w", n, policy, ErrEvictionPolicy),
		Fix: EvictionFix,
	}
}

// WarnUnverified logs at warn on log, once per episode, that g cannot
// verify the policy (Unverified).
func (g *EvictionGuard) WarnUnverified(log *zap.Logger) {
	if why := g.Unverified(); why != nil {
		log.Warn("cannot verify that redis will not evict solo's keys; leadership and locks are unsafe if it does "+
			"(grant the ACL user +info, and check maxmemory-policy noeviction yourself: docs/operations.md#memory)",
			zap.Error(why))
	}
}

// evictionGuard returns the guard of l's client: the hub's with a hub.
func (l *RedisStore) evictionGuard() *EvictionGuard {
	if l.hub != nil {
		return l.hub.guard
	}
	return l.guard
}

// guardOf returns the eviction guard of lock, nil for a Store that is not
// kept in Redis.
func guardOf(lock Store) *EvictionGuard {
	if l, ok := lock.(*RedisStore); ok {
		return l.evictionGuard()
	}
	return nil
}

// refreshEviction reads the eviction policy of lock's server again when it
// is due (EvictionGuard.Refresh), within d and ctx. A term calls it after
// each renewal's answer was handed over, so that a holder sees a policy
// changed live (its next renewal steps down) without a round trip on the
// renewal's path.
func refreshEviction(ctx context.Context, lock Store, d time.Duration) {
	if g := guardOf(lock); g != nil {
		rctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		g.Refresh(rctx)
	}
}

// noteEviction tells the metrics what the store last read of the eviction
// policy, and logs once per episode, at warn, that it cannot be verified.
func (e *Elector) noteEviction() {
	g := guardOf(e.lock)
	if g == nil {
		return
	}
	e.metrics.RedisEviction(g.State())
	g.WarnUnverified(e.log)
}
