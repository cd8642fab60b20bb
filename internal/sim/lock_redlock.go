package sim

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/lockseam"
)

// Redlock schedules (Options.LockConns, a fraction of the lock schedules)
// run lock.NewRedlockClient over several simulated masters: independent
// servers (no replication, no failover) with the semantics of
// leader/lock's scripts (acquire.lua, abandon.lua, redlock_*.lua), each
// frozen now and then (requests arriving inside a frozen window execute at
// its end). Each process reaches each master through a go-redis client of
// its own whose script calls (EVALSHA, EVAL; the lock's only commands)
// are served here over that process's connections to that master (see
// lock_conn.go), and whose pub/sub goes over net.Pipe to the simulated
// server as the single server's does. An undo or abandon thus lands on
// every master on its own connection, early or late.

// rlMaster is one Redlock master's lock keys, under w.mu.
type rlMaster struct {
	idx      int
	d        lockData
	frozen   []Window
	scripts  map[string]string // SHA → script kind, loaded by EVAL
	lastMint uint64
}

func (m *rlMaster) execAt(w *world, t time.Time) time.Time {
	d := t.Sub(w.start)
	for _, f := range m.frozen {
		if f.contains(d) {
			return w.start.Add(f.To + (d-f.From)/1024)
		}
	}
	return t
}

// liveField is the master's unexpired lock field at now.
func (m *rlMaster) liveField(w *world, now time.Time) string {
	if m.d.field != "" && w.srvNs(now) < m.d.exp {
		return m.d.field
	}
	return ""
}

// newMasters draws n masters and their frozen windows.
func (lw *lockWorld) newMasters(n int) {
	w := lw.w
	for i := range n {
		r := keyed(w.p.Seed, uint64(opLMaster), uint64(i))
		m := &rlMaster{idx: i, scripts: map[string]string{}}
		for range r.intn(3) {
			if r.chance(0.5 * w.p.Intensity) {
				a := r.dur(0, w.p.FaultEnd)
				m.frozen = append(m.frozen, Window{a, min(a+r.logDur(w.p.Cfg.RenewDeadline/8, 2*w.p.Cfg.TTL), w.p.FaultEnd)})
			}
		}
		lw.masters = append(lw.masters, m)
	}
}

// Script kinds, by the first line of their source.
var scriptKinds = []struct{ prefix, kind string }{
	{"-- redlock renew by owner:", "renewOwner"},
	{"-- redlock renew:", "renewFloor"},
	{"-- redlock release by owner:", "releaseOwner"},
	{"-- redlock release:", "releaseFloor"},
	{"-- redlock undo:", "undo"},
	{"-- abandon:", "abandon"},
	{"-- acquire:", "acquire"},
}

func scriptKind(src string) string {
	for _, k := range scriptKinds {
		if strings.HasPrefix(src, k.prefix) {
			return k.kind
		}
	}
	return ""
}

// rlClient is a process's go-redis client for one master: its script
// calls go over the simulated connections to the master; everything else
// (pub/sub) is the real client's, dialled to the simulated server.
type rlClient struct {
	*redis.Client
	p  *lockProc
	ep int // 1 + the master's index
}

func (c *rlClient) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return c.eval(ctx, "evalsha", sha, keys, args)
}

func (c *rlClient) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	return c.eval(ctx, "eval", src, keys, args)
}

func (c *rlClient) eval(ctx context.Context, name, script string, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, script, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	cmd := redis.NewCmd(ctx, a...)
	_ = c.Process(ctx, cmd)
	return cmd
}

// Process serves EVALSHA and EVAL of the lock's scripts (the only
// commands the lock sends besides pub/sub).
func (c *rlClient) Process(ctx context.Context, cmder redis.Cmder) error {
	cmd, ok := cmder.(*redis.Cmd)
	a := cmder.Args()
	if !ok || len(a) < 3 {
		err := fmt.Errorf("sim: unexpected command %v", a)
		cmder.SetErr(err)
		return err
	}
	w, lw := c.p.w, c.p.lw
	m := lw.masters[c.ep-1]
	name := strings.ToLower(fmt.Sprint(a[0]))
	body := fmt.Sprint(a[1])
	nk, _ := strconv.Atoi(fmt.Sprint(a[2]))
	if len(a) < 3+nk {
		err := fmt.Errorf("sim: bad key count in %v", a)
		cmd.SetErr(err)
		return err
	}
	argv := make([]string, 0, len(a)-3-nk)
	for _, x := range a[3+nk:] {
		argv = append(argv, fmt.Sprint(x))
	}
	w.mu.Lock()
	kind := ""
	switch name {
	case "evalsha":
		kind = m.scripts[body]
	case "eval":
		kind = scriptKind(body)
	}
	w.mu.Unlock()
	if kind == "" {
		err := error(redis.ErrNoScript)
		if name == "eval" {
			err = fmt.Errorf("sim: unknown script %.40q", body)
		}
		cmd.SetErr(err)
		return err
	}
	sha := ""
	if name == "eval" {
		s := sha1.Sum([]byte(body))
		sha = hex.EncodeToString(s[:])
	}
	o, owner, cleanup := opLAcquire, "", false
	arg := func(i int) string {
		if i < len(argv) {
			return argv[i]
		}
		return ""
	}
	switch kind {
	case "acquire":
		owner = arg(0)
		if arg(2) != "" {
			owner = ownerOf(arg(2))
		}
	case "renewFloor":
		o, owner = opLRenew, ownerOf(arg(0))
	case "renewOwner":
		o, owner = opLRenew, arg(0)
	case "releaseFloor":
		o, owner, cleanup = opLRelease, ownerOf(arg(0)), true
	case "releaseOwner":
		o, owner, cleanup = opLRelease, arg(0), true
	case "undo", "abandon":
		o, owner, cleanup = opLAbandon, arg(0), true
	}
	sent := time.Now()
	var rec *callRec
	if kind == "acquire" && arg(2) == "" {
		w.mu.Lock()
		rec = lw.callOf(ctx, owner)
		lw.attemptSent(rec, sent)
		w.mu.Unlock()
	}
	res, err := c.p.netCall(ctx, c.ep, o, owner, cleanup, func(now time.Time) lockRes {
		if sha != "" {
			m.scripts[sha] = kind
		}
		if rec != nil {
			rec.lastExec = now
		}
		return lw.execMaster(m, now, kind, argv)
	})
	w.mu.Lock()
	if rec != nil {
		lw.attemptReturned(rec, err == nil && res.rep.Code == lockseam.CodeHeld)
	}
	if err == nil {
		switch {
		case kind == "acquire" && (res.rep.Code == lockseam.CodeAcquired || res.rep.Code == lockseam.CodeAdopted):
			lw.rlSent[owner] = maxTime(lw.rlSent[owner], sent)
		case o == opLRenew && res.n == 1:
			lw.rlRenew[owner] = maxTime(lw.rlRenew[owner], sent)
		}
	}
	w.mu.Unlock()
	if err != nil {
		cmd.SetErr(err)
		return err
	}
	if kind != "acquire" {
		cmd.SetVal(res.n)
		return nil
	}
	switch rp := res.rep; rp.Code {
	case lockseam.CodeAcquired, lockseam.CodeAdopted:
		cmd.SetVal([]any{int64(rp.Code), int64(rp.Term)})
	case lockseam.CodeReentered:
		cmd.SetVal([]any{int64(rp.Code), rp.Count})
	case lockseam.CodeHeld:
		cmd.SetVal([]any{int64(0), rp.Holder, rp.PTTL.Milliseconds()})
	default:
		cmd.SetVal([]any{int64(-1)})
	}
	return nil
}

// execMaster runs one script on master m, under w.mu.
func (lw *lockWorld) execMaster(m *rlMaster, now time.Time, kind string, argv []string) lockRes {
	w := lw.w
	srv := w.srvNs(now)
	d := &m.d
	d.expire(srv)
	res := lockRes{}
	arg := func(i int) string {
		if i < len(argv) {
			return argv[i]
		}
		return ""
	}
	ms := func(s string) int64 { v, _ := strconv.ParseInt(s, 10, 64); return v }
	raise := func(floor string) {
		if f, _ := strconv.ParseUint(floor, 10, 64); f > d.term {
			d.term = f
		}
	}
	publish := func(msg string) { w.lockPublishEp(now, 1+m.idx, lw.channel, msg) }
	switch kind {
	case "acquire":
		owner, ttl, reenter := arg(0), ms(arg(1)), arg(2)
		if reenter != "" {
			if d.field == reenter {
				d.count++
				res.rep = lockseam.AcquireReply{Code: lockseam.CodeReentered, Count: d.count}
			} else {
				res.rep.Code = lockseam.CodeGone
			}
			return res
		}
		if d.field != "" {
			if ownerOf(d.field) == owner {
				d.exp = srv + ttl*int64(time.Millisecond)
				t, _ := strconv.ParseUint(d.field[:strings.IndexByte(d.field, ' ')], 10, 64)
				res.rep = lockseam.AcquireReply{Code: lockseam.CodeAdopted, Term: t}
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
		d.field, d.count, d.exp = strconv.FormatUint(term, 10)+" "+owner, 1, srv+ttl*int64(time.Millisecond)
		if term <= m.lastMint {
			w.violate(InvLockTerms, fmt.Sprintf("master %d minted term %d after term %d", m.idx, term, m.lastMint))
		}
		m.lastMint = term
		res.rep = lockseam.AcquireReply{Code: lockseam.CodeAcquired, Term: term}
	case "renewFloor":
		if d.field == arg(0) {
			raise(arg(2))
			d.exp = srv + ms(arg(1))*int64(time.Millisecond)
			res.n = 1
		}
	case "renewOwner":
		if d.field != "" && ownerOf(d.field) == arg(0) {
			raise(arg(2))
			d.exp = srv + ms(arg(1))*int64(time.Millisecond)
			res.n = 1
		}
	case "releaseFloor":
		res.n = -1
		if d.field != arg(0) {
			return res
		}
		raise(arg(4))
		if arg(1) != "1" {
			d.count = max(d.count-1, 1)
			res.n = d.count
			return res
		}
		res.deleted = d.field
		d.field, d.count = "", 0
		publish(arg(3))
		res.n = 0
	case "releaseOwner":
		res.n = -1
		if d.field == "" || ownerOf(d.field) != arg(0) {
			return res
		}
		raise(arg(2))
		res.deleted = d.field
		publish("released " + d.field)
		d.field, d.count = "", 0
		res.n = 0
	case "undo", "abandon":
		if d.field == "" || ownerOf(d.field) != arg(0) {
			return res
		}
		res.deleted = d.field
		if kind == "abandon" {
			publish("released " + d.field)
		}
		d.field, d.count = "", 0
		res.n = 1
	}
	return res
}

// checkQuorum is L1's second half for a Redlock hold: a quorum of masters
// holds the hold's owner, under w.mu.
func (lw *lockWorld) checkQuorum(c int, r *leaseRec, where string) {
	if r.ctx.Err() != nil {
		return
	}
	lw.judged(InvLockExcl)
	now := time.Now()
	owner := ownerOf(r.field)
	n := 0
	var got []string
	for _, m := range lw.masters {
		f := m.liveField(lw.w, now)
		got = append(got, quoteVal(f))
		if f != "" && ownerOf(f) == owner {
			n++
		}
	}
	if n >= len(lw.masters)/2+1 {
		return
	}
	lw.w.violate(InvLockExcl, fmt.Sprintf("c%d's Redlock hold of term %d is live (%s) but only %d masters hold it: %s",
		c, r.term, where, n, strings.Join(got, ", ")), Finding2)
	lw.finding(Finding2)
}
