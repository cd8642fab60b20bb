// Package fence is the SQL guard that refuses writes from a stale leader.
//
// A lease alone cannot stop a leader that was paused (GC, SIGSTOP, a frozen
// VM) past its stop budget from waking up and writing after another instance
// has taken over. Every leadership carries a fencing term that grows with each
// new lease; this package makes a SQL database remember the highest term it
// has seen for each election, and who holds it, and refuse transactions that
// carry a lower term or another holder.
//
// # Protocol
//
//  1. Once, at start-up: [Guard.EnsureTable] (or [Init]) creates the fence
//     table (default name solo_fence) if it is missing, and adds the holder
//     column to a table created by an older version.
//  2. At the start of every term: [Guard.Claim] (or [Claim]) stores the new
//     term for the election with its holder — the elector's ID,
//     leader.Elector.ID() — unless a higher term is stored, in which case it
//     returns [ErrStaleTerm]. Claiming the same term again by the same holder
//     is a no-op; by another holder it returns [ErrHolderMismatch].
//     worker.WithFence does this step for the jobs of a worker.
//  3. For every write: run it in a transaction that begins with
//     [Guard.Check], most simply through [WithTx], [Guard.Do] or
//     [Guard.Begin], with the same term and holder. The check refuses the
//     transaction with [ErrStaleTerm] when a higher term has been claimed
//     ([ErrHolderMismatch], [ErrNotClaimed] in the cases they name), and
//     holds until commit.
//
// # Guarantees
//
// For one election, in one database, among transactions that go through the
// guard:
//   - The stored term never decreases, and a Claim of a term lower than one
//     already committed is refused with ErrStaleTerm, even when several
//     claimers race, including on a row that does not exist yet.
//   - One term has one holder: the first Claim of a term records it; a Claim
//     or Check of that term by another holder is refused with
//     ErrHolderMismatch. (Two holders of one term mean the election handed
//     it out twice, or a term was copied or made up.)
//   - A transaction whose Check passed either commits before any Claim of a
//     higher term commits, or does not commit at all. So once a new
//     leader's Claim has returned, no transaction of an older term can
//     commit, however long its leader was paused.
//   - A Claim waits only for the transactions that had passed Check when it
//     came. On PostgreSQL, Check and Claim take a transaction-level advisory
//     lock of the election (shared and exclusive), and PostgreSQL grants
//     such locks in arrival order: a Check that comes while a Claim waits
//     queues behind it, and is refused once the Claim committed. An old
//     leader that keeps overlapping its transactions cannot hold the new
//     leader off. (SQLite has one writer at a time: a Claim waits for the
//     open checked transaction, if any, then competes for the write lock.)
//   - On PostgreSQL, transactions of the same term do not wait for one
//     another: shared locks do not conflict.
//   - The server's default isolation level does not matter. Claim runs in a
//     transaction of its own at READ COMMITTED. Check works in a transaction
//     at any level: at REPEATABLE READ or SERIALIZABLE, a transaction whose
//     snapshot predates a Claim of a higher term is refused with
//     ErrStaleTerm (wrapping the server's serialization failure).
//
// # Non-guarantees
//
//   - Writes that do not go through the guard (autocommit statements, other
//     programs, transactions that skip Check) are not fenced.
//   - Only this database is fenced. Side effects outside it (e-mails, calls to
//     other services, other databases) are not, unless they carry the term
//     and check it themselves.
//   - SQLite's fence holds only among processes on one host. The guard
//     relies on SQLite's file locks; WAL mode needs shared memory, which
//     processes on different hosts do not share, and network filesystems
//     (NFS, SMB, most FUSE mounts) implement the locks poorly or not at
//     all. Leaders on several hosts need a database server (PostgreSQL).
//   - Check must be the first statement of its transaction. On SQLite a
//     transaction that read before the check may fail with SQLITE_BUSY when
//     the check upgrades it to a writer. Either way a stale write is
//     refused.
//   - If Commit returns an error because the connection broke, the outcome
//     is unknown, as with any database transaction.
//   - The guard is only as good as its terms and holders: they must come
//     from the election (leader.TermFrom(ctx) or SOLO_TERM, and
//     leader.Elector.ID() or SOLO_ID), never be made up.
//   - While a transaction holds its check, a Claim of a higher term waits
//     for it. Keep fenced transactions short. On PostgreSQL the wait is
//     bounded by the Guard's lock timeout ([WithLockTimeout], default
//     [DefaultLockTimeout], set for Claim's and Check's own statements):
//     past it Claim returns an error wrapping [ErrClaimTimeout], stores
//     nothing, and may be retried; Check likewise when it waited for a
//     Claim. On SQLite the driver's busy timeout (busy_timeout pragma)
//     bounds the wait, and Claim fails with SQLITE_BUSY ("database is
//     locked") past it.
//   - A leader paused (SIGSTOP, a frozen VM, a GC pause) inside a checked
//     transaction blocks failover to the database until that transaction
//     ends: no higher term can be claimed, so the next leader's Claim keeps
//     failing and it cannot write. On PostgreSQL the guard sets
//     idle_in_transaction_session_timeout for the transactions it checks
//     ([WithIdleTimeout], default [DefaultIdleTimeout]): the server ends a
//     transaction left idle that long, so failover waits at most that (plus
//     a lock timeout). It does not cover a leader frozen in the middle of a
//     statement (set statement_timeout, and TCP keepalives for a host that
//     died). On SQLite nothing bounds it: the paused process holds the
//     database write lock — the whole database, for every writer — until
//     it resumes or dies.
//
// # Dialects
//
// SQLite (modernc.org/sqlite, mattn/go-sqlite3) and PostgreSQL (pgx stdlib,
// lib/pq) are supported; the dialect is detected from db.Driver() or given
// with [WithDialect]. The package imports database/sql only; the program
// imports the driver. SQLite needs version 3.24 or later (upsert),
// PostgreSQL 9.6 or later. The table and statements of each dialect, for
// programs in other languages that claim and check by hand, are in the
// fence section of docs/design.md.
package fence
