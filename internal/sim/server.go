package sim

import (
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/solo-run/solo/leader"
)

// state is the data of one Redis node: the election's lease key (value and
// absolute expiry in server time), its term key and its checkpoint keys.
type state struct {
	val  string // "TERM ID"; "" when absent
	exp  int64  // server time in ns at which the lease expires
	ttl  int64  // the info hash's ttl_ms (acquire.lua), which lives and dies with val
	term uint64 // the term key; 0 when absent
	cps  map[string]int64
	lk   lockData // the lock schedules' lock (lock_server.go)
}

func (s *state) clone() state {
	c := *s
	c.cps = make(map[string]int64, len(s.cps))
	for k, v := range s.cps {
		c.cps[k] = v
	}
	c.lk.gone = maps.Clone(s.lk.gone)
	return c
}

// expire drops the lease once its expiry passed in server time, as Redis
// does lazily on access.
func (s *state) expire(srv int64) {
	if s.val != "" && srv >= s.exp {
		s.val = ""
	}
}

// writeKind is what one replicated write does.
type writeKind uint8

const (
	wSetLease writeKind = iota + 1 // SET lease val PXAT exp (PEXPIRE replicates as PEXPIREAT)
	wDelLease
	wSetTerm
	wSetCP
)

// repWrite is one write in the replication stream, applied to the replica
// at `at` (fake time); the stream is ordered, so `at` never decreases.
type repWrite struct {
	at   time.Time
	kind writeKind
	val  string
	exp  int64
	ttl  int64 // wSetLease from an acquire: the info hash's ttl_ms; 0 leaves it
	n    int64
	key  string
}

func (s *state) apply(w repWrite) {
	switch w.kind {
	case wSetLease:
		s.val, s.exp = w.val, w.exp
		if w.ttl != 0 {
			s.ttl = w.ttl
		}
	case wDelLease:
		s.val = ""
	case wSetTerm:
		s.term = uint64(w.n)
	case wSetCP:
		if s.cps == nil {
			s.cps = map[string]int64{}
		}
		s.cps[w.key] = w.n
	default:
		s.lk.apply(w)
	}
}

// srvNs is the server clock at fake time now, in Unix ns: it runs at
// Plan.Rate and is offset by Plan.Offset from the fake clock.
func (w *world) srvNs(now time.Time) int64 {
	el := now.Sub(w.start)
	return w.start.UnixNano() + int64(w.p.Offset) + int64(float64(el)*w.p.Rate)
}

// replicate appends a write to the replication stream and returns when the
// replica applies it. Lags are keyed by the server's write counter.
func (w *world) replicate(now time.Time, wr repWrite) time.Time {
	w.writes++
	r := keyed(w.p.Seed, uint64(opRepl), w.writes)
	lag := r.dur(50*time.Microsecond, 3*time.Millisecond)
	if w.faulty(now) && r.chance(w.p.LongLagP) {
		lag = r.logDur(20*time.Millisecond, 1500*time.Millisecond)
	}
	if !w.faulty(now) && w.p.Cfg.MinReplicas > 0 {
		lag = min(lag, w.p.Cfg.ReplicaTimeout/2)
	}
	at := now.Add(lag)
	for _, d := range w.p.ReplicaDown {
		if d.contains(at.Sub(w.start)) {
			at = w.start.Add(d.To).Add(lag)
		}
	}
	if at.Before(w.lastApply) {
		at = w.lastApply
	}
	w.lastApply = at
	wr.at = at
	w.repQ = append(w.repQ, wr)
	return at
}

// catchUpReplica applies the writes the replica has received by now.
func (w *world) catchUpReplica(now time.Time) {
	i := 0
	for ; i < len(w.repQ) && !w.repQ[i].at.After(now); i++ {
		w.rep.apply(w.repQ[i])
	}
	if i > 0 {
		w.repQ = append(w.repQ[:0], w.repQ[i:]...)
	}
}

// execResult is what the server computed for one request.
type execResult struct {
	outcome leader.Outcome
	rec     leader.Record
	code    int64         // script return code where there is one
	n       int64         // checkpoint value
	ok      bool          // checkpoint present
	acked   int64         // replicas that acknowledged (WAIT)
	wait    time.Duration // time spent in WAIT
	epoch   uint64        // the server's epoch at execution
	err     error
}

// waitFor accounts for a WAIT after a write applied by the replica at `at`.
func (w *world) waitFor(o op, now, at time.Time, res *execResult) {
	if w.p.Cfg.MinReplicas <= 0 || !w.waitOps[o] {
		return
	}
	rt := w.p.Cfg.ReplicaTimeout
	lag := at.Sub(now)
	if lag <= rt {
		res.acked, res.wait = 1, lag
	} else {
		res.wait = rt
	}
}

// The scripts, executed at fake time now under w.mu, with the semantics of
// leader/*.lua. Of the info hash only ttl_ms is modelled (it lives and dies
// with the lease); the proclaimed value and the candidates set are not
// (the client implements neither Proclaimer nor Withdrawer): they bear on
// what readers see, never on who may lead.

func (w *world) execAcquire(now time.Time, id string, ttl time.Duration) execResult {
	srv := w.srvNs(now)
	st := &w.prim
	st.expire(srv)
	ms := pxMillis(ttl)
	res := execResult{epoch: w.epoch}
	if st.val != "" {
		l, _ := parseLease(st.val)
		if l.ID == id {
			st.exp, st.ttl = srv+ms*int64(time.Millisecond), ms
			at := w.replicate(now, repWrite{kind: wSetLease, val: st.val, exp: st.exp, ttl: ms})
			w.waitFor(opAcquire, now, at, &res)
			res.outcome, res.rec = leader.Adopted, leader.Record{Lease: l, TTL: time.Duration(ms) * time.Millisecond}
			return res
		}
		pttl := (st.exp - srv) / int64(time.Millisecond)
		res.outcome, res.rec = leader.Held, leader.Record{Lease: l, TTL: time.Duration(pttl) * time.Millisecond}
		return res
	}
	floor := uint64(srv / int64(time.Microsecond))
	term := st.term + 1
	if floor > term {
		term = floor
	}
	l := leader.Lease{Term: term, ID: id}
	st.term = term
	st.val, st.exp, st.ttl = l.String(), srv+ms*int64(time.Millisecond), ms
	w.replicate(now, repWrite{kind: wSetTerm, n: int64(term)})
	at := w.replicate(now, repWrite{kind: wSetLease, val: st.val, exp: st.exp, ttl: ms})
	w.waitFor(opAcquire, now, at, &res)
	res.outcome, res.rec = leader.Acquired, leader.Record{Lease: l, TTL: time.Duration(ms) * time.Millisecond}
	w.minted(l)
	return res
}

func (w *world) execRenew(now time.Time, l leader.Lease, ttl time.Duration) execResult {
	srv := w.srvNs(now)
	st := &w.prim
	st.expire(srv)
	res := execResult{epoch: w.epoch}
	if st.val != l.String() {
		return res
	}
	st.exp = srv + pxMillis(ttl)*int64(time.Millisecond)
	at := w.replicate(now, repWrite{kind: wSetLease, val: st.val, exp: st.exp})
	w.waitFor(opRenew, now, at, &res)
	res.code = 1
	return res
}

func (w *world) execRelease(now time.Time, l leader.Lease) execResult {
	srv := w.srvNs(now)
	st := &w.prim
	st.expire(srv)
	res := execResult{epoch: w.epoch}
	if st.val != l.String() {
		return res
	}
	st.val = ""
	at := w.replicate(now, repWrite{kind: wDelLease})
	w.waitFor(opRelease, now, at, &res)
	w.publish(now, leader.Event{Kind: leader.EventReleased, Lease: l})
	res.code = 1
	return res
}

func (w *world) execInspect(now time.Time) execResult {
	srv := w.srvNs(now)
	st := &w.prim
	st.expire(srv)
	res := execResult{epoch: w.epoch}
	if st.val == "" {
		res.err = leader.ErrNoLeader
		return res
	}
	l, _ := parseLease(st.val)
	res.rec = leader.Record{Lease: l, TTL: time.Duration((st.exp-srv)/int64(time.Millisecond)) * time.Millisecond,
		Info: leader.LeaseInfo{TTL: time.Duration(st.ttl) * time.Millisecond}}
	return res
}

func (w *world) execCheckpoint(now time.Time, l leader.Lease, key string, n int64) execResult {
	srv := w.srvNs(now)
	st := &w.prim
	st.expire(srv)
	res := execResult{epoch: w.epoch}
	if st.val != l.String() {
		res.code = -1
		return res
	}
	if cur, ok := st.cps[key]; ok && cur >= n {
		res.code = 0
		return res
	}
	if st.cps == nil {
		st.cps = map[string]int64{}
	}
	st.cps[key] = n
	at := w.replicate(now, repWrite{kind: wSetCP, key: key, n: n})
	w.waitFor(opCheckpoint, now, at, &res)
	res.code = 1
	return res
}

func (w *world) execLoad(now time.Time, key string) execResult {
	res := execResult{epoch: w.epoch}
	res.n, res.ok = w.prim.cps[key]
	return res
}

// dataLoss empties the server as a restart without persistence does; the
// replica resynchronises from the empty primary.
func (w *world) dataLoss(now time.Time) {
	w.prim, w.rep = state{}, state{}
	w.repQ = w.repQ[:0]
	w.lastApply = now
	w.epoch++
	w.disconnectWatches(now)
	w.event(-1, evFault, 0, 0, 0, 0, "DATA LOSS: lease, term and checkpoints gone")
	w.affectActive("data loss")
	w.lockFault(now, "data loss")
}

// failover promotes the replica with what it has applied by now; the old
// primary's unreplicated writes are lost and connections drop.
func (w *world) failover(now time.Time) {
	w.catchUpReplica(now)
	lost := len(w.repQ)
	w.prim = w.rep.clone()
	w.repQ = w.repQ[:0]
	w.lastApply = now
	w.epoch++
	w.disconnectWatches(now)
	w.event(-1, evFault, 0, 0, int64(lost), 0, "FAILOVER to the replica; writes lost: "+strconv.Itoa(lost)+"; lease now "+quoteVal(w.prim.val))
	w.failovers = append(w.failovers, now)
	if w.p.Cfg.MinReplicas == 0 {
		w.affectActive("failover without min_replicas")
	}
	w.lockFault(now, "failover")
}

func quoteVal(v string) string {
	if v == "" {
		return "(none)"
	}
	return strconv.Quote(v)
}

// execAt returns when a request arriving at `arrive` executes: at once, or
// at the end of a stall window it arrives in (in arrival order).
func (w *world) execAt(arrive time.Time) time.Time {
	d := arrive.Sub(w.start)
	for _, s := range w.p.Stalls {
		if s.contains(d) {
			return w.start.Add(s.To + (d-s.From)/1024)
		}
	}
	return arrive
}

func parseLease(s string) (leader.Lease, bool) {
	t, id, ok := strings.Cut(s, " ")
	if !ok {
		return leader.Lease{}, false
	}
	term, err := strconv.ParseUint(t, 10, 64)
	if err != nil {
		return leader.Lease{}, false
	}
	return leader.Lease{Term: term, ID: id}, true
}

// pxMillis is what the real stores send as PX: the TTL in milliseconds,
// rounded up (leader/redis.go, leader/lock/store.go).
func pxMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
