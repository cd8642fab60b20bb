package sim

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"
)

// The connection model of the lock schedules (Options.LockConns): every
// lock request travels on one connection of its process's pool for its
// server (the replicated server, or one Redlock master), as go-redis
// sends it. A connection is a FIFO both ways: a request arrives after the
// ones written before it on the same connection, and in any order against
// the other connections. A request written before its caller gave up
// still arrives (the bytes are on the wire); the client then drops the
// connection (go-redis removes a connection after a timeout), and later
// calls take an idle one or dial a new one. Each connection has a fate of
// its own, keyed by (seed, process, server, connection, its request
// counter): a slow path for its whole life, stalls (every packet waits
// until the stall ends: a retransmission timeout), death (a reset the
// client hears, or a black hole it does not) that loses what was not yet
// delivered. A process also meets network blips: every packet of its
// connections in flight inside the blip waits until the blip ends plus
// that connection's own recovery time, so connections come back one by
// one and a connection dialled after the blip is fast. A failover or
// restart drops every connection of the replicated server.

var (
	errConnReset   = errors.New("sim: read: connection reset by peer")
	errConnRefused = errors.New("sim: dial: connection refused")
)

// Decision streams of the connection model.
const (
	opLConn      op = 96 + iota // one connection's fate, and each request on it
	opLBlip                     // a process's network blips
	opLMode                     // a lock schedule's mode (fair, Redlock, inline calls)
	opLMaster                   // a Redlock master's faults
	opLConnReq                  // one request on one connection
	opLCallStart                // a Lock call's start offset (lockCall)
)

func init() {
	lockOpNames[opLConn] = "lock-conn"
	lockOpNames[opLBlip] = "lock-blip"
	lockOpNames[opLMode] = "lock-mode"
	lockOpNames[opLMaster] = "lock-master"
	lockOpNames[opLConnReq] = "lock-conn-req"
	lockOpNames[opLCallStart] = "lock-call-start"
}

// simConn is the client's end of one connection, under w.mu.
type simConn struct {
	id      uint64
	ep      int
	epoch   uint64        // the server's epoch when dialled: a failover drops it
	slowReq time.Duration // extra latency of its requests for its whole life
	slowRep time.Duration // extra latency of its replies for its whole life
	rto     time.Duration // its recovery after a blip
	dieAt   time.Time     // zero: it never dies
	reset   bool          // its death is a reset the client hears
	stallTo time.Time     // every packet waits until then
	reqLast time.Time     // the request path's last arrival (FIFO)
	repLast time.Time     // the reply path's last arrival (FIFO)
	n       uint64        // requests sent on it
}

// connPool is a process's idle connections to one server.
type connPool struct {
	idle []*simConn
	n    uint64 // connections dialled
}

// netResult is a request's answer as the caller hears it.
type netResult struct {
	res lockRes
	err error
}

// blips draws process proc's network blips (fault phase only).
func (lw *lockWorld) blips(proc int) []Window {
	w := lw.w
	r := keyed(w.p.Seed, uint64(opLBlip), uint64(proc))
	var out []Window
	for range r.intn(3) {
		if r.chance(0.5 * w.p.Intensity) {
			a := r.dur(0, w.p.FaultEnd)
			out = append(out, Window{a, a + r.logDur(time.Millisecond, w.p.Cfg.RenewDeadline)})
		}
	}
	return out
}

// epEpoch is server ep's epoch (the replicated server's; a Redlock master
// never restarts).
func (lw *lockWorld) epEpoch(ep int) uint64 {
	if ep == 0 {
		return lw.w.epoch
	}
	return 0
}

// epExecAt is when a request arriving at server ep at t executes (server
// stalls, a frozen master).
func (lw *lockWorld) epExecAt(ep int, t time.Time) time.Time {
	if ep == 0 {
		return lw.w.execAt(t)
	}
	return lw.masters[ep-1].execAt(lw.w, t)
}

// conn returns an idle live connection of p to server ep, or dials one;
// nil when the server refuses (restarting), under w.mu.
func (p *lockProc) conn(ep int, now time.Time) *simConn {
	lw, w := p.lw, p.w
	pool := p.pools[ep]
	for len(pool.idle) > 0 {
		c := pool.idle[len(pool.idle)-1]
		pool.idle = pool.idle[:len(pool.idle)-1]
		if c.epoch == lw.epEpoch(ep) && (c.dieAt.IsZero() || now.Before(c.dieAt)) {
			return c
		}
		w.event(p.idx, evNote, opLConn, c.id, int64(ep), 0, "idle connection found dead; dropped")
	}
	if ep == 0 && now.Before(lw.downUntil) {
		return nil
	}
	pool.n++
	c := &simConn{id: pool.n, ep: ep, epoch: lw.epEpoch(ep)}
	r := keyed(w.p.Seed, uint64(p.idx)+1, uint64(opLConn), uint64(ep)<<32|c.id)
	c.rto = r.logDur(time.Millisecond, max(w.p.Cfg.RenewDeadline, 2*time.Millisecond))
	desc := ""
	if w.faulty(now) {
		in := w.p.Intensity
		if r.chance(0.4 * in) {
			// A slow path, often one way only (a congested uplink, a
			// lossy direction).
			rd := w.p.Cfg.RenewDeadline
			switch x := r.float(); {
			case x < 0.6:
				c.slowReq = r.logDur(rd/4, 3*rd)
			case x < 0.8:
				c.slowRep = r.logDur(rd/8, 3*rd)
			default:
				s := r.logDur(rd/8, 3*rd/2)
				c.slowReq, c.slowRep = s, s
			}
			desc += fmt.Sprintf(" slow: requests %s, replies %s", c.slowReq, c.slowRep)
		}
		if r.chance(0.1 * in) {
			c.dieAt = now.Add(r.logDur(w.p.Cfg.TTL/50, 4*w.p.Cfg.TTL))
			c.reset = r.chance(0.5)
			desc += fmt.Sprintf(" dies at %s (reset %v)", fmtDur(c.dieAt.Sub(w.start)), c.reset)
		}
	}
	w.event(p.idx, evNote, opLConn, c.id, int64(ep), 0, "connection dialled"+desc)
	return c
}

// packet returns when a packet sent on c at t arrives: its latency, the
// connection's slowness that way and its stall, the process's blips, after the
// connection's previous packet that way (FIFO).
func (p *lockProc) packet(c *simConn, t time.Time, lat, slow time.Duration, last *time.Time) time.Time {
	at := t.Add(lat + slow)
	if at.Before(c.stallTo) {
		at = c.stallTo.Add(lat)
	}
	for _, b := range p.blips {
		from, to := p.w.start.Add(b.From), p.w.start.Add(b.To)
		if t.Before(to) && !at.Before(from) {
			at = maxTime(at, to.Add(c.rto+lat))
		}
	}
	if !at.After(*last) {
		at = last.Add(time.Microsecond)
	}
	*last = at
	return at
}

// sendAlone waits a few nanoseconds keyed by the request (process,
// server, op, what it asks — its arguments, owner IDs without their
// random part — and how many requests of that key came before) before
// it is sent. Goroutines of one process
// woken at one fake instant (an Unlock's reply and the waiter it wakes,
// a hold's end and its watchdog, Redlock's fan-out) run in any order;
// without this their requests would take the pool's connections, and
// their fates, in that order, and a replay would diverge.
func (p *lockProc) sendAlone(ep int, o op, owner, what string) {
	id := p.stripID(owner, what)
	id = strconv.Itoa(ep) + " " + strconv.FormatUint(uint64(o), 10) + " " + id
	p.w.mu.Lock()
	k := p.sends[id]
	p.sends[id]++
	p.w.mu.Unlock()
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	r := keyed(p.w.p.Seed, uint64(p.idx)+1, uint64(opLConnReq), h.Sum64(), k)
	time.Sleep(time.Duration(1 + r.intn(99999)))
}

// stripID returns what with the random part of p's owner IDs ("pN-" and
// 12 hex digits, learnt from owner) taken out: "pN-RANDOM" becomes "pN",
// as lockIDRandom would make it (a process's requests name only its own
// owners), without a regular expression on every request.
func (p *lockProc) stripID(owner, what string) string {
	p.w.mu.Lock()
	tok := p.idRandom
	if tok == "" {
		pre := "p" + strconv.Itoa(p.idx) + "-"
		if len(owner) >= len(pre)+12 && strings.HasPrefix(owner, pre) {
			tok = owner[:len(pre)+12]
			p.idRandom = tok
		}
	}
	p.w.mu.Unlock()
	if tok == "" {
		return what
	}
	return strings.ReplaceAll(what, tok, tok[:strings.IndexByte(tok, '-')])
}

// netCall sends one lock request to server ep on a connection of p's pool
// and waits for its reply as a go-redis client with p's options would;
// owner names the Lock call whose request it is ("" none), for the
// checker's in-flight accounting; what is the request's arguments
// (sendAlone); cleanup marks a release or abandon.
func (p *lockProc) netCall(ctx context.Context, ep int, o op, owner, what string, cleanup bool, exec func(now time.Time) lockRes) (lockRes, error) {
	w, lw := p.w, p.lw
	p.sendAlone(ep, o, owner, what)
	w.mu.Lock()
	// Numbered per server: Redlock sends to its masters from goroutines
	// of their own, in any order at one instant.
	key := o | op(ep)<<32
	p.n[key]++
	n := p.n[key]
	w.stats.Calls++
	if err := ctx.Err(); err != nil {
		w.event(p.idx, evReturn, o, n, 0, 0, "not sent: "+err.Error())
		w.mu.Unlock()
		return lockRes{}, err
	}
	now := time.Now()
	depart := p.wake(now)
	c := p.conn(ep, depart)
	if c == nil {
		w.event(p.idx, evReturn, o, n, int64(ep), 0, "error: "+errConnRefused.Error())
		w.mu.Unlock()
		w.sleepUntil(depart)
		return lockRes{}, errConnRefused
	}
	c.n++
	r := keyed(w.p.Seed, uint64(p.idx)+1, uint64(opLConnReq), uint64(ep)<<48|c.id<<24|c.n)
	lat := r.dur(20*time.Microsecond, time.Millisecond)
	rlat := r.dur(20*time.Microsecond, time.Millisecond)
	flags := ""
	if w.faulty(depart) && r.chance(0.04*w.p.Intensity) {
		// The connection stalls (a lost packet and its retransmission
		// timeout): this request, and everything behind it either way.
		c.stallTo = maxTime(c.stallTo, depart.Add(r.logDur(w.p.Cfg.RenewDeadline/8, 2*w.p.Cfg.TTL)))
		flags += " (connection stalls until " + fmtDur(c.stallTo.Sub(w.start)) + ")"
	}
	arrive := p.packet(c, depart, lat, c.slowReq, &c.reqLast)
	lost := !c.dieAt.IsZero() && !arrive.Before(c.dieAt)
	if depart.After(now) {
		flags += " (paused: sent at wake-up)"
	}
	if lost {
		flags += " (lost: the connection dies first)"
	}
	w.event(p.idx, evSend, o, n, int64(arrive.Sub(depart)), 0, fmt.Sprintf(" on connection %d/%d%s", ep, c.id, flags))
	tr := lw.sent(ctx, owner, o, cleanup, depart)
	done := make(chan netResult, 1)
	deliver := func(nr netResult) {
		select {
		case done <- nr:
		default:
		}
	}
	if c.reset && !c.dieAt.IsZero() {
		w.at(p.wake(maxTime(c.dieAt, depart)), func(time.Time) { deliver(netResult{err: errConnReset}) })
	}
	if lost {
		w.at(maxTime(c.dieAt, depart), func(time.Time) { lw.landed(tr, false) })
	} else {
		w.at(lw.epExecAt(ep, arrive), func(t time.Time) {
			if c.epoch != lw.epEpoch(ep) {
				w.event(p.idx, evReturn, o, n, 0, 0, "request lost: the connection dropped (failover or restart)")
				lw.landed(tr, false)
				deliver(netResult{err: errConnReset})
				return
			}
			res := exec(t)
			lw.landed(tr, true)
			w.event(p.idx, evExec, o, n, int64(ep), 0, res.String(o))
			if p.resetAfterRun(ep, c, t) {
				// The connection is reset as the server runs the request:
				// its reply is lost, the client hears a network error.
				w.event(p.idx, evFault, o, n, int64(ep), 0, "connection reset after the server ran the request: reply lost")
				w.at(p.wake(t.Add(rlat)), func(time.Time) { deliver(netResult{err: errConnReset}) })
				return
			}
			back := p.packet(c, t.Add(res.wait), rlat, c.slowRep, &c.repLast)
			if !c.dieAt.IsZero() && !back.Before(c.dieAt) {
				return // the reply dies with the connection
			}
			w.at(p.wake(back), func(time.Time) {
				if c.epoch != lw.epEpoch(ep) {
					w.event(p.idx, evReturn, o, n, 0, 0, "reply lost: the connection dropped (failover or restart)")
					deliver(netResult{err: errConnReset})
					return
				}
				deliver(netResult{res: res})
			})
		})
	}
	w.mu.Unlock()

	nr, err := awaitReply(ctx, w, p.plan, depart, now, done, "")
	if err == nil {
		err = nr.err
	}
	w.mu.Lock()
	lw.returned(tr)
	if err != nil {
		// go-redis drops a connection after a timeout or a network error;
		// what was written on it still arrives.
		w.event(p.idx, evReturn, o, n, int64(ep), 0, "error: "+err.Error())
	} else {
		w.event(p.idx, evReturn, o, n, int64(ep), 0, "ok")
		p.pools[ep].idle = append(p.pools[ep].idle, c)
	}
	w.mu.Unlock()
	return nr.res, err
}
