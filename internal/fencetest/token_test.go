package fencetest_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/fence"
	"github.com/solo-run/solo/leader/lock"
	"github.com/solo-run/solo/worker"
)

// TestDo_Token: Guard.Do takes the election, term and holder from the
// context's fence.Token. The first write of a term claims it; a lower
// term is refused as stale, another holder of the stored term as a
// mismatch; a context without a token is refused with ErrNoToken, and
// nothing is written. On SQLite and PostgreSQL.
func TestDo_Token(t *testing.T) {
	forEachBackend(t, func(t *testing.T, newEnv func(t *testing.T) *env) {
		e := newEnv(t)
		ctx := ctxT(t)
		write := func(ctx context.Context, who string) error {
			return e.g.Do(ctx, func(tx *sql.Tx) error { return e.insert(ctx, tx, who, 0) })
		}
		at := func(term uint64, holder string) context.Context {
			return fence.WithToken(ctx, fence.Token{Election: "el", Term: term, Holder: holder})
		}
		if err := write(ctx, "none"); !errors.Is(err, fence.ErrNoToken) {
			t.Fatalf("no token: %v, want ErrNoToken", err)
		}
		// Nothing claimed yet: the first write of term 10 claims it.
		if err := write(at(10, "A"), "A10"); err != nil {
			t.Fatalf("first write of term 10: %v", err)
		}
		if term, holder, err := e.g.Stored(ctx, "el"); err != nil || term != 10 || holder != "A" {
			t.Fatalf("stored %d %q %v, want 10 A", term, holder, err)
		}
		if err := write(at(10, "A"), "A10"); err != nil {
			t.Fatalf("second write of term 10: %v", err)
		}
		if err := write(at(10, "B"), "B10"); !errors.Is(err, fence.ErrHolderMismatch) {
			t.Fatalf("term 10 by B: %v, want ErrHolderMismatch", err)
		}
		// A new leader's first write claims term 11; term 10 is stale.
		if err := e.g.Do(at(11, "B"), func(*sql.Tx) error { return nil }); err != nil {
			t.Fatalf("Do of term 11: %v", err)
		}
		if err := write(at(12, "B"), "B12"); err != nil {
			t.Fatalf("first write of term 12: %v", err)
		}
		if err := write(at(10, "A"), "A10"); !errors.Is(err, fence.ErrStaleTerm) {
			t.Fatalf("term 10 after 12: %v, want ErrStaleTerm", err)
		}
		// The stale term is not claimed on the way: 12 stays.
		if term, _ := e.g.Term(ctx, "el"); term != 12 {
			t.Fatalf("stored term %d, want 12", term)
		}
		// fn's error comes back as it is, and nothing is written.
		boom := errors.New("boom")
		if err := e.g.Do(at(12, "B"), func(tx *sql.Tx) error { _ = e.insert(ctx, tx, "boom", 0); return boom }); err != boom {
			t.Fatalf("fn's error: %v, want it as it is", err)
		}
		for who, want := range map[string]int{"none": 0, "A10": 2, "B10": 0, "B12": 1, "boom": 0} {
			if n := e.count(t, who); n != want {
				t.Errorf("%s: %d rows, want %d", who, n, want)
			}
		}
	})
}

// TestLockFence_OneCall: a lock's hold context carries its token, so
// guard.Do(h.Context(), fn) is the whole fenced write: the first write of
// a hold claims its term (election lock:NAME), and once a newer hold
// wrote, the older one's writes are refused.
//
// Before, the lock snippet (now in docs/library.md) called Guard.Do with
// h.Term() and h.Holder() and no Claim, and every write was refused:
//
//	fence: term not claimed: election "lock-account-42": term …: no row in solo_fence
func TestLockFence_OneCall(t *testing.T) {
	srv := redistest.Start(t)
	forEachBackend(t, func(t *testing.T, newEnv func(t *testing.T) *env) {
		e := newEnv(t)
		ctx := ctxT(t)
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
		defer rdb.Close()
		name := "acct-1c-" + t.Name()[len("TestLockFence_OneCall/"):]
		c, err := lock.NewClient(rdb, lock.WithConfig(lock.Config{TTL: 30 * time.Second}))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		m, err := c.Mutex(name)
		if err != nil {
			t.Fatal(err)
		}
		write := func(h *lock.Hold, who string) error {
			return e.g.Do(h.Context(), func(tx *sql.Tx) error { return e.insert(ctx, tx, who, h.Term()) })
		}
		old, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if tok, ok := fence.TokenFrom(old.Context()); !ok || tok != old.Token() ||
			tok != (fence.Token{Election: "lock:" + name, Term: old.Term(), Holder: old.Holder()}) {
			t.Fatalf("hold's context token %v %v, want %v", tok, ok, old.Token())
		}
		if err := write(old, "old"); err != nil {
			t.Fatalf("the hold's first write: %v", err)
		}
		// The old holder freezes; its key goes and the lock passes on.
		if err := rdb.Del(ctx, "solo:{"+name+"}:lock").Err(); err != nil {
			t.Fatal(err)
		}
		cur, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Re-entry under the new hold shares its token.
		inner, err := m.Lock(cur.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := write(inner, "cur"); err != nil {
			t.Fatalf("the new hold's first write: %v", err)
		}
		if err := write(old, "old"); !errors.Is(err, fence.ErrStaleTerm) {
			t.Fatalf("the stale hold's write: %v, want ErrStaleTerm", err)
		}
		if n, k := e.count(t, "old"), e.count(t, "cur"); n != 1 || k != 1 {
			t.Fatalf("old %d rows, cur %d; want 1 and 1", n, k)
		}
		_ = inner.Unlock(context.Background())
		_ = cur.Unlock(context.Background())
		_ = old.Unlock(context.Background())
	})
}

// TestWorker_OneCallFencedWrite: a job writes with guard.Do(ctx, fn)
// alone, its worker given no fence: the token in the job's context
// claims the term at the first write, with the elector's ID as holder.
func TestWorker_OneCallFencedWrite(t *testing.T) {
	ctx := t.Context()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "app.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	g, err := fence.New(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.EnsureTable(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE orders (term BIGINT)"); err != nil {
		t.Fatal(err)
	}
	in := newInstance(t, "a")
	wrote := make(chan error, 1)
	_ = in.w.Pull("consume", func(ctx context.Context) error {
		wrote <- g.Do(ctx, func(tx *sql.Tx) error {
			term, _ := leader.TermFrom(ctx)
			_, err := tx.ExecContext(ctx, "INSERT INTO orders (term) VALUES (?)", int64(term))
			return err
		})
		<-ctx.Done()
		return nil
	}, worker.WithRestart(worker.RestartNever))
	in.start()
	defer func() { _ = in.stop() }()
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatalf("the job's fenced write: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the job did not run within 30s")
	}
	term, holder, err := g.Stored(ctx, "jobs")
	if err != nil || term != in.e.Term() || holder != in.e.ID() {
		t.Fatalf("stored %d %q %v, want the elector's term %d and ID %q", term, holder, err, in.e.Term(), in.e.ID())
	}
}
