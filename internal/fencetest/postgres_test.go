package fencetest_test

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/solo-run/solo/internal/pgtest"
	"github.com/solo-run/solo/leader/fence"
)

// lockWaiters counts the backends waiting for a lock on e's fence: claims
// and checks.
func lockWaiters(t *testing.T, e *env) (claims, checks int) {
	t.Helper()
	rows, err := e.db.QueryContext(ctxT(t), `SELECT query FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND state = 'active' AND pid <> pg_backend_pid()`)
	if err != nil {
		t.Fatalf("pg_stat_activity: %v", err)
	}
	defer rows.Close()
	for rows.Next() {
		var q string
		if err := rows.Scan(&q); err != nil {
			t.Fatal(err)
		}
		switch {
		case !strings.Contains(q, e.g.Table()):
		case strings.Contains(q, "lock_shared"), strings.Contains(q, "FOR SHARE"):
			checks++
		default:
			claims++
		}
	}
	return claims, checks
}

// awaitWaiters waits until at least claims claims and checks checks wait
// for a lock on e's fence, failing if done yields first.
func awaitWaiters[T any](t *testing.T, e *env, claims, checks int, done <-chan T) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if c, k := lockWaiters(t, e); c >= claims && k >= checks {
			return
		}
		select {
		case r := <-done:
			t.Fatalf("returned (%v) before %d claims and %d checks waited for the fence", r, claims, checks)
		case <-deadline:
			t.Fatalf("%d claims and %d checks not seen waiting for the fence after 20s", claims, checks)
		case <-tick.C:
		}
	}
}

type begun struct {
	tx  *sql.Tx
	err error
}

// TestCheck_DoesNotJumpAQueuedClaim: an old leader that keeps two fenced
// transactions overlapping must not hold off the new leader's Claim. A
// Claim waits only for the transactions that had passed Check when it
// arrived; a Check that comes after a queued Claim waits behind it, and is
// refused once it went through.
//
// Before (Check took FOR SHARE on the fence row, Claim the row's exclusive
// lock): a share request skips ahead of a queued exclusive one while only
// share locks hold the row, so
//
//	20 term-10 transactions that began after Claim(11) was queued passed
//	Check and committed, while Claim(11) stayed blocked
func TestCheck_DoesNotJumpAQueuedClaim(t *testing.T) {
	e := pgEnv(t, fence.WithLockTimeout(0)) // waits are bounded by ctx only
	ctx := ctxT(t)
	e.mustClaim(t, "el", 10)
	prev, err := e.g.Begin(ctx, "el", 10, h(10), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = prev.Rollback() }()

	claimed := make(chan error, 1)
	go func() { claimed <- e.g.Claim(ctx, "el", 11, h(11)) }()
	awaitWaiters(t, e, 1, 0, claimed)

	// The old leader overlaps: it begins its next transaction before it
	// commits the previous one.
	passed := 0
	var queued chan begun
	for i := range 20 {
		next := make(chan begun, 1)
		go func() {
			tx, err := e.g.Begin(ctx, "el", 10, h(10), nil)
			next <- begun{tx, err}
		}()
		r, waiting := firstOf(t, e, next)
		if waiting {
			queued = next
			break
		}
		if r.err != nil {
			t.Fatalf("overlapping transaction %d: %v", i, r.err)
		}
		passed++
		if err := e.insert(ctx, r.tx, "old", 10); err != nil {
			t.Fatal(err)
		}
		if err := prev.Commit(); err != nil {
			t.Fatal(err)
		}
		prev = r.tx
	}
	select {
	case err := <-claimed:
		t.Logf("claim returned: %v", err)
	default:
	}
	if passed > 0 {
		t.Fatalf("%d term-10 transactions that began after Claim(11) was queued passed Check and committed, while Claim(11) stayed blocked", passed)
	}
	// The transaction that held the row before the Claim came ends; the
	// Claim goes through, then the queued check is refused.
	if err := prev.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-claimed; err != nil {
		t.Fatalf("claim 11: %v", err)
	}
	r := <-queued
	if !errors.Is(r.err, fence.ErrStaleTerm) {
		t.Fatalf("the check queued behind Claim(11): got %v, want ErrStaleTerm", r.err)
	}
}

// firstOf waits until next yields or a check is seen waiting for the fence.
func firstOf(t *testing.T, e *env, next <-chan begun) (r begun, waiting bool) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case r := <-next:
			return r, false
		case <-deadline:
			t.Fatal("a check neither passed nor waited within 20s")
		case <-tick.C:
		}
		if _, k := lockWaiters(t, e); k > 0 {
			return begun{}, true
		}
	}
}

// isolationLevels are the server defaults Claim and Check must not care
// about.
var isolationLevels = []string{"read committed", "repeatable read", "serializable"}

// isolatedDB returns a handle on a fresh database of srv whose
// default_transaction_isolation is level.
func isolatedDB(t *testing.T, srv *pgtest.Server, admin *sql.DB, level string) *sql.DB {
	t.Helper()
	name := fmt.Sprintf("iso_%d", tables.Add(1))
	for _, q := range []string{
		"CREATE DATABASE " + name,
		fmt.Sprintf("ALTER DATABASE %s SET default_transaction_isolation = '%s'", name, level),
	} {
		if _, err := admin.ExecContext(ctxT(t), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db, err := sql.Open("pgx", strings.Replace(srv.DSN(), "/postgres?", "/"+name+"?", 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	var got string
	if err := db.QueryRowContext(ctxT(t), "SHOW transaction_isolation").Scan(&got); err != nil || got != level {
		t.Fatalf("transaction_isolation = %q, %v; want %q", got, err, level)
	}
	return db
}

// TestClaim_AnyServerIsolation: two Claims queued behind a checked
// transaction both go through when it ends, in order, and the higher term
// stays stored, whatever the server's default_transaction_isolation. A
// fenced write of the old term is then refused with ErrStaleTerm.
//
// Before, at repeatable read (and serializable) the second Claim failed:
//
//	claim 11 = <nil>; claim 12 = fence: claim "el" term 12: ERROR: could
//	not serialize access due to concurrent update (SQLSTATE 40001); stored
//	term 11
func TestClaim_AnyServerIsolation(t *testing.T) {
	srv := pgtest.Start(t)
	admin := srv.DB(t)
	for _, level := range isolationLevels {
		t.Run(strings.ReplaceAll(level, " ", "-"), func(t *testing.T) {
			e := setup(t, isolatedDB(t, srv, admin, level), "solo_fence", "writes")
			ctx := ctxT(t)
			e.mustClaim(t, "el", 10)
			tx, err := e.g.Begin(ctx, "el", 10, h(10), nil)
			if err != nil {
				t.Fatal(err)
			}
			c11, c12 := make(chan error, 1), make(chan error, 1)
			go func() { c11 <- e.g.Claim(ctx, "el", 11, h(11)) }()
			awaitWaiters(t, e, 1, 0, c11)
			go func() { c12 <- e.g.Claim(ctx, "el", 12, h(12)) }()
			awaitWaiters(t, e, 2, 0, c12)
			if err := e.insert(ctx, tx, "old", 10); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			err11, err12 := <-c11, <-c12
			stored := e.stored(t, "el")
			if err11 != nil || err12 != nil || stored != 12 {
				t.Fatalf("claim 11 = %v; claim 12 = %v; stored term %d; want nil, nil, 12", err11, err12, stored)
			}
			if err := e.write(ctx, "el", "old", 11); !errors.Is(err, fence.ErrStaleTerm) {
				t.Fatalf("write of term 11 after claim 12: got %v, want ErrStaleTerm", err)
			}
			if err := e.write(ctx, "el", "new", 12); err != nil {
				t.Fatalf("write of term 12: %v", err)
			}
		})
	}
}

// TestCheck_AnyServerIsolation: a checked transaction whose Check waited
// for a Claim of a higher term is refused with ErrStaleTerm at every
// server default isolation, although at repeatable read and serializable
// its snapshot was taken before the Claim committed.
func TestCheck_AnyServerIsolation(t *testing.T) {
	srv := pgtest.Start(t)
	admin := srv.DB(t)
	for _, level := range isolationLevels {
		t.Run(strings.ReplaceAll(level, " ", "-"), func(t *testing.T) {
			e := setup(t, isolatedDB(t, srv, admin, level), "solo_fence", "writes")
			ctx := ctxT(t)
			e.mustClaim(t, "el", 10)
			holder, err := e.g.Begin(ctx, "el", 10, h(10), nil)
			if err != nil {
				t.Fatal(err)
			}
			claimed := make(chan error, 1)
			go func() { claimed <- e.g.Claim(ctx, "el", 11, h(11)) }()
			awaitWaiters(t, e, 1, 0, claimed)

			// A transaction whose snapshot is taken now, before the Claim
			// committed, checks after it.
			tx, err := e.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback() }()
			if _, err := tx.ExecContext(ctx, "SELECT count(*) FROM "+e.writes); err != nil {
				t.Fatal(err)
			}
			checked := make(chan error, 1)
			go func() { checked <- e.g.Check(ctx, tx, "el", 10, h(10)) }()
			select {
			case err := <-checked:
				if !errors.Is(err, fence.ErrStaleTerm) {
					t.Fatalf("check while Claim(11) was queued: got %v, want it to wait, then ErrStaleTerm", err)
				}
			case <-time.After(300 * time.Millisecond):
			}
			if err := holder.Commit(); err != nil {
				t.Fatal(err)
			}
			if err := <-claimed; err != nil {
				t.Fatalf("claim 11: %v", err)
			}
			if err := <-checked; !errors.Is(err, fence.ErrStaleTerm) {
				t.Fatalf("check of term 10 after claim 11: got %v, want ErrStaleTerm", err)
			}
		})
	}
}
