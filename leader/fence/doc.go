// Package fence is the SQL guard that refuses writes from a stale leader.
//
// A lease cannot stop a leader paused (GC, SIGSTOP, a frozen VM) past its
// stop budget from waking up and writing after another instance took over.
// Every leadership carries a fencing term that grows with each new lease;
// a [Guard] makes a SQL database remember, per election, the highest term
// claimed and its holder, and refuse transactions of a lower term or
// another holder.
//
// Protocol: [Guard.EnsureTable] once at start-up; [Guard.Claim] at the
// start of every term, before the first write (worker.WithFence does it);
// then every write in a transaction that begins with [Guard.Check], most
// simply through [Guard.Do], which takes the election, term and holder from
// the context's [Token]:
//
//	err := guard.Do(ctx, func(tx *sql.Tx) error {
//		_, err := tx.ExecContext(ctx, "INSERT INTO orders …")
//		return err
//	}) // fence.ErrStaleTerm once a newer leader has claimed
//
// The worker puts the token in every job's context whenever there is a
// term, a lock's Hold.Context carries its hold's, and [WithToken] makes
// one. Do claims the token's term at its first write when the fence has
// not seen it.
//
// Guarantees, for one election in one database, among transactions through
// the guard: the stored term never decreases; one term has one holder
// ([ErrHolderMismatch]); a transaction whose Check passed commits before
// any Claim of a higher term commits, or not at all, so once a new
// leader's Claim returned no older term's transaction commits
// ([ErrStaleTerm]), however long its leader was paused. The server's
// default isolation level does not matter.
//
// Not guaranteed: writes outside the guard or outside this database;
// SQLite among processes on more than one host; failover while a leader
// frozen inside a checked transaction holds the election's lock —
// PostgreSQL ends such a transaction after [DefaultIdleTimeout]
// ([WithIdleTimeout]), SQLite only when the process resumes or dies.
//
// What a stale write looks like: rarely [ErrStaleTerm]. A leader paused
// past its lease usually learns it has lost before its write reaches
// Check: the job's context is cancelled, so the write fails with
// context.Canceled (or the driver's "conn closed"), and context.Cause of
// the job's context is leader.ErrRenewDeadline or leader.ErrLeaseLost. A
// leader frozen inside a checked transaction finds it ended by
// PostgreSQL (SQLSTATE 25P03, idle_in_transaction_session_timeout) or
// gets a lock timeout. All are the fence at work: the write did not
// commit. So count, and alert on, every fenced write that failed while
// ErrStaleTerm was returned or the context's cause was the end of the
// term, not ErrStaleTerm alone; beside it, solo's
// solo_election_transitions_total{transition="lost"} (SoloLeaseLost),
// solo_job_overruns_total (SoloOverrun) and
// solo_fence_claim_failures_total (SoloFenceClaimFailing) say a leader
// lost its lease while running, a job outlived its term, and claims
// failed. docs/operations.md, "Stale writes after a pause".
//
// SQLite (3.24+) and PostgreSQL (9.6+) are supported, the dialect detected
// from db.Driver() or given with [WithDialect]; the package imports
// database/sql only. The table, the statements of each dialect and the
// failover bounds are in docs/design.md, "The fence", and docs/cli.md for
// programs in other languages.
package fence
