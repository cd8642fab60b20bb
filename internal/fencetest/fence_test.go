package fencetest_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/solo-run/solo/leader/fence"
)

// TestGuard runs the suite against SQLite and against a real PostgreSQL.
func TestGuard(t *testing.T) {
	forEachBackend(t, func(t *testing.T, newEnv func(t *testing.T) *env) {
		for _, tc := range []struct {
			name string
			test func(t *testing.T, e *env)
		}{
			{"Claim", testClaim},
			{"DefaultGuard", testDefaultGuard},
			{"StaleLeaderRefused", testStaleLeaderRefused},
			{"NotClaimed", testNotClaimed},
			{"WriteInFlight", testWriteInFlight},
			{"DoRollsBack", testDoRollsBack},
			{"ConcurrentClaims", testConcurrentClaims},
			{"FreshRowRace", testFreshRowRace},
			{"StaleWritersStress", testStaleWritersStress},
			{"BadInput", testBadInput},
			{"Holder", testHolder},
			{"MigrateHolder", testMigrateHolder},
		} {
			t.Run(tc.name, func(t *testing.T) { tc.test(t, newEnv(t)) })
		}
	})
}

func testClaim(t *testing.T, e *env) {
	ctx := ctxT(t)
	if err := e.g.EnsureTable(ctx); err != nil {
		t.Fatalf("second EnsureTable: %v", err)
	}
	if _, err := e.g.Term(ctx, "jobs"); !errors.Is(err, fence.ErrNotClaimed) {
		t.Fatalf("Term on empty table: got %v, want ErrNotClaimed", err)
	}
	e.mustClaim(t, "jobs", 5) // empty table: inserts
	if got := e.stored(t, "jobs"); got != 5 {
		t.Fatalf("stored = %d, want 5", got)
	}
	e.mustClaim(t, "jobs", 7) // higher: updates
	e.mustClaim(t, "jobs", 7) // same: idempotent

	err := e.g.Claim(ctx, "jobs", 6, h(6))
	if !errors.Is(err, fence.ErrStaleTerm) {
		t.Fatalf("claim of lower term: got %v, want ErrStaleTerm", err)
	}
	for _, want := range []string{`"jobs"`, "offered term 6", "stored term 7"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	if got := e.stored(t, "jobs"); got != 7 {
		t.Fatalf("stored = %d after refused claim, want 7", got)
	}

	// Elections are independent; realistic (clock-minted) terms and the
	// largest storable one round-trip.
	big := uint64(1_700_000_000_000_000)
	e.mustClaim(t, "other", big)
	e.mustClaim(t, "other", math.MaxInt64)
	if got := e.stored(t, "other"); got != math.MaxInt64 {
		t.Fatalf("stored = %d, want MaxInt64", got)
	}
	if got := e.stored(t, "jobs"); got != 7 {
		t.Fatalf("jobs stored = %d, want 7", got)
	}
}

// testDefaultGuard: a Guard with no options uses the default table and
// detects the dialect (what the package-level functions before v0.1.0 did).
func testDefaultGuard(t *testing.T, e *env) {
	ctx := ctxT(t)
	g, err := fence.New(e.db)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if g.Table() != fence.DefaultTable || g.Dialect() != e.dialect {
		t.Fatalf("New(db): table %s, dialect %v; want %s, %v", g.Table(), g.Dialect(), fence.DefaultTable, e.dialect)
	}
	name := fmt.Sprintf("pkg-%d", tables.Add(1)) // the default table may be shared
	if err := g.EnsureTable(ctx); err != nil {
		t.Fatalf("EnsureTable: %v", err)
	}
	if err := g.EnsureTable(ctx); err != nil {
		t.Fatalf("second EnsureTable: %v", err)
	}
	if err := g.Claim(ctx, name, 3, h(3)); err != nil {
		t.Fatalf("Claim: %v", err)
	}
	if err := g.DoTerm(ctx, name, 3, h(3), func(tx *sql.Tx) error { return e.insert(ctx, tx, name, 3) }); err != nil {
		t.Fatalf("DoTerm: %v", err)
	}
	if err := g.Claim(ctx, name, 4, h(4)); err != nil {
		t.Fatalf("Claim: %v", err)
	}
	if err := g.Claim(ctx, name, 3, h(3)); !errors.Is(err, fence.ErrStaleTerm) {
		t.Fatalf("Claim of old term: got %v, want ErrStaleTerm", err)
	}
	err = g.DoTerm(ctx, name, 3, h(3), func(tx *sql.Tx) error { return e.insert(ctx, tx, name, 3) })
	if !errors.Is(err, fence.ErrStaleTerm) {
		t.Fatalf("DoTerm with old term: got %v, want ErrStaleTerm", err)
	}
	if n := e.count(t, name); n != 1 {
		t.Fatalf("%d rows, want 1", n)
	}
	d, err := fence.DetectDialect(e.db)
	if err != nil || d != e.dialect {
		t.Fatalf("DetectDialect = %v, %v; want %v", d, err, e.dialect)
	}
}

func testStaleLeaderRefused(t *testing.T, e *env) {
	ctx := ctxT(t)
	e.mustClaim(t, "el", 10)
	if err := e.write(ctx, "el", "A", 10); err != nil {
		t.Fatalf("A's write at term 10: %v", err)
	}
	e.mustClaim(t, "el", 11) // B takes over while A is, say, paused

	called := false
	err := e.g.DoTerm(ctx, "el", 10, h(10), func(tx *sql.Tx) error {
		called = true
		return e.insert(ctx, tx, "A", 10)
	})
	if !errors.Is(err, fence.ErrStaleTerm) {
		t.Fatalf("A's write after B's claim: got %v, want ErrStaleTerm", err)
	}
	if called {
		t.Errorf("fn ran although the check refused the term")
	}
	if err := e.write(ctx, "el", "B", 11); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	if a, b := e.count(t, "A"), e.count(t, "B"); a != 1 || b != 1 {
		t.Fatalf("rows: A=%d B=%d, want 1 and 1", a, b)
	}
	// A Check in a transaction the caller began itself refuses too.
	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := e.g.Check(ctx, tx, "el", 10, h(10)); !errors.Is(err, fence.ErrStaleTerm) {
		t.Fatalf("Check at term 10: got %v, want ErrStaleTerm", err)
	}
}

func testNotClaimed(t *testing.T, e *env) {
	ctx := ctxT(t)
	if err := e.write(ctx, "none", "X", 1); !errors.Is(err, fence.ErrNotClaimed) {
		t.Fatalf("write without any claim: got %v, want ErrNotClaimed", err)
	}
	e.mustClaim(t, "el", 5)
	err := e.write(ctx, "el", "X", 6)
	if !errors.Is(err, fence.ErrNotClaimed) || errors.Is(err, fence.ErrStaleTerm) {
		t.Fatalf("write at an unclaimed higher term: got %v, want ErrNotClaimed only", err)
	}
	if n := e.count(t, "X"); n != 0 {
		t.Fatalf("%d rows written without a claim", n)
	}
}

// testWriteInFlight: A has passed Check, and not written yet, when B claims
// a higher term. B's claim must not take effect before A's
// transaction ends, so A's row is committed before B's claim, never after.
func testWriteInFlight(t *testing.T, e *env) {
	ctx := ctxT(t)
	e.mustClaim(t, "el", 10)
	tx, err := e.g.Begin(ctx, "el", 10, h(10), nil)
	if err != nil {
		t.Fatalf("A begin: %v", err)
	}
	defer func() { _ = tx.Rollback() }()

	type result struct {
		err  error
		seen int // A's rows visible right after B's claim returned
	}
	bDone := make(chan result, 1)
	go func() {
		err := e.g.Claim(ctx, "el", 11, h(11))
		r := result{err: err}
		if err == nil {
			err = e.db.QueryRowContext(ctx, "SELECT count(*) FROM "+e.writes+" WHERE who = "+e.ph(1), "A").Scan(&r.seen)
			r.err = err
		}
		bDone <- r
	}()

	// B must be held up while A's checked transaction is open. A claim that
	// completes now is the bug under test. On PostgreSQL we also see B
	// waiting for A's row lock; SQLite offers no such view, so there we only
	// give B a chance to (wrongly) finish.
	if e.dialect == fence.Postgres {
		waitClaimBlocked(t, e, bDone)
	} else {
		select {
		case r := <-bDone:
			t.Fatalf("B's claim returned (%v) while A's checked transaction was open", r.err)
		case <-time.After(300 * time.Millisecond):
		}
	}

	// A writes only now, so that the check alone is what holds B up.
	if err := e.insert(ctx, tx, "A", 10); err != nil {
		t.Fatalf("A insert: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("A commit: %v", err)
	}
	r := <-bDone
	if r.err != nil {
		t.Fatalf("B claim: %v", r.err)
	}
	if r.seen != 1 {
		t.Fatalf("B saw %d rows of A right after its claim, want 1 (A committed after the claim)", r.seen)
	}
	if got := e.stored(t, "el"); got != 11 {
		t.Fatalf("stored = %d, want 11", got)
	}
	if err := e.write(ctx, "el", "A", 10); !errors.Is(err, fence.ErrStaleTerm) {
		t.Fatalf("A's next write: got %v, want ErrStaleTerm", err)
	}
	if err := e.write(ctx, "el", "B", 11); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	if n := e.count(t, "A"); n != 1 {
		t.Fatalf("A has %d rows, want 1", n)
	}

	// The other order: B's claim first, then A's check is refused.
	e.mustClaim(t, "el", 12)
	if _, err := e.g.Begin(ctx, "el", 11, h(11), nil); !errors.Is(err, fence.ErrStaleTerm) {
		t.Fatalf("begin at term 11 after claim 12: got %v, want ErrStaleTerm", err)
	}

	if e.dialect == fence.Postgres {
		// Transactions of the same term do not wait for one another.
		tx1, err := e.g.Begin(ctx, "el", 12, h(12), nil)
		if err != nil {
			t.Fatalf("begin 1: %v", err)
		}
		defer func() { _ = tx1.Rollback() }()
		ctx2, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		tx2, err := e.g.Begin(ctx2, "el", 12, h(12), nil)
		if err != nil {
			t.Fatalf("second transaction of the same term, while the first is open: %v", err)
		}
		_ = tx2.Rollback()
	}
}

// waitClaimBlocked waits, bounded, until PostgreSQL shows a claim on e's
// fence waiting for a lock, failing if the claim returns first.
func waitClaimBlocked[T any](t *testing.T, e *env, done <-chan T) {
	t.Helper()
	awaitWaiters(t, e, 1, 0, done)
}

func testDoRollsBack(t *testing.T, e *env) {
	ctx := ctxT(t)
	e.mustClaim(t, "el", 1)
	boom := errors.New("boom")
	err := e.g.DoTerm(ctx, "el", 1, h(1), func(tx *sql.Tx) error {
		if err := e.insert(ctx, tx, "fail", 1); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Do: got %v, want fn's error", err)
	}
	func() {
		defer func() {
			if r := recover(); r != "kaboom" {
				t.Errorf("recovered %v, want the panic to go on", r)
			}
		}()
		_ = e.g.DoTerm(ctx, "el", 1, h(1), func(tx *sql.Tx) error {
			if err := e.insert(ctx, tx, "fail", 1); err != nil {
				return err
			}
			panic("kaboom")
		})
	}()
	if n := e.count(t, "fail"); n != 0 {
		t.Fatalf("%d rows of failed transactions committed", n)
	}
	// The connection and the locks were released: a claim and a write go
	// through.
	e.mustClaim(t, "el", 2)
	if err := e.write(ctx, "el", "ok", 2); err != nil {
		t.Fatalf("write after rollbacks: %v", err)
	}
}

// testConcurrentClaims: N goroutines claim shuffled distinct terms. A claim
// must be refused if a higher claim had committed before it started, the
// highest term always wins, and only ErrStaleTerm comes back.
func testConcurrentClaims(t *testing.T, e *env) {
	ctx := ctxT(t)
	const workers, rounds = 8, 25
	// Round r's terms are r*workers+0 .. r*workers+workers-1, dealt out
	// shuffled, so the workers race on close terms and both verdicts occur.
	terms := make([][]int, workers)
	for r := range rounds {
		for w, p := range rand.Perm(workers) {
			terms[w] = append(terms[w], r*workers+p)
		}
	}
	var committed atomic.Uint64 // highest term whose Claim returned nil
	var accepted, refused atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		mine := terms[w]
		wg.Go(func() {
			for _, p := range mine {
				term := uint64(p) + 1_700_000_000_000_000
				before := committed.Load()
				err := e.g.Claim(ctx, "el", term, h(term))
				switch {
				case err == nil:
					accepted.Add(1)
					if term < before {
						t.Errorf("claim %d accepted after %d had committed", term, before)
					}
					for {
						cur := committed.Load()
						if cur >= term || committed.CompareAndSwap(cur, term) {
							break
						}
					}
				case errors.Is(err, fence.ErrStaleTerm):
					refused.Add(1)
				default:
					t.Errorf("claim %d: %v", term, err)
				}
			}
		})
	}
	wg.Wait()
	want := uint64(workers*rounds-1) + 1_700_000_000_000_000
	if got := e.stored(t, "el"); got != want {
		t.Fatalf("stored = %d, want the highest term %d", got, want)
	}
	if committed.Load() != want {
		t.Fatalf("highest accepted = %d, want %d", committed.Load(), want)
	}
	t.Logf("%d accepted, %d refused", accepted.Load(), refused.Load())
}

// testFreshRowRace: claimers race to create the row of a new election.
// With distinct terms the highest wins and the others either came first or
// were refused with ErrStaleTerm (never a unique violation); with equal
// terms all succeed.
func testFreshRowRace(t *testing.T, e *env) {
	ctx := ctxT(t)
	const rounds, claimers = 20, 4
	for r := range rounds {
		name := fmt.Sprintf("fresh-%d", r)
		same := r%4 == 3
		errs := make([]error, claimers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range claimers {
			term := uint64(100 + i)
			if same {
				term = 100
			}
			wg.Go(func() {
				<-start
				errs[i] = e.g.Claim(ctx, name, term, h(term))
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			switch {
			case err == nil:
			case same:
				t.Errorf("round %d: equal-term claimer %d: %v", r, i, err)
			case i == claimers-1:
				t.Errorf("round %d: highest claimer refused: %v", r, err)
			case !errors.Is(err, fence.ErrStaleTerm):
				t.Errorf("round %d: claimer %d: %v, want nil or ErrStaleTerm", r, i, err)
			}
		}
		want := uint64(100 + claimers - 1)
		if same {
			want = 100
		}
		if got := e.stored(t, name); got != want {
			t.Errorf("round %d: stored %d, want %d", r, got, want)
		}
		var rows int
		if err := e.db.QueryRowContext(ctx, "SELECT count(*) FROM "+e.g.Table()+" WHERE election = "+e.ph(1), name).Scan(&rows); err != nil || rows != 1 {
			t.Errorf("round %d: %d rows (%v), want 1", r, rows, err)
		}
	}
}

// testStaleWritersStress: leaders of growing terms overlap; each keeps
// writing until refused while the next one claims. Right after a claim of T
// returns, the rows of terms below T are counted; none may appear later.
func testStaleWritersStress(t *testing.T, e *env) {
	ctx := ctxT(t)
	const leaders, maxWrites = 6, 40
	before := make([]int, leaders+1) // rows below term i seen right after claim i
	refusedAt := make([]bool, leaders+1)
	started := make([]chan struct{}, leaders+2)
	for i := range started {
		started[i] = make(chan struct{})
	}
	close(started[1])
	var wg sync.WaitGroup
	for i := 1; i <= leaders; i++ {
		term := uint64(i)
		wg.Go(func() {
			<-started[i]
			next := sync.OnceFunc(func() { close(started[i+1]) })
			defer next()
			if err := e.g.Claim(ctx, "el", term, h(term)); err != nil {
				t.Errorf("leader %d claim: %v", i, err)
				return
			}
			err := e.db.QueryRowContext(ctx, "SELECT count(*) FROM "+e.writes+" WHERE term < "+e.ph(1), int64(term)).Scan(&before[i])
			if err != nil {
				t.Errorf("leader %d count: %v", i, err)
				return
			}
			for w := range maxWrites {
				err := e.write(ctx, "el", fmt.Sprint(i), term)
				if errors.Is(err, fence.ErrStaleTerm) {
					refusedAt[i] = true
					return
				}
				if err != nil {
					t.Errorf("leader %d write %d: %v", i, w, err)
					return
				}
				if w == 2 {
					next() // let the successor claim while we keep writing
				}
			}
		})
	}
	wg.Wait()
	for i := 2; i <= leaders; i++ {
		if after := e.countWhere(t, "term < "+e.ph(1), int64(i)); after != before[i] {
			t.Errorf("rows below term %d: %d right after its claim, %d at the end: a stale write committed late", i, before[i], after)
		}
	}
	n := 0
	for _, r := range refusedAt {
		if r {
			n++
		}
	}
	t.Logf("%d of %d leaders were cut off mid-stream", n, leaders-1)
}

func testBadInput(t *testing.T, e *env) {
	ctx := ctxT(t)
	e.mustClaim(t, "el", 1)
	fn := func(*sql.Tx) error { return nil }
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"claim empty name", func() error { return e.g.Claim(ctx, "", 1, h(1)) }, "empty election name"},
		{"claim term 0", func() error { return e.g.Claim(ctx, "el", 0, h(0)) }, "term 0"},
		{"claim term above MaxInt64", func() error { return e.g.Claim(ctx, "el", math.MaxInt64+1, h(math.MaxInt64+1)) }, "exceeds"},
		{"claim MaxUint64", func() error { return e.g.Claim(ctx, "el", math.MaxUint64, h(math.MaxUint64)) }, "exceeds"},
		{"do empty name", func() error { return e.g.DoTerm(ctx, "", 1, h(1), fn) }, "empty election name"},
		{"do term 0", func() error { return e.g.DoTerm(ctx, "el", 0, h(0), fn) }, "term 0"},
		{"do nil fn", func() error { return e.g.DoTerm(ctx, "el", 1, h(1), nil) }, "nil func"},
		{"check nil tx", func() error { return e.g.Check(ctx, nil, "el", 1, h(1)) }, "nil tx"},
		{"claim empty holder", func() error { return e.g.Claim(ctx, "el", 1, "") }, "empty holder"},
		{"do empty holder", func() error { return e.g.DoTerm(ctx, "el", 1, "", fn) }, "empty holder"},
		{"term empty name", func() error { _, err := e.g.Term(ctx, ""); return err }, "empty election name"},
		{"new nil db", func() error { _, err := fence.New(nil); return err }, "nil db"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error mentioning %q", err, tc.want)
			}
			if errors.Is(err, fence.ErrStaleTerm) || errors.Is(err, fence.ErrNotClaimed) {
				t.Fatalf("bad input reported as a fencing verdict: %v", err)
			}
		})
	}
	if got := e.stored(t, "el"); got != 1 {
		t.Fatalf("stored = %d after bad input, want 1", got)
	}
	// Claiming against a missing table is an error, not a verdict.
	g, err := fence.New(e.db, fence.WithTable("no_such_table"))
	if err != nil {
		t.Fatalf("new: %v", err)
	}
	if err := g.Claim(ctx, "el", 1, h(1)); err == nil || errors.Is(err, fence.ErrStaleTerm) {
		t.Fatalf("claim on a missing table: got %v", err)
	}
}

func TestNew_BadOptions(t *testing.T) {
	db := openSQLite(t)
	for _, tc := range []struct {
		name string
		db   *sql.DB
		opts []fence.Option
		want string
	}{
		{"nil db", nil, nil, "nil db"},
		{"empty table", db, []fence.Option{fence.WithTable("")}, "table name"},
		{"injection", db, []fence.Option{fence.WithTable("t; DROP TABLE x")}, "table name"},
		{"leading digit", db, []fence.Option{fence.WithTable("1t")}, "table name"},
		{"three parts", db, []fence.Option{fence.WithTable("a.b.c")}, "table name"},
		{"unknown dialect", db, []fence.Option{fence.WithDialect(fence.Dialect(9))}, "unknown dialect"},
		{"undetectable driver", fakeDB(t), nil, "unknown driver"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := fence.New(tc.db, tc.opts...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
	for _, table := range []string{"solo_fence", "app.fence_2", "_x"} {
		if _, err := fence.New(db, fence.WithTable(table)); err != nil {
			t.Errorf("table %q: %v", table, err)
		}
	}
	g, err := fence.New(fakeDB(t), fence.WithDialect(fence.Postgres))
	if err != nil || g.Dialect() != fence.Postgres {
		t.Fatalf("explicit dialect on an unknown driver: %v, %v", g, err)
	}
}

// fakeDB returns a handle on fakeConnector, closed in t.Cleanup.
func fakeDB(t *testing.T) *sql.DB {
	db := sql.OpenDB(fakeConnector{})
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// fakeConnector is a driver no dialect detection knows; it never connects.
type fakeConnector struct{}

func (fakeConnector) Connect(context.Context) (driver.Conn, error) {
	return nil, errors.New("fake: no connections")
}
func (fakeConnector) Driver() driver.Driver { return fakeDriver{} }

type fakeDriver struct{}

func (fakeDriver) Open(string) (driver.Conn, error) { return nil, errors.New("fake: no connections") }

// testHolder: the fence tells two holders of one term apart. The first
// Claim of a term records its holder; a Claim of the same term by another
// holder is refused with ErrHolderMismatch, and so is a transaction of that
// holder, while the first holder goes on writing.
//
// Before, the row held the term only, so the fence could not tell them
// apart: both Claims of term 7 returned nil and both holders' writes
// committed.
func testHolder(t *testing.T, e *env) {
	ctx := ctxT(t)
	if err := e.g.Claim(ctx, "el", 7, "A"); err != nil {
		t.Fatalf("A claims 7: %v", err)
	}
	if err := e.g.Claim(ctx, "el", 7, "A"); err != nil {
		t.Fatalf("A claims 7 again: %v", err)
	}
	err := e.g.Claim(ctx, "el", 7, "B")
	if !errors.Is(err, fence.ErrHolderMismatch) || errors.Is(err, fence.ErrStaleTerm) {
		t.Fatalf("B claims 7: got %v, want ErrHolderMismatch only", err)
	}
	for _, want := range []string{`"el"`, "term 7", `"A"`, `"B"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	if term, holder, err := e.g.Stored(ctx, "el"); err != nil || term != 7 || holder != "A" {
		t.Fatalf("stored %d %q %v, want 7 A", term, holder, err)
	}
	insert := func(who string) func(*sql.Tx) error {
		return func(tx *sql.Tx) error { return e.insert(ctx, tx, who, 7) }
	}
	if err := e.g.DoTerm(ctx, "el", 7, "B", insert("B")); !errors.Is(err, fence.ErrHolderMismatch) {
		t.Fatalf("B writes with term 7: got %v, want ErrHolderMismatch", err)
	}
	if err := e.g.DoTerm(ctx, "el", 7, "A", insert("A")); err != nil {
		t.Fatalf("A writes with term 7: %v", err)
	}
	if a, b := e.count(t, "A"), e.count(t, "B"); a != 1 || b != 0 {
		t.Fatalf("rows: A=%d B=%d, want 1 and 0", a, b)
	}
	// A higher term changes hands as usual; the old holder is stale.
	if err := e.g.Claim(ctx, "el", 8, "B"); err != nil {
		t.Fatalf("B claims 8: %v", err)
	}
	if err := e.g.DoTerm(ctx, "el", 7, "A", insert("A")); !errors.Is(err, fence.ErrStaleTerm) {
		t.Fatalf("A writes with term 7 after B claimed 8: got %v, want ErrStaleTerm", err)
	}
	if err := e.g.Claim(ctx, "el", 8, "A"); !errors.Is(err, fence.ErrHolderMismatch) {
		t.Fatalf("A claims 8: got %v, want ErrHolderMismatch", err)
	}
}

// testMigrateHolder: a fence table created before holders were recorded
// gets the holder column from EnsureTable (several at once, twice), keeps
// its rows, and a term stored without a holder can be claimed by nobody
// (the next term can).
func testMigrateHolder(t *testing.T, e *env) {
	ctx := ctxT(t)
	table := fmt.Sprintf("old_fence_%d", tables.Add(1))
	for _, q := range []string{
		"CREATE TABLE " + table + " (election TEXT PRIMARY KEY, term BIGINT NOT NULL, updated_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)",
		"INSERT INTO " + table + " (election, term) VALUES ('el', 5)",
	} {
		if _, err := e.db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	g, err := fence.New(e.db, fence.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = g.EnsureTable(ctx) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent EnsureTable %d: %v", i, err)
		}
	}
	if err := g.EnsureTable(ctx); err != nil {
		t.Fatalf("EnsureTable again: %v", err)
	}
	if term, holder, err := g.Stored(ctx, "el"); err != nil || term != 5 || holder != "" {
		t.Fatalf("stored %d %q %v, want 5 and no holder", term, holder, err)
	}
	if err := g.Claim(ctx, "el", 5, "A"); !errors.Is(err, fence.ErrHolderMismatch) || !strings.Contains(err.Error(), "no recorded holder") {
		t.Fatalf("claim of the stored term: got %v, want ErrHolderMismatch (no recorded holder)", err)
	}
	if err := g.Claim(ctx, "el", 6, "A"); err != nil {
		t.Fatalf("claim 6: %v", err)
	}
	if err := g.DoTerm(ctx, "el", 6, "A", func(tx *sql.Tx) error { return e.insert(ctx, tx, "A", 6) }); err != nil {
		t.Fatalf("write at 6: %v", err)
	}
}

// TestSQLite_Modes: the guard on SQLite in WAL and rollback-journal mode,
// with busy_timeout 0 and 5000, through two handles on one file (two
// processes, as far as SQLite's locks go): the new leader's Claim on one
// handle refuses the old leader's writes on the other; a Claim while a
// checked transaction is open waits for it (or, with busy_timeout 0, fails
// with SQLITE_BUSY and stores nothing).
func TestSQLite_Modes(t *testing.T) {
	for _, journal := range []string{"WAL", "DELETE"} {
		for _, busy := range []int{0, 5000} {
			t.Run(fmt.Sprintf("%s-busy%d", journal, busy), func(t *testing.T) {
				ctx := ctxT(t)
				path := filepath.Join(t.TempDir(), "fence.db")
				open := func() *fence.Guard {
					db, err := sql.Open("sqlite", fmt.Sprintf("file:%s?_pragma=busy_timeout(%d)&_pragma=journal_mode(%s)", path, busy, journal))
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = db.Close() })
					g, err := fence.New(db)
					if err != nil {
						t.Fatal(err)
					}
					if err := g.EnsureTable(ctx); err != nil {
						t.Fatal(err)
					}
					return g
				}
				oldG, newG := open(), open()
				if err := oldG.Claim(ctx, "el", 10, "old"); err != nil {
					t.Fatal(err)
				}
				tx, err := oldG.Begin(ctx, "el", 10, "old", nil)
				if err != nil {
					t.Fatal(err)
				}
				claimed := make(chan error, 1)
				go func() { claimed <- newG.Claim(ctx, "el", 11, "new") }()
				if busy == 0 {
					if err := <-claimed; err == nil || errors.Is(err, fence.ErrStaleTerm) {
						t.Fatalf("claim with busy_timeout 0 while a checked transaction is open: got %v, want SQLITE_BUSY", err)
					}
				} else {
					select {
					case err := <-claimed:
						t.Fatalf("claim returned (%v) while a checked transaction was open", err)
					case <-time.After(200 * time.Millisecond):
					}
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
				if busy == 0 {
					go func() { claimed <- newG.Claim(ctx, "el", 11, "new") }()
				}
				if err := <-claimed; err != nil {
					t.Fatalf("claim 11: %v", err)
				}
				err = oldG.DoTerm(ctx, "el", 10, "old", func(*sql.Tx) error { return nil })
				if !errors.Is(err, fence.ErrStaleTerm) {
					t.Fatalf("old leader's write on its own handle: got %v, want ErrStaleTerm", err)
				}
				if err := newG.DoTerm(ctx, "el", 11, "new", func(*sql.Tx) error { return nil }); err != nil {
					t.Fatalf("new leader's write: %v", err)
				}
			})
		}
	}
}
