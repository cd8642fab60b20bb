package worker

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// The limits of NewHTTPServer's server.
const (
	httpReadHeaderTimeout = 5 * time.Second
	httpReadTimeout       = 10 * time.Second
	httpWriteTimeout      = 15 * time.Second
	httpIdleTimeout       = 60 * time.Second
	httpMaxConns          = 128
	// fullRetry is how often Serve, at the cap, frees the connections
	// that turned idle.
	fullRetry = 100 * time.Millisecond
)

// HTTPServer is the server of solo's endpoints (/livez, /readyz, /leader,
// /metrics) for `solo run`'s http.addr and workerfx.WithHTTP: an
// http.Server whose every connection is bounded in time and whose open
// connections are capped, so that no number of clients, idle or slow, can
// grow its memory without bound. Serve it with Serve (ListenAndServe of
// the embedded http.Server would skip the cap).
type HTTPServer struct {
	*http.Server
	// MaxConns is the most connections open at once. At the cap, Serve
	// first closes the idle keep-alive connections, then accepts no other
	// until one closes (the rest wait in the kernel's listen backlog), so
	// clients that idle cannot keep the kubelet's probes out. Zero or
	// less: no cap.
	MaxConns int
}

// NewHTTPServer returns the server for h: 5s to read a request's header,
// 10s its whole, 15s to write the response, 60s for an idle keep-alive
// connection (longer than the usual scrape intervals, so Prometheus
// keeps its connection), at most 128 connections open. A test may lower
// them through the fields before Serve.
func NewHTTPServer(h http.Handler) *HTTPServer {
	return &HTTPServer{
		Server: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: httpReadHeaderTimeout,
			ReadTimeout:       httpReadTimeout,
			WriteTimeout:      httpWriteTimeout,
			IdleTimeout:       httpIdleTimeout,
		},
		MaxConns: httpMaxConns,
	}
}

// Serve serves connections accepted on ln, at most MaxConns open at once,
// until Shutdown or Close, as http.Server.Serve does (it closes ln).
func (s *HTTPServer) Serve(ln net.Listener) error {
	if s.MaxConns > 0 {
		ln = &limitListener{Listener: ln, slots: make(chan struct{}, s.MaxConns), closed: make(chan struct{}),
			full: func() {
				// Closes the idle connections; keep-alive stays on.
				s.SetKeepAlivesEnabled(false)
				s.SetKeepAlivesEnabled(true)
			}}
	}
	return s.Server.Serve(ln)
}

// limitListener accepts a connection only while fewer than cap(slots) of
// those it accepted are open; while none is free it calls full, at once
// and every fullRetry.
type limitListener struct {
	net.Listener
	slots     chan struct{} // one token per open connection
	full      func()        // frees what it can: the idle connections
	closed    chan struct{} // closed by Close: Accept stops waiting for a slot
	closeOnce sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	default:
		// At the cap: free the idle connections, and those that turn idle
		// while Accept waits (a connection just accepted is not idle yet).
		l.full()
		tick := time.NewTicker(fullRetry)
		defer tick.Stop()
	wait:
		for {
			select {
			case l.slots <- struct{}{}:
				break wait
			case <-tick.C:
				l.full()
			case <-l.closed:
				return nil, net.ErrClosed
			}
		}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.closed) })
	return err
}

// limitConn gives its listener's slot back when first closed.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// CloseWrite half-closes a TCP connection, as http.Server does before
// closing one whose request it did not read whole.
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
