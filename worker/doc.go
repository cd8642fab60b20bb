// Package worker runs registered jobs on exactly one instance: the one whose
// leader.Elector currently leads.
//
// Pull jobs (Worker.Pull) are long-running functions started when a term
// starts and restarted with capped exponential back-off while it lasts;
// after Policy.MaxFailures consecutive failures the worker drains every job
// while the lease is still renewed and resigns, so another instance tries.
// Cron jobs (Worker.Cron) fire on the leader only. Each tick is recorded
// as fired beside the lease (leader.Elector.Checkpoint, fenced by the term
// and monotonic) before it runs; ticks that fell into a failover gap follow
// the job's Misfire policy. Delivery is per job (WithDelivery):
//
//   - AtMostOnce (default): a tick runs only if recording it succeeded, so
//     no tick ever runs twice. A tick whose run fails, is cut off (a crash
//     or a lost lease after the record) or has its writes refused as stale
//     is lost: it is not run again, and MisfireRunOnce does not catch it up.
//   - AtLeastOnce: a successful run's tick is recorded as completed
//     (checkpoint cron-done:JOB, fenced); a failed run runs again within the
//     term with back-off, and the next leader runs again the last fired tick
//     that did not complete (catch-up from the last completed tick). A tick
//     whose completion is recorded never runs again; a tick may run twice
//     when its completion was not recorded, so the job must be idempotent
//     for its tick (TickFrom).
//
// The checkpoints a term's catch-up needs are read again, with back-off,
// after a failed read, for as long as the term lasts: one failed read
// loses neither an owed at-least-once tick nor a MisfireRunOnce catch-up.
//
// With WithFence the worker claims every term in a fence (leader/fence's
// Guard) before any job of the term runs, so jobs write through the fence
// without claiming themselves.
//
// Every job's context carries the fencing term (leader.TermFrom; a cron
// run also its tick, TickFrom), its elector (ElectorFrom) and, whenever
// there is a term, the fencing token (fence.TokenFrom: the election, the
// term, the elector's ID), so that a fenced write is one call,
// guard.Do(ctx, fn); it is cancelled when the term ends. The
// worker waits for every job before the elector may release the lease; a
// job still running past the stop budget (TTL − renew deadline) is
// reported in the log and in solo_job_overruns_total, and on a voluntary
// step-down the lease stays renewed, never released, while it runs.
//
// What this does not promise: after a lost lease a job that ignores its
// context may still run when another instance already leads. Writes
// through leader/fence with the term are refused then; other side effects
// are not.
//
// Modes ease the move off a hand-picked fetch=true instance: ModeElect
// (default), ModeStandby (never leads) and ModeAlways (no election;
// unsafe, logged as such).
//
// Spread (NewSpread, workerfx.SpreadModule, mode spread in solo's
// config) runs every job — every shard of a Sharded job — as an election
// of its own under one leader.Hub, and spreads the jobs over the live
// instances of a group: members heartbeat in Redis, an instance runs at most ceil(jobs/members)
// jobs (per job, only the members that registered it count), sheds the
// excess gracefully (Resign: drain, release, notice) and campaigns while
// below its share. A group and an election of the same name in ModeElect
// exclude each other, at a member's shutdown too (its exclusion entry
// covers the drain; a failed leave is sent again). Each job keeps
// everything above: its own term, fence claim, checkpoints and metrics;
// with a fence, a member also claims the elect-mode row of the group's
// name with a term reserved from that election before its first job runs,
// so an elect-mode leader from before a switch is refused (the reverse
// switch is not fenced: see docs/operations.md). A later Run does not
// start a job whose function an earlier Run left running past the
// shutdown timeout.
//
// Package worker/workerfx wires a Worker or a Spread for go.uber.org/fx,
// and worker/workerprom exports the metrics (WithMetrics) to Prometheus:
// this package depends on neither.
package worker
