package sim

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/solo-run/solo/internal/lockseam"
	"github.com/solo-run/solo/leader/lock"
)

// The lock's scripts run on the simulated server as they ship
// (leader/lock/acquire.lua, renew.lua, release.lua, abandon.lua), with the
// KEYS and ARGV leader/lock's store sends (lockArgs). The lock takes no
// WAIT: every failover may lose its recent writes.

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
	rep     lockseam.AcquireReply // acquire
	n       int64                 // renew: 1 renewed; release: holds left or -1; abandon: 1 deleted
	epoch   uint64
	deleted string // the field a release or abandon deleted
	err     error  // the script failed (a violation of its own)
}

func (r lockRes) String(o op) string {
	switch o {
	case opLAcquire:
		switch r.rep.Code {
		case lockseam.CodeAcquired:
			return "acquired term " + strconv.FormatUint(r.rep.Term, 10)
		case lockseam.CodeAdopted:
			return "adopted term " + strconv.FormatUint(r.rep.Term, 10)
		case lockseam.CodeReentered:
			return "re-entered, count " + strconv.FormatInt(r.rep.Count, 10)
		case lockseam.CodeHeld:
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

// lockArgs returns the KEYS and ARGV of the lock script name as
// leader/lock's store sends them: the one place to change when the
// scripts' interface changes.
func lockArgs(name string, a ...string) (keys, argv []string) {
	switch name {
	case "acquire": // owner, TTL ms, re-entry field or "", adoptable owners...
		return []string{lockHash(), lockTerm(), lockGone()}, a
	case "abandon": // channel, tombstone lifetime ms, owners...
		return []string{lockHash(), lockGone()}, a
	default: // renew: field, TTL ms; release: field, "1"/"0", channel
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
	r, err := w.eval(now, scripts().get("leader/lock/"+name+".lua"), keys, argv, nil)
	res.err = err
	return r, res
}

// execLockAcquire runs acquire.lua.
func (w *world) execLockAcquire(now time.Time, owner string, adopt []string, reenter string, ttl time.Duration) lockRes {
	r, res := w.runLock(now, "acquire", append([]string{owner, strconv.FormatInt(pxMillis(ttl), 10), reenter}, adopt...)...)
	if res.err != nil {
		return res
	}
	arr, _ := r.([]any)
	if len(arr) == 0 {
		res.err = fmt.Errorf("acquire: unexpected reply %v", r)
		return res
	}
	code, _ := arr[0].(int64)
	res.rep.Code = int(code)
	switch res.rep.Code {
	case lockseam.CodeAcquired, lockseam.CodeAdopted:
		field := ""
		if len(arr) > 1 {
			if res.rep.Code == lockseam.CodeAdopted {
				// {2, "TERM OWNER"}: an earlier attempt's hold.
				field, _ = arr[1].(string)
				res.rep.Field = field
				t, _, _ := strings.Cut(field, " ")
				res.rep.Term, _ = strconv.ParseUint(t, 10, 64)
			} else {
				t, _ := arr[1].(int64)
				res.rep.Term = uint64(t)
				field = strconv.FormatUint(res.rep.Term, 10) + " " + owner
			}
		}
		if res.rep.Code == lockseam.CodeAcquired {
			w.lk.mintedTerm(now, res.rep.Term, owner)
		}
		if f := w.lockNow(now); f == field {
			w.renewedTrue(f, now)
		}
	case lockseam.CodeReentered:
		if len(arr) > 1 {
			res.rep.Count, _ = arr[1].(int64)
		}
		w.lk.serverCount(reenter, res.rep.Count)
	case lockseam.CodeHeld:
		if len(arr) > 2 {
			res.rep.Holder, _ = arr[1].(string)
			p, _ := arr[2].(int64)
			res.rep.PTTL = time.Duration(p) * time.Millisecond
		}
	}
	return res
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

// execLockRelease runs release.lua: L4 when it deletes the lock or leaves
// a count.
func (w *world) execLockRelease(now time.Time, field string, last bool, channel string) lockRes {
	before, _ := w.lockField(now)
	flag := "0"
	if last {
		flag = "1"
	}
	r, res := w.runLock(now, "release", field, flag, channel)
	res.n, _ = r.(int64)
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

// execLockAbandon runs abandon.lua: L4 when it deletes the lock.
func (w *world) execLockAbandon(now time.Time, owners []string, channel string, ttl time.Duration) lockRes {
	before, _ := w.lockField(now)
	r, res := w.runLock(now, "abandon", append([]string{channel, tombstoneMillis(ttl)}, owners...)...)
	res.n, _ = r.(int64)
	if after, _ := w.lockField(now); before != "" && after == "" {
		w.lk.abandoning(before)
		res.deleted = before
	}
	return res
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
