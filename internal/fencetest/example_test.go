package fencetest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite"

	"github.com/solo-run/solo/leader/fence"
)

// Example_sqlite is leader/fence's Example, run against SQLite with its
// output checked.
func Example_sqlite() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "fence-example-")
	defer func() { _ = os.RemoveAll(dir) }()
	db, _ := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_pragma=busy_timeout(5000)")
	defer func() { _ = db.Close() }()

	guard, _ := fence.New(db) // the default table, the dialect detected
	_ = guard.EnsureTable(ctx)
	_, _ = db.ExecContext(ctx, "CREATE TABLE orders (id INTEGER PRIMARY KEY, term BIGINT)")
	// Each leader writes under its fencing token. In a program the context
	// carries it: a worker job's (the election, leader.TermFrom(ctx),
	// leader.Elector.ID()) or a lock hold's (lock.Hold.Context).
	write := func(term uint64, holder string) error {
		ctx := fence.WithToken(ctx, fence.Token{Election: "billing", Term: term, Holder: holder})
		return guard.Do(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO orders (term) VALUES (?)", int64(term))
			return err
		})
	}

	// The old leader, term 41: its first write claims the term.
	fmt.Println(write(41, "host-a-1f2e"))
	// A new leader takes over with term 42 while the old one is paused.
	fmt.Println(write(42, "host-b-9c0d"))
	// The old leader wakes up and tries to write.
	err := write(41, "host-a-1f2e")
	fmt.Println(errors.Is(err, fence.ErrStaleTerm))
	fmt.Println(err)
	// Output:
	// <nil>
	// <nil>
	// true
	// fence: stale term: election "billing": offered term 41, stored term 42
}
