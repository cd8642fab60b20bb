package sim

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/hooks"
)

// Redlock schedules (Options.LockConns, a fraction of the lock schedules)
// run lock.NewRedlockClient over several simulated masters: independent
// servers (no replication, no failover), each with a keyspace of its own
// on which the shipped scripts run (acquire.lua, abandon.lua,
// redlock_*.lua, as the client sends them, by SHA or body),
// leader/lock's scripts, each frozen now and then (requests arriving inside a frozen window execute at
// its end). Each process reaches each master through a go-redis client of
// its own whose script calls (EVALSHA, EVAL; the lock's only commands)
// are served here over that process's connections to that master (see
// lock_conn.go), and whose pub/sub goes over net.Pipe to the simulated
// server as the single server's does. An undo or abandon thus lands on
// every master on its own connection, early or late.

// rlMaster is one Redlock master's keyspace, under w.mu.
type rlMaster struct {
	idx      int
	ks       keyspace
	frozen   []Window
	scripts  map[string]*script // by SHA, loaded by EVAL
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
	e := m.ks.m[lockHash()]
	if e == nil || e.kind != kHash || len(e.fields) == 0 || (e.exp != 0 && w.srvNs(now) >= e.exp) {
		return ""
	}
	return e.fields[0]
}

// newMasters draws n masters and their frozen windows.
func (lw *lockWorld) newMasters(n int) {
	w := lw.w
	for i := range n {
		r := keyed(w.p.Seed, uint64(opLMaster), uint64(i))
		m := &rlMaster{idx: i, ks: keyspace{m: map[string]*entry{}}, scripts: map[string]*script{}}
		for range r.intn(3) {
			if r.chance(0.5 * w.p.Intensity) {
				a := r.dur(0, w.p.FaultEnd)
				m.frozen = append(m.frozen, Window{a, min(a+r.logDur(w.p.Cfg.RenewDeadline/8, 2*w.p.Cfg.TTL), w.p.FaultEnd)})
			}
		}
		lw.masters = append(lw.masters, m)
	}
}

// scriptKinds are the lock's scripts a Redlock master runs, by name.
var scriptKinds = map[string]string{
	"leader/lock/acquire.lua":               "acquire",
	"leader/lock/abandon.lua":               "abandon",
	"leader/lock/redlock_undo.lua":          "undo",
	"leader/lock/redlock_renew.lua":         "renewFloor",
	"leader/lock/redlock_renew_owner.lua":   "renewOwner",
	"leader/lock/redlock_release.lua":       "releaseFloor",
	"leader/lock/redlock_release_owner.lua": "releaseOwner",
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
	keys := make([]string, 0, nk)
	for _, k := range a[3 : 3+nk] {
		keys = append(keys, fmt.Sprint(k))
	}
	w.mu.Lock()
	var sc *script
	switch name {
	case "evalsha":
		sc = m.scripts[body]
	case "eval":
		sc = scripts().bySHA[sha1Hex(body)]
	}
	w.mu.Unlock()
	kind := ""
	if sc != nil {
		kind = scriptKinds[sc.name]
	}
	if kind == "" {
		err := error(redis.ErrNoScript)
		if name == "eval" {
			err = fmt.Errorf("sim: unknown script %.40q", body)
		}
		cmd.SetErr(err)
		return err
	}
	load := name == "eval"
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
	case "undo": // lifetime, owner
		o, owner, cleanup = opLAbandon, arg(1), true
	case "abandon": // channel, lifetime, owners...
		o, owner, cleanup = opLAbandon, arg(2), true
	}
	sent := time.Now()
	var rec *callRec
	if kind == "acquire" && arg(2) == "" {
		w.mu.Lock()
		rec = lw.callOf(ctx, owner)
		lw.attemptSent(rec, sent)
		w.mu.Unlock()
	}
	res, err := c.p.netCall(ctx, c.ep, o, owner, kind+" "+strings.Join(argv, " "), cleanup, func(now time.Time) lockRes {
		if load {
			m.scripts[sc.sha] = sc
		}
		if rec != nil {
			rec.lastExec = now
		}
		return lw.execMaster(m, now, sc, kind, keys, argv)
	})
	if err == nil {
		err = res.err
	}
	w.mu.Lock()
	if rec != nil {
		lw.attemptReturned(rec, err == nil && res.rep.Code == hooks.CodeHeld, sent, time.Time{})
	}
	if err == nil {
		switch {
		case kind == "acquire" && (res.rep.Code == hooks.CodeAcquired || res.rep.Code == hooks.CodeAdopted):
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
	cmd.SetVal(res.raw)
	return nil
}

// execMaster runs shipped script sc (of kind) on master m's keyspace,
// under w.mu: its notices go to the master's subscribers; the reply is
// parsed for the checker, and a before/after read of the master's lock
// says what it deleted.
func (lw *lockWorld) execMaster(m *rlMaster, now time.Time, sc *script, kind string, keys, argv []string) lockRes {
	w := lw.w
	before := m.liveField(w, now)
	r, pubs, err := w.evalOn(now, &m.ks, sc, keys, argv)
	res := lockRes{raw: r, err: err}
	for _, p := range pubs {
		w.lockPublishEp(now, 1+m.idx, p.channel, p.msg)
	}
	if err != nil {
		return res
	}
	if after := m.liveField(w, now); before != "" && after != before {
		res.deleted = before
	}
	if kind != "acquire" {
		res.n, _ = r.(int64)
		return res
	}
	owner := ""
	if len(argv) > 0 {
		owner = argv[0]
	}
	res.rep, res.err = parseAcquireReply(r, owner)
	if res.rep.Code == hooks.CodeAcquired {
		if res.rep.Term <= m.lastMint {
			w.violate(InvLockTerms, fmt.Sprintf("master %d minted term %d after term %d", m.idx, res.rep.Term, m.lastMint))
		}
		m.lastMint = max(m.lastMint, res.rep.Term)
	}
	return res
}

// evalOn runs shipped script sc on keyspace ks (a Redlock master's: no
// replication, no election hooks) at fake time now; it returns the reply
// and the script's PUBLISHes.
func (w *world) evalOn(now time.Time, ks *keyspace, sc *script, keys, argv []string) (any, []pubMsg, error) {
	if w.vm == nil {
		w.vm = newLuaVM()
	}
	c := &cmdCtx{ks: ks, srv: w.srvNs(now)}
	r, err := w.vm.run(c, w.resolve(sc), keys, argv)
	if errors.Is(err, errScript) {
		w.violate(InvScript, fmt.Sprintf("%v (KEYS %q ARGV %q)", err, keys, argv))
		return nil, c.pub, redisError("ERR " + err.Error())
	}
	return r, c.pub, err
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
		c, r.term, where, n, strings.Join(got, ", ")), LabelLateUndo)
	lw.finding(LabelLateUndo)
}
