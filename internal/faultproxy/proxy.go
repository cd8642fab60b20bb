// Package faultproxy is a TCP proxy on loopback that injects network faults
// between one client and its server: blackholed requests or replies, added
// latency, reset connections and refused new ones.
//
// Tests point a single candidate's Redis client at Proxy.Addr instead of the
// server, so that the fault hits that candidate's link only while everyone
// else keeps talking to Redis directly.
package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// dialTimeout bounds each connection attempt to the target.
	dialTimeout = 5 * time.Second
	// bufSize is the largest chunk a pump reads and forwards at once.
	bufSize = 32 << 10
	// acceptBackoff is the pause after an accept error other than close,
	// such as running out of file descriptors.
	acceptBackoff = 10 * time.Millisecond
)

// direction is the way bytes flow through a link.
type direction int

const (
	toServer direction = iota // requests: client to target
	toClient                  // replies: target to client
)

// Proxy forwards every connection accepted on a loopback port to a target
// address and injects faults into that traffic. Faults are safe to change
// concurrently and take effect at once, on existing and new connections.
//
// A Proxy owns all its goroutines: one accept loop, and per connection a
// dialer and then one pump per direction. Close stops and waits for all of
// them.
type Proxy struct {
	target string
	ln     net.Listener
	// ctx is cancelled by Close; it aborts dials and waits in progress.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	closeOnce sync.Once
	closeErr  error

	blackholeReq atomic.Bool
	blackholeRep atomic.Bool
	refuse       atomic.Bool
	latency      atomic.Int64 // time.Duration

	mu     sync.Mutex
	closed bool
	links  map[*link]struct{}

	accepted     atomic.Int64
	refused      atomic.Int64
	dialFailures atomic.Int64
	reqBytes     atomic.Int64
	repBytes     atomic.Int64
	reqDropped   atomic.Int64
	repDropped   atomic.Int64
}

// Stats are counters since New. Accepted counts every connection, Refused the
// part of it closed at once because of Refuse.
type Stats struct {
	// Accepted is the number of client connections accepted.
	Accepted int64
	// Refused is the number of accepted connections reset at once by Refuse.
	Refused int64
	// DialFailures is the number of accepted connections dropped because
	// the target could not be reached.
	DialFailures int64
	// Active is the number of connections being forwarded now.
	Active int
	// RequestBytes is the number of bytes forwarded from clients to the
	// target.
	RequestBytes int64
	// ReplyBytes is the number of bytes forwarded from the target to
	// clients.
	ReplyBytes int64
	// DroppedRequestBytes is the number of client bytes read and discarded
	// by BlackholeRequests.
	DroppedRequestBytes int64
	// DroppedReplyBytes is the number of target bytes read and discarded by
	// BlackholeReplies.
	DroppedReplyBytes int64
}

// link is one proxied connection: the accepted client side and the dialled
// server side. done closes when the link is torn down.
type link struct {
	client net.Conn
	server net.Conn
	done   chan struct{}
	once   sync.Once
}

// New listens on 127.0.0.1 at a free port and forwards every accepted
// connection to target (host:port), dialling it once per connection. The
// caller must Close the Proxy.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for proxy to %s: %w", target, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		target: target,
		ln:     ln,
		ctx:    ctx,
		cancel: cancel,
		links:  make(map[*link]struct{}),
	}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr returns the address clients connect to, "127.0.0.1:port".
func (p *Proxy) Addr() string {
	return p.ln.Addr().String()
}

// Close stops accepting, closes every connection, and blocks until all of the
// proxy's goroutines have returned. Calling it again returns the first
// result.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		links := p.snapshotLocked()
		p.mu.Unlock()

		p.cancel()
		if err := p.ln.Close(); err != nil {
			p.closeErr = fmt.Errorf("close proxy to %s: %w", p.target, err)
		}
		for _, l := range links {
			p.teardown(l, false)
		}
		p.wg.Wait()
	})
	return p.closeErr
}

// BlackholeRequests turns dropping of client-to-target bytes on or off. The
// bytes are still read, so senders never block, and the connections stay
// open.
func (p *Proxy) BlackholeRequests(on bool) {
	p.blackholeReq.Store(on)
}

// BlackholeReplies turns dropping of target-to-client bytes on or off. The
// bytes are still read, so the target never blocks, and the connections stay
// open.
func (p *Proxy) BlackholeReplies(on bool) {
	p.blackholeRep.Store(on)
}

// Blackhole turns dropping of bytes in both directions on or off.
func (p *Proxy) Blackhole(on bool) {
	p.BlackholeRequests(on)
	p.BlackholeReplies(on)
}

// SetLatency delays every forwarded chunk by d, in each direction, keeping
// the order within a direction. A round trip therefore takes at least 2×d
// more. Zero or less turns latency off.
func (p *Proxy) SetLatency(d time.Duration) {
	p.latency.Store(int64(max(d, 0)))
}

// ResetAll closes every current connection with a TCP reset (SO_LINGER 0)
// towards both the client and the target. New connections are accepted as
// usual unless Refuse is on.
func (p *Proxy) ResetAll() {
	p.mu.Lock()
	links := p.snapshotLocked()
	p.mu.Unlock()
	for _, l := range links {
		p.teardown(l, true)
	}
}

// Refuse turns refusing of new connections on or off: a refused connection
// is reset right after accept, before the target is dialled. Together with
// ResetAll this cuts the link completely.
func (p *Proxy) Refuse(on bool) {
	p.refuse.Store(on)
}

// Heal turns all faults off. Connections reset or refused earlier stay
// closed.
func (p *Proxy) Heal() {
	p.Blackhole(false)
	p.SetLatency(0)
	p.Refuse(false)
}

// Stats returns the proxy's counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	active := len(p.links)
	p.mu.Unlock()
	return Stats{
		Accepted:            p.accepted.Load(),
		Refused:             p.refused.Load(),
		DialFailures:        p.dialFailures.Load(),
		Active:              active,
		RequestBytes:        p.reqBytes.Load(),
		ReplyBytes:          p.repBytes.Load(),
		DroppedRequestBytes: p.reqDropped.Load(),
		DroppedReplyBytes:   p.repDropped.Load(),
	}
}

// acceptLoop accepts connections until the listener is closed and hands each
// to its own connect goroutine.
func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || !p.sleep(acceptBackoff, nil) {
				return
			}
			continue
		}
		p.accepted.Add(1)
		if p.refuse.Load() {
			p.refused.Add(1)
			reset(c)
			continue
		}
		// A slow dial must not hold up other accepts. The loop's own count
		// keeps the group above zero, so Add cannot race with Wait.
		p.wg.Add(1)
		go p.connect(c)
	}
}

// connect dials the target for client and starts the two pumps.
func (p *Proxy) connect(client net.Conn) {
	defer p.wg.Done()
	d := net.Dialer{Timeout: dialTimeout}
	server, err := d.DialContext(p.ctx, "tcp", p.target)
	if err != nil {
		p.dialFailures.Add(1)
		reset(client)
		return
	}
	l := &link{client: client, server: server, done: make(chan struct{})}

	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = client.Close()
		_ = server.Close()
		return
	}
	p.links[l] = struct{}{}
	p.wg.Add(2)
	p.mu.Unlock()

	go p.pump(l, toServer)
	go p.pump(l, toClient)
}

// pump copies one direction of l until either side fails or the link is torn
// down, applying the faults to every chunk. It tears the whole link down when
// it stops, so the other direction stops too.
func (p *Proxy) pump(l *link, dir direction) {
	defer p.wg.Done()
	src, dst := l.client, l.server
	blackhole, forwarded, dropped := &p.blackholeReq, &p.reqBytes, &p.reqDropped
	if dir == toClient {
		src, dst = l.server, l.client
		blackhole, forwarded, dropped = &p.blackholeRep, &p.repBytes, &p.repDropped
	}
	defer p.teardown(l, false)

	buf := make([]byte, bufSize)
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			// Sleeping here, before the next read, keeps the order of
			// chunks; the sender is throttled only by the socket buffers.
			if d := time.Duration(p.latency.Load()); d > 0 && !p.sleep(d, l.done) {
				return
			}
			// Checked after the delay, so that a fault switched on
			// meanwhile applies to this chunk too.
			if blackhole.Load() {
				dropped.Add(int64(n))
			} else {
				if _, err := dst.Write(buf[:n]); err != nil {
					return
				}
				forwarded.Add(int64(n))
			}
		}
		if rerr != nil {
			// EOF included: redis clients do not half-close, so the link
			// is simply closed both ways.
			return
		}
	}
}

// teardown closes both sides of l once, with a reset when rst is set, and
// forgets it.
func (p *Proxy) teardown(l *link, rst bool) {
	l.once.Do(func() {
		if rst {
			reset(l.client)
			reset(l.server)
		} else {
			_ = l.client.Close()
			_ = l.server.Close()
		}
		close(l.done)
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	})
}

// snapshotLocked returns the current links. The caller holds p.mu.
func (p *Proxy) snapshotLocked() []*link {
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	return links
}

// sleep waits for d and reports true, or reports false as soon as the proxy
// is closed or done (if not nil) is closed.
func (p *Proxy) sleep(d time.Duration, done <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.ctx.Done():
		return false
	case <-done:
		return false
	}
}

// reset closes c with SO_LINGER 0, so the peer gets a RST instead of a FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
