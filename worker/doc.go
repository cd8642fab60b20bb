// Package worker runs registered jobs on exactly one instance: the one whose
// leader.Elector currently leads.
//
// Pull jobs (Worker.Pull) are long-running functions started when a term
// starts and restarted with capped exponential back-off while it lasts;
// after Policy.MaxFailures consecutive failures the worker drains every job
// while the lease is still renewed and resigns, so another instance tries.
// Cron jobs (Worker.Cron) fire on the leader only. Each tick is recorded
// beside the lease (leader.Elector.Checkpoint, fenced by the term and
// monotonic) before it runs, so a failover never runs a tick twice; ticks
// that fell into a failover gap follow the job's Misfire policy.
//
// Every job's context carries the fencing term (leader.TermFrom; a cron
// run also its tick, TickFrom) and is cancelled when the term ends. The
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
// unsafe, logged as such). Module wires it all for go.uber.org/fx; Config
// is the configuration file of the solo command.
package worker
