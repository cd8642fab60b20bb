package fencetest_test

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/solo-run/solo/leader/fence"
)

// claimAfterFreeze opens a checked transaction of term 10 on e — a leader
// that then freezes (SIGSTOP, a paused VM) between two statements, its
// transaction open and idle — and has the next leader claim term 11 at
// once, retrying as the worker does (at once here: the worker's back-off
// only adds to it) until a Claim succeeds. It returns how long after the
// freeze that was, and how many Claims it took. With thaw > 0 the frozen
// leader resumes after thaw and ends its transaction (rolled back: its
// context was cancelled when its lease was lost), as on SQLite, where
// nothing else ends it.
func claimAfterFreeze(t *testing.T, e *env, thaw time.Duration) (time.Duration, int) {
	t.Helper()
	ctx := ctxT(t)
	e.mustClaim(t, "el", 10)
	tx, err := e.g.Begin(ctx, "el", 10, h(10), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	frozen := time.Now()
	if thaw > 0 {
		timer := time.AfterFunc(thaw, func() { _ = tx.Rollback() })
		defer timer.Stop()
	}
	for attempts := 1; ; attempts++ {
		err := e.g.Claim(ctx, "el", 11, h(11))
		if err == nil {
			return time.Since(frozen), attempts
		}
		if ctx.Err() != nil || attempts > 100 {
			t.Fatalf("Claim after the freeze, attempt %d: %v", attempts, err)
		}
		if !errors.Is(err, fence.ErrClaimTimeout) && e.dialect == fence.Postgres {
			t.Fatalf("Claim after the freeze: %v", err)
		}
		// SQLite: SQLITE_BUSY past the busy timeout; PostgreSQL: the lock
		// timeout. Either way the worker retries.
	}
}

// TestFence_LockTimeoutCoversTheIdleTimeout: on PostgreSQL, when the
// guard's lock timeout is above its idle timeout, one Claim outlasts a
// leader frozen inside a checked transaction (the server ends the frozen
// transaction first), so failover costs no retry and no back-off; below
// it, the first Claim times out. The defaults keep the first case.
func TestFence_LockTimeoutCoversTheIdleTimeout(t *testing.T) {
	if fence.DefaultLockTimeout <= fence.DefaultIdleTimeout {
		t.Fatalf("DefaultLockTimeout %s not above DefaultIdleTimeout %s: a Claim behind a frozen leader would time out before the server ends its transaction",
			fence.DefaultLockTimeout, fence.DefaultIdleTimeout)
	}
	covered := pgEnv(t, fence.WithIdleTimeout(500*time.Millisecond), fence.WithLockTimeout(5*time.Second))
	if d, n := claimAfterFreeze(t, covered, 0); n != 1 || d < 400*time.Millisecond {
		t.Fatalf("lock timeout 5s, idle timeout 500ms: the Claim returned %v after the freeze in %d attempts, want 1 attempt after about 500ms", d, n)
	}
	// 3s: the first Claim must reach the lock well before the server ends
	// the frozen transaction, even when opening its connection is slow.
	short := pgEnv(t, fence.WithIdleTimeout(3*time.Second), fence.WithLockTimeout(200*time.Millisecond))
	if _, n := claimAfterFreeze(t, short, 0); n < 2 {
		t.Fatalf("lock timeout 200ms, idle timeout 3s: %d attempts, want the first to time out", n)
	}
}

// TestFence_FailoverBound measures (SOLO_FENCE_BOUND=1; about a minute)
// how long a leader frozen inside a fenced transaction holds off the next
// leader's Claim, for the guard's defaults and its earlier ones (idle 30s,
// lock 5s) on PostgreSQL, and on SQLite for a leader that stays frozen 8s.
// The figures are in README ("What solo promises") and docs/design.md
// ("Failover with the fence").
func TestFence_FailoverBound(t *testing.T) {
	if os.Getenv("SOLO_FENCE_BOUND") == "" {
		t.Skip("a measurement: SOLO_FENCE_BOUND=1 runs it")
	}
	rows := []struct {
		name string
		env  func(t *testing.T) *env
		thaw time.Duration
	}{
		{"postgres, idle 30s, lock 5s (before)", func(t *testing.T) *env {
			return pgEnv(t, fence.WithIdleTimeout(30*time.Second), fence.WithLockTimeout(5*time.Second))
		}, 0},
		{fmt.Sprintf("postgres, defaults (idle %s, lock %s)", fence.DefaultIdleTimeout, fence.DefaultLockTimeout), func(t *testing.T) *env { return pgEnv(t) }, 0},
		{"sqlite, busy_timeout 5s, leader frozen 8s", func(t *testing.T) *env {
			return setup(t, openSQLite(t), fence.DefaultTable, "writes")
		}, 8 * time.Second},
	}
	for _, r := range rows {
		for i := range 3 {
			d, n := claimAfterFreeze(t, r.env(t), r.thaw)
			t.Logf("%-45s run %d: the new leader's Claim returned %6.2fs after the freeze (%d attempts)", r.name, i+1, d.Seconds(), n)
		}
	}
}
