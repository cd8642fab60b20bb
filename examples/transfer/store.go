package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/solo-run/solo/leader/fence"
)

// schema is the bank. transfers is the ledger: one row per applied
// transfer, its id unique, so a transfer is applied at most once; seq
// numbers commits in order (SQLite has one writer at a time), and the
// terms each account was written with never decrease along it in a
// correct run.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS accounts (
		id INTEGER PRIMARY KEY,
		balance INTEGER NOT NULL,
		opening INTEGER NOT NULL
	)`,
	`CREATE TABLE IF NOT EXISTS transfers (
		seq INTEGER PRIMARY KEY AUTOINCREMENT,
		id TEXT NOT NULL UNIQUE,     -- process ID + sequence number
		src INTEGER NOT NULL,
		dst INTEGER NOT NULL,
		amount INTEGER NOT NULL,
		src_term INTEGER NOT NULL,   -- the term of src's lock (0: unfenced)
		dst_term INTEGER NOT NULL,
		process TEXT NOT NULL
	)`,
}

// openDB opens the SQLite file shared by all processes, which must run on
// one host (SQLite's locks, and so the fence, hold only there). WAL lets
// readers work while a writer writes; busy_timeout makes writers queue.
func openDB(path string) (*sql.DB, error) {
	return sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
}

// initCmd creates the tables, the fence table and the accounts.
func initCmd(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("init", flag.ContinueOnError)
	dbPath := fs.String("db", "bank.db", "SQLite database file")
	accounts := fs.Int("accounts", 6, "number of accounts (ids 1..N)")
	balance := fs.Int64("balance", 1000, "opening balance of every account")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *accounts < 2 {
		return fmt.Errorf("-accounts %d: need at least 2", *accounts)
	}
	if *balance < 0 {
		return fmt.Errorf("-balance %d: must not be negative", *balance)
	}
	db, err := openDB(*dbPath)
	if err != nil {
		return err
	}
	defer db.Close()
	g, err := fence.New(db)
	if err != nil {
		return err
	}
	if err := g.EnsureTable(ctx); err != nil {
		return err
	}
	for _, q := range schema {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("create tables: %w", err)
		}
	}
	for id := 1; id <= *accounts; id++ {
		if _, err := db.ExecContext(ctx, `INSERT INTO accounts (id, balance, opening) VALUES (?, ?, ?)
			ON CONFLICT (id) DO NOTHING`, id, *balance, *balance); err != nil {
			return fmt.Errorf("create account %d: %w", id, err)
		}
	}
	fmt.Fprintf(stdout, "%d accounts of %d in %s\n", *accounts, *balance, *dbPath)
	return nil
}

// checkCmd verifies the invariants and prints a summary; it returns
// errCheckFailed when one does not hold.
func checkCmd(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	dbPath := fs.String("db", "bank.db", "SQLite database file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	db, err := openDB(*dbPath)
	if err != nil {
		return err
	}
	defer db.Close()
	problems, summary, err := check(ctx, db)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, summary)
	for _, p := range problems {
		fmt.Fprintln(stdout, "FAIL:", p)
	}
	if len(problems) > 0 {
		return errCheckFailed
	}
	fmt.Fprintln(stdout, "OK: total constant, no negative balance, every balance matches its ledger, no stale write accepted")
	return nil
}

// check reads the whole database in one transaction (a consistent
// snapshot) and returns one line per violated invariant.
func check(ctx context.Context, db *sql.DB) (problems []string, summary string, err error) {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, "", err
	}
	defer func() { _ = tx.Rollback() }()

	type account struct{ balance, opening, ledger int64 }
	accts := map[int64]*account{}
	var ids []int64
	var total, opening int64
	rows, err := tx.QueryContext(ctx, `SELECT id, balance, opening FROM accounts ORDER BY id`)
	if err != nil {
		return nil, "", err
	}
	for rows.Next() {
		var id int64
		a := &account{}
		if err := rows.Scan(&id, &a.balance, &a.opening); err != nil {
			rows.Close()
			return nil, "", err
		}
		a.ledger = a.opening
		accts[id] = a
		ids = append(ids, id)
		total += a.balance
		opening += a.opening
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, "", err
	}

	// The ledger in commit order: every account's balance must be its
	// opening balance plus what the ledger moved (a lost update breaks
	// this), and the term each account was written with must never go
	// down (a stale write accepted breaks this).
	lastTerm := map[int64]int64{}
	n := 0
	rows, err = tx.QueryContext(ctx, `SELECT seq, id, src, dst, amount, src_term, dst_term, process FROM transfers ORDER BY seq`)
	if err != nil {
		return nil, "", err
	}
	for rows.Next() {
		var seq, src, dst, amount, srcTerm, dstTerm int64
		var id, process string
		if err := rows.Scan(&seq, &id, &src, &dst, &amount, &srcTerm, &dstTerm, &process); err != nil {
			rows.Close()
			return nil, "", err
		}
		n++
		for _, w := range []struct{ acct, term int64 }{{src, srcTerm}, {dst, dstTerm}} {
			if w.term < lastTerm[w.acct] {
				problems = append(problems, fmt.Sprintf("stale write accepted: transfer %s (row %d) wrote account %d with term %d after term %d had",
					id, seq, w.acct, w.term, lastTerm[w.acct]))
			}
			lastTerm[w.acct] = max(lastTerm[w.acct], w.term)
		}
		if a := accts[src]; a != nil {
			a.ledger -= amount
		}
		if a := accts[dst]; a != nil {
			a.ledger += amount
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, "", err
	}

	if total != opening {
		problems = append(problems, fmt.Sprintf("total balance %d, opening total %d: money was created or destroyed", total, opening))
	}
	var balances []string
	for _, id := range ids {
		a := accts[id]
		balances = append(balances, fmt.Sprintf("%d:%d", id, a.balance))
		if a.balance < 0 {
			problems = append(problems, fmt.Sprintf("account %d has a negative balance %d", id, a.balance))
		}
		if a.balance != a.ledger {
			problems = append(problems, fmt.Sprintf("lost update: account %d holds %d but its ledger says %d", id, a.balance, a.ledger))
		}
	}
	summary = fmt.Sprintf("%d transfers applied; total %d (opening %d); balances %s", n, total, opening, strings.Join(balances, " "))
	return problems, summary, nil
}

// errInsufficient reports a transfer larger than its source's balance; it
// is skipped, not applied.
var errInsufficient = errors.New("insufficient funds")
