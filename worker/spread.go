package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/solo-run/solo/leader"
)

// SpreadConfig holds the tunables of a Spread's membership and balancing.
// The zero value of every field means "use the default", derived from the
// group's leader.Config.
type SpreadConfig struct {
	// Heartbeat is how often every member writes its heartbeat (and its
	// load) and rebalances. Default TTL/3.
	Heartbeat time.Duration

	// MemberTTL is how long a member stays in the group after its last
	// heartbeat, on the Redis server's clock: a crashed instance leaves
	// the group this long after its last heartbeat. Default TTL; at least
	// twice Heartbeat.
	MemberTTL time.Duration

	// MinHold is the least time an instance runs a job before it may shed
	// it to rebalance (never applies to shutdown or a lost lease). Default
	// TTL.
	MinHold time.Duration
}

// withDefaults fills zero fields from the group's election config.
func (c SpreadConfig) withDefaults(e leader.Config) SpreadConfig {
	if e.TTL == 0 {
		e.TTL = leader.DefaultTTL
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = e.TTL / 3
	}
	if c.MemberTTL == 0 {
		c.MemberTTL = e.TTL
	}
	if c.MinHold == 0 {
		c.MinHold = e.TTL
	}
	return c
}

// Validate checks c with the defaults of the election config e applied. It
// returns a *leader.ConfigError naming the field (heartbeat, member_ttl,
// min_hold) and its value.
func (c SpreadConfig) Validate(e leader.Config) error {
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"heartbeat", c.Heartbeat}, {"member_ttl", c.MemberTTL}, {"min_hold", c.MinHold}} {
		if f.v < 0 {
			return &leader.ConfigError{Field: f.name, Value: f.v, Reason: "must not be negative"}
		}
	}
	d := c.withDefaults(e)
	if d.Heartbeat < time.Millisecond {
		return &leader.ConfigError{Field: "heartbeat", Value: d.Heartbeat, Reason: "must be at least 1ms"}
	}
	// A live member beats every heartbeat plus the call's time: with
	// member_ttl barely above heartbeat it would drop out between beats,
	// and every drop and rejoin wakes the whole group.
	if d.MemberTTL < 2*d.Heartbeat {
		return &leader.ConfigError{Field: "member_ttl", Value: d.MemberTTL, Reason: "must be at least twice heartbeat " + d.Heartbeat.String()}
	}
	return nil
}

// Spread runs every job (every shard of a sharded job) as an election of
// its own, GROUP.JOB, all under one leader.Hub, and spreads the jobs over
// the live instances of its group without a coordinator: each job runs on
// exactly one instance at a time, with its own term, fence claim,
// checkpoints and metrics, as a Worker's jobs do under one election. An
// instance never starts more jobs than its share (about its group's jobs
// over its live members) but to rescue a job nobody holds. A group excludes
// an election of the same name in mode elect. Membership, balancing and
// mode switches: docs/design.md, "Spreading jobs".
type Spread struct {
	client redis.UniversalClient
	cfg    leader.Config // the group's template: Name is the group, ID the member
	sc     SpreadConfig
	opts   []Option
	tmpl   *Worker // validates jobs; its options are every unit's
	log    *zap.Logger
	base   *zap.Logger // the logger given (WithLogger), for the electors
	member string
	kick   chan struct{}

	mu      sync.Mutex
	running bool
	units   []*unit // name order; set by Run
	limit   int     // the share: the most jobs a term may start with
	members []Member
	// memberUntil is the local send time of the last accepted heartbeat
	// plus member_ttl: a job starts only before it, and the jobs still
	// running at it are stopped (lapse), so that they have stopped before
	// the member's exclusion entry expires on the server (member_ttl + TTL
	// after that heartbeat) and an elect-mode candidate may take the name.
	memberUntil time.Time
	// conflict is the elect-mode lease of the group's name that refused
	// the last heartbeat ("" when accepted).
	conflict string
	// configErr is the last heartbeat's error when Redis refused it as a
	// configuration error (leader.ErrRedisConfig), else nil; answered is
	// set once a heartbeat was answered (accepted, or refused so).
	configErr error
	answered  bool
	// busy maps a job to a channel closed when its function returns: set
	// while the job runs here, in this Run or, after ErrStopTimeout, in an
	// earlier one (see straggling).
	busy map[string]chan struct{}
	// gen counts memberships: it grows when a heartbeat is accepted while
	// not a member (first join, after a lapse or a refusal); fencedGen is
	// the membership whose claim of the group's fence row is done (see
	// fenceGroup, which fenceSem, of size one, serialises).
	gen, fencedGen uint64
	fenceSem       chan struct{}
}

// Member is one live instance of a group as its last heartbeat told.
type Member struct {
	ID   string `json:"id"`
	Load int    `json:"load"`
}

// unit is one job (or shard) under its own election.
type unit struct {
	name string
	e    *leader.Elector
	w    *Worker
	m    leader.Metrics // e's; nil for none

	// Guarded by Spread.mu.
	running  bool // a campaign goroutine runs
	waiting  bool // the job's function of an earlier Run still runs (logged once)
	cancel   context.CancelFunc
	held     bool // the job runs here (its term passed the share check)
	shedding bool
	rescue   bool // nobody else can take the job now: it may start beyond the share
	term     uint64
	since    time.Time
	stop     context.CancelCauseFunc // cancels the job's context (lapse); nil while not held
	err      error                   // the first error a campaign of the job returned; Run reads it after its campaigns ended
}

// ModeSpread is the configuration mode (solo's election.mode) that runs the
// jobs under a Spread instead of one election. A Worker does not take it:
// build a Spread (NewSpread, workerfx.SpreadModule).
const ModeSpread Mode = "spread"

// electorKey is the context key of a spread job's elector.
type electorKey struct{}

// ElectorFrom returns the elector of the job whose context ctx is (or
// descends from), in every mode: the worker's, or under a Spread the job's
// own; ok is false elsewhere. A job reads its election's name, its holder
// ID and its status from it. (A fenced write needs none of them: the job's
// context carries its fence.Token.)
func ElectorFrom(ctx context.Context) (e *leader.Elector, ok bool) {
	e, ok = ctx.Value(electorKey{}).(*leader.Elector)
	return e, ok
}

// errOverShare hands a term back: this instance already runs its share.
var errOverShare = errors.New("worker: over this instance's share")

// errNotMember hands a term back, and stops the jobs of a member whose
// membership was not confirmed within member_ttl (see Spread.memberUntil).
var errNotMember = errors.New("worker: membership of the group not confirmed within member_ttl")

// shardKey is the context key of a shard number.
type shardKey struct{}

// ShardFrom returns the shard number a sharded job's context carries
// (Sharded); ok is false for other jobs.
func ShardFrom(ctx context.Context) (shard int, ok bool) {
	shard, ok = ctx.Value(shardKey{}).(int)
	return shard, ok
}

// Sharded returns n pull jobs named NAME/0 … NAME/N−1; shard i runs
// fn(ctx, i), and ShardFrom(ctx) returns i too. Under a Spread every shard
// is an election of its own; under a Worker the leader runs them all.
func Sharded(name string, n int, fn func(ctx context.Context, shard int) error, opts ...JobOption) ([]Job, error) {
	if n < 1 {
		return nil, fmt.Errorf("worker: job %q: shards %d: must be at least 1", name, n)
	}
	if fn == nil {
		return nil, fmt.Errorf("worker: job %q: nil function", name)
	}
	jobs := make([]Job, n)
	for i := range n {
		jobs[i] = PullJob(name+"/"+strconv.Itoa(i), func(ctx context.Context) error {
			return fn(context.WithValue(ctx, shardKey{}, i), i)
		}, opts...)
	}
	return jobs, nil
}

// NewSpread returns a Spread of the group cfg.Name: its jobs' elections are
// named GROUP.JOB and take every other field of cfg; its member ID is
// cfg.ID (default HOST-PID) plus a random part. opts are the Worker options
// every job's worker gets; a WithMode other than ModeSpread or ModeElect,
// WithOnLeaderChange and Policy.MaxFailedTerms are refused. It validates
// cfg and sc and does not contact Redis.
func NewSpread(client redis.UniversalClient, cfg leader.Config, sc SpreadConfig, opts ...Option) (*Spread, error) {
	if client == nil {
		return nil, errors.New("worker: nil redis client")
	}
	var probeW Worker
	for _, o := range opts {
		o.apply(&probeW)
	}
	probe, err := leader.New(client, cfg, leader.WithHooks(probeW.hooks))
	if err != nil {
		return nil, err
	}
	cfg = probe.Config() // defaults applied; ID now has its random part
	if err := sc.Validate(cfg); err != nil {
		return nil, fmt.Errorf("worker: spread: %w", err)
	}
	switch probeW.mode {
	case "", ModeElect, ModeSpread:
		opts = append(slices.Clone(opts), WithMode(ModeElect)) // each job: one election
	default:
		return nil, fmt.Errorf("worker: mode %q: spreading jobs needs mode spread (or elect)", probeW.mode)
	}
	if probeW.onChange != nil {
		return nil, errors.New("worker: WithOnLeaderChange: not supported when spreading jobs")
	}
	// Giving up is an election's (the whole group's jobs stop campaigning
	// together); a Spread has one election per job, and the count was
	// never kept per job: refused rather than accepted and ignored.
	if n := probeW.policy.MaxFailedTerms; n > 0 {
		return nil, fmt.Errorf("worker: spread: %w", &leader.ConfigError{Field: "max_failed_terms", Value: n,
			Reason: "not supported when spreading jobs (election.mode spread): set it to 0"})
	}
	tmpl, err := New(probe, opts...)
	if err != nil {
		return nil, err
	}
	s := &Spread{
		client: client,
		cfg:    cfg,
		sc:     sc.withDefaults(cfg),
		opts:   opts,
		tmpl:   tmpl,
		member: cfg.ID,
		kick:   make(chan struct{}, 1),

		fenceSem: make(chan struct{}, 1),
	}
	s.base = zap.NewNop()
	if probeW.log != nil {
		s.base = probeW.log
	}
	s.log = s.base.Named("spread").With(zap.String("group", cfg.Name), zap.String("member", s.member))
	tmpl.metrics.SpreadCreated(cfg.Name)
	return s, nil
}

// RedisConfigErr returns the error of the group's last heartbeat, or else
// of the last acquire or renew of one of its jobs whose campaign runs now,
// when Redis refused it as a configuration error (leader.ErrRedisConfig:
// an ACL that lacks a rule, a wrong password, a command the server does
// not know); else nil. A job's error clears when its campaign's next call
// is answered, or when the member stops campaigning for it (at its
// share): a member reports only the refusals of calls it still makes.
func (s *Spread) RedisConfigErr() error {
	s.mu.Lock()
	err := s.configErr
	s.mu.Unlock()
	if err != nil {
		return err
	}
	for _, u := range s.campaigning() {
		if err := u.e.Status().ConfigErr; err != nil {
			return fmt.Errorf("job %q: %w", u.name, err)
		}
	}
	return nil
}

// campaigning returns the units whose campaign runs now (nil before Run).
func (s *Spread) campaigning() []*unit {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*unit
	for _, u := range s.units {
		if u.running {
			out = append(out, u)
		}
	}
	return out
}

// HeartbeatAnswered reports whether Redis answered a heartbeat of the
// current Run (accepted it, or refused it as a configuration error).
func (s *Spread) HeartbeatAnswered() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.answered
}

// Member returns this instance's member ID.
func (s *Spread) Member() string { return s.member }

// Config returns the group's election config (defaults applied) and the
// spread tunables in use.
func (s *Spread) Config() (leader.Config, SpreadConfig) { return s.cfg, s.sc }

// Election returns the election name of job: GROUP.JOB.
func (s *Spread) Election(job string) string { return s.cfg.Name + "." + job }

// Add registers jobs (pull or cron jobs, shards). Names are unique and must
// make valid election names (no braces, no white space).
func (s *Spread) Add(jobs ...Job) error {
	for _, j := range jobs {
		if j == nil {
			return errors.New("worker: nil job")
		}
		c := s.cfg
		c.Name = s.Election(j.Name())
		if err := c.Validate(); err != nil && j.Name() != "" {
			return fmt.Errorf("worker: job %q: %w", j.Name(), err)
		}
		s.mu.Lock()
		err := ErrRunning
		if !s.running {
			err = s.tmpl.Add(j)
		}
		s.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// Pull registers a pull job (see Worker.Pull).
func (s *Spread) Pull(name string, fn func(ctx context.Context) error, opts ...JobOption) error {
	return s.Add(PullJob(name, fn, opts...))
}

// Cron registers a cron job (see Worker.Cron).
func (s *Spread) Cron(name, spec string, fn func(ctx context.Context) error, opts ...JobOption) error {
	return s.Add(CronJob(name, spec, fn, opts...))
}

// Sharded registers n shards of a pull job (see the function Sharded).
func (s *Spread) Sharded(name string, n int, fn func(ctx context.Context, shard int) error, opts ...JobOption) error {
	jobs, err := Sharded(name, n, fn, opts...)
	if err != nil {
		return err
	}
	return s.Add(jobs...)
}

// Run blocks until ctx is done: it joins the group, heartbeats, and
// campaigns for and sheds jobs. When ctx ends it leaves the group, stops
// every job as a Worker does on shutdown, and returns nil, or
// leader.ErrStopTimeout (one error per such job, in job-name order, joined)
// when a job ignored cancellation past the shutdown timeout; a later Run
// does not start such a job again until it returned. Redis errors are
// retried, never returned. A Run while another runs returns ErrRunning.
func (s *Spread) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.running {
		s.mu.Unlock()
		return ErrRunning
	}
	s.running = true
	s.tmpl.mu.Lock()
	jobs := slices.Clone(s.tmpl.jobs)
	s.tmpl.mu.Unlock()
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.running = false
		s.mu.Unlock()
	}()
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].name < jobs[j].name })
	if err := s.noJobs(len(jobs)); err != nil {
		return err
	}

	hub := leader.NewHub(s.client, leader.WithHooks(s.tmpl.hooks))
	defer hub.Close()
	units, err := s.newUnits(hub, jobs)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.units, s.members, s.limit, s.memberUntil = units, nil, 0, time.Time{}
	s.configErr, s.answered = nil, false
	s.mu.Unlock()

	var wg sync.WaitGroup
	closeWatch := s.watch(ctx, hub, &wg)
	c := &control{s: s, units: units, wg: &wg, ctx: ctx}
	// A kick left by the previous Run's stopping jobs: the first step
	// comes at once anyway.
	select {
	case <-s.kick:
	default:
	}
	// lapse stops the jobs once membership is unconfirmed for member_ttl
	// (Redis unreachable, the group's slot down): see memberUntil. It
	// only cancels contexts, under s.mu; Run stops it before returning.
	c.lapseTimer = time.AfterFunc(time.Hour, s.lapse)
	c.lapseTimer.Stop()
	defer c.lapseTimer.Stop()
	t := time.NewTimer(0)
	defer t.Stop()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-t.C:
			c.step()
			t.Reset(s.sc.Heartbeat)
		case <-s.kick:
			c.step()
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
			t.Reset(s.sc.Heartbeat)
		}
	}
	return s.leave(units, &wg, closeWatch)
}

// newUnits makes the units of jobs, each job's elector under hub.
func (s *Spread) newUnits(hub *leader.Hub, jobs []*job) ([]*unit, error) {
	units := make([]*unit, 0, len(jobs))
	for _, j := range jobs {
		c := s.cfg
		c.Name, c.ID = s.Election(j.name), s.member
		m := s.tmpl.metrics.Elector(c.Name)
		e, err := leader.New(s.client, c, leader.WithHub(hub), leader.WithLogger(s.base), leader.WithMetrics(m),
			leader.WithHooks(s.tmpl.hooks))
		if err != nil {
			return nil, err
		}
		w, err := New(e, s.opts...)
		if err != nil {
			return nil, err
		}
		w.jobs = []*job{j}
		units = append(units, &unit{name: j.name, e: e, w: w, m: m})
	}
	return units, nil
}

// watch turns the group's notices into kicks, from a goroutine in wg,
// until the returned stop is called. spread.lua publishes one when a
// member joins, leaves or is pruned, so that every member rebalances at
// once; they come over the hub's one pub/sub connection. Without them
// (Redis down) the heartbeat still rebalances, a heartbeat later.
func (s *Spread) watch(ctx context.Context, hub *leader.Hub, wg *sync.WaitGroup) (stop func()) {
	gl, err := hub.NewRedisStore(s.cfg)
	if err != nil {
		return func() {}
	}
	gw, err := gl.Watch(ctx)
	if err != nil {
		return func() {}
	}
	wg.Go(func() {
		for range gw.Events() { // closed by gw.Close
			select {
			case s.kick <- struct{}{}:
			default:
			}
		}
	})
	return func() { _ = gw.Close() }
}

// lapse stops the jobs of a member whose membership was not confirmed
// within member_ttl: each job's context is cancelled (its lease is renewed
// while it drains, then released), so that every job has stopped before
// the member's exclusion entry expires. It runs on its timer's goroutine.
func (s *Spread) lapse() {
	s.mu.Lock()
	if time.Now().Before(s.memberUntil) { // confirmed meanwhile
		s.mu.Unlock()
		return
	}
	var stopped []string
	for _, u := range s.units {
		if u.held && u.stop != nil {
			u.stop(errNotMember)
			stopped = append(stopped, u.name)
		}
	}
	s.mu.Unlock()
	if len(stopped) > 0 {
		s.log.Warn("stopping jobs: membership of the group not confirmed within member_ttl",
			zap.Strings("jobs", stopped), zap.Duration("member_ttl", s.sc.MemberTTL))
	}
}
