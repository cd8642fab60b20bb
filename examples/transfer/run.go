package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/solo-run/solo/leader/fence"
	"github.com/solo-run/solo/leader/lock"
	"github.com/solo-run/solo/leader/redisurl"
)

// runner is one process moving money.
type runner struct {
	db       *sql.DB
	guard    *fence.Guard  // nil with -unsafe-no-fence
	accounts []int64       // account ids, ascending: the lock order
	mutexes  []*lock.Mutex // one per account, same index
	id       string
	think    time.Duration
	log      *zap.Logger
	rnd      *rand.Rand
	seq      int

	applied, refused, skipped int
}

// transfer is one transfer in hand: the holds of both accounts' locks and
// the balances read under them.
type transfer struct {
	id               string
	src, dst         int64
	amount           int64
	srcHold, dstHold *lock.Hold
	srcBal, dstBal   int64
}

func runCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	redisURL := fs.String("redis", "redis://127.0.0.1:6379/0", "Redis URL of the locks")
	dbPath := fs.String("db", "bank.db", "SQLite database file (made by init)")
	host, _ := os.Hostname()
	id := fs.String("id", fmt.Sprintf("%s-%d", host, os.Getpid()), "process ID: base of the lock owners and of the transfer ids")
	name := fs.String("name", "bank", "lock name prefix: account N's lock is NAME-account-N, also its fence name")
	ttl := fs.Duration("ttl", lock.DefaultTTL, "lock TTL (renewed while held)")
	renew := fs.Duration("renew", 0, "renew interval (0: TTL/3)")
	deadline := fs.Duration("deadline", 0, "renew deadline: a hold not renewed within it is lost (0: 2/3 TTL)")
	think := fs.Duration("think", 0, "time between reading the balances and writing the transfer")
	count := fs.Int("n", 0, "stop after this many transfers (0: until SIGTERM)")
	noFence := fs.Bool("unsafe-no-fence", false, "write without the fence (a demonstration of what goes wrong)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *think < 0 {
		return fmt.Errorf("-think %s: must not be negative", *think)
	}
	log, err := newLogger()
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	log = log.With(zap.String("process", *id))

	rdb, err := redisurl.NewClient(*redisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	locks, err := lock.NewClient(rdb, lock.WithID(*id), lock.WithLogger(log.Named("lock")),
		lock.WithConfig(lock.Config{TTL: *ttl, RenewInterval: *renew, RenewDeadline: *deadline}))
	if err != nil {
		return err
	}
	// Closed after every hold was unlocked (the loop below returns first).
	defer locks.Close()

	db, err := openDB(*dbPath)
	if err != nil {
		return err
	}
	defer db.Close()
	r := &runner{db: db, id: *id, think: *think, log: log, rnd: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
	if !*noFence {
		if r.guard, err = fence.New(db); err != nil {
			return err
		}
	} else {
		log.Warn("running WITHOUT the fence: a paused process can overwrite newer balances")
	}
	if r.accounts, err = accountIDs(ctx, db); err != nil {
		return err
	}
	for _, a := range r.accounts {
		m, err := locks.Mutex(fmt.Sprintf("%s-account-%d", *name, a))
		if err != nil {
			return err
		}
		r.mutexes = append(r.mutexes, m)
	}
	log.Info("running", zap.Int("accounts", len(r.accounts)), zap.Duration("ttl", *ttl))
	for n := 0; ctx.Err() == nil && (*count == 0 || n < *count); n++ {
		if err := r.transfer(ctx); err != nil && ctx.Err() == nil {
			log.Warn("transfer failed; next one", zap.Error(err))
		}
	}
	log.Info("stopped", zap.Int("applied", r.applied), zap.Int("stale_refused", r.refused), zap.Int("skipped", r.skipped))
	return nil
}

// accountIDs returns the accounts' ids, ascending.
func accountIDs(ctx context.Context, db *sql.DB) ([]int64, error) {
	rows, err := db.QueryContext(ctx, `SELECT id FROM accounts ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("read accounts (did you run init?): %w", err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(ids) < 2 {
		return nil, fmt.Errorf("%d accounts: need at least 2 (run init)", len(ids))
	}
	return ids, nil
}

// transfer moves a random amount between two random accounts.
//
//  1. Lock both accounts, the lower id first: every process takes locks in
//     the same order, so none waits for another in a cycle.
//  2. Claim both holds' tokens in the database (fence.Guard.Claim of each Hold.Token): from
//     then on it refuses every write of an older term of those accounts.
//  3. Read both balances, think, then write both new balances and the
//     ledger row in one transaction that first checks both terms
//     (fence.Guard.Check): a process that was paused past its locks' TTL
//     meanwhile — another process may have taken the locks and written
//     since — has its write refused (ErrStaleTerm) instead of overwriting
//     newer balances with ones computed from old reads.
//  4. Unlock both.
//
// The transfer in hand is not abandoned when a hold's context ends during
// step 3: a process can be frozen right after any such look at its
// context, so only the database, which sees the claims in commit order,
// can decide. The fence decides exactly.
func (r *runner) transfer(ctx context.Context) error {
	i := r.rnd.IntN(len(r.accounts))
	j := r.rnd.IntN(len(r.accounts) - 1)
	if j >= i {
		j++
	}
	t := transfer{src: r.accounts[i], dst: r.accounts[j], amount: 1 + r.rnd.Int64N(100)}
	first, second := min(i, j), max(i, j)

	h1, err := r.mutexes[first].Lock(ctx)
	if err != nil {
		return err
	}
	defer r.unlock(h1)
	// Waiting for the second lock ends if the first is lost meanwhile.
	h2, err := r.mutexes[second].Lock(h1.Context())
	if err != nil {
		return err
	}
	defer r.unlock(h2)
	t.srcHold, t.dstHold = h1, h2
	if t.src != r.accounts[first] {
		t.srcHold, t.dstHold = h2, h1
	}
	r.seq++
	t.id = fmt.Sprintf("%s-%d", r.id, r.seq)
	log := r.log.With(zap.String("transfer", t.id), zap.Int64("src", t.src), zap.Int64("dst", t.dst),
		zap.Uint64("src_term", t.srcHold.Term()), zap.Uint64("dst_term", t.dstHold.Term()))

	if r.guard != nil {
		for _, h := range []*lock.Hold{h1, h2} {
			tok := h.Token()
			if err := r.guard.Claim(ctx, tok.Election, tok.Term, tok.Holder); err != nil { // lock:NAME, the hold's term and holder
				if errors.Is(err, fence.ErrStaleTerm) {
					r.refused++
					log.Info("stale write refused", zap.String("at", "claim"), zap.Error(err))
					return nil
				}
				return err
			}
		}
	}
	if err := r.db.QueryRowContext(ctx, `SELECT balance FROM accounts WHERE id = ?`, t.src).Scan(&t.srcBal); err != nil {
		return err
	}
	if err := r.db.QueryRowContext(ctx, `SELECT balance FROM accounts WHERE id = ?`, t.dst).Scan(&t.dstBal); err != nil {
		return err
	}
	log.Info("transfer prepared", zap.Int64("amount", t.amount), zap.Int64("src_balance", t.srcBal), zap.Int64("dst_balance", t.dstBal))
	if r.think > 0 {
		timer := time.NewTimer(r.think)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil // shutting down: nothing written
		case <-timer.C:
		}
	}
	// The write runs to its end even when ctx ends now: SQLite rolls back
	// what does not commit, and a commit is never left half done.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err = r.write(wctx, t)
	switch {
	case err == nil:
		r.applied++
		log.Info("transfer applied", zap.Int64("amount", t.amount))
	case errors.Is(err, fence.ErrStaleTerm):
		r.refused++
		log.Info("stale write refused", zap.String("at", "write"), zap.Error(err))
	case errors.Is(err, errInsufficient):
		r.skipped++
		log.Debug("transfer skipped: insufficient funds")
	default:
		return err
	}
	return nil
}

// write applies t in one transaction that, fenced, first checks both
// accounts' terms.
func (r *runner) write(ctx context.Context, t transfer) error {
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	var srcTerm, dstTerm uint64
	if r.guard != nil {
		for _, h := range []*lock.Hold{t.srcHold, t.dstHold} {
			tok := h.Token()
			if err := r.guard.Check(ctx, tx, tok.Election, tok.Term, tok.Holder); err != nil {
				return err
			}
		}
		srcTerm, dstTerm = t.srcHold.Term(), t.dstHold.Term()
	}
	if t.srcBal < t.amount {
		return errInsufficient
	}
	// Balances computed from the reads under the locks: correct exactly
	// while the locks are held, which the checks above make sure of.
	if _, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = ? WHERE id = ?`, t.srcBal-t.amount, t.src); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = ? WHERE id = ?`, t.dstBal+t.amount, t.dst); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO transfers (id, src, dst, amount, src_term, dst_term, process) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		t.id, t.src, t.dst, t.amount, int64(srcTerm), int64(dstTerm), r.id); err != nil {
		return err
	}
	return tx.Commit()
}

// unlock releases h on a fresh, bounded context (the run's may be over). A
// hold lost meanwhile (a pause past its TTL) is reported, not an error.
func (r *runner) unlock(h *lock.Hold) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.Unlock(ctx); err != nil {
		if errors.Is(err, lock.ErrLockLost) {
			r.log.Info("lock lost before unlock", zap.String("lock", h.Name()), zap.Uint64("term", h.Term()), zap.Error(err))
			return
		}
		r.log.Warn("unlock", zap.String("lock", h.Name()), zap.Error(err))
	}
}
