package fencetest_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/fence"
	"github.com/solo-run/solo/leader/leadertest"
	"github.com/solo-run/solo/worker"
)

// instance is an elector on an in-memory lock and its worker.
type instance struct {
	e     *leader.Elector
	w     *worker.Worker
	start func()
	stop  func() error
}

func newInstance(t *testing.T, id string, opts ...worker.Option) *instance {
	t.Helper()
	c := leader.Config{Name: "jobs", ID: id, TTL: 3 * time.Second, RenewInterval: time.Second,
		RenewDeadline: 2 * time.Second, RetryInterval: 500 * time.Millisecond}
	e, err := leader.NewWithStore(leadertest.New(), c)
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(e, opts...)
	if err != nil {
		t.Fatal(err)
	}
	in := &instance{e: e, w: w}
	in.start = func() {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		in.stop = func() error { cancel(); return <-done }
	}
	return in
}

// TestWorker_FencedWriteAtTermStart: with a real guard (SQLite), a pull
// job's first fenced write of its term, with the elector's ID as holder,
// is accepted without the job claiming anything.
//
// Before (no WithFence; the job does not claim):
//
//	fence: term not claimed: election "jobs": term 1: no row in solo_fence
func TestWorker_FencedWriteAtTermStart(t *testing.T) {
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
	in := newInstance(t, "a", worker.WithFence(g))
	wrote := make(chan error, 1)
	_ = in.w.Pull("consume", func(ctx context.Context) error {
		term, _ := leader.TermFrom(ctx)
		wrote <- g.DoTerm(ctx, "jobs", term, in.e.ID(), func(tx *sql.Tx) error {
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
			t.Fatalf("the job's first fenced write: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the job did not run within 30s")
	}
	term, holder, err := g.Stored(ctx, "jobs")
	if err != nil || term != in.e.Term() || holder != in.e.ID() {
		t.Fatalf("stored %d %q %v, want the elector's term %d and ID %q", term, holder, err, in.e.Term(), in.e.ID())
	}
}
