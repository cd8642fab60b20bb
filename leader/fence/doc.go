// Package fence is the SQL guard that refuses writes from a stale leader.
//
// A lease alone cannot stop a leader that was paused (GC, SIGSTOP, a frozen
// VM) past its stop budget from waking up and writing after another instance
// has taken over. Every leadership carries a fencing term that grows with each
// new lease; this package makes a SQL database remember the highest term it
// has seen for each election and refuse transactions that carry a lower one.
//
// # Protocol
//
//  1. Once, at start-up: [Guard.EnsureTable] (or [Init]) creates the fence
//     table (default name solo_fence) if it is missing.
//  2. At the start of every term: [Claim] (or [Guard.Claim]) stores the new
//     term for the election, unless a higher term is already stored, in which
//     case it returns [ErrStaleTerm]. Claiming the same term again is a no-op.
//  3. For every write: run it in a transaction that begins with
//     [Guard.Check], most simply through [WithTx], [Guard.Do] or
//     [Guard.Begin]. The check refuses the transaction with [ErrStaleTerm]
//     when a higher term has been claimed, and holds until commit.
//
// # Guarantees
//
// For one election, in one database, among transactions that go through the
// guard:
//   - The stored term never decreases, and a Claim of a term lower than one
//     already committed is refused with ErrStaleTerm, even when several
//     claimers race, including on a row that does not exist yet.
//   - A transaction whose Check passed either commits before any Claim of a
//     higher term commits, or does not commit at all. Check takes a lock on
//     the fence row (PostgreSQL: SELECT ... FOR SHARE, which a Claim's
//     upsert must wait for) or the database write lock (SQLite: the check is
//     a no-op UPDATE) and keeps it until the transaction ends. So once a new
//     leader's Claim has returned, no transaction of an older term can
//     commit, however long its leader was paused.
//   - On PostgreSQL, transactions of the same term do not serialize on the
//     fence row: FOR SHARE locks do not conflict with each other.
//
// # Non-guarantees
//
//   - Writes that do not go through the guard (autocommit statements, other
//     programs, transactions that skip Check) are not fenced.
//   - Only this database is fenced. Side effects outside it (e-mails, calls to
//     other services, other databases) are not, unless they carry the term
//     and check it themselves.
//   - Check must be the first statement of its transaction. On SQLite a
//     transaction that read before the check may fail with SQLITE_BUSY when
//     the check upgrades it to a writer; on PostgreSQL at REPEATABLE READ or
//     SERIALIZABLE a concurrent Claim turns into a serialization failure
//     rather than ErrStaleTerm. Either way the stale write is refused, but
//     the error differs.
//   - If Commit returns an error because the connection broke, the outcome
//     is unknown, as with any database transaction.
//   - The guard is only as good as its terms: they must come from the
//     election (leader.TermFrom(ctx) or SOLO_TERM), never be made up.
//   - While a transaction holds its check, a Claim of a higher term waits
//     for it. Keep fenced transactions short. On PostgreSQL the wait is
//     bounded by the Guard's lock timeout ([WithLockTimeout], default
//     [DefaultLockTimeout], set with SET LOCAL lock_timeout inside Claim's
//     and Check's transactions): past it Claim returns an error wrapping
//     [ErrClaimTimeout], stores nothing, and may be retried; Check likewise
//     when it waited for a Claim that did not commit. On SQLite the driver's
//     busy timeout (busy_timeout pragma) bounds the wait, and Claim fails
//     with SQLITE_BUSY ("database is locked") past it.
//   - A leader paused (SIGSTOP, a frozen VM, a GC pause) inside a checked
//     transaction holds the fence row until the server ends that
//     transaction; until then no higher term can be claimed, so the next
//     leader's Claim keeps timing out and it cannot write. The guard cannot
//     bound a transaction the user holds open. On PostgreSQL set
//     idle_in_transaction_session_timeout (on the role or database of the
//     fenced writers, e.g. ALTER ROLE app SET
//     idle_in_transaction_session_timeout = '10s') so that the server ends
//     such a transaction, and TCP keepalives for a host that died; on
//     SQLite the lock lasts as long as the paused process holds it.
//
// # Dialects
//
// SQLite (modernc.org/sqlite, mattn/go-sqlite3) and PostgreSQL (pgx stdlib,
// lib/pq) are supported; the dialect is detected from db.Driver() or given
// with [WithDialect]. The package imports database/sql only; the program
// imports the driver. SQLite needs version 3.24 or later (upsert).
package fence
