package leader

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/solo-run/solo/internal/bounded"
	"github.com/solo-run/solo/internal/hooks"
)

// Elector campaigns for one election and runs a leader function during each
// term it wins. Create it with New (Redis) or NewWithLock (any Lock); it is
// safe for concurrent use. One Elector runs at most one Run at a time.
type Elector struct {
	lock    Lock
	cfg     Config
	log     *zap.Logger
	logSet  bool // a logger was given (WithLogger, UseLogger)
	metrics Metrics
	hooks   hooks.Hooks // WithHooks: the simulator's; the zero Hooks in production

	running  atomic.Bool
	resignCh chan *resignRequest // unbuffered: received only by a term in progress
	// baseID is the configured (or host-derived) part of the ID; the ID
	// adds a random part per Elector, so two processes sharing a
	// configuration never share an ID.
	baseID string
	// straggler is closed when the leader function of the last term
	// returns. A term that ended in ErrStopTimeout leaves it open: the next
	// Run waits on it before campaigning, so one Elector never runs two
	// functions at once. Only the running Run touches it.
	straggler chan struct{}
	// lastTerm is the term of the last leadership that ended here, in this
	// or an earlier Run (whose function may even still be running, after
	// ErrStopTimeout): a lease of that term is never adopted again.
	// Only the running Run touches it.
	lastTerm uint64

	mu     sync.Mutex // guards status, termDone and the loop's heartbeat
	status Status
	// loopBeat is when the leader's term loop last started a renewal or
	// handled its answer (or began the term); renewBusy is true while a
	// renewal it started is in flight. Healthy reads them to tell a wedged
	// loop from a slow or unreachable Redis.
	loopBeat  time.Time
	renewBusy bool
	// expiredAt is when the renew deadline timer ended the current term,
	// until the term loop handles it (zero otherwise): a loop that never
	// does is wedged too.
	expiredAt time.Time
	openTerm  uint64        // the term between beginTerm and endTerm, else 0
	termDone  chan struct{} // closed when the current term has ended; nil between terms
}

// Status is a snapshot of an elector's view of its election.
type Status struct {
	// ID is this candidate's ID.
	ID string
	// Leading is true from the confirmed acquire until the term's context
	// is cancelled.
	Leading bool
	// Term is the current term while Leading, else 0.
	Term uint64
	// Since is the local send time of the acquire that began the current
	// (or last) term.
	Since time.Time
	// LastRenew is the local send time of the last successful renewal (or
	// of the acquire) of the current or last term. The renew deadline runs
	// from it.
	LastRenew time.Time
	// Holder is the holder last observed (this candidate while Leading);
	// zero before any holder was seen.
	Holder Lease
	// RedisErr is the error of this elector's last acquire or renew that
	// got no answer from Redis (down, frozen, unreachable), nil once one
	// is answered again. It is ErrNotStarted... never: before the first
	// call it is nil, and Reached is false.
	RedisErr error
	// Reached is true once Redis answered one of this elector's calls.
	Reached bool
	// ProtocolErr is set (a *ProtocolError) while this elector does not
	// campaign because the holder speaks a protocol this build does not
	// share an election with (version skew); nil once an acquire is
	// answered otherwise.
	ProtocolErr error
	// ConfigErr is the error (a *RedisConfigError) of this elector's last
	// acquire or renew that Redis refused as a configuration error: an ACL
	// that lacks a command, key or channel, a wrong or missing password, a
	// command the server does not know; or of the notices' subscription
	// when Redis refused it (the election works on without notices, but
	// solo run exits 2 on any ConfigErr and /readyz fails). Retrying cannot
	// cure it; it is nil once a call is answered without one.
	ConfigErr error
}

type resignRequest struct{ done chan struct{} }

// New returns an Elector for the election cfg names, keeping its lease in
// Redis through client (single node, Sentinel failover or Cluster client).
// It validates cfg (defaults applied to zero fields) and returns a
// *ConfigError naming the bad field and value. It does not contact Redis.
// With a Sentinel failover client and MinReplicas 0 it logs
// SentinelWarning at error, once per client.
func New(client redis.UniversalClient, cfg Config, opts ...Option) (*Elector, error) {
	if client == nil {
		return nil, errors.New("leader: nil redis client")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	e, err := newRedisElector(client, cfg, opts) // hub.go: the RedisLock, on a Hub with WithHub
	if err != nil {
		return nil, err
	}
	e.warnClientTimeouts(client)
	e.warnSentinel(client)
	return e, nil
}

// NewWithLock returns an Elector that keeps its lease in lock, for instance
// the in-memory fake of package leadertest.
func NewWithLock(lock Lock, cfg Config, opts ...Option) (*Elector, error) {
	if lock == nil {
		return nil, errors.New("leader: nil lock")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	base := cfg.ID
	if base == "" {
		base = defaultBaseID()
	}
	// The random part cannot be configured away: an ID is unique per
	// Elector even when many processes share one configuration, so the
	// acquire script's adopt-by-ID can only ever adopt this Elector's own
	// attempt (see campaign.acquire).
	o := options{log: zap.NewNop(), metrics: nopMetrics{}}
	for _, opt := range opts {
		opt.apply(&o)
	}
	token := randomToken()
	if o.hooks.IDToken != nil {
		token = o.hooks.IDToken(cfg.Name) // the simulator's, for exact replays
	}
	cfg.ID = base + "-" + token
	return &Elector{
		lock:     lock,
		cfg:      cfg,
		log:      o.log.Named("leader").With(zap.String("election", cfg.Name), zap.String("id", cfg.ID)),
		logSet:   o.logSet,
		metrics:  o.metrics,
		hooks:    o.hooks,
		resignCh: make(chan *resignRequest),
		baseID:   base,
		status:   Status{ID: cfg.ID},
	}, nil
}

// Config returns the configuration in use, defaults applied.
func (e *Elector) Config() Config { return e.cfg }

// ID returns this candidate's ID.
func (e *Elector) ID() string { return e.cfg.ID }

// IsLeader reports whether this elector leads now: true from a confirmed
// acquire until the term's context is cancelled.
func (e *Elector) IsLeader() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.status.Leading
}

// Term returns the fencing term while leading, else 0.
func (e *Elector) Term() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.status.Term
}

// Status returns a snapshot of the elector's state.
func (e *Elector) Status() Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.status
}

// Resign steps down gracefully if this elector leads: it cancels the
// leader function's context, keeps renewing while the function drains,
// releases the lease, tells the other candidates, and stays out of the
// election for ResignCooldown unless no other candidate takes over.
//
// Resign blocks until the lease was released (or the step-down otherwise
// ended) or ctx is done; the step-down goes on after ctx ends. It returns
// ErrNotLeader when there is no term to end, or ctx's error.
func (e *Elector) Resign(ctx context.Context) error {
	e.mu.Lock()
	termDone := e.termDone
	e.mu.Unlock()
	if termDone == nil {
		return ErrNotLeader
	}
	req := &resignRequest{done: make(chan struct{})}
	select {
	case e.resignCh <- req:
	case <-termDone:
		return ErrNotLeader
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-req.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run campaigns until ctx is done. Each time it wins, it calls fn with a
// context that carries the term (TermFrom) and is cancelled when the term
// ends: renew deadline passed, lease found lost, Resign, a resign request
// from another process, or ctx done. It waits for fn to return, releases
// the lease if it is still held, and campaigns again; after a term that
// ended in failure (fn error or panic, lost lease) it backs off for
// RetryInterval first. An error from fn is logged and ends the term only;
// an error wrapping ErrResigned ends it as Resign does (release, then
// ResignCooldown), for a function that drained its own work first.
//
// fn starts only on an acquire whose reply arrived before its renew
// deadline (send time + RenewDeadline, on this host's monotonic clock),
// whatever the Redis client's own timeouts are. Every store call is bounded
// by Run itself: a call the client never ends delays neither the renew
// deadline nor shutdown (its goroutine ends when the client returns).
//
// Run never releases the lease while fn runs. When ctx ends it cancels fn,
// renews while fn drains for up to ShutdownTimeout, then releases; if fn
// has not returned by then, renewing stops, the lease is left to expire and
// Run returns ErrStopTimeout. A later Run of the same Elector waits until
// that function has returned before it campaigns (it returns ErrStopTimeout
// again if its ctx ends first), so one Elector never runs two functions.
// Otherwise Run returns nil once ctx is done. Redis errors are retried
// within the timing rules and logged, never returned. A call Redis refuses
// as a configuration error (ErrRedisConfig: an ACL that lacks a command,
// key or channel, a wrong password, an unknown command) is retried too,
// every RetryInterval, so that a configuration fixed live needs no
// restart; it is logged once at error level and reported in
// Status.ConfigErr and to RedisConfigMetrics, and a renewal refused so
// ends the term at once. It returns ErrAlreadyRunning if this Elector
// already runs.
func (e *Elector) Run(ctx context.Context, fn func(ctx context.Context) error) error {
	if fn == nil {
		return errors.New("leader: nil leader function")
	}
	if !e.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer e.running.Store(false)

	if e.straggler != nil {
		select {
		case <-e.straggler:
		default:
			e.log.Warn("waiting for the previous term's leader function to return before campaigning")
			select {
			case <-e.straggler:
			case <-ctx.Done():
				return ErrStopTimeout
			}
		}
		e.straggler = nil
	}

	var rng *rand.Rand
	if e.hooks.Rand != nil {
		rng = e.hooks.Rand(e.cfg.Name)
	}
	if rng == nil {
		rng = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	c := &campaign{e: e, fn: fn, rng: rng, watchReady: make(chan Watch), runDone: make(chan struct{})}
	// Notices are an optimisation: subscribing must never delay the first
	// acquire, so the watch is set up beside the campaign and joins it when
	// ready. Until then followers wait at most RetryInterval.
	wctx, wcancel := context.WithCancel(ctx)
	go c.openWatch(wctx)
	defer func() {
		wcancel()
		close(c.runDone) // an openWatch still running closes its own watch
		if c.watch != nil {
			_ = c.watch.Close()
		}
	}()
	err := c.run(ctx)
	c.cleanup(ctx)
	c.withdraw(ctx)
	return err
}

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
	// for such a lease on its way out (cleanup).
	unconfirmed bool
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

func (c *campaign) run(ctx context.Context) error {
	e := c.e
	var pause time.Duration
	wake := true
	for {
		if pause > 0 && !c.sleep(ctx, pause, wake) {
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		pause, wake = 0, true

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
				return nil
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
			pause = c.jitter(e.cfg.RetryInterval)
			continue
		}
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
		switch outcome {
		case Held:
			c.listed = true
			c.observe(rec.Lease)
			pause = c.followWait(rec.TTL)
			continue
		case Adopted:
			if rec.Term <= e.lastTerm {
				// A lease of a term that already ended here (its function
				// has returned): hand it back so the next term is new.
				c.release(ctx, rec.Lease)
				continue
			}
		}
		c.listed = false // the script took us off the candidates
		// Acquired, or Adopted: an earlier attempt of this Elector whose
		// reply was lost took the lease, and this attempt's script
		// refreshed its TTL after this send time. Either way the lease
		// lasts on the server until at least sent + TTL×(1−Drift).
		if ctx.Err() != nil {
			// Won just as Run was told to stop: hand the lease back at once.
			e.lastTerm = rec.Term
			c.release(ctx, rec.Lease)
			return nil
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
			pause = c.jitter(e.cfg.RetryInterval) // a release notice cuts it short
			continue
		}
		end := c.lead(ctx, rec.Lease, sent, outcome)
		e.lastTerm = rec.Term
		if end.stop {
			return end.err
		}
		pause, wake = end.pause, end.wake
	}
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
	c.unconfirmed = true
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
	if err := c.releaseWithin(ictx, rec.Lease); err == nil {
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
// RedisConfigMetrics), logged once per episode. Followers then poll at
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

// renewResult is the outcome of one renew round trip.
type renewResult struct {
	sent time.Time
	took time.Duration
	err  error
}

// term is the state of one leadership.
type term struct {
	c      *campaign
	lease  Lease
	log    *zap.Logger
	cancel context.CancelCauseFunc

	lastOK   time.Time   // send time of the last successful renewal or the acquire
	deadline *time.Timer // AfterFunc at lastOK + RenewDeadline: deadlinePassed
	renewAt  *time.Timer // next renew attempt
	// expired is set by deadlinePassed, before it cancels the context; a
	// renewal answered after it is too late to count.
	expired atomic.Bool
	passed  chan struct{} // size one: deadlinePassed tells the loop

	renewing     bool             // one renew in flight at most
	renewCh      chan renewResult // size one: the renew goroutine never blocks
	renewStop    context.CancelFunc
	renewFailing bool

	cause   error // why the term ends; nil while leading
	lost    bool  // the lease is presumed gone: stop renewing, never release
	waiters []*resignRequest
}

// lead runs one term: start fn, renew, and end the term by the rules in
// docs/design.md. It returns only after fn returned (or, on shutdown, after
// ShutdownTimeout) and the lease was released or given up.
func (c *campaign) lead(ctx context.Context, lease Lease, sent time.Time, how Outcome) termEnd {
	e := c.e
	cfg := e.cfg
	// The term's context carries the values of ctx but not its
	// cancellation: shutdown is a graceful step-down, decided here.
	termCtx, cancel := context.WithCancelCause(withTerm(context.WithoutCancel(ctx), lease.Term))
	defer cancel(nil)
	t := &term{
		c:       c,
		lease:   lease,
		log:     e.log.With(zap.Uint64("term", lease.Term)),
		cancel:  cancel,
		lastOK:  sent,
		renewAt: time.NewTimer(time.Until(sent.Add(cfg.RenewInterval))),
		renewCh: make(chan renewResult, 1),
		passed:  make(chan struct{}, 1),
	}
	// The renew deadline cancels the term's context from a timer goroutine
	// of its own, not from the loop below: a loop held up by anything (a
	// log write to a blocked stderr, a metric, a slow path) cannot delay
	// it. The loop learns of it through passed and reports it afterwards.
	// The term is open before its timer is armed: a deadline already
	// past fires at once, and must find its term open to end it.
	e.beginTerm(lease, sent)
	t.deadline = time.AfterFunc(time.Until(sent.Add(cfg.RenewDeadline)), t.deadlinePassed)
	defer t.deadline.Stop()
	defer t.renewAt.Stop()
	// Metrics must not block; the deadline is checked after them anyway,
	// so a slow one can delay the start but never past the deadline.
	e.metrics.Transition(TransitionElected, lease.Term)

	fnDone := make(chan error, 1)
	returned := make(chan struct{})
	if termCtx.Err() != nil {
		// The deadline passed between the caller's check and now: never
		// start on it. The loop reports the loss.
		fnDone <- nil
		close(returned)
	} else {
		go func() {
			defer close(returned)
			fnDone <- callLeader(termCtx, c.fn)
		}()
		// Logged after the start: a blocked log sink cannot delay it.
		t.log.Info("elected", zap.String("how", how.String()), zap.Duration("ttl", cfg.TTL))
	}

	var (
		fnErr     error
		ctxDone   = ctx.Done()
		budget    *time.Timer
		budgetC   <-chan time.Time
		shutdownC <-chan time.Time
	)
	defer func() {
		if budget != nil {
			budget.Stop()
		}
	}()
	startBudget := func() {
		if budget == nil {
			budget = time.NewTimer(cfg.TTL - cfg.RenewDeadline)
			budgetC = budget.C
		}
	}
	const (
		gotFn = iota + 1
		gotPassed
		gotRenew
		gotRenewAt
		gotCtx
		gotResign
		gotWatch
		gotEvent
		gotBudget
		gotShutdown
	)
wait:
	for {
		var renewAtC <-chan time.Time
		if !t.lost {
			renewAtC = t.renewAt.C
		}
		var (
			got  int
			res  renewResult
			req  *resignRequest
			w    Watch
			ev   Event
			evOK bool
		)
		e.hooks.SettleAt("elector " + cfg.Name)
		got = pollTerm([]termPoll{
			{gotPassed, func() bool { return recvNow(t.passed) }},
			{gotRenew, func() bool { return recvValNow(t.renewCh, &res) }},
			{gotFn, func() bool { return recvValNow(fnDone, &fnErr) }},
			{gotResign, func() bool { return recvValNow(e.resignCh, &req) }},
			{gotCtx, func() bool { return recvNow(ctxDone) }},
			{gotEvent, func() bool { return recvVal2Now(c.events, &ev, &evOK) }},
			{gotWatch, func() bool { return recvValNow(c.watchReady, &w) }},
			{gotRenewAt, func() bool { return recvNow(renewAtC) }},
			{gotBudget, func() bool { return recvNow(budgetC) }},
			{gotShutdown, func() bool { return recvNow(shutdownC) }},
		})
		if got == 0 {
			select {
			case fnErr = <-fnDone:
				got = gotFn
			case <-t.passed:
				got = gotPassed
			case res = <-t.renewCh:
				got = gotRenew
			case <-renewAtC:
				got = gotRenewAt
			case <-ctxDone:
				got = gotCtx
			case req = <-e.resignCh:
				got = gotResign
			case w = <-c.watchReady:
				got = gotWatch
			case ev, evOK = <-c.events:
				got = gotEvent
			case <-budgetC:
				got = gotBudget
			case <-shutdownC:
				got = gotShutdown
			}
		}
		switch got {
		case gotFn:
			break wait
		case gotPassed:
			// The deadline timer has already cancelled the context; a local
			// timer, not the renew call's timeout, so a hung call cannot
			// delay it. Nothing is released after it.
			e.expiryHandled()
			t.end(ErrRenewDeadline, true)
			startBudget()
		case gotRenew:
			t.renewed(res)
			if t.lost {
				startBudget()
			}
		case gotRenewAt:
			t.startRenew(ctx)
		case gotCtx:
			ctxDone = nil
			t.end(ErrShutdown, false)
			startBudget()
			st := time.NewTimer(cfg.ShutdownTimeout)
			defer st.Stop()
			shutdownC = st.C
		case gotResign:
			t.waiters = append(t.waiters, req)
			t.end(ErrResigned, false)
			startBudget()
		case gotWatch:
			c.useWatch(w)
		case gotEvent:
			if !evOK {
				c.events = nil
				continue
			}
			if ev.Kind == EventResign && (ev.Lease.Term == 0 || ev.Lease.Term == lease.Term) {
				t.log.Info("resign requested")
				t.end(ErrResigned, false)
				startBudget()
			}
		case gotBudget:
			budgetC = nil
			t.log.Error("leader function still running past its stop budget",
				zap.NamedError("cause", t.cause), zap.Bool("lease_kept", !t.lost),
				zap.Duration("stop_budget", cfg.TTL-cfg.RenewDeadline))
			e.metrics.Overrun(lease.Term)
		case gotShutdown:
			// The function ignores cancellation. Stop renewing and let the
			// lease expire; releasing it now could start a second leader
			// while this function still runs.
			t.lost = true
			t.stopRenew()
			e.straggler = returned // the next Run waits for it
			e.endTerm(t.waiters)
			t.log.Error("leader function did not stop within shutdown_timeout; lease left to expire",
				zap.Duration("shutdown_timeout", cfg.ShutdownTimeout))
			e.metrics.Transition(TransitionStepDown, lease.Term)
			return termEnd{stop: true, err: ErrStopTimeout}
		}
	}

	// fn has returned: no work of this term runs any more.
	if t.cause == nil && errors.Is(fnErr, ErrResigned) {
		t.end(fnErr, false)
	}
	if t.cause == nil {
		cause := fmt.Errorf("leader function returned: %w", fnErr)
		if fnErr == nil {
			cause = errors.New("leader function returned")
		}
		t.end(cause, false)
	}
	t.finish(ctx)
	e.endTerm(t.waiters)

	switch {
	case ctx.Err() != nil:
		return termEnd{stop: true}
	case errors.Is(t.cause, ErrResigned):
		// Resign, a resign request, or fn returning an error that wraps
		// ErrResigned (a worker that drained its jobs and gives up the term).
		return termEnd{pause: cfg.ResignCooldown}
	case fnErr != nil:
		t.log.Error("leader function failed", zap.Error(fnErr))
	}
	return termEnd{pause: c.jitter(cfg.RetryInterval), wake: true}
}

// deadlinePassed runs on the deadline timer's own goroutine when no
// renewal succeeded within RenewDeadline: it cancels the term's context
// first, then marks the elector not leading and tells the loop. It neither
// logs nor waits on anything the loop holds, so nothing can delay it.
func (t *term) deadlinePassed() {
	t.expired.Store(true)
	t.cancel(ErrRenewDeadline)
	t.c.e.endLeadingExpired(t.lease.Term)
	select {
	case t.passed <- struct{}{}:
	default:
	}
}

// end ends the term with cause: the function's context is cancelled at once
// and IsLeader turns false. lost marks the lease as presumed gone.
func (t *term) end(cause error, lost bool) {
	e := t.c.e
	if t.cause == nil {
		if t.expired.Load() {
			cause, lost = ErrRenewDeadline, true // what the context already says
		}
		t.cause = cause
		t.cancel(cause)
		e.endLeading()
		if !lost {
			t.log.Info("stepping down", zap.String("cause", cause.Error()))
		}
	}
	if lost && !t.lost {
		t.lost = true
		t.deadline.Stop()
		t.renewAt.Stop()
		t.log.Error("leadership lost", zap.NamedError("cause", cause),
			zap.Time("last_renew_sent", t.lastOK), zap.Duration("renew_deadline", e.cfg.RenewDeadline))
		e.metrics.Transition(TransitionLost, t.lease.Term)
	}
}

// startRenew sends one renew in its own goroutine, bounded by the time left
// until the deadline (go-redis honours it with ContextTimeoutEnabled; the
// deadline timer does not depend on it either way). The goroutine reports
// into renewCh, which has room for its one answer, so it never blocks and
// ends when the client call returns, even after the term ended.
func (t *term) startRenew(ctx context.Context) {
	if t.renewing || t.lost {
		return
	}
	e := t.c.e
	now := time.Now()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.lastOK.Add(e.cfg.RenewDeadline).Sub(now))
	t.renewing, t.renewStop = true, cancel
	e.beat(now, true)
	ch := t.renewCh
	go func() {
		err := RedisConfig(e.lock.Renew(rctx, t.lease, e.cfg.TTL))
		took := time.Since(now)
		e.metrics.Renew(took, err)
		ch <- renewResult{sent: now, took: took, err: err}
		refreshEviction(ctx, e.lock, e.cfg.RenewDeadline) // after the answer: never delays a renewal
	}()
}

// renewed handles a renew result.
func (t *term) renewed(res renewResult) {
	e := t.c.e
	cfg := e.cfg
	t.renewing = false
	t.renewStop()
	e.beat(time.Now(), false)
	if res.err == nil || errors.Is(res.err, ErrLeaseLost) {
		e.redisAnswered(nil)
	} else {
		e.redisAnswered(res.err)
	}
	if t.lost {
		return
	}
	switch {
	case res.err == nil && t.expired.Load():
		// Answered after the deadline cancelled the term: the term is over
		// (t.passed reports it), however fresh this renewal is.
	case res.err == nil:
		t.c.configFailing = false
		if t.renewFailing {
			t.renewFailing = false
			t.log.Info("renew succeeded again")
		}
		t.c.checkWatch()
		t.log.Debug("renewed", zap.Duration("took", res.took))
		t.lastOK = res.sent
		e.renewed(res.sent)
		now := time.Now()
		t.deadline.Reset(res.sent.Add(cfg.RenewDeadline).Sub(now))
		t.renewAt.Reset(res.sent.Add(cfg.RenewInterval).Sub(now))
	case errors.Is(res.err, ErrLeaseLost):
		t.end(res.err, true)
	case errors.Is(res.err, ErrRedisConfig):
		// Refused, and every renewal until the deadline would be too:
		// step down now rather than at the deadline. The lease stays ours
		// until it expires; the loop keeps renewing while the function
		// drains (in case the configuration is fixed meanwhile), and the
		// deadline timer still ends the term at lastOK + RenewDeadline.
		t.renewFailing = true
		t.c.configRefused("renew", res.err)
		t.end(res.err, false)
		t.renewAt.Reset(max(cfg.RenewInterval/4, time.Millisecond))
	default:
		if !t.renewFailing {
			t.renewFailing = true
			t.log.Warn("renew failed; retrying until the renew deadline", zap.Error(res.err),
				zap.Time("deadline", t.lastOK.Add(cfg.RenewDeadline)))
		} else {
			t.log.Debug("renew failed", zap.Error(res.err))
		}
		t.renewAt.Reset(max(cfg.RenewInterval/4, time.Millisecond))
	}
}

// stopRenew cancels an in-flight renew without waiting for it: a client
// that ignores cancellation must not hold up a step-down or shutdown. The
// renew's answer, when it comes, goes unread; a late renew is harmless, as
// it only extends a lease that is still exactly ours.
func (t *term) stopRenew() {
	if t.renewing {
		t.renewStop()
		t.renewing = false
	}
}

// finish runs after fn returned: release the lease unless it is presumed
// gone, then stop any renew still in flight.
func (t *term) finish(ctx context.Context) {
	e := t.c.e
	left := time.Until(t.lastOK.Add(e.cfg.RenewDeadline))
	if !t.lost && (left <= 0 || t.expired.Load()) {
		// The deadline passed as the function returned, before the loop
		// heard of it: the lease is presumed gone, so it is not released.
		t.end(ErrRenewDeadline, true)
	}
	if t.lost {
		t.stopRenew()
		return
	}
	// Released concurrently with a renew still in flight is safe: both
	// compare the exact value, so a late renew finds the key gone.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), left)
	err := t.c.releaseWithin(rctx, t.lease)
	cancel()
	t.stopRenew()
	switch {
	case err == nil:
		t.log.Info("released")
		e.metrics.Transition(TransitionReleased, t.lease.Term)
	case errors.Is(err, ErrLeaseLost):
		t.log.Warn("lease was already gone at release", zap.Error(err))
		e.metrics.Transition(TransitionLost, t.lease.Term)
	default:
		t.log.Warn("release failed; the lease will expire", zap.Error(err))
		e.metrics.Transition(TransitionStepDown, t.lease.Term)
	}
}

func (e *Elector) beginTerm(l Lease, sent time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.status.Leading = true
	e.status.Term = l.Term
	e.status.Since = sent
	e.status.LastRenew = sent
	e.status.Holder = l
	e.loopBeat, e.renewBusy = sent, false
	e.openTerm, e.expiredAt = l.Term, time.Time{}
	e.termDone = make(chan struct{})
}

// redisAnswered records the outcome of a Redis call: nil when Redis
// answered, else the error; and tells the metrics if they listen.
func (e *Elector) redisAnswered(err error) {
	config := errors.Is(err, ErrRedisConfig) // an answer: a refusal
	e.mu.Lock()
	switch {
	case config:
		e.status.RedisErr, e.status.ConfigErr, e.status.Reached = nil, err, true
	case err == nil:
		e.status.RedisErr, e.status.ConfigErr, e.status.Reached = nil, nil, true
	default:
		e.status.RedisErr = err
	}
	e.mu.Unlock()
	if m, ok := e.metrics.(RedisMetrics); ok {
		if config {
			m.Redis(nil)
		} else {
			m.Redis(err)
		}
	}
	if m, ok := e.metrics.(RedisConfigMetrics); config && ok {
		m.RedisConfigError(err)
	}
	e.noteEviction()
}

// protocolRefused records that acquires are refused for version skew
// (err a *ProtocolError), or no longer (nil), and tells the metrics if
// they listen.
func (e *Elector) protocolRefused(err error) {
	e.mu.Lock()
	e.status.ProtocolErr = err
	e.mu.Unlock()
	if m, ok := e.metrics.(ProtocolMetrics); ok {
		m.ProtocolRefused(err != nil)
	}
}

// beat records that the term loop started a renewal (busy) or handled one.
func (e *Elector) beat(now time.Time, busy bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.loopBeat, e.renewBusy = now, busy
}

func (e *Elector) renewed(sent time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.status.LastRenew = sent
}

func (e *Elector) endLeading() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.status.Leading = false
	e.status.Term = 0
}

// endLeadingExpired is endLeading for the deadline timer: it also notes
// when, for Healthy, until the loop handles it.
//
// A timer that fired as its term ended runs after the loop ended that
// term, perhaps after the next term began: it then changes nothing, or it
// would show a live later term as not leading.
func (e *Elector) endLeadingExpired(term uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.openTerm != term {
		return
	}
	e.status.Leading = false
	e.status.Term = 0
	e.expiredAt = time.Now()
}

// expiryHandled tells Healthy that the loop handled the deadline.
func (e *Elector) expiryHandled() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.expiredAt = time.Time{}
}

func (e *Elector) endTerm(waiters []*resignRequest) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.status.Leading = false
	e.status.Term = 0
	e.expiredAt, e.openTerm = time.Time{}, 0
	if e.termDone != nil {
		close(e.termDone)
		e.termDone = nil
	}
	for _, w := range waiters {
		close(w.done)
	}
}

// callLeader runs fn, turning a panic into an error.
func callLeader(ctx context.Context, fn func(context.Context) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("leader function panicked: %v\n%s", r, debug.Stack())
		}
	}()
	return fn(ctx)
}

// termPoll is one of the term loop's receives under the simulator's
// settle: try receives without blocking; got names the case.
type termPoll struct {
	got int
	try func() bool
}

// pollTerm tries each receive in order, without blocking, and returns the
// got of the first that succeeded, or 0. (The term loop's fixed order
// under the simulator's settle.)
func pollTerm(polls []termPoll) int {
	for _, p := range polls {
		if p.try() {
			return p.got
		}
	}
	return 0
}

// recvNow receives from ch if a value (or its close) is there; a nil ch
// never is.
func recvNow[T any](ch <-chan T) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// recvValNow is recvNow keeping the value in *v.
func recvValNow[T any](ch <-chan T, v *T) bool {
	select {
	case x := <-ch:
		*v = x
		return true
	default:
		return false
	}
}

// recvVal2Now is recvValNow keeping whether ch is still open in *ok.
func recvVal2Now[T any](ch <-chan T, v *T, ok *bool) bool {
	select {
	case x, open := <-ch:
		*v, *ok = x, open
		return true
	default:
		return false
	}
}
