// Package sim is a seeded, deterministic simulation of solo's election and
// worker over a simulated Redis, run on the fake clock of a
// testing/synctest bubble: seconds of simulated time cost microseconds, and
// a failing seed replays.
//
// # What a schedule is
//
// A seed draws a Plan (NewPlan): 2–5 candidates, each a leader.Elector
// (NewWithLock on its own client view of the store) under a worker.Worker
// with a pull job writing to a fenced store and one or two cron jobs; a
// legal random leader.Config (sometimes MinReplicas=1, sometimes two
// candidates configured with one ID); the server clock's rate and offset;
// Redis stalls, data losses, failovers and replica outages; each
// candidate's go-redis options (ContextTimeoutEnabled or not, read timeout
// finite or -1), process pauses, log writes that block (a full stderr
// pipe), Run stop/restart cycles and Resign calls.
// A fault phase is followed by a calm phase in which faults stop.
//
// The simulated Redis runs the very Lua scripts that ship (leader/*.lua,
// leader/lock/*.lua; worker/spread.lua is runnable too) on gopher-lua, with
// redis.call over a small keyspace (keyspace.go: strings, hashes, sorted
// sets, lists, the commands the scripts call with Redis's reply types,
// expiry on the server clock) and TIME from the server clock (fake time ×
// rate + offset). Each candidate's leader.Lock is the real
// leader.RedisLock, on a go-redis client whose hooks send every command or
// pipeline through the simulated network (rdb.go): the KEYS and ARGV it
// sends, the WAIT it pipelines after acquire, renew and checkpoint under
// MinReplicas, its EVALSHA-then-EVAL fallback (a restarted or promoted
// server has no scripts cached) and its reading of replies are the
// shipped code's. A script's effects replicate to one replica as one
// write after a random lag (ordered stream); WAIT waits for the last write
// of the request (or of the client's earlier requests). A failover
// promotes the replica with what it applied. A script that fails (a wrong
// type, an unknown command, a runtime error) breaks invariant S.
//
// # Faults
//
// Every call's fate — request and reply delay (sub-millisecond mostly,
// sometimes up to half the renew deadline, rarely past every deadline),
// lost request, lost reply — is drawn from a stream keyed by (seed,
// candidate, op, that candidate's call counter for the op; for checkpoints
// and loads, per key), never from a shared stream whose order depends on
// goroutine interleaving. A request may execute after its caller gave up.
// A client with context timeouts returns ctx.Err() when ctx ends; one
// without returns only with the reply or at its read timeout, or never
// (read timeout -1). A paused process sends at wake-up, hears replies at
// wake-up, and its pull job makes the write it was in at wake-up before
// looking at its context. SUBSCRIBE may be slow, hang until Run's context
// ends, or fail; notices may be delayed or lost; a restart or failover
// drops subscriptions for a while.
//
// Shapes (plan.go drawShapes, shapes.go), each from a stream of its own:
// a server with maxmemory and a policy, which answers `INFO memory`
// (maxmemory, maxmemory_policy) and, with a limit and an evicting policy,
// evicts keys the policy allows (a key with a TTL, the lease first among
// them, for volatile-*; any for allkeys-*); a single failed call at a
// boundary (a candidate's first checkpoint reads in a term, a spread
// member's leave that extends its exclusion entry, a process's first
// release, as a shed makes it); a connection reset after the server ran a
// request, which the client sends again as go-redis does (its MaxRetries,
// its back-off), so the server runs it twice (go-redis also retries a read
// timeout; the simulator does not, so a call without context timeouts
// takes one read timeout, not up to four); and clients that keep
// talking to the old master for a while after a failover: it takes their
// writes and replicates them nowhere (with MinReplicas their WAIT fails;
// without, what it grants is out of the model, as any failover's).
//
// # Invariants
//
// Checked against the simulated server's own state (see world.go):
//  1. a running leader function's term is the server's unexpired lease
//     (at its start, every write, every cron run, its return);
//  2. at most one leader function at any instant, and never two of one
//     Elector;
//  3. no function starts already past its renew deadline;
//  4. terms strictly increase across all starts, data loss included;
//  5. a cron tick fires at most once, and a run-once job whose term loaded
//     an older checkpoint offers the latest missed tick; an at-least-once
//     tick that fired is run to completion before any later completion is
//     recorded (an owed tick is eventually run, never skipped for good);
//  6. once faults stopped and settled, a leader runs its function within
//     the bound derived in world.calmBound (not asked when the server's
//     maxmemory-policy may evict keys: a candidate may refuse to campaign
//     there, and no leader is then the right outcome, two the wrong one);
//  7. Run returns within ShutdownTimeout + RenewDeadline + 10ms after its
//     context ended;
//  8. a Run sends its first acquire within 5ms of its start (or of the
//     return of an earlier Run's function still running then);
//  9. nothing spins: at most 500 calls, fires and log entries at one fake
//     instant;
//  10. the fenced store never accepts a write of a leader other than the
//     last claimant;
//     S. every script runs without error (a wrong type, an unknown command,
//     a runtime error), in election and lock schedules alike.
//
// Out of the model, counted in Stats.OutOfModel and not reported as
// violations of 1, 2 and 5: a function still running past its stop budget
// (TTL×(1−Drift) − RenewDeadline after its cancellation: a long pause or a
// job ignoring cancellation), data loss, and a failover without
// MinReplicas. The excuse is bounded (deadline.go): a function (or a lock
// hold) that is no longer the server's, and not cancelled past its last
// true renewal (one that ran while the server held its own value) +
// RenewDeadline, breaks invariant 1 (L3) whatever the cause, since a
// holder that hears no successful renewal stops by then.
//
// # Weighting
//
// Rare preconditions are counted per schedule in Stats.Exercised
// (exercise.go): a late release of a lease not the server's, an acquire
// after the term key was lost, a failover losing an unreplicated
// checkpoint under MinReplicas, a lock renew of a hold not the server's,
// a data loss or failover while a lease or the lock is held. The CI
// profiles print in how many schedules each could have been violated. The
// plan is weighted so that each happens often: under MinReplicas (45% of
// schedules) 80% get a failover, most of them shortly after a whole
// second of the server clock, with the replica stopped since just before
// it, so a cron tick's checkpoint is lost in about one schedule in ten.
//
// # Determinism
//
// Deterministic: the plan, every per-call and per-notice decision, the
// replication lags, and the order of the store's actions (one goroutine
// runs them in (time, sequence) order), hence every fake time in the log.
// The elector's jitter is deterministic once the elector draws from the
// *rand.Rand its Rand hook gives each Run (leader.WithHooks; one seeded by
// (seed, candidate, run)); an elector that uses math/rand's global source
// instead makes replays diverge from its first jittered sleep on. The
// IDs' random part comes from the seed (its IDToken hook).
//
// Settling (world.quiesce): where what a goroutine does next depends on
// what others do at the same fake instant, it waits until every other
// goroutine of the bubble is durably blocked (synctest.Wait, called by
// one settler goroutine) without taking fake time, so a settle on one
// path and none on another cannot shift later times. Callers at one
// instant are released one at a time, each running until it blocks:
// progress steps first (a call about to be sent, a reply waited for, a
// log write a stall held up), then the plan's actions (a Resign), then
// decisions (the settle functions the code under test is given: the
// elector's Settle hook, seeded.SetSettle, seeded.WithSettle,
// lockseam.WithSettle; a job's end). Within a priority they go in order of a key (quiesceKey), not
// in the order they came: the code under test names each decider
// ("elector NAME", "cron ELECTION", "hub", "spread"), prefixed with its
// process (world.decider); a call's send and the wait for its reply are
// keyed by (process, Run, op, key), a subscribe by (process, Run), a
// Resign by its process, a stalled log write by what it writes (its
// logger's fields included); a cron run's end goes before its loop's
// decision, a pull job's after it.
// So a call's context cancelled at its instant is always seen; a reply
// landing as its context or read timeout ends is taken; a cron loop sees
// a run that ends at the tick's instant ended; a Hub's batch and a
// Spread's step see every renewal and job end of the instant; two
// deciders of one instant (an elector's term loop and its function's
// cron loop) go in one order; a call the cron runner makes as a pull job
// ends is counted as part of the function before the job's end. A call not
// sent takes no number, a function's end is logged once, the teardown is
// not logged.
//
// Election schedules replay exactly: the elector's term loop settles
// (its Settle hook) and takes what came at one instant in a fixed order,
// and a second planned Resign due at or before the
// first is called at once (1,200 of 1,200 from seed 1, 150 of 150 under
// -race; docs/faults.md).
//
// Lock schedules replay exactly (TestSim_ReplaysExactly runs seeds twice
// and compares the logs; 900 of 900 from seed 1 without -race and 120 of
// 120 with it, each run three times): the lock Client's random ID part is
// printed as a token keyed by (seed, process) (lockIDs; it decides
// nothing: owners of one process share it, owners of two differ before
// it); plan notes are written before any goroutine starts and each
// application goroutine starts at an instant of its own; each Lock call
// and each Unlock begins 1–999ns later, keyed by its goroutine's stream
// (lockCall, unlock), so two calls never take the Client's call IDs in
// goroutine order; pub/sub connections are numbered per process and
// server; every request waits 1–99,999ns keyed by what it asks
// (sendAlone) before it takes a pooled connection (with 1–999ns, two
// requests of one process collided at one nanosecond in about one
// schedule in two hundred); every wait inside leader/lock that could end
// two ways at one instant (a reply and its bound, a notice, a grant and
// a timer, a wake-up and a cancellation, a Redlock fan-out's replies and
// its timer) settles and decides in a fixed order
// (lockseam.WithSettle; without it those waits are plain selects); and
// the teardown is not logged. Measured again with the settler: 800 of
// 800 from seed 301, 160 of 160 under -race.
//
// Spread schedules replay exactly (200 of 200 from seed 1001 without
// -race, 40 of 40 from seed 2001 with it): seeded.SetIDs gives each process
// a count per election for the random part of its electors' IDs, so a
// replay hashes the jobs to the same members; a member's client keys
// every request's fate by the keys it names (classify, keyOf), not by
// the order its electors sent at one instant; seeded.SetSettle makes the
// member's leader.Hub settle (every goroutine woken at the instant has
// queued) before it takes its renewal queue, ordered by key, and the
// Spread settle before each step reads its jobs' state;
// seeded.WithPerElection gives each campaign a source of its own, by
// election; a job's cancellation is recorded by the job's own goroutine
// and its write steps are counted per job; a restart due at the
// schedule's last instant is judged by the clock; and the teardown is
// neither logged nor judged.
//
// # Spread schedules
//
// RunSpread (TestSim_Spread) runs spread mode as it ships: each member is
// a real worker.Spread (its leader.Hub, one Elector per job, the
// heartbeat script), and for a mode switch each old instance a real
// elect-mode worker.Worker on an Elector of the group's name, on clients
// routed through the simulated network as the candidates' are (the Hub's
// pub/sub dial is refused: members rebalance on heartbeats). Members join,
// leave and rejoin, freeze and die, register different job sets; jobs
// drain slower than any timeout; elect-mode instances of the name are
// replaced by spread members one by one (with a cron job firing every
// second in most of those schedules), or arrive while every member stops
// and drains, from nothing to past shutdown_timeout, with leaves that fail
// (SpreadPlan.Back); members stop and run again at once after
// ErrStopTimeout; the server may evict keys as in the election schedules
// (P2 is then not asked). Invariants (spread_run.go): P1 one runner per job at any
// instant (two runs on one process are never excused; a stopped member's
// run is in the model until shutdown_timeout); P2 in the calm phase no job runs nowhere
// for longer than SpreadPlan.CalmBound while a member that registered it
// is up; P3 a cron tick fires at most once. See spread_plan.go for the
// weighting.
//
// # Lock schedules
//
// RunLock (TestSim_Lock) runs the real leader/lock Client, Mutex and Hold
// over the same plan of faults, with lock holders in place of electors:
// see lock_run.go for what they do and invariants L1–L5. Every lock
// application goroutine's context carries a *rand.Rand of its own,
// seeded by (seed, process, goroutine), through internal/seeded: a lock
// replay repeats its timings once leader/lock draws its jitter from it
// (as the elector does).
//
// With Options.LockConns (TestSim_Lock's default; SOLO_SIM_LOCK_CONNS=0
// turns it off) the lock schedules run on the connection model (lock_conn.go): each request
// travels on one connection of its process's pool for its server, a FIFO
// both ways with a fate of its own (a slow path, often one way; stalls;
// a reset or a black hole that loses what was not delivered), and a
// request written before its caller gave up still arrives, in order on
// its connection and in any order across connections; processes meet
// network blips after which their connections recover one by one;
// pub/sub connections may go half-open and be closed later. A fifth of
// these schedules use WithFair (the shipped fair scripts and their queue
// on the simulated server, lock_fair.go), 15% are Redlock over 3 or 5
// simulated masters, each with a keyspace of its own on which the
// shipped scripts run, frozen now and then and reached over connections
// of its own (lock_redlock.go), and a third use WithInlineCalls. Invariants L6 (no
// lock held, or fair-queued, for a finished call's owner), L7 (a waiter
// tries again within a bound after the lock's expiry or a release
// notice, once faults stopped; without WithFair, the head of the
// Client's queue), L8 (a live fair waiter's slot never lapses once faults
// stopped) and L9 (without WithFair, a Lock call that begins while its
// Client's waiters have all waited past the 1ms starvation bound goes
// behind them: no attempt before RetryInterval) are in lock_calls.go;
// violations are labelled with the finding of the outside review they
// show (LockStats.Findings), or issue 25's waiting bound.
//
// Shapes drawn on top (lock_shapes.go): fair processes take a release's
// grant as leader/lock's Redis store does (their calls queue as "CALL!";
// one process in ten queues as an older client, the bare call, woken by
// "released"), through lockseam.Granter; in three schedules in ten
// outside Redlock each process's Mutex has timings of its own, scaled
// 1/5–3/2 from the plan's (a short-TTL releaser beside a long-TTL
// waiter); outside Redlock the lock takes the plan's MinReplicas (45% of
// schedules, most with a failover after the replica stopped): an acquire
// and a renewal that took or kept the lock wait for the replica, its
// reply coming after the WAIT (not acknowledged: ErrNotReplicated, or a
// failed renewal), releases and abandons do not, and a failover is then
// in the model for L1–L4; and in the fault phase one request in a
// hundred (times the intensity) has its connection reset as the server
// runs it, the reply lost, and the process sends it again as go-redis's
// retries do (L10: a request run twice answers as once, as far as the
// Mutex hears and uses the answer: a release of one hold run twice may
// take two off Redis's advisory count). Violations a
// grant takes part in, or that a request run twice shows, are labelled
// G1–G4 and R1–R2.
package sim
