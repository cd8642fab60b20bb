package sim

import (
	"math"
	"time"
)

// Every random decision of a schedule comes from a stream keyed by what the
// decision is about — (seed, candidate, op, that candidate's call counter),
// (seed, "plan"), (seed, "replication", write counter) — never from one
// shared stream whose order would depend on how goroutines interleave.

// op names the kind of a keyed decision.
type op uint64

const (
	opAcquire op = iota + 1
	opRenew
	opRelease
	opInspect
	opWatch
	opResignReq
	opCheckpoint
	opLoad
	opNotice  // one release/resign notice delivered to one watch
	opPlan    // the schedule's plan
	opRepl    // replication lag of one write
	opJob     // a pull job run's behaviour
	opElector // the seed of an elector's own math/rand source
	opCancel  // what a job does when cancelled
	opCronRun // whether an at-least-once cron run fails
	opOther   // a command the election's client is not expected to send
	opLockCtx // the seed of a lock goroutine's own math/rand source
	numOps
)

var opNames = [...]string{
	opAcquire: "acquire", opRenew: "renew", opRelease: "release", opInspect: "inspect",
	opWatch: "watch", opResignReq: "resign-req", opCheckpoint: "checkpoint", opLoad: "load-cp",
	opNotice: "notice", opPlan: "plan", opRepl: "repl", opJob: "job", opElector: "elector",
	opCancel: "cancel", opCronRun: "cron-run", opOther: "other", opLockCtx: "lock-rand",
}

func (o op) String() string {
	if s, ok := lockOpNames[o]; ok {
		return s
	}
	if int(o) < len(opNames) && opNames[o] != "" {
		return opNames[o]
	}
	return "op?"
}

// rng is a splitmix64 stream. The zero value is a valid (if dull) stream.
type rng struct{ s uint64 }

func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// keyed returns the stream for one decision, a pure function of its key.
func keyed(seed uint64, parts ...uint64) rng {
	h := mix(seed + 0x9e3779b97f4a7c15)
	for _, p := range parts {
		h = mix(h ^ mix(p+0x632be59bd9b4e019))
	}
	return rng{s: h}
}

func (r *rng) u64() uint64 {
	r.s += 0x9e3779b97f4a7c15
	return mix(r.s)
}

// float returns a number in [0, 1).
func (r *rng) float() float64 { return float64(r.u64()>>11) / (1 << 53) }

// chance reports true with probability p.
func (r *rng) chance(p float64) bool { return r.float() < p }

// intn returns a number in [0, n).
func (r *rng) intn(n int) int {
	if n <= 0 {
		return 0
	}
	return int(r.u64() % uint64(n))
}

// between returns a number in [lo, hi].
func (r *rng) between(lo, hi int) int { return lo + r.intn(hi-lo+1) }

// dur returns a duration in [lo, hi), nanosecond-grained so that events
// rarely coincide.
func (r *rng) dur(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(r.u64()%uint64(hi-lo))
}

// logDur returns a duration in [lo, hi) whose logarithm is uniform.
func (r *rng) logDur(lo, hi time.Duration) time.Duration {
	if hi <= lo || lo <= 0 {
		return lo
	}
	return time.Duration(float64(lo) * math.Pow(float64(hi)/float64(lo), r.float()))
}
