//go:build linux

package faults

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	_ "modernc.org/sqlite" // the fenced store's driver

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/fence"
	"github.com/solo-run/solo/leader/lock"
	"github.com/solo-run/solo/worker"
)

// CandidateEnv is the environment variable that turns the test binary into
// a candidate process; its value is the JSON of a CandidateConfig.
const CandidateEnv = "SOLO_FAULTS_CANDIDATE"

// CandidateConfig is what a candidate process is told by the rig.
type CandidateConfig struct {
	// ID is the candidate's ID in the election, unique per process run.
	ID string `json:"id"`
	// Election is the election's name; also the fence's election.
	Election string `json:"election"`
	// Redis is the address the candidate reaches Redis at (its proxy).
	Redis string `json:"redis,omitempty"`
	// Sentinels and Master select a Sentinel failover client instead.
	Sentinels []string `json:"sentinels,omitempty"`
	Master    string   `json:"master,omitempty"`
	// DB is the path of the shared SQLite store.
	DB string `json:"db"`
	// Timing is the election's timing.
	Timing Timing `json:"timing"`
	// MinReplicas is leader.Config.MinReplicas.
	MinReplicas int `json:"min_replicas,omitempty"`
	// Worker runs the job as a worker.Worker pull job instead of as the
	// elector's leader function.
	Worker bool `json:"worker,omitempty"`
	// IgnoreCancel makes the job go on writing this long after its context
	// was cancelled.
	IgnoreCancel time.Duration `json:"ignore_cancel,omitempty"`
	// Seed seeds the job's write intervals.
	Seed uint64 `json:"seed"`
	// Lock runs the LOCK mode (lock_candidate.go) instead of an elector:
	// the candidate takes the lock named Election over and over.
	Lock *LockMode `json:"lock,omitempty"`
}

// Timing is an election's timing and the candidates' Redis client timeouts.
type Timing struct {
	TTL           time.Duration `json:"ttl"`
	RenewInterval time.Duration `json:"renew_interval"`
	RenewDeadline time.Duration `json:"renew_deadline"`
	RetryInterval time.Duration `json:"retry_interval"`
	// RedisTimeout is the client's dial, read and write timeout.
	RedisTimeout time.Duration `json:"redis_timeout"`
	// WriteMin and WriteMax bound the pause between two writes of a job.
	WriteMin time.Duration `json:"write_min"`
	WriteMax time.Duration `json:"write_max"`
}

// DefaultTiming returns the suite's timing: TTL 2s, renew every 600ms,
// deadline 1.4s (stop budget 600ms), retry 300ms, client timeouts 500ms,
// a write every 20–50ms. A fault iteration takes a few seconds.
func DefaultTiming() Timing {
	return Timing{
		TTL:           2 * time.Second,
		RenewInterval: 600 * time.Millisecond,
		RenewDeadline: 1400 * time.Millisecond,
		RetryInterval: 300 * time.Millisecond,
		RedisTimeout:  500 * time.Millisecond,
		WriteMin:      20 * time.Millisecond,
		WriteMax:      50 * time.Millisecond,
	}
}

// LeaderConfig returns the leader.Config of a candidate.
func (c CandidateConfig) LeaderConfig() leader.Config {
	return leader.Config{
		Name:          c.Election,
		ID:            c.ID,
		TTL:           c.Timing.TTL,
		RenewInterval: c.Timing.RenewInterval,
		RenewDeadline: c.Timing.RenewDeadline,
		RetryInterval: c.Timing.RetryInterval,
		MinReplicas:   c.MinReplicas,
	}
}

// Mono returns CLOCK_MONOTONIC in nanoseconds: one clock for every process
// of the host, so the test can compare the candidates' times exactly.
func Mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // cannot fail on Linux with a valid clock id
	}
	return ts.Nano()
}

// CandidateMain is the main of a candidate process: it runs an elector (or
// a worker) whose leader function writes through the fence into the shared
// store, and reports every step as a JSON Event line on stdout. SIGTERM
// shuts it down gracefully (Run's context ends); SIGUSR1 makes it resign.
// It returns the process exit code.
func CandidateMain() int {
	var cfg CandidateConfig
	if err := json.Unmarshal([]byte(os.Getenv(CandidateEnv)), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "candidate: bad %s: %v\n", CandidateEnv, err)
		return 2
	}
	c, err := newCandidate(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "candidate %s: %v\n", cfg.ID, err)
		return 2
	}
	defer c.close()
	if cfg.Lock != nil {
		return c.runLock()
	}
	return c.run()
}

// candidate is one candidate process.
type candidate struct {
	cfg    CandidateConfig
	out    *emitter
	db     *sql.DB
	guard  *fence.Guard
	client redis.UniversalClient
	log    *zap.Logger
	e      *leader.Elector
	rnd    *rand.Rand
	seq    int64        // write sequence number, unique within the process
	locks  *lock.Client // LOCK mode only, as is mu
	mu     *lock.Mutex
}

func newCandidate(cfg CandidateConfig) (*candidate, error) {
	c := &candidate{cfg: cfg, out: &emitter{id: cfg.ID}, rnd: rand.New(rand.NewPCG(cfg.Seed, 0x5010))}
	db, err := OpenStore(cfg.DB)
	if err != nil {
		return nil, err
	}
	c.db = db
	if c.guard, err = fence.New(db); err != nil {
		_ = db.Close()
		return nil, err
	}
	t := cfg.Timing
	if len(cfg.Sentinels) > 0 {
		c.client = redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: cfg.Master, SentinelAddrs: cfg.Sentinels,
			ContextTimeoutEnabled: true,
			DialTimeout:           t.RedisTimeout, ReadTimeout: t.RedisTimeout, WriteTimeout: t.RedisTimeout,
		})
	} else {
		c.client = redis.NewClient(&redis.Options{
			Addr:                  cfg.Redis,
			ContextTimeoutEnabled: true,
			DialTimeout:           t.RedisTimeout, ReadTimeout: t.RedisTimeout, WriteTimeout: t.RedisTimeout,
		})
	}
	zcfg := zap.NewProductionConfig()
	zcfg.OutputPaths, zcfg.ErrorOutputPaths = []string{"stderr"}, []string{"stderr"}
	zcfg.Sampling = nil
	zcfg.Level = zap.NewAtomicLevelAt(zap.DebugLevel)
	if c.log, err = zcfg.Build(); err != nil {
		c.close()
		return nil, err
	}
	if cfg.Lock != nil {
		if err := c.newLockMode(); err != nil {
			c.close()
			return nil, err
		}
		return c, nil
	}
	lcfg := cfg.LeaderConfig()
	lock, err := leader.NewRedisStore(c.client, lcfg)
	if err != nil {
		c.close()
		return nil, err
	}
	c.e, err = leader.NewWithStore(&recordingStore{Store: lock, out: c.out}, lcfg,
		leader.WithLogger(c.log), leader.WithMetrics(recordingMetrics{out: c.out}))
	if err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

func (c *candidate) close() {
	if c.locks != nil {
		_ = c.locks.Close()
	}
	if c.client != nil {
		_ = c.client.Close()
	}
	if c.db != nil {
		_ = c.db.Close()
	}
	if c.log != nil {
		_ = c.log.Sync()
	}
}

// run runs the election until SIGTERM.
func (c *candidate) run() int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGUSR1)
	defer signal.Stop(sigs)

	var wg sync.WaitGroup
	defer wg.Wait()
	stopSignals := make(chan struct{})
	defer close(stopSignals)
	wg.Go(func() {
		for {
			select {
			case <-stopSignals:
				return
			case s := <-sigs:
				if s == syscall.SIGTERM {
					c.out.emit(Event{Kind: KindSignal, Detail: "SIGTERM"})
					cancel()
					continue
				}
				c.out.emit(Event{Kind: KindSignal, Detail: "SIGUSR1"})
				wg.Go(func() { c.resign(ctx) })
			}
		}
	})

	var run func(context.Context) error
	if c.cfg.Worker {
		w, err := worker.New(c.e, worker.WithLogger(c.log))
		if err == nil {
			err = w.Pull("writer", c.job)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "candidate %s: %v\n", c.cfg.ID, err)
			return 2
		}
		run = w.Run
	} else {
		run = func(ctx context.Context) error { return c.e.Run(ctx, c.job) }
	}
	c.out.emit(Event{Kind: KindReady})
	err := run(ctx)
	ev := Event{Kind: KindExit}
	if err != nil {
		ev.Detail = err.Error()
	}
	c.out.emit(ev)
	return 0
}

func (c *candidate) resign(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 3*c.cfg.Timing.TTL)
	defer cancel()
	ev := Event{Kind: KindResign, Result: "ok"}
	if err := c.e.Resign(rctx); err != nil {
		ev.Result, ev.Detail = "error", err.Error()
	}
	c.out.emit(ev)
}

// job is the leader function: claim the term in the store, then write
// every WriteMin–WriteMax until the context ends (or, with IgnoreCancel,
// that long after). Its start and stop are reported with the monotonic
// clock; they bound the interval in which it may write.
func (c *candidate) job(ctx context.Context) error {
	start := Mono()
	term, _ := leader.TermFrom(ctx)
	c.out.emit(Event{Mono: start, Kind: KindStart, Term: term})
	defer func() {
		ev := Event{Kind: KindStop, Term: term}
		if cause := context.Cause(ctx); cause != nil {
			ev.Detail = cause.Error()
		}
		ev.Mono = Mono()
		c.out.emit(ev)
	}()

	// Writes use a context of their own: a write that has begun is
	// finished, as most jobs finish the unit of work in hand. The fence,
	// not the cancellation, is what stops a stale one.
	wctx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), 2*c.cfg.Timing.TTL)
	}
	var ignoreUntil int64
	running := func() bool {
		if ctx.Err() == nil {
			return true
		}
		if c.cfg.IgnoreCancel <= 0 {
			return false
		}
		if ignoreUntil == 0 {
			ignoreUntil = Mono() + int64(c.cfg.IgnoreCancel)
		}
		return Mono() < ignoreUntil
	}
	claim := claimPending
	for running() {
		if claim == claimPending {
			claim = c.claim(wctx, term, c.e.ID())
		}
		if claim == claimStale && c.cfg.IgnoreCancel <= 0 {
			// A higher term has been claimed: this term can never write.
			// It keeps its lease idle until the elector ends the term.
			<-ctx.Done()
			return nil
		}
		d := c.cfg.Timing.WriteMin + time.Duration(c.rnd.Int64N(int64(c.cfg.Timing.WriteMax-c.cfg.Timing.WriteMin)+1))
		if !c.pause(ctx, d) {
			continue // running() decides
		}
		if claim == claimOK {
			c.write(wctx, term, c.e.ID())
		}
	}
	return nil
}

// claimState is where a job stands with its term's claim in the store.
type claimState int

const (
	claimPending claimState = iota // not yet claimed (or the claim failed)
	claimOK
	claimStale // refused: a higher term is stored
)

// claim claims the term for holder in the store once and reports it.
func (c *candidate) claim(wctx func() (context.Context, context.CancelFunc), term uint64, holder string) claimState {
	ctx, cancel := wctx()
	defer cancel()
	t0 := Mono()
	err := c.guard.Claim(ctx, c.cfg.Election, term, holder)
	ev := Event{Mono: t0, Dur: Mono() - t0, Kind: KindClaim, Term: term, Result: classify(err)}
	if err != nil {
		ev.Detail = err.Error()
	}
	c.out.emit(ev)
	switch {
	case err == nil:
		return claimOK
	case errors.Is(err, fence.ErrStaleTerm):
		return claimStale
	default:
		return claimPending // busy store: retried after the next pause
	}
}

// pause sleeps d; it returns false early when ctx ends and the job does
// not ignore cancellation.
func (c *candidate) pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	done := ctx.Done()
	if c.cfg.IgnoreCancel > 0 {
		done = nil
	}
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}

// write performs one fenced write of term and holder and reports it.
func (c *candidate) write(wctx func() (context.Context, context.CancelFunc), term uint64, holder string) {
	c.seq++
	n := c.seq
	ctx, cancel := wctx()
	defer cancel()
	t0 := Mono()
	err := c.guard.DoTerm(ctx, c.cfg.Election, term, holder, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO witness (kind, term, cand, n, mono) VALUES ('write', ?, ?, ?, ?)`,
			int64(term), c.cfg.ID, n, t0)
		return err
	})
	ev := Event{Mono: t0, Dur: Mono() - t0, Kind: KindWrite, Term: term, N: n, Result: classify(err)}
	if err != nil {
		ev.Detail = err.Error()
	}
	c.out.emit(ev)
}

// classify names the outcome of a fenced call.
func classify(err error) string {
	switch {
	case err == nil:
		return ResultAccepted
	case errors.Is(err, fence.ErrStaleTerm):
		return ResultStale
	case errors.Is(err, fence.ErrNotClaimed):
		return ResultUnclaimed
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return ResultCancelled
	default:
		return ResultError
	}
}

// OpenStore opens the shared SQLite store: WAL, so readers do not block the
// writer, and a busy timeout, so the candidates' writers queue for the one
// write lock instead of failing.
func OpenStore(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(3000)&_pragma=journal_mode(WAL)")
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	db.SetMaxOpenConns(2)
	return db, nil
}

// emitter writes Events as JSON lines on stdout, one write per line so
// that a line is never interleaved with another.
type emitter struct {
	id string
	mu sync.Mutex
}

func (o *emitter) emit(ev Event) {
	if ev.Mono == 0 {
		ev.Mono = Mono()
	}
	ev.Cand = o.id
	b, err := json.Marshal(ev)
	if err != nil {
		return
	}
	b = append(b, '\n')
	o.mu.Lock()
	defer o.mu.Unlock()
	_, _ = os.Stdout.Write(b)
}

// recordingStore reports every acquire, renew and release round trip with
// its send time and duration.
type recordingStore struct {
	leader.Store
	out *emitter
}

func (l *recordingStore) Acquire(ctx context.Context, id string, ttl time.Duration) (leader.Outcome, leader.Record, error) {
	t0 := Mono()
	out, rec, err := l.Store.Acquire(ctx, id, ttl)
	ev := Event{Mono: t0, Dur: Mono() - t0, Kind: KindAcquire, Term: rec.Term}
	switch {
	case errors.Is(err, leader.ErrNotReplicated):
		ev.Result, ev.Detail = ResultNotReplicated, err.Error()
	case err != nil:
		ev.Result, ev.Detail = ResultError, err.Error()
	default:
		ev.Result = out.String()
		if out == leader.Held {
			ev.Detail = rec.ID
		}
	}
	l.out.emit(ev)
	return out, rec, err
}

func (l *recordingStore) Renew(ctx context.Context, lease leader.Lease, ttl time.Duration) error {
	t0 := Mono()
	err := l.Store.Renew(ctx, lease, ttl)
	ev := Event{Mono: t0, Dur: Mono() - t0, Kind: KindRenew, Term: lease.Term, Result: ResultOK}
	switch {
	case errors.Is(err, leader.ErrLeaseLost):
		ev.Result = ResultLost
	case err != nil:
		ev.Result, ev.Detail = ResultError, err.Error()
	}
	l.out.emit(ev)
	return err
}

func (l *recordingStore) Release(ctx context.Context, lease leader.Lease) error {
	t0 := Mono()
	err := l.Store.Release(ctx, lease)
	ev := Event{Mono: t0, Dur: Mono() - t0, Kind: KindRelease, Term: lease.Term, Result: ResultOK}
	switch {
	case errors.Is(err, leader.ErrLeaseLost):
		ev.Result = ResultLost
	case err != nil:
		ev.Result, ev.Detail = ResultError, err.Error()
	}
	l.out.emit(ev)
	return err
}

// recordingMetrics reports the elector's transitions and overruns.
type recordingMetrics struct {
	leader.NopMetrics
	out *emitter
}

func (m recordingMetrics) Transition(t leader.Transition, term uint64) {
	m.out.emit(Event{Kind: Kind(t.Label()), Term: term})
}

func (m recordingMetrics) Overrun(term uint64) {
	m.out.emit(Event{Kind: KindOverrun, Term: term})
}
