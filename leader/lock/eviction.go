package lock

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/solo-run/solo/leader"
)

// evictionCheck is a store's view of its server's eviction policy: the
// Client's leader.EvictionGuard of that Redis client, shared by every
// Mutex, and the Client's logger for the warning that it cannot be
// verified. A nil *evictionCheck checks nothing (the tests' stores).
type evictionCheck struct {
	g   *leader.EvictionGuard
	log *zap.Logger
}

// evictionFor returns the Client's check of rdb's server (one guard per
// Redis client: Redlock's masters have one each).
func (c *Client) evictionFor(rdb redis.UniversalClient) *evictionCheck {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.guards == nil {
		c.guards = map[redis.UniversalClient]*evictionCheck{}
	}
	e := c.guards[rdb]
	if e == nil {
		e = &evictionCheck{g: leader.NewEvictionGuard(rdb), log: c.log}
		c.guards[rdb] = e
	}
	return e
}

// check is run before an acquire: a *leader.RedisConfigError (wrapping
// leader.ErrEvictionPolicy) while the server may evict the lock's keys, or
// INFO's error when it got no answer; either way the acquire is not sent.
func (e *evictionCheck) check(ctx context.Context, key string) error {
	if e == nil {
		return nil
	}
	err := e.g.Check(ctx)
	e.g.WarnUnverified(e.log)
	if err != nil {
		return fmt.Errorf("acquire %s: %w (%w)", key, err, errNotSent)
	}
	return nil
}

// renewed is run after a renewal that kept the lock: the last answer's
// error while the server may evict it (the hold ends as on any other
// configuration error), without a round trip.
func (e *evictionCheck) renewed(key string) error {
	if e == nil {
		return nil
	}
	if err := e.g.Err(); err != nil {
		return fmt.Errorf("renew %s: %w", key, err)
	}
	return nil
}

// refreshEviction reads the policy of st's servers again when it is due
// (leader.EvictionGuard.Refresh), within the lease's renew deadline and
// its context. A lease runs it after each renewal was handled, so that a
// holder sees a policy changed live at a later renewal.
func (l *lease) refreshEviction() {
	var checks []*evictionCheck
	switch st := l.m.st.(type) {
	case *redisStore:
		checks = append(checks, st.eviction)
	case *quorumStore:
		for _, m := range st.masters {
			if rm, ok := m.(redlockMaster); ok {
				checks = append(checks, rm.eviction)
			}
		}
	}
	ctx, cancel := context.WithTimeout(l.ctx, l.m.cfg.RenewDeadline)
	defer cancel()
	for _, e := range checks {
		if e != nil {
			e.g.Refresh(ctx)
		}
	}
}

// grantable reports, without a round trip, whether the guard's last
// answer lets a fair grant become a hold: the server cannot evict, or INFO
// cannot tell (an acquire goes on then too). While it may evict, or the
// last read got no answer, the grant is left to the call's next attempt,
// whose acquire checks the policy as every acquire does.
func (m *Mutex) grantable() bool {
	rs, ok := m.st.(*redisStore)
	if !ok || rs.eviction == nil {
		return true
	}
	s := rs.eviction.g.State()
	return s == leader.EvictionSafe || s == leader.EvictionUnverified
}
