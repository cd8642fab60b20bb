package sim

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/solo-run/solo/internal/lockseam"
)

// The lock's keys on the simulated server, with the semantics of
// leader/lock/*.lua: a hash of one field "TERM OWNER" → hold count with a
// PEXPIRE, a term key (the next term is max(stored+1, server clock in µs)),
// and a release notice PUBLISHed when release or abandon deletes the hash.
// The lock takes no WAIT: every failover may lose its recent writes.

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

// Writes of the lock's keys in the replication stream.
const (
	wLockHash writeKind = 64 + iota // the hash (field, count) with its expiry: HSET/HINCRBY/PEXPIRE
	wLockDel                        // DEL of the hash
	wLockTerm                       // SET of the term key
	wLockGone                       // ZADD of a tombstone (val: the owner)
)

// lockData is the lock's keys on one node.
type lockData struct {
	field string // "TERM OWNER"; "" when the hash is absent
	count int64
	exp   int64           // server ns
	term  uint64          // the term key; 0 when absent
	gone  map[string]bool // tombstones: abandoned attempts' owners
}

func (d *lockData) apply(w repWrite) {
	switch w.kind {
	case wLockHash:
		d.field, d.count, d.exp = w.val, w.n, w.exp
	case wLockDel:
		d.field, d.count = "", 0
	case wLockTerm:
		d.term = uint64(w.n)
	case wLockGone:
		if d.gone == nil {
			d.gone = map[string]bool{}
		}
		d.gone[w.val] = true
	}
}

// expire drops the hash once its expiry passed in server time.
func (d *lockData) expire(srv int64) {
	if d.field != "" && srv >= d.exp {
		d.field, d.count = "", 0
	}
}

// lockRes is what the server computed for one lock request.
type lockRes struct {
	rep     lockseam.AcquireReply // acquire
	n       int64                 // renew: 1 renewed; release: holds left or -1; abandon: 1 deleted
	epoch   uint64
	deleted string // the field a release or abandon deleted
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

func ownerOf(field string) string {
	_, o, _ := strings.Cut(field, " ")
	return o
}

func (w *world) lockHashWrite(now time.Time) {
	d := &w.prim.lk
	w.replicate(now, repWrite{kind: wLockHash, val: d.field, n: d.count, exp: d.exp})
}

// execLockAcquire is acquire.lua.
func (w *world) execLockAcquire(now time.Time, owner string, adopt []string, reenter string, ttl time.Duration) lockRes {
	srv := w.srvNs(now)
	d := &w.prim.lk
	d.expire(srv)
	res := lockRes{epoch: w.epoch}
	ms := pxMillis(ttl)
	if reenter != "" {
		if d.field == reenter {
			d.count++
			w.lockHashWrite(now)
			res.rep = lockseam.AcquireReply{Code: lockseam.CodeReentered, Count: d.count}
			w.lk.serverCount(d.field, d.count)
			return res
		}
		res.rep.Code = lockseam.CodeGone
		return res
	}
	if d.gone[owner] {
		res.rep.Code = lockseam.CodeAbandoned
		return res
	}
	if d.field != "" {
		if slices.Contains(adopt, ownerOf(d.field)) {
			d.exp = srv + ms*int64(time.Millisecond)
			w.lockHashWrite(now)
			t, _ := strconv.ParseUint(d.field[:strings.IndexByte(d.field, ' ')], 10, 64)
			res.rep = lockseam.AcquireReply{Code: lockseam.CodeAdopted, Term: t, Field: d.field}
			return res
		}
		res.rep = lockseam.AcquireReply{Code: lockseam.CodeHeld, Holder: d.field,
			PTTL: time.Duration((d.exp-srv)/int64(time.Millisecond)) * time.Millisecond}
		return res
	}
	term := uint64(srv / int64(time.Microsecond))
	if d.term >= term {
		term = d.term + 1
	}
	d.term = term
	w.replicate(now, repWrite{kind: wLockTerm, n: int64(term)})
	d.field, d.count, d.exp = strconv.FormatUint(term, 10)+" "+owner, 1, srv+ms*int64(time.Millisecond)
	w.lockHashWrite(now)
	res.rep = lockseam.AcquireReply{Code: lockseam.CodeAcquired, Term: term}
	w.lk.mintedTerm(now, term, owner)
	return res
}

// execLockRenew is renew.lua.
func (w *world) execLockRenew(now time.Time, field string, ttl time.Duration) lockRes {
	srv := w.srvNs(now)
	d := &w.prim.lk
	d.expire(srv)
	res := lockRes{epoch: w.epoch}
	if d.field != field {
		return res
	}
	d.exp = srv + pxMillis(ttl)*int64(time.Millisecond)
	w.lockHashWrite(now)
	res.n = 1
	return res
}

// execLockRelease is release.lua.
func (w *world) execLockRelease(now time.Time, field string, last bool, channel string) lockRes {
	srv := w.srvNs(now)
	d := &w.prim.lk
	d.expire(srv)
	res := lockRes{epoch: w.epoch, n: -1}
	if d.field != field {
		return res
	}
	if !last {
		// Never deletes (release.lua): the caller's last hold does.
		d.count = max(d.count-1, 1)
		w.lockHashWrite(now)
		res.n = d.count
		w.lk.serverCount(d.field, d.count)
		return res
	}
	w.lk.deleting(field, last)
	d.field, d.count = "", 0
	w.replicate(now, repWrite{kind: wLockDel})
	w.lockPublish(now, channel, "released "+field)
	res.n, res.deleted = 0, field
	return res
}

// execLockAbandon is abandon.lua.
func (w *world) execLockAbandon(now time.Time, owners []string, channel string) lockRes {
	srv := w.srvNs(now)
	d := &w.prim.lk
	d.expire(srv)
	res := lockRes{epoch: w.epoch}
	for _, o := range owners {
		wr := repWrite{kind: wLockGone, val: o}
		d.apply(wr)
		w.replicate(now, wr)
	}
	if d.field == "" || !slices.Contains(owners, ownerOf(d.field)) {
		return res
	}
	field := d.field
	w.lk.abandoning(field)
	d.field, d.count = "", 0
	w.replicate(now, repWrite{kind: wLockDel})
	w.lockPublish(now, channel, "released "+field)
	res.n, res.deleted = 1, field
	return res
}

// lockNow returns the server's unexpired lock field at fake time now.
func (w *world) lockNow(now time.Time) string {
	d := &w.prim.lk
	if d.field != "" && w.srvNs(now) < d.exp {
		return d.field
	}
	return ""
}

// lockFault is called by dataLoss and failover.
func (w *world) lockFault(now time.Time, reason string) {
	if w.lk != nil {
		w.lk.fault(now, reason)
	}
}
