package sim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/solo-run/solo/leader/lock"
)

// Shapes of the lock schedules that the plan draws on top of its faults:
// Mutexes of one name with timings of their own (timings); fair calls
// that take a release's grant (lockStore.TakesGrants). A violation of L1
// that a grant takes part in is labelled with what the grant did
// (grantShape), so that the CI profile's summary names the shape.

// Labels of the shapes a violation shows (LockStats.Findings).
const (
	ShapeGrantExpired  = "G1 two live holds: a granted hold outlives the lock on the server (the releaser's TTL)"
	ShapeGrantFailover = "G2 two live holds: a granted hold lost by a failover (a grant takes no WAIT)"
	ShapeGrantOver     = "G3 two live holds: a release granted the lock while another owner held it"
	// ShapeGrantLeft labels L6: a grant to a call that gave up is left
	// in place (the next waiter waits a TTL).
	ShapeGrantLeft = "G4 a grant to a finished call left in place"
	// ShapeRetryHeld and ShapeRetryLost label L10.
	ShapeRetryHeld = "R1 a request run twice: an acquire answers held by its own attempt"
	ShapeRetryLost = "R2 a request run twice: a clean release answers not held (ErrLockLost)"
)

// InvLockTwice is the invariant a request run twice by the client's
// retry breaks: a script's second run of one request answers as its
// first did (idempotence).
const InvLockTwice = "L10 a request run twice answers as once"

// grantShape labels an L1 violation between held, a hold found live, and
// next (nil: the server's own lock) when a fair grant ("TERM CALL.0")
// takes part, and counts it; nil otherwise, under w.mu.
func (lw *lockWorld) grantShape(held, next *leaseRec) []string {
	var f string
	switch {
	case isGrant(held.field) && lw.failedOverSince(held.minted):
		f = ShapeGrantFailover
	case isGrant(held.field):
		f = ShapeGrantExpired
	case next != nil && isGrant(next.field):
		f = ShapeGrantOver
	default:
		return nil
	}
	lw.finding(f)
	return []string{f}
}

// isGrant reports whether field is a fair release's grant ("TERM CALL.0").
func isGrant(field string) bool { return strings.HasSuffix(field, ".0") }

// failedOverSince reports whether a failover came at or after t.
func (lw *lockWorld) failedOverSince(t time.Time) bool {
	for i, l := range lw.losses {
		if lw.lossWhy[i] == "failover" && !l.Before(t) {
			return true
		}
	}
	return false
}

// timings returns process i's Mutex timings: the plan's (base), or, in
// two schedules in five outside Redlock, timings of its own scaled from
// the plan's by 1/10 to 2 (a rolling change of TTL, per-Mutex options: a
// short-TTL releaser beside a long-TTL waiter). Scaling keeps every
// ratio legal (leader.Config.Validate); the TTL stays in whole
// milliseconds.
func (lw *lockWorld) timings(base lock.Config, i int) lock.Config {
	seed := lw.w.p.Seed
	if d := keyed(seed, uint64(opLMode), 1<<20); lw.redlock || !d.chance(0.3) {
		return base
	}
	lw.mixed = true
	r := keyed(seed, uint64(opLMode), uint64(i), 2)
	ttl := max(r.logDur(base.TTL/5, 3*base.TTL/2).Truncate(time.Millisecond), 5*time.Millisecond)
	f := float64(ttl) / float64(base.TTL)
	scale := func(d time.Duration) time.Duration { return max(time.Duration(float64(d)*f), time.Microsecond) }
	c := base
	c.TTL, c.RenewInterval, c.RetryInterval = ttl, scale(base.RenewInterval), scale(base.RetryInterval)
	limit := time.Duration(float64(ttl) * (1 - max(base.Drift, lock.DefaultDrift)))
	c.RenewDeadline = min(scale(base.RenewDeadline), limit-time.Microsecond)
	if c.RenewInterval >= c.RenewDeadline {
		c.RenewInterval = c.RenewDeadline / 2
	}
	if base.ReplicaTimeout > 0 {
		c.ReplicaTimeout = max(min(scale(base.ReplicaTimeout), (c.RenewDeadline-c.RenewInterval)/2), time.Microsecond)
	}
	return c
}

// longest returns a config whose every duration is the longer of a's
// and b's (the schedule's bounds over Mutexes of different timings).
func longest(a, b lock.Config) lock.Config {
	c := b
	c.TTL, c.RenewInterval, c.RenewDeadline = max(a.TTL, b.TTL), max(a.RenewInterval, b.RenewInterval), max(a.RenewDeadline, b.RenewDeadline)
	c.RetryInterval, c.ReplicaTimeout, c.Drift = max(a.RetryInterval, b.RetryInterval), max(a.ReplicaTimeout, b.ReplicaTimeout), max(a.Drift, b.Drift)
	return c
}

// lockWait is the WAIT leader/lock's Redis store pipelines after an
// acquire or renewal that took or kept the lock under MinReplicas
// (world.waitFor): it delays the reply and counts the replica when it
// applied the script's writes within ReplicaTimeout, under w.mu.
func (p *lockProc) lockWait(now time.Time, res *lockRes) {
	if p.cfg.MinReplicas == 0 {
		return
	}
	var er execResult
	res.acked = p.w.waitFor(now, res.applyAt, p.cfg.ReplicaTimeout, &er)
	res.wait = er.wait
}

// lockRetries is go-redis's default MaxRetries: a request whose
// connection failed is sent again up to that many times.
const lockRetries = 3

// retried runs call (one request over the connection model) as a
// go-redis client with its default retries does: after a connection
// reset, while ctx is live, it sends the same request again after a
// backoff (8ms doubling, at most 512ms, jittered, keyed by the process's
// retry count), so the server may run it twice.
func (p *lockProc) retried(ctx context.Context, o op, call func() (lockRes, error)) (lockRes, error) {
	for n := 0; ; n++ {
		res, err := call()
		if !errors.Is(err, errConnReset) || n == lockRetries || ctx.Err() != nil {
			return res, err
		}
		p.w.mu.Lock()
		p.retries++
		r := keyed(p.w.p.Seed, uint64(p.idx)+1, uint64(opLConnReq), 1<<62|p.retries)
		p.w.event(p.idx, evNote, o, uint64(n+1), 0, 0, "go-redis retries the request after: "+err.Error())
		p.w.mu.Unlock()
		if !sleepOrEnd(r.dur(time.Microsecond, min(8*time.Millisecond<<n, 512*time.Millisecond)), ctx.Done(), nil) {
			return res, err
		}
	}
}

// resetAfterRun draws whether connection c to server ep is reset just
// as the server runs a request at t (fault phase, server 0 only: the
// store's requests go through retried), under w.mu.
func (p *lockProc) resetAfterRun(ep int, c *simConn, t time.Time) bool {
	w := p.w
	if ep != 0 || !w.faulty(t) {
		return false
	}
	r := keyed(w.p.Seed, uint64(p.idx)+1, uint64(opLConnReq), uint64(ep)<<48|c.id<<24|c.n, 1)
	return r.chance(0.01 * w.p.Intensity)
}

// ranTwice reports L10, under w.mu.
func (p *lockProc) ranTwice(what, shape string) {
	p.lw.finding(shape)
	p.w.violate(InvLockTwice, fmt.Sprintf("c%d: %s", p.idx, what), shape)
}
