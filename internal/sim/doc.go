// Package sim is a seeded, deterministic simulation of solo's election,
// worker, spread group and lock over a simulated Redis, run on the fake
// clock of a testing/synctest bubble: seconds of simulated time cost
// microseconds, and a failing seed replays exactly.
//
// A seed draws a plan: candidates (real leader.Electors under real
// worker.Workers, real worker.Spread members, or real leader/lock Clients),
// legal random timings, and faults — request and reply delays past every
// deadline, lost and duplicated requests and replies, Redis stalls, data
// losses, failovers, evictions, process pauses, blocked log writes, clients
// with and without timeouts, Run/stop cycles and resigns. A fault phase is
// followed by a calm phase. The simulated server runs the very Lua scripts
// that ship (on gopher-lua), with its own clock, a lagging replica and
// WAIT; each candidate's go-redis client reaches it through hooks, so what
// runs is the shipped code.
//
// Invariants, checked against the simulated server's own state: a running
// leader function's (or hold's) term is the server's lease; at most one
// leader function (one hold) at any instant; no function starts past its
// renew deadline; terms strictly increase; a cron tick fires at most once
// and an owed tick runs; a leader within a derived bound once faults stop;
// bounded shutdown and first acquire; nothing spins; the fenced store
// never accepts a stale write; every script runs without error. Spread
// schedules add one runner per job and no job left unrun; lock schedules
// add the lock's own (no hold for a finished call, bounded waits, the fair
// queue kept). Faults the lease does not cover (data loss, a failover
// without MinReplicas, a pause past the stop budget) are counted as out of
// the model, bounded by the holder's own deadline.
//
//	go test ./internal/sim                                  # CI profile
//	SOLO_SIM=long go test -timeout 90m ./internal/sim       # long profile
//	SOLO_SIM_SEED=N go test ./internal/sim -run 'TestSim$'  # replay one
//
// internal/sim/README.md describes the plan, the fault shapes, each
// invariant, the weighting and how determinism is kept;
// internal/faults/notes.md what the simulator found.
package sim
