package fencetest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/solo-run/solo/internal/pgtest"
	"github.com/solo-run/solo/leader/fence"
)

// pgEnv returns a fresh env on one PostgreSQL server per test; opts apply
// to its Guard.
func pgEnv(t *testing.T, opts ...fence.Option) *env {
	t.Helper()
	db := pgtest.Start(t).DB(t)
	n := tables.Add(1)
	e := setup(t, db, fmt.Sprintf("fence_%d", n), fmt.Sprintf("writes_%d", n))
	g, err := fence.New(db, append([]fence.Option{fence.WithTable(e.g.Table())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	e.g = g
	return e
}

// staleLeader opens a transaction that passed Check at term and leaves it
// open: a leader frozen (SIGSTOP, a paused VM) inside a fenced write. It is
// rolled back in t.Cleanup, or by the returned func.
func staleLeader(t *testing.T, e *env, term uint64) (end func()) {
	t.Helper()
	tx, err := e.g.Begin(ctxT(t), "el", term, h(term), nil)
	if err != nil {
		t.Fatalf("stale leader's check: %v", err)
	}
	end = func() { _ = tx.Rollback() }
	t.Cleanup(end)
	return end
}

// TestClaim_StaleCheckedTransactionDoesNotBlockForever: a frozen stale
// leader holds FOR SHARE in an open checked transaction. The next leader's
// Claim must not wait for it forever: it gives up after the lock timeout
// (default DefaultLockTimeout) with ErrClaimTimeout, and succeeds on a
// retry once the transaction has ended. Before, Claim waited as long as its
// context allowed.
func TestClaim_StaleCheckedTransactionDoesNotBlockForever(t *testing.T) {
	// Default options but the idle timeout, off: only the lock timeout
	// bounds the Claim (TestFence_LockTimeoutCoversTheIdleTimeout has the
	// two together).
	e := pgEnv(t, fence.WithIdleTimeout(0))
	e.mustClaim(t, "el", 10)
	end := staleLeader(t, e, 10)

	// A generous bound: far above the default lock timeout, so only a Claim
	// that waits for the stale transaction itself reaches it.
	ctx, cancel := context.WithTimeout(ctxT(t), 6*fence.DefaultLockTimeout)
	defer cancel()
	err := e.g.Claim(ctx, "el", 11, h(11))
	if ctx.Err() != nil {
		t.Fatalf("Claim waited for the stale transaction until its context ended: %v", err)
	}
	if !errors.Is(err, fence.ErrClaimTimeout) {
		t.Fatalf("Claim behind a stale checked transaction: got %v, want ErrClaimTimeout", err)
	}
	if errors.Is(err, fence.ErrStaleTerm) {
		t.Fatalf("a timeout reported as a stale term: %v", err)
	}
	t.Logf("Claim: %v", err)
	for _, want := range []string{`"el"`, "term 11", "lock_timeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	if got := e.stored(t, "el"); got != 10 {
		t.Fatalf("stored %d after a timed-out claim, want 10", got)
	}

	end() // the server ends the stale transaction (idle_in_transaction_session_timeout)
	e.mustClaim(t, "el", 11)
	if err := e.write(ctxT(t), "el", "A", 10); !errors.Is(err, fence.ErrStaleTerm) {
		t.Fatalf("stale leader's next write: got %v, want ErrStaleTerm", err)
	}
}

// TestClaim_LockTimeoutOption: WithLockTimeout sets the bound; zero turns
// it off (Claim waits as long as ctx allows, as before); negative is
// refused.
func TestClaim_LockTimeoutOption(t *testing.T) {
	e := pgEnv(t, fence.WithLockTimeout(200*time.Millisecond))
	e.mustClaim(t, "el", 10)
	end := staleLeader(t, e, 10)
	if err := e.g.Claim(ctxT(t), "el", 11, h(11)); !errors.Is(err, fence.ErrClaimTimeout) || !strings.Contains(err.Error(), "200ms") {
		t.Fatalf("Claim with a 200ms lock timeout: got %v, want ErrClaimTimeout naming 200ms", err)
	}

	unbounded, err := fence.New(e.db, fence.WithTable(e.g.Table()), fence.WithLockTimeout(0))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- unbounded.Claim(ctxT(t), "el", 11, h(11)) }()
	waitClaimBlocked(t, e, done)
	end()
	if err := <-done; err != nil {
		t.Fatalf("unbounded Claim after the stale transaction ended: %v", err)
	}

	if _, err := fence.New(e.db, fence.WithLockTimeout(-time.Second)); err == nil || !strings.Contains(err.Error(), "lock timeout") {
		t.Fatalf("negative lock timeout: got %v", err)
	}
}

// TestCheck_LockTimeout: a claimer frozen between its upsert and its
// commit holds the fence row; Check gives up after the lock timeout with
// ErrClaimTimeout. A Check that passes leaves the transaction's own
// lock_timeout as it was.
func TestCheck_LockTimeout(t *testing.T) {
	e := pgEnv(t, fence.WithLockTimeout(200*time.Millisecond))
	ctx := ctxT(t)
	e.mustClaim(t, "el", 10)

	claimer, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := claimer.ExecContext(ctx, "UPDATE "+e.g.Table()+" SET term = 11 WHERE election = $1", "el"); err != nil {
		t.Fatal(err)
	}
	_, err = e.g.Begin(ctx, "el", 10, h(10), nil)
	if !errors.Is(err, fence.ErrClaimTimeout) {
		t.Fatalf("Check behind an uncommitted claim: got %v, want ErrClaimTimeout", err)
	}
	if err := claimer.Rollback(); err != nil {
		t.Fatal(err)
	}

	// Check sets lock_timeout only for its own statements: what the
	// transaction had before (the server default, or the caller's SET
	// LOCAL) is back once it passed. idle_in_transaction_session_timeout
	// stays the Guard's for the rest of the transaction.
	for _, tc := range []struct{ set, want string }{
		{"SET LOCAL statement_timeout = 0", "0"},
		{"SET LOCAL lock_timeout = '42s'", "42s"},
	} {
		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, tc.set); err != nil {
			t.Fatal(err)
		}
		if err := e.g.Check(ctx, tx, "el", 10, h(10)); err != nil {
			t.Fatalf("check: %v", err)
		}
		var got string
		if err := tx.QueryRowContext(ctx, "SHOW lock_timeout").Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("after %s and Check: lock_timeout %q, want %q", tc.set, got, tc.want)
		}
		if err := tx.QueryRowContext(ctx, "SHOW idle_in_transaction_session_timeout").Scan(&got); err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("%ds", int(fence.DefaultIdleTimeout.Seconds())); got != want {
			t.Errorf("after Check: idle_in_transaction_session_timeout %q, want %q (DefaultIdleTimeout)", got, want)
		}
		_ = tx.Rollback()
	}
}

// TestClaim_FrozenLeaderEndedByIdleTimeout: a leader frozen inside a checked
// transaction holds the fence until the server ends its session. The guard
// sets idle_in_transaction_session_timeout in the transactions it checks
// (WithIdleTimeout), so the next leader's Claim goes through once that
// passed, within one lock timeout; the frozen leader's transaction is gone.
//
// Before, only the server's setting (off by default) could end it, and
// Claim kept failing:
//
//	fence: claim "el" term 11: the fence row stayed locked past lock_timeout
//	5s: fence: lock timeout on the fence row: ERROR: canceling statement due
//	to lock timeout (SQLSTATE 55P03)
func TestClaim_FrozenLeaderEndedByIdleTimeout(t *testing.T) {
	e := pgEnv(t, fence.WithIdleTimeout(300*time.Millisecond))
	e.mustClaim(t, "el", 10)
	tx, err := e.g.Begin(ctxT(t), "el", 10, h(10), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	// The leader freezes here, its checked transaction open and idle.
	if err := e.g.Claim(ctxT(t), "el", 11, h(11)); err != nil {
		t.Fatalf("Claim behind a frozen checked transaction: %v", err)
	}
	if err := e.insert(ctxT(t), tx, "frozen", 10); err == nil {
		if err := tx.Commit(); err == nil {
			t.Fatal("the frozen leader's transaction committed after the idle timeout")
		}
	}
	if n := e.count(t, "frozen"); n != 0 {
		t.Fatalf("%d rows of the frozen leader", n)
	}
	if _, err := fence.New(e.db, fence.WithIdleTimeout(-time.Second)); err == nil || !strings.Contains(err.Error(), "idle timeout") {
		t.Fatalf("negative idle timeout: got %v", err)
	}
}
