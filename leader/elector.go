package leader

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/solo-run/solo/internal/hooks"
)

// Elector campaigns for one election and runs a leader function during each
// term it wins. Create it with New (Redis) or NewWithStore (any Store); it is
// safe for concurrent use. One Elector runs at most one Run at a time.
type Elector struct {
	lock    Store
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
	// got no answer from Redis (down, frozen, unreachable); nil before the
	// first call and once one is answered again.
	RedisErr error
	// Reached is true once Redis answered one of this elector's calls.
	Reached bool
	// ProtocolErr is set (a *ProtocolError) while this elector does not
	// campaign because the holder speaks a protocol this build does not
	// share an election with (version skew); nil once an acquire is
	// answered otherwise.
	ProtocolErr error
	// ConfigErr is the *RedisConfigError of this elector's last acquire,
	// renew or notice subscription that Redis refused as a configuration
	// error (ACL, password, unknown command); nil once a call is answered
	// without one.
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
	e, err := newRedisElector(client, cfg, opts) // hub.go: the RedisStore, on a Hub with WithHub
	if err != nil {
		return nil, err
	}
	e.warnClientTimeouts(client)
	e.warnSentinel(client)
	return e, nil
}

// NewWithStore returns an Elector that keeps its lease in lock, for instance
// the in-memory fake of package leadertest.
func NewWithStore(lock Store, cfg Config, opts ...Option) (*Elector, error) {
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
	o := options{log: zap.NewNop(), metrics: NopMetrics{}}
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
// releases the lease and waits ResignCooldown before campaigning again.
// It blocks until the step-down ended or ctx is done (the step-down goes
// on), and returns ErrNotLeader when there is no term to end, or ctx's error.
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

// Run campaigns until ctx is done and calls fn for each term won, with a
// context carrying the term (TermFrom) that is cancelled when the term ends
// (renew deadline, lease lost, Resign, resign request, ctx done). After fn
// returns it releases the lease if still held and campaigns again; an fn
// error wrapping ErrResigned acts as Resign, others are logged. Redis errors
// are logged and retried. It returns nil once ctx is done, ErrStopTimeout
// if fn outlived ShutdownTimeout (the lease is left to expire; a later Run
// first waits for fn), or ErrAlreadyRunning. The timing rules:
// docs/design.md, "Timing: why two leaders never run at once".
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
