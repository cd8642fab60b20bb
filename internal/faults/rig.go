//go:build linux

package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/faultproxy"
	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/fence"
)

// witnessSchema is the store's log. The triggers add a row for every claim
// that raises the stored term, in the claim's own transaction; SQLite has
// one writer at a time, so the order of seq is the commit order of claims
// and writes alike.
const witnessSchema = `
CREATE TABLE IF NOT EXISTS witness (
	seq  INTEGER PRIMARY KEY AUTOINCREMENT,
	kind TEXT NOT NULL,
	term INTEGER NOT NULL,
	cand TEXT NOT NULL DEFAULT '',
	n    INTEGER NOT NULL DEFAULT 0,
	mono INTEGER NOT NULL DEFAULT 0
);
CREATE TRIGGER IF NOT EXISTS witness_claim_insert AFTER INSERT ON solo_fence
BEGIN INSERT INTO witness (kind, term) VALUES ('claim', NEW.term); END;
CREATE TRIGGER IF NOT EXISTS witness_claim_update AFTER UPDATE OF term ON solo_fence
WHEN NEW.term > OLD.term
BEGIN INSERT INTO witness (kind, term) VALUES ('claim', NEW.term); END;
`

// waitLimit bounds every wait of the rig for something that must happen.
const waitLimit = 20 * time.Second

// RigConfig describes the processes of one test.
type RigConfig struct {
	// Candidates is the number of candidate processes (slots).
	Candidates int
	// Timing defaults to DefaultTiming.
	Timing Timing
	// Sentinel runs a primary, a replica and three sentinels instead of one
	// server; candidates use failover clients and no proxies.
	Sentinel bool
	// SentinelReplicas is, with Sentinel, the number of replicas (default
	// 1). The sentinel that leads a failover announces the new master only
	// once every other replica follows it, about a second each.
	SentinelReplicas int
	// FollowFailoverSentinel gives the candidates, with Sentinel, only the
	// sentinel that leads Failover (redistest's FailoverSentinelAddr), so
	// they are the last to follow a failover.
	FollowFailoverSentinel bool
	// MinReplicas is passed to the candidates' leader.Config.
	MinReplicas int
	// Worker runs the job as a worker.Worker pull job.
	Worker bool
	// IgnoreCancel makes the job write on this long after cancellation.
	IgnoreCancel time.Duration
	// Lock runs the candidates in LOCK mode (lock_candidate.go): holds of
	// the lock named Election instead of an election.
	Lock *LockMode
}

// Rig is one test's world: Redis, the store, the candidates and their
// proxies, and the history. It owns every process and goroutine it starts;
// they are stopped and awaited in the test's cleanup.
type Rig struct {
	T        *testing.T
	Cfg      RigConfig
	H        *History   // every event of the run
	Rand     *rand.Rand // seeded from Seed and the test's name
	Seed     uint64
	Election string              // the test's name, usable as an election name
	DBPath   string              // the shared SQLite store
	Redis    *redistest.Server   // nil with Sentinel
	Sentinel *redistest.Sentinel // nil without
	Slots    []*Slot
	Origin   int64 // Mono when the rig started; failure output counts from it

	logDir string
	wg     sync.WaitGroup // one output reader per process
}

// Slot is one candidate position: its proxy and its current process. A slot
// keeps its proxy across process restarts; each process gets a new ID.
type Slot struct {
	Index int
	Proxy *faultproxy.Proxy // nil with Sentinel
	gen   int
	proc  *Proc
}

// Proc is one candidate process.
type Proc struct {
	ID   string
	cmd  *exec.Cmd
	done chan struct{} // closed once the process is reaped
}

// ID returns the slot's current candidate ID, or "" when none runs.
func (s *Slot) ID() string {
	if s.proc == nil {
		return ""
	}
	return s.proc.ID
}

// Alive reports whether the slot has a running (or paused) process.
func (s *Slot) Alive() bool {
	if s.proc == nil {
		return false
	}
	select {
	case <-s.proc.done:
		return false
	default:
		return true
	}
}

// NewRig starts Redis (or a Sentinel group), creates the store and starts
// cfg.Candidates candidates. Everything is torn down in t.Cleanup; if the
// test failed by then, the seed, the history and the candidates' logs are
// printed and saved.
func NewRig(t *testing.T, cfg RigConfig) *Rig {
	t.Helper()
	if cfg.Timing == (Timing{}) {
		cfg.Timing = DefaultTiming()
	}
	seed := Seed()
	h := fnv.New64a()
	_, _ = h.Write([]byte(t.Name()))
	r := &Rig{
		T:        t,
		Cfg:      cfg,
		H:        NewHistory(),
		Rand:     rand.New(rand.NewPCG(seed, h.Sum64())),
		Seed:     seed,
		Election: strings.NewReplacer("/", ".", " ", "_", "{", "(", "}", ")").Replace(t.Name()),
		Origin:   Mono(),
		logDir:   t.TempDir(),
	}
	r.DBPath = filepath.Join(r.logDir, "store.db")
	if cfg.Sentinel {
		r.Sentinel = redistest.StartSentinelWith(t, "solo-faults-"+strconv.Itoa(os.Getpid()),
			redistest.SentinelOptions{Replicas: cfg.SentinelReplicas})
	} else {
		r.Redis = redistest.Start(t)
	}
	r.createStore()
	// Runs after the processes are gone (cleanups run last-in first-out).
	t.Cleanup(r.report)
	t.Cleanup(r.stopAll)
	for i := range cfg.Candidates {
		r.AddSlot()
		r.Spawn(r.Slots[i])
	}
	return r
}

// Seed returns the suite's seed: SOLO_FAULTS_SEED, or one fixed per test
// binary run.
func Seed() uint64 {
	seedOnce.Do(func() {
		if s := os.Getenv("SOLO_FAULTS_SEED"); s != "" {
			v, err := strconv.ParseUint(s, 10, 64)
			if err == nil {
				seed = v
				return
			}
		}
		seed = rand.Uint64() >> 1
	})
	return seed
}

var (
	seedOnce sync.Once
	seed     uint64
)

func (r *Rig) createStore() {
	t := r.T
	db, err := OpenStore(r.DBPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g, err := fence.New(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.EnsureTable(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, witnessSchema); err != nil {
		t.Fatalf("witness schema: %v", err)
	}
}

// AddSlot adds a candidate slot with its own proxy (none with Sentinel)
// and returns it; Spawn starts its process.
func (r *Rig) AddSlot() *Slot {
	s := &Slot{Index: len(r.Slots)}
	if r.Redis != nil {
		p, err := faultproxy.New(r.Redis.Addr())
		if err != nil {
			r.T.Fatal(err)
		}
		r.T.Cleanup(func() { _ = p.Close() })
		s.Proxy = p
	}
	r.Slots = append(r.Slots, s)
	return s
}

// Spawn starts a new candidate process in slot s, which must have none.
func (r *Rig) Spawn(s *Slot) *Proc {
	t := r.T
	t.Helper()
	if s.Alive() {
		t.Fatalf("spawn in slot %d: %s still runs", s.Index, s.ID())
	}
	id := fmt.Sprintf("c%d.%d", s.Index, s.gen)
	s.gen++
	cc := CandidateConfig{
		ID:           id,
		Election:     r.Election,
		DB:           r.DBPath,
		Timing:       r.Cfg.Timing,
		MinReplicas:  r.Cfg.MinReplicas,
		Worker:       r.Cfg.Worker,
		IgnoreCancel: r.Cfg.IgnoreCancel,
		Seed:         r.Rand.Uint64(),
		Lock:         r.Cfg.Lock,
	}
	if r.Sentinel != nil {
		cc.Sentinels, cc.Master = r.Sentinel.SentinelAddrs(), r.Sentinel.MasterName()
		if r.Cfg.FollowFailoverSentinel {
			cc.Sentinels = []string{r.Sentinel.FailoverSentinelAddr()}
		}
	} else {
		cc.Redis = s.Proxy.Addr()
	}
	env, err := json.Marshal(cc)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), CandidateEnv+"="+string(env))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := os.Create(filepath.Join(r.logDir, id+".log"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close() // the child has its own copy
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	r.H.Note(KindSpawn, id, "")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{ID: id, cmd: cmd, done: make(chan struct{})}
	s.proc = p
	r.wg.Go(func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var ev Event
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.Cand != id {
				ev = Event{Mono: Mono(), Cand: id, Kind: KindGarbled, Detail: sc.Text()}
			}
			r.H.Add(ev)
		}
		// The pipe is at EOF: the process has exited (it has no children
		// holding it). After Wait no code of it runs any more.
		err := cmd.Wait()
		ev := Event{Mono: Mono(), Cand: id, Kind: KindReaped}
		if err != nil {
			ev.Detail = err.Error()
		}
		r.H.Add(ev)
	})
	return p
}

// WaitReady waits until every live candidate has reported ready.
func (r *Rig) WaitReady() {
	for _, s := range r.Slots {
		if !s.Alive() {
			continue
		}
		id := s.ID()
		if _, _, ok := r.H.Wait(waitLimit, 0, func(ev Event) bool { return ev.Cand == id && ev.Kind == KindReady }); !ok {
			r.T.Fatalf("%s not ready within %s", id, waitLimit)
		}
	}
}

// stopAll kills every process and waits for their readers.
func (r *Rig) stopAll() {
	for _, s := range r.Slots {
		if p := s.proc; p != nil {
			_ = p.cmd.Process.Signal(syscall.SIGKILL) // stopped ones too
		}
	}
	r.wg.Wait()
	for _, s := range r.Slots {
		s.proc = nil
	}
}

// SlotOf returns the slot whose current process is cand, or nil.
func (r *Rig) SlotOf(cand string) *Slot {
	for _, s := range r.Slots {
		if s.ID() == cand {
			return s
		}
	}
	return nil
}

// Leading is a candidate running its leader function.
type Leading struct {
	Slot  *Slot
	Term  uint64
	Start int64
	Index int // history index of the start event
}

// Leaders returns the candidates whose leader function runs now (started,
// not stopped, process not reaped), by the history so far.
func (r *Rig) Leaders() []Leading {
	evs := r.H.Events(0)
	open := map[string]Leading{}
	for i, ev := range evs {
		switch ev.Kind {
		case KindStart:
			open[ev.Cand] = Leading{Term: ev.Term, Start: ev.Mono, Index: i}
		case KindStop, KindReaped:
			delete(open, ev.Cand)
		}
	}
	var out []Leading
	for cand, l := range open {
		if s := r.SlotOf(cand); s != nil {
			l.Slot = s
			out = append(out, l)
		}
	}
	return out
}

// Leading reports whether the slot's process runs its leader function now.
func (r *Rig) Leading(s *Slot) bool {
	for _, l := range r.Leaders() {
		if l.Slot == s {
			return true
		}
	}
	return false
}

// StableLeader waits until exactly one candidate leads and has renewed its
// lease at least once, and returns it.
func (r *Rig) StableLeader() Leading {
	r.T.Helper()
	return r.soleLeaderWith(KindRenew, ResultOK, "no stable leader", "leading")
}

// soleLeaderWith waits until exactly one candidate leads and has an event
// of kind with result in its term, and returns it; past waitLimit it fails
// the test with "<none> within …; <now> now: …".
func (r *Rig) soleLeaderWith(kind Kind, result, none, now string) Leading {
	r.T.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		seen := r.H.Len()
		if ls := r.Leaders(); len(ls) == 1 {
			l := ls[0]
			id := l.Slot.ID()
			for _, ev := range r.H.Events(l.Index) {
				if ev.Cand == id && ev.Kind == kind && ev.Term == l.Term && ev.Result == result {
					return l
				}
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			var leading []string
			for _, l := range r.Leaders() {
				leading = append(leading, fmt.Sprintf("%s (term %d, for %s)", l.Slot.ID(), l.Term, time.Duration(Mono()-l.Start).Round(time.Millisecond)))
			}
			r.T.Fatalf("%s within %s; %s now: %v", none, waitLimit, now, leading)
		}
		r.H.Wait(left, seen, func(Event) bool { return true })
	}
}

// NextStart waits for a leader function to start at history index from or
// later, on another candidate than not, within timeout.
func (r *Rig) NextStart(from int, not string, timeout time.Duration) (Event, bool) {
	ev, _, ok := r.H.Wait(timeout, from, func(ev Event) bool { return ev.Kind == KindStart && ev.Cand != not })
	return ev, ok
}

// WaitStop waits for cand's leader function to stop, at history index from
// or later, within timeout.
func (r *Rig) WaitStop(from int, cand string, timeout time.Duration) (Event, bool) {
	ev, _, ok := r.H.Wait(timeout, from, func(ev Event) bool {
		return ev.Cand == cand && (ev.Kind == KindStop || ev.Kind == KindReaped)
	})
	return ev, ok
}

// Direct returns a client to the current Redis primary that bypasses the
// proxies, closed in the test's cleanup.
func (r *Rig) Direct() redis.UniversalClient {
	t := r.T
	to := r.Cfg.Timing.RedisTimeout
	if r.Sentinel != nil {
		return r.Sentinel.FailoverClient(t, func(o *redis.FailoverOptions) {
			o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout = true, to, to
		})
	}
	return r.Redis.Client(t, func(o *redis.Options) {
		o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout = true, to, to
	})
}

// LeaderConfig returns the election's leader.Config (name, timing).
func (r *Rig) LeaderConfig() leader.Config {
	return CandidateConfig{Election: r.Election, Timing: r.Cfg.Timing, MinReplicas: r.Cfg.MinReplicas}.LeaderConfig()
}

// Since returns the time from monotonic instant a to b.
func Since(a, b int64) time.Duration { return time.Duration(b - a) }

// Result is what a run's history and store say once every process is gone.
type Result struct {
	Events    []Event
	Intervals []Interval
	Overlaps  []Overlap
	Witness   Witness
	// TermViolations are acquires whose term was not above an earlier one.
	TermViolations []string
	// StaleRefused counts writes the fence refused as stale.
	StaleRefused int
	// Garbled counts candidate output lines that were no event.
	Garbled int
}

// Finish stops every process and reads the history and the store.
func (r *Rig) Finish() Result {
	r.T.Helper()
	r.stopAll()
	evs := r.H.Events(0)
	res := Result{Events: evs}
	res.Intervals = Intervals(evs, Mono())
	res.Overlaps = Overlaps(res.Intervals)
	res.TermViolations = TermsIncrease(evs)
	for _, ev := range evs {
		switch {
		case ev.Kind == KindWrite && ev.Result == ResultStale:
			res.StaleRefused++
		case ev.Kind == KindGarbled:
			res.Garbled++
		}
	}
	rows, err := r.witnessRows()
	if err != nil {
		r.T.Fatalf("read the store's witness log: %v", err)
	}
	res.Witness = CheckWitness(rows, evs)
	return res
}

func (r *Rig) witnessRows() ([]WitnessRow, error) {
	db, err := OpenStore(r.DBPath)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := db.QueryContext(ctx, `SELECT seq, kind, term, cand, n FROM witness ORDER BY seq`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []WitnessRow
	for rows.Next() {
		var w WitnessRow
		var term int64
		if err := rows.Scan(&w.Seq, &w.Kind, &term, &w.Cand, &w.N); err != nil {
			return nil, err
		}
		w.Term = uint64(term)
		out = append(out, w)
	}
	return out, rows.Err()
}

// RequireSafety fails the test on any level-2 violation, on terms that did
// not increase and on garbled output, and records the run's overlaps and
// stale writes in st. Level 1 is the row's to check: which overlaps the
// lease model covers depends on the fault.
func (r *Rig) RequireSafety(res Result, st *RowStats) {
	r.T.Helper()
	for _, v := range res.Witness.Violations() {
		r.T.Errorf("level 2: %s", v)
	}
	for _, v := range res.TermViolations {
		r.T.Errorf("terms: %s", v)
	}
	if res.Garbled > 0 {
		r.T.Errorf("%d garbled candidate output lines", res.Garbled)
	}
	if res.Witness.Writes == 0 {
		r.T.Errorf("no write reached the store: the run proves nothing")
	}
	st.AddRun(res)
}

// RequireNoOverlap fails the test on any overlap that exempt does not
// excuse (nil excuses none).
func (r *Rig) RequireNoOverlap(res Result, exempt func(Overlap) bool) {
	r.T.Helper()
	for _, o := range res.Overlaps {
		if exempt != nil && exempt(o) {
			continue
		}
		r.T.Errorf("level 1: %s, from %.1fms", o, ms(o.From-r.Origin))
	}
}

// report prints and saves the history of a failed test.
func (r *Rig) report() {
	t := r.T
	if !t.Failed() {
		return
	}
	evs := r.H.Events(0)
	dir, err := os.MkdirTemp("", "solo-faults-")
	if err == nil {
		if f, ferr := os.Create(filepath.Join(dir, "history.jsonl")); ferr == nil {
			enc := json.NewEncoder(f)
			for _, ev := range evs {
				_ = enc.Encode(ev)
			}
			_ = f.Close()
		}
		logs, _ := filepath.Glob(filepath.Join(r.logDir, "*.log"))
		for _, l := range logs {
			if b, rerr := os.ReadFile(l); rerr == nil {
				_ = os.WriteFile(filepath.Join(dir, filepath.Base(l)), b, 0o644)
			}
		}
	}
	t.Logf("FAILED with seed %d: replay with SOLO_FAULTS_SEED=%d go test ./internal/faults -run '^%s$'",
		r.Seed, r.Seed, strings.Split(t.Name(), "/")[0])
	if dir != "" {
		t.Logf("history and candidate logs saved in %s", dir)
	}
	t.Logf("history (ms since the rig started; renewals and held acquires omitted):\n%s", FormatHistory(evs, r.Origin))
}

// errNoLease is returned by LeaseOf when no lease exists.
var errNoLease = errors.New("no lease")

// LeaseOf reads the lease's value and time left, bracketed by the send
// time of the read.
func (r *Rig) LeaseOf(ctx context.Context, c redis.UniversalClient) (value string, sent int64, pttl time.Duration, err error) {
	key := r.LeaderConfig().LeaseKey()
	sent = Mono()
	pipe := c.Pipeline()
	get := pipe.Get(ctx, key)
	ttl := pipe.PTTL(ctx, key)
	_, _ = pipe.Exec(ctx)
	value, err = get.Result()
	if errors.Is(err, redis.Nil) {
		return "", sent, 0, errNoLease
	}
	if err != nil {
		return "", sent, 0, err
	}
	return value, sent, ttl.Val(), ttl.Err()
}

// Find returns the first event at index from or later that pred accepts.
func (r *Rig) Find(from int, pred func(Event) bool) (Event, bool) {
	for _, ev := range r.H.Events(from) {
		if pred(ev) {
			return ev, true
		}
	}
	return Event{}, false
}

// Count returns how many events at index from or later pred accepts.
func (r *Rig) Count(from int, pred func(Event) bool) int {
	n := 0
	for _, ev := range r.H.Events(from) {
		if pred(ev) {
			n++
		}
	}
	return n
}
