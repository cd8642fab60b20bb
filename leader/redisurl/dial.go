package redisurl

import (
	"context"
	"crypto/tls"
	"net"
	"sync/atomic"
	"time"
)

// tlsDialer returns the dialer of a TLS deployment: it opens the TCP
// connection and leaves the TLS handshake to the connection's first read or
// write, which go-redis makes as it logs in (HELLO, AUTH), under the deadline
// of the call that asked for the connection.
//
// go-redis's own dialer handshakes inside the dial, and a pool dial outlives
// the call that started it: when the call gives up first (a frozen server
// completes the handshake only once it runs again), the pool parks the
// connection idle, never logged in. Each such connection shows on the server
// as an unauthenticated client (user=default cmd=NULL in CLIENT LIST) for as
// long as the process runs. Handshaking under the caller's deadline instead,
// a connection whose TCP connect completed in time is either logged in by
// its caller or closed (a connect that itself outlasts its caller can still
// be parked before its handshake).
//
// Each connection verifies its server against cfg, with the host dialed as
// the server name unless cfg names one (as tls.Dial does). timeout bounds
// the TCP connect, and a handshake no deadline bounds.
func tlsDialer(cfg *tls.Config, timeout time.Duration) func(context.Context, string, string) (net.Conn, error) {
	if timeout <= 0 {
		timeout = 5 * time.Second // go-redis's default dial_timeout
	}
	d := &net.Dialer{Timeout: timeout, KeepAliveConfig: net.KeepAliveConfig{
		Enable: true, Idle: 30 * time.Second, Interval: 5 * time.Second, Count: 3, // go-redis's
	}}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c := cfg
		if c.ServerName == "" {
			c = cfg.Clone()
			if host, _, err := net.SplitHostPort(addr); err == nil {
				c.ServerName = host
			} else {
				c.ServerName = addr
			}
		}
		return &handshakeOnUse{Conn: tls.Client(raw, c), timeout: timeout}, nil
	}
}

// handshakeOnUse is a TLS connection that handshakes at its first read or
// write, bounded by the write deadline go-redis set for it (or, with none,
// by timeout), so that a handshake never outlasts the call it serves.
type handshakeOnUse struct {
	*tls.Conn
	timeout  time.Duration
	deadline atomic.Int64 // the last write deadline, Unix ns; 0: none
	done     atomic.Bool  // the handshake succeeded
}

// handshake runs the TLS handshake unless it has succeeded already.
func (c *handshakeOnUse) handshake() error {
	if c.done.Load() {
		return nil
	}
	deadline := time.Now().Add(c.timeout)
	if ns := c.deadline.Load(); ns != 0 {
		deadline = time.Unix(0, ns)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if err := c.HandshakeContext(ctx); err != nil {
		return err
	}
	c.done.Store(true)
	return nil
}

// Write implements net.Conn: the handshake first.
func (c *handshakeOnUse) Write(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// Read implements net.Conn: the handshake first.
func (c *handshakeOnUse) Read(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

// SetDeadline implements net.Conn, noting the deadline for the handshake.
func (c *handshakeOnUse) SetDeadline(t time.Time) error {
	c.noteDeadline(t)
	return c.Conn.SetDeadline(t)
}

// SetWriteDeadline implements net.Conn, noting the deadline for the
// handshake.
func (c *handshakeOnUse) SetWriteDeadline(t time.Time) error {
	c.noteDeadline(t)
	return c.Conn.SetWriteDeadline(t)
}

func (c *handshakeOnUse) noteDeadline(t time.Time) {
	if t.IsZero() {
		c.deadline.Store(0)
		return
	}
	c.deadline.Store(t.UnixNano())
}
