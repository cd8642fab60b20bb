package sim

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/solo-run/solo/internal/hooks"
	"github.com/solo-run/solo/leader/lock"
)

// The lock's scripts run on the simulated server as they ship
// (leader/lock/acquire.lua, renew.lua, release.lua, abandon.lua), with the
// KEYS and ARGV leader/lock's store sends (lockArgs). Under MinReplicas an
// acquire and a renewal wait for the replica (lockWait), as leader/lock's
// Redis store pipelines WAIT; releases and abandons do not.

// Ops of the lock schedules, keyed apart from the election's.
const (
	opLAcquire op = 64 + iota
	opLRenew
	opLRelease
	opLAbandon
	opLNotice
	opLSub
	opLPlan
	opLProc
)

var lockOpNames = map[op]string{
	opLAcquire: "lock-acquire", opLRenew: "lock-renew", opLRelease: "lock-release", opLAbandon: "lock-abandon",
	opLNotice: "lock-notice", opLSub: "lock-subscribe", opLPlan: "lock-plan", opLProc: "lock-proc",
}

// lockRes is what the server computed for one lock request.
type lockRes struct {
	rep     hooks.AcquireReply // acquire
	n       int64              // renew: 1 renewed; release: holds left or -1; abandon: 1 deleted
	epoch   uint64
	deleted string // the field a release or abandon deleted
	raw     any    // a Redlock master's script reply, as sent back
	err     error  // the script failed (a violation of its own)
	// applyAt: when the replica applies the script's writes (zero: it
	// wrote nothing); wait: the WAIT pipelined after it under MinReplicas
	// delays the reply by that much; acked: the replicas WAIT counted.
	applyAt time.Time
	wait    time.Duration
	acked   int64
}

func (r lockRes) String(o op) string {
	switch o {
	case opLAcquire:
		switch r.rep.Code {
		case hooks.CodeAcquired:
			return "acquired term " + strconv.FormatUint(r.rep.Term, 10)
		case hooks.CodeAdopted:
			return "adopted term " + strconv.FormatUint(r.rep.Term, 10)
		case hooks.CodeReentered:
			return "re-entered, count " + strconv.FormatInt(r.rep.Count, 10)
		case hooks.CodeHeld:
			return "held by " + strconv.Quote(r.rep.Holder) + " pttl " + r.rep.PTTL.String()
		default:
			return "gone"
		}
	default:
		s := strconv.FormatInt(r.n, 10)
		if r.deleted != "" {
			s += " (deleted " + strconv.Quote(r.deleted) + ")"
		}
		return s
	}
}

// lockHash and lockTerm are the lock's keys (leader/lock's store.go:
// PREFIX:{NAME}:lock and PREFIX:{NAME}:lock.term).
func lockHash() string { return lock.DefaultKeyPrefix + ":{" + lockName + "}:lock" }
func lockTerm() string { return lockHash() + ".term" }
func lockGone() string { return lockHash() + ".gone" }

// lockQueue and lockTimeouts are the fair lock's queue (a list of calls,
// "CALL!TTL") and its slot timeouts (a zset call -> server ms).
func lockQueue() string    { return lockHash() + ".queue" }
func lockTimeouts() string { return lockHash() + ".timeouts" }

// lockArgs returns the KEYS and ARGV of the lock script name as
// leader/lock's store sends them: the one place to change when the
// scripts' interface changes.
func lockArgs(name string, a ...string) (keys, argv []string) {
	switch name {
	case "acquire": // owner, TTL ms, re-entry field or "", adoptable owners...
		return []string{lockHash(), lockTerm(), lockGone()}, a
	case "abandon": // channel, tombstone lifetime ms, owners...
		return []string{lockHash(), lockGone()}, a
	case "fair_acquire": // owner, TTL ms, re-entry field or "", "1"/"0" queue, slot ms, queue entry, adoptable owners...
		return []string{lockHash(), lockTerm(), lockQueue(), lockTimeouts(), lockGone()}, a
	case "fair_release": // field, "1"/"0", channel, mark lifetime ms (TTL)
		return []string{lockHash(), lockTerm(), lockQueue(), lockTimeouts(), lockGone()}, a
	case "release": // field, "1"/"0", channel, mark lifetime ms (TTL)
		return []string{lockHash(), lockGone()}, a
	case "fair_abandon": // channel, tombstone lifetime ms, queue entry, owners...
		return []string{lockHash(), lockGone(), lockQueue(), lockTimeouts()}, a
	default: // renew: field, TTL ms
		return []string{lockHash()}, a
	}
}

// tombstoneMillis is leader/lock's tombstone lifetime for ttl (store.go's
// tombstoneLife): max(10 TTL, 1 min).
func tombstoneMillis(ttl time.Duration) string {
	return strconv.FormatInt(max(10*ttl, time.Minute).Milliseconds(), 10)
}

// lockField returns the lock hash's first field and its count on the
// primary (what the checker compares), "" when absent or expired.
func (w *world) lockField(now time.Time) (string, int64) {
	e := w.prim.ks.m[lockHash()]
	if e == nil || e.kind != kHash || len(e.fields) == 0 || (e.exp != 0 && w.srvNs(now) >= e.exp) {
		return "", 0
	}
	n, _ := strconv.ParseInt(e.hash[e.fields[0]], 10, 64)
	return e.fields[0], n
}

// runLock runs lock script name at fake time now.
func (w *world) runLock(now time.Time, name string, a ...string) (any, lockRes) {
	res := lockRes{epoch: w.epoch}
	keys, argv := lockArgs(name, a...)
	var er execResult
	r, err := w.eval(now, scripts().get("leader/lock/"+name+".lua"), keys, argv, &er)
	res.err, res.applyAt = err, er.applyAt
	return r, res
}

// execLockAcquire runs acquire.lua.
func (w *world) execLockAcquire(now time.Time, owner string, adopt []string, reenter string, ttl time.Duration) lockRes {
	r, res := w.runLock(now, "acquire", append([]string{owner, strconv.FormatInt(pxMillis(ttl), 10), reenter}, adopt...)...)
	return w.acquired(now, r, res, owner, reenter)
}

// execLockFairAcquire runs fair_acquire.lua; slot is a waiter's slot
// lifetime (redisStore's slot). L8 when it drops a live waiter's lapsed
// slot.
func (w *world) execLockFairAcquire(now time.Time, owner string, adopt []string, reenter string, ttl time.Duration, wait, grants bool, slot time.Duration) lockRes {
	q := "0"
	if wait {
		q = "1"
	}
	entry := queueEntry(callOfOwner(owner), grants, ttl)
	before := w.fairQueue(now)
	r, res := w.runLock(now, "fair_acquire", append([]string{owner, strconv.FormatInt(pxMillis(ttl), 10), reenter, q,
		strconv.FormatInt(slot.Milliseconds(), 10), entry}, adopt...)...)
	if reenter == "" && w.lk != nil {
		w.lk.fairRan(now, before, w.fairQueue(now), entry, wait)
	}
	return w.acquired(now, r, res, owner, reenter)
}

// acquired parses an acquire script's reply r and records a minted or
// re-entered term (L2, L4).
func (w *world) acquired(now time.Time, r any, res lockRes, owner, reenter string) lockRes {
	if res.err != nil {
		return res
	}
	res.rep, res.err = parseAcquireReply(r, owner)
	switch res.rep.Code {
	case hooks.CodeAcquired, hooks.CodeAdopted:
		field := res.rep.Field
		if res.rep.Code == hooks.CodeAcquired {
			field = strconv.FormatUint(res.rep.Term, 10) + " " + owner
			w.lk.mintedTerm(now, res.rep.Term, owner)
		}
		if f := w.lockNow(now); f == field {
			w.renewedTrue(f, now)
		}
	case hooks.CodeReentered:
		w.lk.serverCount(reenter, res.rep.Count)
	}
	return res
}

// parseAcquireReply parses an acquire script's reply to owner's attempt
// (leader/lock's parseAcquire).
func parseAcquireReply(r any, owner string) (hooks.AcquireReply, error) {
	var rep hooks.AcquireReply
	arr, _ := r.([]any)
	if len(arr) == 0 {
		return rep, fmt.Errorf("acquire: unexpected reply %v", r)
	}
	code, _ := arr[0].(int64)
	rep.Code = int(code)
	switch rep.Code {
	case hooks.CodeAcquired, hooks.CodeAdopted:
		if len(arr) > 1 {
			if rep.Code == hooks.CodeAdopted {
				// {2, "TERM OWNER"}: an earlier attempt's hold.
				rep.Field, _ = arr[1].(string)
				t, _, _ := strings.Cut(rep.Field, " ")
				rep.Term, _ = strconv.ParseUint(t, 10, 64)
			} else {
				t, _ := arr[1].(int64)
				rep.Term = uint64(t)
			}
		}
	case hooks.CodeReentered:
		if len(arr) > 1 {
			rep.Count, _ = arr[1].(int64)
		}
	case hooks.CodeHeld:
		if len(arr) > 2 {
			rep.Holder, _ = arr[1].(string)
			p, _ := arr[2].(int64)
			rep.PTTL = time.Duration(p) * time.Millisecond
		}
		if len(arr) > 3 {
			t, _ := arr[3].(int64)
			rep.Seen = uint64(max(t, 0))
		}
	}
	return rep, nil
}

// execLockRenew runs renew.lua.
func (w *world) execLockRenew(now time.Time, field string, ttl time.Duration) lockRes {
	before := w.lockNow(now)
	r, res := w.runLock(now, "renew", field, strconv.FormatInt(pxMillis(ttl), 10))
	res.n, _ = r.(int64)
	if res.n == 1 && before == field {
		w.renewedTrue(field, now)
	}
	return res
}

// execLockRelease runs release.lua (fair: fair_release.lua, which may
// grant the lock to the queue's head): L4 when it deletes the lock or
// leaves a count.
func (w *world) execLockRelease(now time.Time, field string, last, fair bool, channel string, ttl time.Duration) lockRes {
	before, _ := w.lockField(now)
	flag := "0"
	if last {
		flag = "1"
	}
	var r any
	var res lockRes
	if fair {
		q := w.fairQueue(now)
		r, res = w.runLock(now, "fair_release", field, flag, channel, strconv.FormatInt(pxMillis(ttl), 10))
		if w.lk != nil {
			w.lk.fairRan(now, q, w.fairQueue(now), "", false)
		}
		arr, _ := r.([]any)
		if len(arr) > 0 {
			res.n, _ = arr[0].(int64)
		}
		if len(arr) > 1 {
			// {0, "TERM CALL.0"}: released and granted to the queue's head.
			g, _ := arr[1].(string)
			t, o, _ := strings.Cut(g, " ")
			term, _ := strconv.ParseUint(t, 10, 64)
			w.lk.deleting(before, last)
			res.deleted = before
			w.lk.mintedTerm(now, term, o)
			return res
		}
	} else {
		r, res = w.runLock(now, "release", field, flag, channel, strconv.FormatInt(pxMillis(ttl), 10))
		res.n, _ = r.(int64)
	}
	after, count := w.lockField(now)
	switch {
	case before != "" && after == "":
		w.lk.deleting(before, last)
		res.deleted = before
	case after != "" && res.n > 0:
		w.lk.serverCount(after, count)
	}
	return res
}

// execLockAbandon runs abandon.lua (fair: fair_abandon.lua, which also
// takes call's entry out of the queue): L4 when it deletes the lock.
func (w *world) execLockAbandon(now time.Time, call string, owners []string, fair, grants bool, channel string, ttl time.Duration) lockRes {
	before, _ := w.lockField(now)
	a := []string{channel, tombstoneMillis(ttl)}
	name := "abandon"
	if fair {
		name = "fair_abandon"
		a = append(a, queueEntry(call, grants, ttl))
	}
	r, res := w.runLock(now, name, append(a, owners...)...)
	res.n, _ = r.(int64)
	if after, _ := w.lockField(now); before != "" && after == "" {
		w.lk.abandoning(before)
		res.deleted = before
	}
	return res
}

// queueEntry is a fair call's entry in the queue: as leader/lock's Redis
// store marks it ("CALL!TTL", its own TTL in ms: fair_release.lua then
// hands the lock to the queue's head as "CALL.0" for that TTL) when its
// process takes grants (lockStore.TakesGrants), or the bare call, as an
// older client queues it, which fair_release.lua wakes with "released"
// and lets take the lock itself.
func queueEntry(call string, grants bool, ttl time.Duration) string {
	if grants {
		return call + "!" + strconv.FormatInt(pxMillis(ttl), 10)
	}
	return call
}

// callOfOwner is the call of an attempt's owner ("CALL.N"; leader/lock's
// callOf).
func callOfOwner(owner string) string {
	if i := strings.LastIndexByte(owner, '.'); i >= 0 {
		return owner[:i]
	}
	return owner
}

// fairQueue returns the fair lock's queue on the primary with each
// entry's slot timeout (server ms; -1 when it has none), at fake time now.
func (w *world) fairQueue(now time.Time) []qEntry {
	srv := w.srvNs(now)
	e := w.prim.ks.m[lockQueue()]
	if e == nil || e.kind != kList || (e.exp != 0 && srv >= e.exp) {
		return nil
	}
	var to map[string]float64
	if z := w.prim.ks.m[lockTimeouts()]; z != nil && z.kind == kZset && (z.exp == 0 || srv < z.exp) {
		to = z.zset
	}
	out := make([]qEntry, len(e.list))
	for i, entry := range e.list {
		out[i] = qEntry{entry: entry, to: -1}
		if v, ok := to[entry]; ok {
			out[i].to = int64(v)
		}
	}
	return out
}

// qEntry is one entry of the fair queue and its slot timeout.
type qEntry struct {
	entry string
	to    int64
}

// lockNow returns the server's unexpired lock field at fake time now.
func (w *world) lockNow(now time.Time) string {
	f, _ := w.lockField(now)
	return f
}

// lockFault is called by dataLoss and failover.
func (w *world) lockFault(now time.Time, reason string) {
	if w.lk != nil {
		w.lk.fault(now, reason)
	}
}

// ownerOf returns a field's owner ("TERM OWNER").
func ownerOf(field string) string {
	_, o, _ := strings.Cut(field, " ")
	return o
}
