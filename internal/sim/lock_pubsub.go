package sim

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The lock's waiters subscribe through a real go-redis client (the
// lock.Client's one PubSub connection), so the simulated server speaks
// just enough RESP2 over net.Pipe for it: SUBSCRIBE, UNSUBSCRIBE and PING
// (anything else, HELLO included, is an unknown command). Subscriptions
// may be slow, hang or have their connection dropped; notices may be late
// or lost; a failover or restart drops every connection and refuses dials
// for a while; a paused process hears confirmations and notices at
// wake-up. Not modelled: a server slow to answer a reconnect's HELLO (see
// command).

// psConn is the server's end of one pub/sub connection.
type psConn struct {
	w       *world
	proc    *lockProc
	id      uint64
	conn    net.Conn
	subs    map[string]bool // under w.mu: subscribed on the server
	q       [][]byte        // under w.mu: frames to write, in order
	kick    chan struct{}
	done    chan struct{} // closed when the connection ends
	notices uint64        // under w.mu
	subN    uint64        // under w.mu
	closed  bool          // under w.mu
	ep      int           // the server: 0, or 1 + a Redlock master's index
	// silent: from then on the connection is half-open (the connection
	// model): nothing it sends or is sent arrives, until the server ends
	// it at its close time and the client reconnects.
	silent time.Time
}

// dial is the go-redis Dialer of a lock process: a net.Pipe to the
// simulated server, refused while the server is restarting. It never
// waits: go-redis dials under a sync.Mutex, and a goroutine blocked on a
// mutex is not durably blocked, so waiting for fake time here would hang
// the bubble.
func (p *lockProc) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	return p.dialEp(0)(ctx, network, addr)
}

// dialEp is dial for server ep (0, or 1 + a Redlock master's index).
func (p *lockProc) dialEp(ep int) func(context.Context, string, string) (net.Conn, error) {
	return func(context.Context, string, string) (net.Conn, error) { return p.dialPubSub(ep) }
}

func (p *lockProc) dialPubSub(ep int) (net.Conn, error) {
	w := p.w
	w.mu.Lock()
	down := ep == 0 && time.Now().Before(w.lk.downUntil)
	w.mu.Unlock()
	if down {
		return nil, errRefused
	}
	cli, srv := net.Pipe()
	w.mu.Lock()
	if w.lk.tornDown {
		w.mu.Unlock()
		_ = cli.Close()
		_ = srv.Close()
		return nil, errClosed
	}
	// Numbered per process and server: a connection's fates are keyed by
	// (process, number), never by the order in which processes (or a
	// process's Redlock clients) dialled at one instant.
	p.psN[ep]++
	c := &psConn{w: w, proc: p, id: uint64(ep)<<16 | p.psN[ep], conn: srv, subs: map[string]bool{}, kick: make(chan struct{}, 1), done: make(chan struct{}), ep: ep}
	w.lk.conns[c] = struct{}{}
	w.event(p.idx, evNote, opLSub, c.id, int64(ep), 0, "pub/sub connection opened")
	w.lk.silentFate(c)
	w.mu.Unlock()
	w.lk.wg.Add(2)
	go c.read()
	go c.write()
	return cli, nil
}

// sortConns sorts pub/sub connections by process and number.
func sortConns(conns []*psConn) {
	sort.Slice(conns, func(i, j int) bool {
		if a, b := conns[i].proc.idx, conns[j].proc.idx; a != b {
			return a < b
		}
		return conns[i].id < conns[j].id // ep, then number
	})
}

// read serves the client's commands; it ends the connection at EOF.
func (c *psConn) read() {
	defer c.w.lk.wg.Done()
	defer c.close()
	br := bufio.NewReader(c.conn)
	for {
		args, err := readCommand(br)
		if err != nil {
			return
		}
		c.command(args)
	}
}

func (c *psConn) command(args []string) {
	w := c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if c.closed {
		return
	}
	now := time.Now()
	if c.isSilent(now) {
		return // half-open: the command never arrives
	}
	switch strings.ToUpper(args[0]) {
	case "SUBSCRIBE":
		for _, ch := range args[1:] {
			c.subN++
			r := keyed(w.p.Seed, uint64(c.proc.idx)+1, uint64(opLSub), c.id<<20|c.subN)
			d := r.dur(20*time.Microsecond, time.Millisecond)
			desc := ""
			if w.faulty(now) {
				in := w.p.Intensity
				switch x := r.float(); {
				case x < 0.03*in:
					w.event(c.proc.idx, evFault, opLSub, c.id, 0, 0, "SUBSCRIBE "+ch+": connection dropped")
					c.closeLocked()
					return
				case x < 0.06*in:
					w.event(c.proc.idx, evFault, opLSub, c.id, 0, 0, "SUBSCRIBE "+ch+": never confirmed")
					continue
				case x < 0.2*in:
					d = r.logDur(w.p.Cfg.RenewDeadline/4, 2*w.p.Cfg.TTL)
					desc = " (slow)"
				}
			}
			w.event(c.proc.idx, evNote, opLSub, c.id, 0, 0, "SUBSCRIBE "+ch+" confirmed in "+d.String()+desc)
			w.at(c.proc.wake(now.Add(d)), func(time.Time) {
				if c.closed {
					return
				}
				c.subs[ch] = true
				c.proc.resubscribed = time.Now()
				c.push(respArray("subscribe", ch) + ":" + strconv.Itoa(len(c.subs)) + "\r\n")
			})
		}
	// Other replies come at once, never after fake time passes: go-redis
	// reads the HELLO reply of a reconnect under its PubSub mutex, and
	// Close waits for that mutex; a goroutine blocked on a sync.Mutex is
	// not durably blocked, so the bubble's clock would stop.
	case "UNSUBSCRIBE":
		for _, ch := range args[1:] {
			delete(c.subs, ch)
			c.push(respArray("unsubscribe", ch) + ":" + strconv.Itoa(len(c.subs)) + "\r\n")
		}
	case "PING":
		c.push("*2\r\n$4\r\npong\r\n$0\r\n\r\n")
	default:
		c.push("-ERR unknown command '" + args[0] + "'\r\n")
	}
}

// respArray returns the header and bulk strings of an array of
// len(parts)+1 elements (the caller appends the last).
func respArray(parts ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(parts)+1)
	for _, p := range parts {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(p), p)
	}
	return b.String()
}

func (c *psConn) push(frame string) {
	if c.isSilent(time.Now()) {
		return // half-open: nothing arrives
	}
	c.q = append(c.q, []byte(frame))
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// write writes the queued frames in order.
func (c *psConn) write() {
	defer c.w.lk.wg.Done()
	for {
		select {
		case <-c.kick:
		case <-c.done:
			return
		}
		for {
			c.w.mu.Lock()
			if len(c.q) == 0 || c.closed {
				c.w.mu.Unlock()
				break
			}
			f := c.q[0]
			c.q = c.q[1:]
			c.w.mu.Unlock()
			if _, err := c.conn.Write(f); err != nil {
				return
			}
		}
	}
}

func (c *psConn) close() {
	c.w.mu.Lock()
	c.closeLocked()
	c.w.mu.Unlock()
}

// closeLocked ends the connection, under w.mu.
func (c *psConn) closeLocked() {
	if c.closed {
		return
	}
	c.closed = true
	delete(c.w.lk.conns, c)
	_ = c.conn.Close() // net.Pipe: never blocks
	close(c.done)
}

// lockPublish sends a release notice to every connection subscribed to
// channel, each delayed or lost by the network, under w.mu.
func (w *world) lockPublish(now time.Time, channel, msg string) {
	w.lockPublishEp(now, 0, channel, msg)
}

// lockPublishEp is lockPublish on server ep (0, or 1 + a Redlock
// master's index).
func (w *world) lockPublishEp(now time.Time, ep int, channel, msg string) {
	if w.lk == nil {
		return
	}
	conns := make([]*psConn, 0, len(w.lk.conns))
	for c := range w.lk.conns {
		if c.subs[channel] && c.ep == ep {
			conns = append(conns, c)
		}
	}
	sortConns(conns)
	for _, c := range conns {
		c.notices++
		r := keyed(w.p.Seed, uint64(c.proc.idx)+1, uint64(opLNotice), c.id<<32|c.notices)
		d := r.dur(20*time.Microsecond, time.Millisecond)
		if w.faulty(now) {
			if r.chance(0.05 * w.p.Intensity) {
				w.event(c.proc.idx, evFault, opLNotice, c.notices, 0, 0, "notice lost: "+msg)
				continue
			}
			if r.chance(0.05 * w.p.Intensity) {
				d = r.logDur(time.Millisecond, w.p.Cfg.TTL)
			}
		}
		c.pushNotice(now.Add(d), respArray("message", channel)+"$"+strconv.Itoa(len(msg))+"\r\n"+msg+"\r\n", !strings.HasPrefix(msg, "granted "))
	}
}

// dropConns closes every pub/sub connection (a failover or restart), and
// refuses dials for a while, under w.mu.
func (w *world) dropConns(now time.Time) {
	conns := make([]*psConn, 0, len(w.lk.conns))
	for c := range w.lk.conns {
		if c.ep == 0 {
			conns = append(conns, c)
		}
	}
	sortConns(conns)
	for _, c := range conns {
		c.closeLocked()
	}
	r := keyed(w.p.Seed, uint64(opLSub), 1<<40+w.epoch)
	w.lk.downUntil = now.Add(r.dur(time.Millisecond, w.p.Cfg.TTL))
}

var (
	errProtocol = errors.New("sim: bad RESP request")
	errRefused  = errors.New("sim: dial: connection refused (server restarting)")
)

// readCommand reads one RESP array of bulk strings.
func readCommand(br *bufio.Reader) ([]string, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 4 || line[0] != '*' {
		return nil, errProtocol
	}
	n, err := strconv.Atoi(strings.TrimRight(line[1:], "\r\n"))
	if err != nil || n <= 0 {
		return nil, errProtocol
	}
	args := make([]string, 0, n)
	for range n {
		h, err := br.ReadString('\n')
		if err != nil {
			return nil, err
		}
		if len(h) < 4 || h[0] != '$' {
			return nil, errProtocol
		}
		l, err := strconv.Atoi(strings.TrimRight(h[1:], "\r\n"))
		if err != nil || l < 0 {
			return nil, errProtocol
		}
		buf := make([]byte, l+2)
		if _, err := io.ReadFull(br, buf); err != nil {
			return nil, err
		}
		args = append(args, string(buf[:l]))
	}
	return args, nil
}

// silentFate draws whether pub/sub connection c goes half-open (the
// connection model, fault phase): from a time on nothing crosses it,
// until the server ends it a while later, under w.mu.
func (lw *lockWorld) silentFate(c *psConn) {
	w := lw.w
	now := time.Now()
	if !lw.connModel || !w.faulty(now) {
		return
	}
	r := keyed(w.p.Seed, uint64(c.proc.idx)+1, uint64(opLSub), 1<<50|c.id)
	if !r.chance(0.15 * w.p.Intensity) {
		return
	}
	ttl := w.p.Cfg.TTL
	c.silent = now.Add(r.logDur(ttl/10, 3*ttl))
	end := c.silent.Add(r.logDur(ttl/4, 3*ttl))
	w.event(c.proc.idx, evNote, opLSub, c.id, int64(c.ep), 0,
		fmt.Sprintf("pub/sub connection goes half-open at %s, closed by the server at %s", fmtDur(c.silent.Sub(w.start)), fmtDur(end.Sub(w.start))))
	w.at(end, func(time.Time) {
		if !c.closed {
			w.event(c.proc.idx, evFault, opLSub, c.id, int64(c.ep), 0, "half-open pub/sub connection closed by the server")
			c.closeLocked()
		}
	})
}

func (c *psConn) isSilent(now time.Time) bool {
	return !c.silent.IsZero() && !now.Before(c.silent)
}

// pushNotice queues a notice for fake time t (a paused process reads it
// at wake-up): the checker learns that a release notice (free; not a
// fair grant, which wakes only its grantee) reached the process (L7).
func (c *psConn) pushNotice(t time.Time, frame string, free bool) {
	c.w.at(c.proc.wake(t), func(now time.Time) {
		if !c.closed && !c.isSilent(now) {
			c.push(frame)
			if free {
				c.w.lk.freed(now, c.proc.idx, "a release notice")
			}
		}
	})
}
