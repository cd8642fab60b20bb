package sim

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/solo-run/solo/leader"
)

// state is the data of one Redis node: its keyspace, and the SHA1s of the
// scripts it has cached (EVAL caches a script; a restart or a promoted
// replica starts with none, so the clients' EVALSHA meets NOSCRIPT).
type state struct {
	ks      keyspace
	scripts map[string]bool
}

// clone copies the keyspace; a promoted replica's script cache is empty.
func (s *state) clone() state {
	return state{ks: s.ks.clone()}
}

// keySnap is one key's value after a write (nil: deleted).
type keySnap struct {
	key string
	e   *entry
}

// repWrite is one replicated unit (a script's or a command's effects, as
// Redis wraps a script's in MULTI/EXEC), applied to the replica at `at`
// (fake time); the stream is ordered, so `at` never decreases. Expiries
// are absolute (PEXPIRE replicates as PEXPIREAT).
type repWrite struct {
	at   time.Time
	keys []keySnap
}

func (s *state) apply(w repWrite) {
	for _, k := range w.keys {
		var e *entry
		if k.e != nil {
			e = k.e.clone()
		}
		s.ks.set(k.key, e)
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
	if w.onOld {
		// The old master after a failover: its replica was promoted, so
		// its writes reach no one and WAIT times out.
		return now.Add(1000 * time.Hour)
	}
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

// execResult is what the server computed for one request (one command or
// a pipeline).
type execResult struct {
	replies []any         // one per command: a reply or an error
	acked   int64         // replicas that acknowledged (WAIT)
	wait    time.Duration // time spent in WAIT
	epoch   uint64        // the server's epoch at execution
	applyAt time.Time     // when the replica applies the request's last write; zero if none
	reset   bool          // the connection reset before the reply arrived (CandPlan.Resets)
}

// exec runs one command of a client at fake time now, under w.mu: the
// scripts (EVAL, EVALSHA), GET and PUBLISH. It returns the reply, or the
// error reply. A script that fails (a wrong type, an unknown command, a
// runtime error) is also a violation: shipped scripts never fail.
func (w *world) exec(now time.Time, cand int, args []string, res *execResult) any {
	name := strings.ToUpper(args[0])
	switch name {
	case "EVAL", "EVALSHA":
		if len(args) < 3 {
			return errArgs(name)
		}
		nk, err := strconv.Atoi(args[2])
		if err != nil || nk < 0 || 3+nk > len(args) {
			return redisError("ERR Number of keys can't be greater than number of args")
		}
		var sc *script
		if name == "EVAL" {
			sc = scripts().bySHA[sha1Hex(args[1])]
			if sc == nil {
				var cerr error
				if sc, cerr = compileScript("(eval)", args[1]); cerr != nil {
					w.violate(InvScript, fmt.Sprintf("c%d sent a script that does not compile: %v", cand, cerr))
					return redisError("ERR Error compiling script: " + cerr.Error())
				}
			}
			if w.prim.scripts == nil {
				w.prim.scripts = map[string]bool{}
			}
			w.prim.scripts[sc.sha] = true
		} else {
			sha := strings.ToLower(args[1])
			if !w.prim.scripts[sha] {
				return redisError("NOSCRIPT No matching script. Please use EVAL.")
			}
			sc = scripts().bySHA[sha]
		}
		r, err := w.eval(now, sc, args[3:3+nk], args[3+nk:], res)
		if err != nil {
			return err
		}
		w.postElection(now, sc, args[3+nk:], r)
		w.postCheckpoint(now, sc, args[3:3+nk], args[3+nk:], r)
		return r
	case "GET", "PUBLISH":
		c := &cmdCtx{ks: &w.prim.ks, srv: w.srvNs(now)}
		r, err := c.do(args)
		if err != nil {
			return err
		}
		if name == "PUBLISH" {
			return w.routePublish(now, c.pub[0])
		}
		return r
	case "ZREM": // Withdraw: an elector leaves the candidates (spread_server.go)
		return w.execWrite(now, args, res)
	case "INFO":
		return w.info(args)
	case "CONFIG":
		return w.configGet(args)
	}
	w.violate(InvScript, fmt.Sprintf("c%d sent %s, which the simulated server does not implement", cand, name))
	return redisError("ERR unknown command '" + args[0] + "'")
}

// eval runs script sc on the primary at fake time now, replicates its
// effects as one write, and delivers what it published. A script error is
// a violation, and an error reply to the caller.
func (w *world) eval(now time.Time, sc *script, keys, argv []string, res *execResult) (any, error) {
	if w.vm == nil {
		w.vm = newLuaVM()
	}
	w.preScript(now, sc, keys, argv)
	w.before = w.leaseNow(now)
	c := &cmdCtx{ks: &w.prim.ks, srv: w.srvNs(now)}
	r, err := w.vm.run(c, w.resolve(sc), keys, argv)
	if len(c.dirty) > 0 {
		wr := repWrite{keys: make([]keySnap, len(c.dirty))}
		for i, k := range c.dirty {
			wr.keys[i] = keySnap{key: k}
			if e := c.ks.m[k]; e != nil {
				wr.keys[i].e = e.clone()
			}
		}
		at := w.replicate(now, wr)
		if res != nil {
			res.applyAt = at
		}
	}
	for _, p := range c.pub {
		w.routePublish(now, p)
	}
	if errors.Is(err, errScript) {
		w.violate(InvScript, fmt.Sprintf("%v (KEYS %q ARGV %q)", err, keys, argv))
		return nil, redisError("ERR " + err.Error())
	}
	return r, err
}

// routePublish delivers a PUBLISH: the election's channel to its watches,
// any other to the lock's subscribers. It returns the receivers' count.
func (w *world) routePublish(now time.Time, p pubMsg) int64 {
	if w.onOld {
		return 0 // the subscribers left the old master at the failover
	}
	if p.channel == w.p.Cfg.EventsChannel() {
		ev, ok := parseEvent(p.msg)
		if !ok {
			w.violate(InvScript, fmt.Sprintf("malformed notice %q on %s", p.msg, p.channel))
			return 0
		}
		n := int64(len(w.watches))
		w.publish(now, ev)
		return n
	}
	w.lockPublish(now, p.channel, p.msg)
	return 0
}

// parseEvent decodes an election notice ("released TERM ID", "elected
// TERM ID", "resign TERM"), as leader's watch does.
func parseEvent(s string) (leader.Event, bool) {
	kind, rest, _ := strings.Cut(s, " ")
	switch kind {
	case "released", "elected":
		l, ok := parseLease(rest)
		k := leader.EventReleased
		if kind == "elected" {
			k = leader.EventElected
		}
		return leader.Event{Kind: k, Lease: l}, ok
	case "resign":
		t, err := strconv.ParseUint(rest, 10, 64)
		return leader.Event{Kind: leader.EventResign, Lease: leader.Lease{Term: t}}, err == nil
	}
	return leader.Event{}, false
}

// waitFor is WAIT 1 timeout after a request whose last write the replica
// applies at `at` (zero: no write; WAIT then waits for nothing).
func (w *world) waitFor(now, at time.Time, timeout time.Duration, res *execResult) int64 {
	lag := at.Sub(now)
	if at.IsZero() || lag <= 0 {
		return 1
	}
	if timeout == 0 || lag <= timeout {
		res.wait += lag
		return 1
	}
	res.wait += timeout
	return 0
}

// The election's keys on the primary, read by the checker.

// leaseNow returns the server's unexpired lease value at fake time now.
func (w *world) leaseNow(now time.Time) string {
	return w.readString(now, w.p.Cfg.LeaseKey())
}

// checkpointNow returns the checkpoint recorded under key (as worker
// names it), if any.
func (w *world) checkpointNow(now time.Time, key string) (int64, bool) {
	v := w.readString(now, w.p.Cfg.Key("")+"cp:"+key)
	if v == "" {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil
}

// readString reads a string key on the primary without touching it.
func (w *world) readString(now time.Time, key string) string {
	e := w.prim.ks.m[key]
	if e == nil || e.kind != kString || (e.exp != 0 && w.srvNs(now) >= e.exp) {
		return ""
	}
	return e.str
}

// dataLoss empties the server as a restart without persistence does; the
// replica resynchronises from the empty primary.
func (w *world) dataLoss(now time.Time) {
	w.preFault(now, nil)
	w.prim, w.rep = state{}, state{}
	w.repQ = w.repQ[:0]
	w.lastApply = now
	w.epoch++
	w.disconnectWatches(now)
	w.event(-1, evFault, 0, 0, 0, 0, "DATA LOSS: every key gone")
	w.affectActive("data loss")
	w.lockFault(now, "data loss")
}

// failover promotes the replica with what it has applied by now; the old
// primary's unreplicated writes are lost and connections drop.
func (w *world) failover(now time.Time) {
	w.catchUpReplica(now)
	w.preFault(now, w.repQ)
	lost := len(w.repQ)
	old := w.prim
	w.prim = w.rep.clone()
	w.repQ = w.repQ[:0]
	w.lastApply = now
	w.epoch++
	w.disconnectWatches(now)
	w.event(-1, evFault, 0, 0, int64(lost), 0, "FAILOVER to the replica; writes lost: "+strconv.Itoa(lost)+"; lease now "+quoteVal(w.leaseNow(now)))
	w.failovers = append(w.failovers, now)
	w.keepOldMaster(now, old)
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

// postElection records what an election script did, from its reply and
// the lease before it (world.before): a new term, and true renewals.
func (w *world) postElection(now time.Time, sc *script, argv []string, r any) {
	if w.onOld {
		// The old master: a renewal there is true as the process sees it
		// (the server it talks to held its value), a term it mints is none
		// of the new master's.
		w.postOld(sc, r)
	}
	switch sc.name {
	case "leader/acquire.lua":
		arr, ok := r.([]any)
		if !ok || len(arr) < 2 {
			return
		}
		v, _ := arr[1].(string)
		switch arr[0] {
		case int64(1):
			if l, ok := parseLease(v); ok && !w.onOld {
				w.minted(l)
			}
			w.renewedTrue(v, now)
		case int64(2):
			if v == w.before {
				w.renewedTrue(v, now)
			}
		}
	case "leader/renew.lua":
		if r == int64(1) && len(argv) > 0 && argv[0] == w.before {
			w.renewedTrue(argv[0], now)
		}
	}
}
