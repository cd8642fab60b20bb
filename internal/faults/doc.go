// Package faults is solo's fault-injection suite: it runs real candidate
// processes against real redis-server processes, injects the faults the
// design names (crashes, pauses, partitions, stalled or restarted Redis,
// Sentinel failover, early expiry, jobs that ignore cancellation) and checks
// the two safety levels of docs/design.md from an outside witness:
//
//   - level 1: no two candidates run the leader function at the same
//     instant, for every fault the lease model covers. The candidates report
//     the start and stop of their function on CLOCK_MONOTONIC, which is one
//     clock for all processes of a host, and the test computes the overlaps.
//   - level 2: no write with a stale term is ever accepted by the fenced
//     store, for every fault at all. The store is one SQLite database shared
//     by all candidates, written through package fence; triggers log every
//     claim of a higher term into the same table as the writes, so the
//     table's row order is the commit order and a write of a lower term
//     after a claim of a higher one is a violation that cannot hide.
//
// The harness lives in this package's non-test files: candidate.go is the
// child process (the test binary re-executed with SOLO_FAULTS_CANDIDATE
// set), history.go the event log and the invariant checks, rig.go the world
// of one test (Redis, the store, the candidate processes and their proxies,
// the waits on observed events), inject.go the fault injectors, and
// report.go the figures and the Markdown report. The rows of the fault
// table are the tests: process_test.go (the leader process), network_test.go
// (its link), redis_test.go (Redis itself), chaos_test.go (everything at
// once). docs/faults.md says how to run them and holds the published
// figures.
package faults
