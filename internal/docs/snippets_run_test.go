package docs_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	_ "modernc.org/sqlite"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/fence"
	"github.com/solo-run/solo/leader/leadertest"
	"github.com/solo-run/solo/worker"
	"github.com/solo-run/solo/worker/workerprom"
)

// openDB is a fresh SQLite database with the snippets' tables.
func openDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "app.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	for _, q := range []string{
		"CREATE TABLE orders (id INTEGER PRIMARY KEY, note TEXT NOT NULL)",
		"CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL)",
		"INSERT INTO accounts (id, balance) VALUES (42, 100)",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

func newGuard(t *testing.T, db *sql.DB) *fence.Guard {
	t.Helper()
	g, err := fence.New(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.EnsureTable(t.Context()); err != nil {
		t.Fatal(err)
	}
	return g
}

func countRows(t *testing.T, db *sql.DB, note string) int {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT count(*) FROM orders WHERE note = ?", note).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// await polls cond every 20ms for up to 30s.
func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s", what)
		}
	}
}

// TestSnippet_Start runs README's library start against a real
// redis-server: the job gets a term, and Run returns nil once its context
// ends.
func TestSnippet_Start(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	terms := make(chan uint64, 1)
	done := make(chan error, 1)
	go func() {
		done <- startSnippet(ctx, rdb, func(ctx context.Context, term uint64) error {
			terms <- term
			<-ctx.Done()
			return nil
		})
	}()
	select {
	case term := <-terms:
		if term == 0 {
			t.Fatal("the job got term 0")
		}
	case err := <-done:
		t.Fatalf("Run returned before the job ran: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the job did not run within 30s")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestSnippet_Fx starts docs/library.md's fx application: the job takes the graph's
// *fence.Guard and writes with guard.Do(ctx, fn); the worker claimed the
// term in that guard before the job ran.
//
// Mutation: workerfx.Module not taking a *fence.Guard as its fence fails
// this with "the worker did not claim the term in the graph's *fence.Guard
// before the job ran".
func TestSnippet_Fx(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	db := openDB(t)
	core, logs := observer.New(zapcore.InfoLevel)
	app := fxSnippet(
		func() redis.UniversalClient { return rdb },
		func() *zap.Logger { return zap.New(core) },
		func() *sql.DB { return db },
		func(db *sql.DB) (*fence.Guard, error) {
			g, err := fence.New(db)
			if err != nil {
				return nil, err
			}
			return g, g.EnsureTable(context.Background())
		},
		func(g *fence.Guard, log *zap.Logger) *ConsumeOrders { return &ConsumeOrders{guard: g, log: log} },
	)
	if err := app.Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		t.Fatal(err)
	}
	await(t, "the fx job's fenced write", func() bool { return countRows(t, db, "consumed") == 1 })
	if logs.FilterMessage("term claimed in the fence").Len() != 1 {
		t.Error("the worker did not claim the term in the graph's *fence.Guard before the job ran")
	}
	if err := app.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	g := newGuard(t, db)
	if term, holder, err := g.Stored(ctx, "orders-sync"); err != nil || term == 0 || holder == "" {
		t.Fatalf("the fence row of orders-sync: %d %q %v", term, holder, err)
	}
}

// TestSnippet_Spread runs docs/library.md's spread snippet until every shard and
// the refunds job wrote through the fence with their own tokens.
func TestSnippet_Spread(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	db := openDB(t)
	g := newGuard(t, db)
	metrics, err := workerprom.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	var wrote atomic.Int64
	write := func(ctx context.Context) error {
		err := g.Do(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO orders (note) VALUES ('spread')")
			return err
		})
		if err != nil {
			return err
		}
		wrote.Add(1)
		<-ctx.Done()
		return nil
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- spreadSnippet(ctx, rdb, zap.NewNop(), metrics, g, write, func(ctx context.Context, _ int) error { return write(ctx) })
	}()
	await(t, "65 fenced writes (refunds and 64 shards)", func() bool { return wrote.Load() == 65 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if term, _, err := g.Stored(t.Context(), "orders-svc.orders/63"); err != nil || term == 0 {
		t.Fatalf("shard 63's fence row: %d %v", term, err)
	}
}

// TestSnippet_Lock runs docs/library.md's lock snippet: its one fenced write under
// the hold claims the hold's term and goes through.
//
// Before (the snippet called guard.Do with h.Term() and h.Holder()
// and no Claim):
//
//	fence: term not claimed: election "lock-account-42": term …: no row in solo_fence
func TestSnippet_Lock(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	db := openDB(t)
	g := newGuard(t, db)
	if err := lockSnippet(t.Context(), rdb, g); err != nil {
		t.Fatal(err)
	}
	var balance int
	if err := db.QueryRow("SELECT balance FROM accounts WHERE id = 42").Scan(&balance); err != nil || balance != 90 {
		t.Fatalf("balance %d %v, want 90", balance, err)
	}
	if term, _, err := g.Stored(t.Context(), "lock:account-42"); err != nil || term == 0 {
		t.Fatalf("the lock's fence row: %d %v", term, err)
	}
}

// TestSnippet_Fence runs docs/library.md's fence snippet in a worker's job, then
// again with a term older than one claimed since: refused.
func TestSnippet_Fence(t *testing.T) {
	db := openDB(t)
	e, err := leader.NewWithStore(leadertest.New(), leader.Config{Name: "orders-sync", ID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(e)
	if err != nil {
		t.Fatal(err)
	}
	result := make(chan error, 1)
	_ = w.Pull("consume-orders", func(ctx context.Context) error {
		result <- fenceSnippet(ctx, db)
		<-ctx.Done()
		return nil
	}, worker.WithRestart(worker.RestartNever))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	if err := <-result; err != nil {
		t.Fatalf("the snippet in a job: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	g := newGuard(t, db)
	term, holder, err := g.Stored(t.Context(), "orders-sync")
	if err != nil || holder != e.ID() {
		t.Fatalf("stored %d %q %v, want the elector's claim", term, holder, err)
	}
	if err := g.Claim(t.Context(), "orders-sync", term+1, "b"); err != nil {
		t.Fatal(err)
	}
	stale := fence.WithToken(t.Context(), fence.Token{Election: "orders-sync", Term: term, Holder: holder})
	if err := fenceSnippet(stale, db); !errors.Is(err, fence.ErrStaleTerm) {
		t.Fatalf("the snippet with a stale term: %v, want ErrStaleTerm", err)
	}
	if n := countRows(t, db, "fenced"); n != 1 {
		t.Fatalf("%d fenced rows, want 1", n)
	}
}

// TestSnippet_WorkerQuickstart builds and runs the worker quick start
// (internal/docs/workerquickstart, verbatim in docs/library.md) against a real
// redis-server: it leads, runs its pull job, and stops cleanly on SIGTERM.
func TestSnippet_WorkerQuickstart(t *testing.T) {
	srv := redistest.Start(t)
	bin := filepath.Join(t.TempDir(), "workerquickstart")
	if out, err := exec.Command("go", "build", "-o", bin, "./workerquickstart").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "REDIS_URL=redis://"+srv.Addr()+"/0")
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() { _ = cmd.Process.Kill() }()
	await(t, "the quick start's pull job", func() bool { return strings.Contains(out.String(), `"msg":"consuming"`) })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit within 30s of SIGTERM\n%s", out.String())
	}
}

// lockedBuffer is an io.Writer safe to read while a process writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
