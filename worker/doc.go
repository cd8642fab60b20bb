// Package worker runs registered jobs on exactly one instance: the one whose
// leader.Elector currently leads.
//
// Pull jobs (Worker.Pull) are long-running functions started when a term
// starts and restarted with capped exponential back-off while it lasts;
// after Policy.MaxFailures failures in a row the worker drains every job
// while the lease is still renewed and resigns, so another instance tries.
// Cron jobs (Worker.Cron) fire on the leader only; each tick is recorded
// beside the lease (fenced by the term, monotonic) before it runs, so a
// failover neither repeats a tick nor loses one silently: ticks that fell
// into a failover gap follow the job's Misfire policy, and delivery is per
// job (WithDelivery): AtMostOnce (default; a tick whose run failed is lost)
// or AtLeastOnce (a tick runs again until its completion is recorded; the
// job must be idempotent for its tick, TickFrom).
//
// Every job's context carries the term (leader.TermFrom), its elector
// (ElectorFrom) and, whenever there is a term, the fencing token, so that
// a fenced write is one call, guard.Do(ctx, fn); it is cancelled when the
// term ends. With WithFence the worker claims every term in the fence
// before any job of the term runs. The worker waits for every job before
// the lease may be released; a job still running past the stop budget is
// reported, and after a lost lease its writes through the fence are
// refused (other side effects are not).
//
// Modes ease the move off a hand-picked instance: ModeElect (default),
// ModeStandby (never leads) and ModeAlways (no election; unsafe, logged as
// such).
//
// Spread (NewSpread) runs every job, and every shard of a sharded job, as
// an election of its own and spreads the jobs over the live instances of a
// group, like a Kafka consumer group: members heartbeat in Redis, each runs
// about its share of the jobs, hands the excess over gracefully and
// campaigns while below its share. Each job keeps its own term, fence
// claim, checkpoints and metrics. A group and an elect-mode election of
// the same name exclude each other.
//
// Rules, keys and scripts: docs/design.md, "Jobs under leadership" and
// "Spreading jobs"; examples in docs/library.md.
package worker
