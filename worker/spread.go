package worker

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/solo-run/solo/internal/bounded"
	"github.com/solo-run/solo/internal/hooks"
	"github.com/solo-run/solo/internal/rediserr"
	"github.com/solo-run/solo/internal/seeded"
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
// its own, all under one leader.Hub, and spreads the jobs over the live
// instances of its group: each job runs on exactly one instance at a time,
// with its own term, fence claim, checkpoints and metrics (the election
// label is GROUP.JOB), as a Worker's jobs do under one election.
//
// Membership: every instance heartbeats PREFIX:{GROUP}:members (a sorted
// set of member → expiry on the server's clock), PREFIX:{GROUP}:loads
// (member → jobs held) and PREFIX:{GROUP}:state (the jobs it registered
// and holds) every Heartbeat, one script call that also prunes expired
// members. Only members that registered a job count toward its share: a
// job registered by c members counts 1/c toward each, and an instance's
// share is the ceiling of its jobs' sum (ceil(jobs / live members) when
// every member has the same jobs). The group's name excludes an election
// of the same name in mode elect (PREFIX:{GROUP}:spread): a member does not
// join while that lease is held, runs jobs only while its membership is
// confirmed, and on shutdown keeps its entry until its jobs drained. With
// a fence (WithFence), a member claims the elect-mode row GROUP with a term
// reserved from that election before its first job runs (see fenceGroup).
//
// Balancing, without a coordinator: an instance never starts more jobs
// than its share (a term won beyond it is handed back at once); one that
// holds more (members joined) resigns the excess gracefully, preferring by
// rendezvous hashing the jobs it ranks lowest; one below its share (or
// below it while some job is unheld) campaigns for the jobs it does not
// hold, after a delay that grows with its load, so the least loaded
// campaign first. One at or above its share does not campaign at all, so
// a balanced group costs only renewals and heartbeats. A job of its own
// that nobody holds while every member able to run it is at its share is
// rescued by the least loaded of them, beyond its share.
//
// Stability: a job is shed only when the excess has lasted a heartbeat
// interval and the job has run for MinHold; a group whose loads differ by
// at most one is left alone.
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
	// settle, set only by the module's simulator (internal/seeded), runs
	// before each step reads the jobs' state: see seeded.SetSettle.
	settle func(key string)

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
	pm   leader.ProtocolMetrics // e's, when the metrics listen: nil otherwise

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
// build a Spread (NewSpread, SpreadModule).
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
// named GROUP.JOB and take every other field of cfg; this instance's member
// ID is cfg.ID (default HOST-PID) plus a random part, and every holder ID
// of its jobs is MEMBER-RANDOM. opts are the Worker options every job's
// worker gets (WithLogger, WithMetrics, WithPolicy, WithFence,
// WithLocation); WithMode other than ModeSpread or ModeElect is refused. It validates cfg
// and sc and does not contact Redis.
func NewSpread(client redis.UniversalClient, cfg leader.Config, sc SpreadConfig, opts ...Option) (*Spread, error) {
	if client == nil {
		return nil, errors.New("worker: nil redis client")
	}
	probe, err := leader.New(client, cfg)
	if err != nil {
		return nil, err
	}
	cfg = probe.Config() // defaults applied; ID now has its random part
	if err := sc.Validate(cfg); err != nil {
		return nil, fmt.Errorf("worker: spread: %w", err)
	}
	var probeW Worker
	for _, o := range opts {
		o.apply(&probeW)
	}
	if probeW.optErr != nil {
		return nil, probeW.optErr
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
		settle: seeded.Settle(client),
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
	tmpl.metrics.initGroup(cfg.Name)
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

// heartbeatAnswered reports whether Redis answered a heartbeat of the
// current Run (accepted it, or refused it as a configuration error).
func (s *Spread) heartbeatAnswered() bool {
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
// campaigns for and sheds jobs as described on Spread. When ctx ends it
// leaves the group, then stops every job (drain, release, notice, as a
// Worker does on shutdown) and returns nil, or leader.ErrStopTimeout when
// a job ignored cancellation past the shutdown timeout (each such job's
// first error, named, in job-name order, joined by errors.Join). A job
// left running so is not started again by a later Run until it returned
// (that Run returns ErrStopTimeout for it too if it ends first). Redis
// errors are retried (membership keeps its last view meanwhile), never
// returned.
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

	hub := leader.NewHub(s.client, leader.WithHooks(hooks.Hooks{Settle: s.settle}))
	defer hub.Close()
	units := make([]*unit, 0, len(jobs))
	for _, j := range jobs {
		c := s.cfg
		c.Name, c.ID = s.Election(j.name), s.member
		m := s.tmpl.metrics.Elector(c.Name)
		e, err := leader.New(s.client, c, leader.WithHub(hub), leader.WithLogger(s.base), leader.WithMetrics(m))
		if err != nil {
			return err
		}
		w, err := New(e, s.opts...)
		if err != nil {
			return err
		}
		w.jobs = []*job{j}
		pm, _ := m.(leader.ProtocolMetrics)
		units = append(units, &unit{name: j.name, e: e, w: w, pm: pm})
	}
	s.mu.Lock()
	s.units, s.members, s.limit, s.memberUntil = units, nil, 0, time.Time{}
	s.configErr, s.answered = nil, false
	s.mu.Unlock()

	var wg sync.WaitGroup
	// The group's notices (spread.lua publishes one when a member joins,
	// leaves or is pruned) make every member rebalance at once; they come
	// over the hub's one pub/sub connection. Without them (Redis down) the
	// heartbeat still rebalances, a heartbeat later.
	closeWatch := func() {}
	if gl, err := hub.NewRedisLock(s.cfg); err == nil {
		if gw, err := gl.Watch(ctx); err == nil {
			wg.Go(func() {
				for range gw.Events() { // closed by gw.Close
					select {
					case s.kick <- struct{}{}:
					default:
					}
				}
			})
			closeWatch = func() { _ = gw.Close() }
		}
	}
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

// control is Run's balancing state, used by Run's goroutine only.
type control struct {
	s         *Spread
	units     []*unit
	wg        *sync.WaitGroup
	ctx       context.Context
	first     time.Time // the first successful heartbeat
	overSince time.Time // since when this instance is over its share
	wantSince time.Time // since when this instance wants to campaign
	failing   bool      // the last heartbeat failed (logged once)
	refused   bool      // the last heartbeat was refused (logged once)
	misconfig bool      // the last heartbeat was refused as a configuration error (logged once)

	lapseTimer *time.Timer // runs Spread.lapse at memberUntil
}

// step heartbeats and rebalances once.
func (c *control) step() {
	s := c.s
	if s.settle != nil {
		s.settle("spread")
	}
	s.mu.Lock()
	var held []string
	for _, u := range c.units {
		if u.held && !u.shedding {
			held = append(held, u.name)
		}
	}
	s.mu.Unlock()
	load := len(held)
	// Bounded like an election's calls, not by the interval: at the
	// smallest legal heartbeat no call on a real network would finish in
	// time, and a member whose every heartbeat fails never campaigns.
	// A reply later than member_ttl after the send confirms nothing.
	hctx, cancel := context.WithTimeout(c.ctx, min(max(s.sc.Heartbeat, s.cfg.RenewDeadline), s.sc.MemberTTL))
	sent := time.Now()
	peers, holder, err := s.heartbeat(hctx, held, s.sc.MemberTTL, s.sc.MemberTTL+s.cfg.TTL)
	cancel()
	err = leader.RedisConfig(err)
	config := errors.Is(err, leader.ErrRedisConfig)
	s.mu.Lock()
	if err == nil || config { // an outage says nothing of the configuration
		s.configErr = nil
		if config {
			s.configErr = err
		}
	}
	s.answered = s.answered || err == nil || config
	s.mu.Unlock()
	if config {
		s.tmpl.metrics.redisConfigError(s.cfg.Name)
		if !c.misconfig {
			s.log.Error("heartbeat refused by redis: a configuration error, retrying will not cure it; fix it (the member retries every heartbeat meanwhile; its jobs stop once its membership lapses, member_ttl after its last accepted heartbeat)",
				zap.Error(err))
		}
		c.misconfig, c.failing = true, true
	} else if err != nil && c.ctx.Err() == nil && !c.failing {
		s.log.Warn("heartbeat failed; keeping the last view of the group", zap.Error(err))
	}
	if err != nil {
		c.failing = true
		s.mu.Lock()
		if !time.Now().Before(s.memberUntil) {
			c.stopCampaigns() // membership lapsed: no job may start
		}
		s.mu.Unlock()
		return
	}
	if c.failing {
		s.log.Info("heartbeat works again")
		c.failing, c.misconfig = false, false
	}
	if holder != "" {
		c.refuse(holder)
		return
	}
	s.mu.Lock()
	if !sent.Before(s.memberUntil) {
		s.gen++ // a new membership: an elect-mode leader may have come between
	}
	s.memberUntil, s.conflict = sent.Add(s.sc.MemberTTL), ""
	s.mu.Unlock()
	c.lapseTimer.Reset(time.Until(sent.Add(s.sc.MemberTTL)))
	if c.refused {
		c.refused = false
		s.log.Info("joined the group: the elect-mode lease of the name is gone")
	}
	if c.first.IsZero() {
		c.first = time.Now()
	}
	mine := make([]string, len(c.units))
	for i, u := range c.units {
		mine[i] = u.name
	}
	b := plan(s.member, mine, held, peers)
	share, floor, minLoad := b.share, b.floor, b.minLoad
	members := make([]Member, len(peers))
	for i, p := range peers {
		members[i] = p.Member
	}
	m := len(members)
	now := time.Now()

	// Log lines wait until s.mu is released: a slow log sink must not hold
	// up a term that starts or ends (runTerm takes s.mu).
	var logs []func()
	defer func() {
		for _, l := range logs {
			l()
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	prevM := len(s.members)
	s.members, s.limit = members, share
	if prevM != m {
		logs = append(logs, func() {
			s.log.Info("group changed", zap.Int("members", m), zap.Int("share", share), zap.Int("load", load))
		})
	}

	// 1. Shed the excess: above the share, or at it while another member
	// is two or more below (only the first of the most loaded sheds, so
	// that they do not all shed at once).
	over := load - share
	if over <= 0 && load == share && share > floor && b.lowPeer && b.firstMax == s.member {
		over = 1
	}
	switch {
	case over <= 0:
		c.overSince = time.Time{}
	case c.overSince.IsZero():
		c.overSince = now
	}
	if over > 0 && now.Sub(c.overSince) >= s.sc.Heartbeat/2 {
		var can []*unit
		for _, u := range c.units {
			// Only a job another capable member has room for: shedding
			// one nobody else can take would leave it to run nowhere.
			if u.held && !u.shedding && now.Sub(u.since) >= s.sc.MinHold && b.room[u.name] {
				can = append(can, u)
			}
		}
		sort.Slice(can, func(i, j int) bool { return score(can[i].name, s.member) < score(can[j].name, s.member) })
		for _, u := range can[:min(over, len(can))] {
			c.shed(u)
			job, term := u.name, u.term
			logs = append(logs, func() {
				s.log.Info("shedding job to rebalance", zap.String("job", job), zap.Uint64("term", term))
			})
		}
	}

	// 2. Campaign while below the share (or the floor once every job is
	// held), the least loaded first; otherwise stop campaigning.
	// A member campaigns from its second heartbeat on (half a heartbeat
	// after its first, so not on the notice of its own joining): instances
	// started together see each other first.
	started := now.Sub(c.first) >= s.sc.Heartbeat/2
	want := started && (load < floor || (len(b.unheld) > 0 && load < share))
	// 3. Rescue: a job of ours that nobody holds while every member able
	// to run it is at or above its share would run nowhere; the least
	// loaded of them (ours, here) campaigns for it, and may run it beyond
	// its share.
	for _, u := range c.units {
		u.rescue = started && b.rescue[u.name]
	}
	if !want {
		c.wantSince = time.Time{}
		for _, u := range c.units {
			switch {
			case u.rescue && !u.running && !u.held:
				c.start(u)
			case !u.rescue && u.running && !u.held && u.cancel != nil:
				u.cancel()
				u.cancel = nil
			}
		}
		return
	}
	if c.wantSince.IsZero() {
		c.wantSince = now
	}
	// The least loaded campaign at once, the others up to a heartbeat
	// later, in proportion to how far above the least loaded they are.
	if delay := s.sc.Heartbeat * time.Duration(load-minLoad) / time.Duration(max(1, share-minLoad)); now.Sub(c.wantSince) < delay {
		return
	}
	for _, u := range c.units {
		if !u.running && !u.held {
			c.start(u)
		}
	}
}

// stopCampaigns stops campaigning for the jobs not held; s.mu is held.
func (c *control) stopCampaigns() {
	for _, u := range c.units {
		if u.running && !u.held && u.cancel != nil {
			u.cancel()
			u.cancel = nil
		}
	}
}

// refuse handles a heartbeat refused because the election of the group's
// name is held in mode elect (holder, "TERM ID"): this member is not in
// the group, so it runs nothing: it stops campaigning, sheds any job it
// still holds (none, unless Redis lost the group's keys), and says so
// once, at error level, with the fix.
func (c *control) refuse(holder string) {
	s := c.s
	if !c.refused {
		c.refused = true
		s.log.Error("not running jobs: the name is led in election.mode elect; stop every elect-mode instance of the name "+
			"(switching modes: stop the old mode's instances, the new mode's take over once its lease is gone), or give the group another name",
			zap.String("election", s.cfg.Name), zap.String("holder", holder))
	}
	c.first = time.Time{} // campaign half a heartbeat after joining, as a new member
	s.mu.Lock()
	defer s.mu.Unlock()
	s.members, s.conflict, s.memberUntil = nil, holder, time.Time{}
	c.stopCampaigns()
	for _, u := range c.units {
		if u.held && !u.shedding {
			c.shed(u)
		}
	}
}

// start starts u's campaign goroutine, unless the job's function of an
// earlier Run still runs (see straggling); s.mu is held.
func (c *control) start(u *unit) {
	s := c.s
	if c.straggling(u) {
		return
	}
	ctx, cancel := context.WithCancel(c.ctx)
	u.running, u.cancel = true, cancel
	c.wg.Go(func() {
		defer cancel()
		err := u.e.Run(ctx, func(ctx context.Context) error { return s.runTerm(ctx, u) })
		s.mu.Lock()
		// A refusal for version skew is reported while the job's campaign
		// is refused (Status.ProtocolErr outlives the campaign, for an
		// elect-mode Run to clear): a member no longer campaigning for the
		// job (at its share, or stopped) refuses nothing. Cleared before
		// the unit may campaign again, so never over a newer refusal.
		if u.pm != nil && u.e.Status().ProtocolErr != nil {
			u.pm.ProtocolRefused(false)
		}
		u.running, u.cancel = false, nil
		if err != nil && u.err == nil {
			u.err = fmt.Errorf("job %q: %w", u.name, err)
		}
		s.mu.Unlock()
	})
}

// shed resigns u gracefully and stops campaigning for it; s.mu is held.
//
// Shedding is a resign in every respect: the elector cancels the job,
// renews the lease while it drains (for as long as that takes: a job that
// ignores cancellation keeps its lease and is reported past the stop
// budget, as on any resign), then releases. Only then is the campaign
// cancelled, in the resign cooldown: cancelling it earlier is a shutdown to
// the elector, which stops renewing at shutdown_timeout and leaves the
// lease to expire under a job that may still run. Resign returns once the
// term ended: released, or cut short by Run's own shutdown (c.ctx), which
// ends the term by the shutdown rules.
func (c *control) shed(u *unit) {
	s := c.s
	u.shedding = true
	cancel := u.cancel
	c.wg.Go(func() {
		err := u.e.Resign(context.Background())
		if err != nil && !errors.Is(err, leader.ErrNotLeader) {
			s.log.Warn("shed job", zap.String("job", u.name), zap.Error(err))
		}
		if cancel != nil {
			cancel()
		}
	})
}

// runTerm is a unit's leader function: it runs the job unless this
// instance already runs its share, in which case it hands the term back.
func (s *Spread) runTerm(ctx context.Context, u *unit) error {
	term, _ := leader.TermFrom(ctx)
	s.mu.Lock()
	load := 0
	for _, o := range s.units {
		if o.held && !o.shedding {
			load++
		}
	}
	if !time.Now().Before(s.memberUntil) {
		s.mu.Unlock()
		return fmt.Errorf("%w: %w", errNotMember, leader.ErrResigned)
	}
	if load >= s.limit && !u.rescue {
		s.mu.Unlock()
		return fmt.Errorf("%w: %w", errOverShare, leader.ErrResigned)
	}
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	u.held, u.term, u.since, u.stop = true, term, time.Now(), stop
	returned := s.run(u.name)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		u.held, u.shedding, u.term, u.stop = false, false, 0, nil
		returned()
		s.mu.Unlock()
		select { // recount at once: a lost job may be someone's to take
		case s.kick <- struct{}{}:
		default:
		}
	}()
	if err := s.fenceGroup(ctx, u); err != nil || ctx.Err() != nil {
		return err
	}
	return u.w.term(ctx, u.w.jobs, u.e.Checkpoint, nil) // u.w's elector is u.e
}

//go:embed spread.lua
var heartbeatLua string

var heartbeatScript = redis.NewScript(heartbeatLua)

func init() { rediserr.Register("spread heartbeat", heartbeatLua) }

// membersKey, loadsKey and spreadKey are the group's keys.
func (s *Spread) membersKey() string { return s.cfg.Key("members") }
func (s *Spread) loadsKey() string   { return s.cfg.Key("loads") }
func (s *Spread) spreadKey() string  { return s.cfg.Key("spread") }

// heartbeat writes this member's heartbeat and load, its membership lasting
// ttl and its exclusion entry excl (see spread.lua), and returns the live
// members, in ID order. It returns by ctx's deadline whatever the client's
// timeouts (the reply of a call abandoned so is dropped). With ttl 0 it leaves the members, and refreshes
// its exclusion entry to excl if it has one, or removes it (excl 0).
// holder is the elect-mode lease ("TERM ID") that refused the heartbeat.
func (s *Spread) heartbeat(ctx context.Context, held []string, ttl, excl time.Duration) (members []peer, holder string, err error) {
	idle := max(10*s.sc.MemberTTL, time.Minute).Milliseconds()
	s.mu.Lock()
	jobs := make([]string, len(s.units))
	for i, u := range s.units {
		jobs[i] = u.name
	}
	s.mu.Unlock()
	list := strings.Join(jobs, " ") // names hold no white space (Add)
	// Bounded as an election's calls are: a reply that never comes costs
	// ctx's bound, not the client's read timeout.
	res, err := bounded.Call(ctx, func() ([]string, error) {
		return heartbeatScript.Run(ctx, s.client,
			[]string{s.membersKey(), s.loadsKey(), s.cfg.LeaseKey(), s.spreadKey(), s.cfg.Key("state"), s.cfg.Key("jobsets")},
			s.member, ttl.Milliseconds(), len(held), idle, s.cfg.EventsChannel(), excl.Milliseconds(),
			digest(list), list, strings.Join(held, " ")).StringSlice()
	})
	if err != nil {
		return nil, "", fmt.Errorf("heartbeat %q: %w", s.membersKey(), err)
	}
	if len(res) == 0 {
		return nil, "", fmt.Errorf("heartbeat %q: empty reply", s.membersKey())
	}
	switch res[0] {
	case "ok":
		members, err := parsePeers(res[1:], jobs)
		if err != nil {
			return nil, "", fmt.Errorf("heartbeat %q: %w", s.membersKey(), err)
		}
		return members, "", nil
	case "elect":
		if len(res) > 1 {
			holder = res[1]
		}
		return nil, holder, nil
	}
	return nil, "", fmt.Errorf("heartbeat %q: unexpected reply %q", s.membersKey(), res)
}

// peer is a live member as the last heartbeat told: its load and, when it
// publishes them, the jobs it registered and those it holds.
type peer struct {
	Member
	jobs map[string]bool // nil: published none (an older solo): taken as ours
	held []string
}

// parsePeers reads spread.lua's reply after its status: M, then M triples
// (member, load, "DIGEST HELD..."), then digest → job list pairs for every
// digest in use but ours (mine: our jobs). Members come in ID order.
func parsePeers(res []string, mine []string) ([]peer, error) {
	if len(res) == 0 {
		return nil, errors.New("no member count")
	}
	m, err := strconv.Atoi(res[0])
	if err != nil || m < 0 || len(res) < 1+3*m || (len(res)-1-3*m)%2 != 0 {
		return nil, fmt.Errorf("malformed reply %q", res)
	}
	sets := map[string]map[string]bool{}
	for i := 1 + 3*m; i+1 < len(res); i += 2 {
		sets[res[i]] = setOf(strings.Fields(res[i+1]))
	}
	own := setOf(mine)
	out := make([]peer, 0, m)
	for i := range m {
		id, load, state := res[1+3*i], res[2+3*i], res[3+3*i]
		n, _ := strconv.Atoi(load)
		p := peer{Member: Member{ID: id, Load: n}}
		if f := strings.Fields(state); len(f) > 0 {
			p.jobs, p.held = sets[f[0]], f[1:]
			if p.jobs == nil {
				p.jobs = own // our digest (the script leaves our own list out)
			}
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// mem is a member as plan sees it.
type mem struct {
	id    string
	load  int
	jobs  map[string]bool
	held  []string
	known bool // published its jobs and holdings (not an older solo)
}

// balance is what one heartbeat's view of the group means for a member.
type balance struct {
	share, floor int             // of the jobs this member can run, its fair part
	minLoad      int             // the least load among the peers and this member
	firstMax     string          // the first (ID order) of the most loaded of them
	lowPeer      bool            // a peer two or more below its own share
	unheld       []string        // this member's jobs that nobody holds
	rescue       map[string]bool // unheld jobs this member must take (see step)
	room         map[string]bool // held jobs another capable member has room for
}

// plan computes the balance of member me, which registered the jobs mine
// and holds held, from the live members peers (me among them, or not yet).
// Only members able to run a job count toward its share: each job counts
// 1/c toward the fair load of each of the c members that registered it,
// so a member's share is ceil of its jobs' sum (ceil(N/M) when every
// member has the same N jobs), and a member that registered none of a
// job's peers' jobs is nobody's peer.
func plan(me string, mine, held []string, peers []peer) balance {
	own := setOf(mine)
	ms := []mem{{id: me, load: len(held), jobs: own, held: held, known: true}}
	for _, p := range peers {
		if p.ID == me {
			continue // our own truth is local
		}
		jobs := p.jobs
		if jobs == nil {
			jobs = own
		}
		ms = append(ms, mem{id: p.ID, load: p.Load, jobs: jobs, held: p.held, known: p.jobs != nil})
	}
	capable := map[string]int{}
	heldBy := map[string]bool{}
	for _, x := range ms {
		for j := range x.jobs {
			capable[j]++
		}
		for _, j := range x.held {
			heldBy[j] = true
		}
	}
	fair := make([]float64, len(ms))
	share := make([]int, len(ms))
	for i, x := range ms {
		for j := range x.jobs {
			fair[i] += 1 / float64(capable[j])
		}
		share[i] = int(math.Ceil(fair[i] - 1e-9))
	}
	b := balance{share: share[0], floor: int(math.Floor(fair[0] + 1e-9)), minLoad: ms[0].load,
		rescue: map[string]bool{}, room: map[string]bool{}}
	// Peers: the members that can run some job of ours, in ID order.
	maxLoad := -1
	for _, i := range peerOrder(ms, own) {
		x := ms[i]
		b.minLoad = min(b.minLoad, x.load)
		if x.load > maxLoad {
			maxLoad, b.firstMax = x.load, x.id
		}
		if i > 0 && x.load <= share[i]-2 {
			b.lowPeer = true
		}
	}
	for _, j := range held {
		for i, x := range ms[1:] {
			if x.jobs[j] && x.load < share[i+1] {
				b.room[j] = true
				break
			}
		}
	}
	for _, j := range mine {
		if heldBy[j] {
			continue
		}
		b.unheld = append(b.unheld, j)
		// Nobody able to run j has room: the least loaded of them (then
		// the first by ID) takes it beyond its share. Not while one of
		// them publishes no holdings (an older solo): it may hold j.
		best := -1
		full := true
		for i, x := range ms {
			if !x.jobs[j] {
				continue
			}
			if x.load < share[i] || !x.known {
				full = false
				break
			}
			if best < 0 || x.load < ms[best].load || (x.load == ms[best].load && x.id < ms[best].id) {
				best = i
			}
		}
		if full && best == 0 {
			b.rescue[j] = true
		}
	}
	return b
}

// peerOrder returns the indexes of ms (0 is this member) that can run some
// job of own, this member included, in ID order.
func peerOrder(ms []mem, own map[string]bool) []int {
	var out []int
	for i, x := range ms {
		if i == 0 {
			out = append(out, i)
			continue
		}
		for j := range x.jobs {
			if own[j] {
				out = append(out, i)
				break
			}
		}
	}
	sort.Slice(out, func(a, b int) bool { return ms[out[a]].id < ms[out[b]].id })
	return out
}

// digest names a job list: members with the same jobs share it.
func digest(list string) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(list))
	return strconv.FormatUint(h.Sum64(), 36)
}

func setOf(names []string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// parseMembers turns {id, load, …} into members in ID order.
func parseMembers(res []string) []Member {
	out := make([]Member, 0, len(res)/2)
	for i := 0; i+1 < len(res); i += 2 {
		n, _ := strconv.Atoi(res[i+1])
		out = append(out, Member{ID: res[i], Load: n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// score is the rendezvous hash of job and member: a member sheds the jobs
// it scores lowest first, so the choice is the same on every run.
func score(job, member string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(job))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(member))
	x := h.Sum64()
	// splitmix64 finaliser: fnv's low bits mix poorly.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// MemberOf returns the member ID in a spread job's holder ID
// (MEMBER-RANDOM): the instance that runs the job.
func MemberOf(holder string) string {
	if i := strings.LastIndexByte(holder, '-'); i > 0 {
		return holder[:i]
	}
	return holder
}
