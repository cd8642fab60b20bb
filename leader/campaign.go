package leader

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/solo-run/solo/internal/bounded"
)

// campaign is the state of one Run.
type campaign struct {
	e   *Elector
	fn  func(context.Context) error
	rng *rand.Rand // jitter; only the campaign goroutine uses it

	watch      Watch
	events     <-chan Event // nil until the watch is ready, or without one
	watchReady chan Watch   // unbuffered: handed over only while the campaign runs
	runDone    chan struct{}

	acquireFailing bool
	skewRefused    bool // the last answered acquire was refused for version skew
	// unconfirmed is set while an acquire whose outcome is unknown (an
	// error, a lost reply, a call abandoned at its bound) may have taken
	// the lease for this Elector; an answered acquire clears it. Run checks
	// for such a lease on its way out (cleanup). abandoned says the last
	// acquire was abandoned as Run stopped (not lost on the way), and
	// handBack is a lease whose acquire was answered but whose release
	// was cut short (Run stopping): cleanup logs each as what it is.
	unconfirmed bool
	abandoned   bool
	handBack    Lease
	collided    map[string]bool // other candidates seen with our base ID
	listed      bool            // the last answered acquire listed us as a waiting candidate
	// configFailing is set while calls are refused as a configuration
	// error (ErrRedisConfig), reported once per episode; watchRefused
	// while the notices' subscription is.
	configFailing bool
	watchRefused  bool
}

// refusedWatch is a Watch that knows when Redis refused its subscription
// as a configuration error (an ACL without SUBSCRIBE or the channel).
type refusedWatch interface {
	configErr() error
}

// termEnd says what Run does after a term.
type termEnd struct {
	pause time.Duration // wait before campaigning again
	wake  bool          // a release notice may cut the pause short
	stop  bool          // Run returns err
	err   error
}

// openWatch subscribes to the election's notices and hands the watch to the
// campaign, or closes it if Run has returned first. It is owned by Run:
// ctx and runDone stop it. The hand-over is unbuffered, so a watch is
// either the campaign's (closed by Run) or closed here, never dropped.
func (c *campaign) openWatch(ctx context.Context) {
	w, err := c.e.lock.Watch(ctx)
	if err != nil {
		c.e.log.Warn("release notices unavailable; followers poll at retry_interval", zap.Error(err))
		return
	}
	select {
	case c.watchReady <- w:
	case <-c.runDone:
		_ = w.Close()
	}
}

// useWatch installs the watch openWatch made.
func (c *campaign) useWatch(w Watch) {
	c.watch, c.events = w, w.Events()
}

// run campaigns until ctx is done or a term ends in a stop: it waits the
// pause the last attempt or term asked for, then makes the next attempt.
func (c *campaign) run(ctx context.Context) error {
	next := termEnd{wake: true}
	for {
		if next.pause > 0 && !c.sleep(ctx, next.pause, next.wake) {
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		next = c.attempt(ctx)
		if next.stop {
			return next.err
		}
	}
}

// attempt sends one acquire and acts on its answer: retry after a failure,
// follow a holder, hand back a lease not to lead on, or lead a term.
func (c *campaign) attempt(ctx context.Context) termEnd {
	e := c.e
	// The send time is taken before the request: the server sets the
	// expiry later still, so a deadline measured from here is safe.
	sent := time.Now()
	outcome, rec, err := c.acquire(ctx)
	if errors.Is(err, ErrNotReplicated) && rec.ID == e.cfg.ID {
		// Ours, but a failover could lose it: never lead on this term
		// (marked before the release is sent, so even a release that
		// arrives late cannot hit a lease this Elector leads on), and
		// hand it back.
		e.lastTerm = max(e.lastTerm, rec.Term)
		c.release(ctx, rec.Lease)
	}
	if err != nil {
		if ctx.Err() != nil {
			return termEnd{stop: true}
		}
		if errors.Is(err, ErrSpreadGroupLive) || errors.Is(err, ErrProtocolSkew) {
			e.redisAnswered(nil) // an answer, not an outage
		} else {
			e.redisAnswered(err)
		}
		// The outcome is unknown (the reply may be lost or late): never
		// lead on it. A retry that finds our ID holding the lease adopts
		// it, as only this Elector's own attempts carry its ID.
		c.acquireFailed(err)
		return termEnd{pause: c.jitter(e.cfg.RetryInterval), wake: true}
	}
	c.acquireAnswered()
	switch outcome {
	case Held:
		c.listed = true
		c.observe(rec.Lease)
		return termEnd{pause: c.followWait(rec.TTLLeft), wake: true}
	case Adopted:
		if rec.Term <= e.lastTerm {
			// A lease of a term that already ended here (its function
			// has returned): hand it back so the next term is new.
			c.release(ctx, rec.Lease)
			return termEnd{wake: true}
		}
	}
	c.listed = false // the script took us off the candidates
	return c.won(ctx, outcome, rec, sent)
}

// acquireAnswered ends the episodes an answered acquire ends: a version
// skew refusal, refused configuration, failing acquires.
func (c *campaign) acquireAnswered() {
	e := c.e
	e.redisAnswered(nil)
	// Status.ProtocolErr outlives a Run (skewRefused does not): a Run
	// that ended while refused leaves it set for the next to clear.
	if c.skewRefused || e.Status().ProtocolErr != nil {
		c.skewRefused = false
		e.protocolRefused(nil)
		e.log.Info("campaigning again: the holder of an incompatible protocol is gone")
	}
	c.configFailing = false
	c.checkWatch()
	if c.acquireFailing {
		c.acquireFailing = false
		e.log.Info("acquire answered again") // Redis reachable, the spread group of the name gone, or the configuration fixed
	}
}

// won leads a term on a lease this attempt acquired or adopted, unless Run
// is stopping or the reply came after the attempt's renew deadline.
//
// Acquired, or Adopted: an earlier attempt of this Elector whose reply was
// lost took the lease, and this attempt's script refreshed its TTL after
// this send time. Either way the lease lasts on the server until at least
// sent + TTL×(1−Drift).
func (c *campaign) won(ctx context.Context, outcome Outcome, rec Record, sent time.Time) termEnd {
	e := c.e
	if ctx.Err() != nil {
		// Won just as Run was told to stop: hand the lease back at once.
		e.lastTerm = rec.Term
		c.release(ctx, rec.Lease)
		return termEnd{stop: true}
	}
	if late := time.Since(sent.Add(e.cfg.RenewDeadline)); late >= 0 {
		// The reply came after this attempt's renew deadline: the lease
		// may already have expired and passed to another candidate.
		// Never start on it. Releasing is safe (it compares the exact
		// value, and no function of this term runs).
		e.log.Warn("acquire confirmed after its renew deadline; not leading on it",
			zap.Uint64("term", rec.Term), zap.String("how", outcome.String()), zap.Duration("late_by", late))
		e.lastTerm = max(e.lastTerm, rec.Term)
		c.release(ctx, rec.Lease)
		return termEnd{pause: c.jitter(e.cfg.RetryInterval), wake: true} // a release notice cuts it short
	}
	end := c.lead(ctx, rec.Lease, sent, outcome)
	e.lastTerm = rec.Term
	return end
}

// acquireResult is the outcome of one acquire call.
type acquireResult struct {
	outcome Outcome
	rec     Record
	err     error
}

// errCallBound reports a store call abandoned at its bound: its outcome is
// unknown.
var errCallBound = errors.New("leader: no reply within the renew deadline")

// acquire sends one acquire and waits for its reply, at most RenewDeadline
// after the send time whatever the client's timeouts, and not past ctx. An
// acquire abandoned at that bound, or at ctx's end, has an unknown outcome.
func (c *campaign) acquire(ctx context.Context) (Outcome, Record, error) {
	e := c.e
	actx, cancel := context.WithTimeout(ctx, e.cfg.RenewDeadline)
	defer cancel()
	c.unconfirmed, c.abandoned = true, false
	ch := make(chan acquireResult, 1) // the call never blocks on its answer
	go func() {
		o, r, err := e.lock.Acquire(actx, e.cfg.ID, e.cfg.TTL)
		ch <- acquireResult{o, r, err}
	}()
	bound := time.NewTimer(e.cfg.RenewDeadline)
	defer bound.Stop()
	select {
	case res := <-ch:
		res.err = RedisConfig(res.err)
		if res.err == nil {
			c.unconfirmed = false
			c.checkCollision(res.outcome, res.rec)
		}
		if errors.Is(res.err, ErrSpreadGroupLive) || errors.Is(res.err, ErrProtocolSkew) {
			c.unconfirmed = false // refused: nothing was taken
		}
		return res.outcome, res.rec, res.err
	case <-bound.C:
		return Held, Record{}, errCallBound
	case <-ctx.Done():
		c.abandoned = true
		return Held, Record{}, ctx.Err()
	}
}

// checkCollision logs, once per holder, a lease held under this Elector's
// base ID by another run: two processes share a configured ID. They stay
// two candidates (the random part of the ID differs); the log says the
// configuration is wrong.
func (c *campaign) checkCollision(o Outcome, rec Record) {
	if o != Held || rec.ID == c.e.cfg.ID {
		return
	}
	i := strings.LastIndex(rec.ID, "-")
	if i < 0 || rec.ID[:i] != c.e.baseID || c.collided[rec.ID] {
		return
	}
	if c.collided == nil {
		c.collided = map[string]bool{}
	}
	c.collided[rec.ID] = true
	c.e.log.Error("another candidate was configured with this candidate's id; ids must be unique per instance (both stay separate candidates)",
		zap.String("configured_id", c.e.baseID), zap.String("other", rec.ID))
}

// cleanup runs as Run returns: an acquire of this Run whose outcome is
// unknown may have left a lease in this Elector's name that nobody renews,
// which would hold the other candidates off for a whole TTL. Find it and
// release it. A request still in flight after this can still leave one
// (it then expires after TTL).
func (c *campaign) cleanup(ctx context.Context) {
	e := c.e
	if !c.unconfirmed {
		return
	}
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.RenewDeadline)
	defer cancel()
	rec, err := callBounded(ictx, func() (Record, error) { return e.lock.Inspect(ictx) })
	if err != nil || rec.ID != e.cfg.ID || (rec.Term <= e.lastTerm && e.straggler != nil) {
		return
	}
	// Marked before the release is sent: a release still in flight when a
	// later Run adopts the same lease would delete it under a running
	// function. Every release this elector sends is of a term it will never
	// lead on (again).
	e.lastTerm = max(e.lastTerm, rec.Term)
	if err := c.releaseWithin(ictx, rec.Lease); err != nil {
		return
	}
	switch {
	case rec.Lease == c.handBack:
		e.log.Info("released a lease won as the elector stopped; not led on", zap.Uint64("term", rec.Term))
	case c.abandoned:
		e.log.Info("released a lease taken by an acquire abandoned as the elector stopped", zap.Uint64("term", rec.Term))
	default:
		e.log.Info("released a lease taken by an acquire whose reply never came", zap.Uint64("term", rec.Term))
	}
}

// withdraw removes this candidate from the election's waiting candidates
// as Run returns, best effort and bounded (the entry expires on its own).
func (c *campaign) withdraw(ctx context.Context) {
	wd, ok := c.e.lock.(Withdrawer)
	if !ok || !c.listed {
		return
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(c.e.cfg.RetryInterval, c.e.cfg.RenewDeadline))
	defer cancel()
	if _, err := callBounded(wctx, func() (struct{}, error) { return struct{}{}, wd.Withdraw(wctx, c.e.cfg.ID) }); err != nil {
		c.e.log.Debug("withdraw from the candidates", zap.Error(err))
	}
}

// sleep waits d, or until a release notice from another candidate when
// wake is set. It returns false when ctx is done.
func (c *campaign) sleep(ctx context.Context, d time.Duration, wake bool) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		case w := <-c.watchReady:
			c.useWatch(w)
		case ev, ok := <-c.events:
			if !ok {
				c.events = nil
				continue
			}
			if wake && ev.Kind == EventReleased && ev.Lease.ID != c.e.cfg.ID {
				return true
			}
		}
	}
}

// followWait is how long a follower waits after seeing a holder with pttl
// left: until the lease runs out (plus a small jitter so followers do not
// all hit Redis in the same millisecond), unless a release notice comes
// first. Without live notices the wait is bounded by RetryInterval.
func (c *campaign) followWait(pttl time.Duration) time.Duration {
	cfg := c.e.cfg
	select {
	case w := <-c.watchReady:
		c.useWatch(w)
	default:
	}
	w := cfg.RetryInterval
	if pttl > 0 {
		w = pttl + time.Millisecond + c.randDuration(min(cfg.TTL/100, 20*time.Millisecond))
	}
	if c.watch == nil || !c.watch.Live() {
		w = min(w, cfg.RetryInterval)
	}
	return w
}

func (c *campaign) observe(l Lease) {
	e := c.e
	e.mu.Lock()
	changed := e.status.Holder != l
	e.status.Holder = l
	e.mu.Unlock()
	if changed {
		e.log.Info("leader observed", zap.String("leader", l.ID), zap.Uint64("term", l.Term))
	}
}

func (c *campaign) acquireFailed(err error) {
	if errors.Is(err, ErrProtocolSkew) {
		// Version skew: the holder's build and this one do not share an
		// election. Never guess: no campaigning, said once per episode at
		// error level with the fix, shown in Status (and /readyz, the
		// metrics); campaigning resumes once that holder is gone.
		c.e.protocolRefused(err)
		if !c.skewRefused {
			c.skewRefused = true
			c.e.log.Error("not campaigning: the holder speaks a protocol this build does not share an election with (version skew); "+
				"finish the upgrade with a stop-the-world (stop every instance of the other protocol before starting this one), "+
				"or roll back; campaigning resumes once that holder is gone",
				zap.Error(err))
		}
		return
	}
	if errors.Is(err, ErrRedisConfig) {
		c.acquireFailing = true
		c.configRefused("acquire", err)
		return
	}
	if errors.Is(err, ErrSpreadGroupLive) {
		// Not a Redis failure: the name is run by a spread group. Said
		// once per episode, at error level, with the fix.
		if !c.acquireFailing {
			c.acquireFailing = true
			c.e.log.Error("not campaigning: a spread group of the same name runs its jobs (election.mode spread); "+
				"stop every spread member of the name, or give one of the two another name; campaigning resumes once the group is gone",
				zap.Error(err))
		}
		return
	}
	if !c.acquireFailing {
		c.acquireFailing = true
		c.e.log.Warn("acquire failed; retrying", zap.Error(err), zap.Duration("retry_interval", c.e.cfg.RetryInterval))
		return
	}
	c.e.log.Debug("acquire failed", zap.Error(err))
}

// checkWatch, after an answered call, reports a subscription Redis refused
// as a configuration error as it does a refused call (Status.ConfigErr,
// Metrics.RedisConfigError), logged once per episode. Followers then poll at
// RetryInterval, and a leader keeps its term: notices are an optimisation.
func (c *campaign) checkWatch() {
	w, ok := c.watch.(refusedWatch)
	if !ok {
		return
	}
	err := w.configErr()
	if err == nil {
		c.watchRefused = false
		return
	}
	err = fmt.Errorf("subscribe to the notices: %w", err)
	c.e.redisAnswered(err)
	if !c.watchRefused {
		c.watchRefused = true
		c.e.log.Error("subscribe refused by redis: a configuration error, retrying will not cure it; fix it (the election works meanwhile, followers poll at retry_interval)",
			zap.Error(err))
	}
}

// configRefused reports a call Redis refused as a configuration error:
// once per episode at error level, with the fix (err's text ends with it);
// the refusals that follow at debug level.
func (c *campaign) configRefused(call string, err error) {
	if c.configFailing {
		c.e.log.Debug(call+" refused: redis configuration error", zap.Error(err))
		return
	}
	c.configFailing = true
	c.e.log.Error(call+" refused by redis: a configuration error, retrying will not cure it; fix it (the elector retries every retry_interval meanwhile, leading nowhere)",
		zap.Error(err), zap.Duration("retry_interval", c.e.cfg.RetryInterval))
}

// release hands back a lease no function of this Elector runs under,
// within RenewDeadline, and no longer than Run's ctx: when Run ends, the
// lease is left to cleanup, which looks for any lease in this Elector's
// name on the way out (so Run's way out costs one bound, not two).
func (c *campaign) release(ctx context.Context, l Lease) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.e.cfg.RenewDeadline)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	if err := c.releaseWithin(rctx, l); err != nil {
		c.unconfirmed = true // a lease in our name may remain: cleanup looks
		c.handBack = l
		c.e.log.Debug("release of a lease not led on", zap.Uint64("term", l.Term), zap.Error(err))
	}
}

// releaseWithin releases l, abandoning the call when ctx ends.
func (c *campaign) releaseWithin(ctx context.Context, l Lease) error {
	_, err := callBounded(ctx, func() (struct{}, error) { return struct{}{}, c.e.lock.Release(ctx, l) })
	return err
}

// callBounded is bounded.Call: f's result, or ctx's error once ctx ends
// first, whatever the client does with ctx.
func callBounded[T any](ctx context.Context, f func() (T, error)) (T, error) {
	return bounded.Call(ctx, f)
}

// jitter returns d plus up to 20%.
func (c *campaign) jitter(d time.Duration) time.Duration { return d + c.randDuration(d/5) }

func (c *campaign) randDuration(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(c.rng.Int64N(int64(d)))
}
