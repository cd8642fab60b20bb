package worker

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// The limits of NewHTTPServer's server.
const (
	httpReadHeaderTimeout = 5 * time.Second
	httpReadTimeout       = 10 * time.Second
	httpWriteTimeout      = 15 * time.Second
	httpIdleTimeout       = 60 * time.Second
	// httpMaxConns bounds memory (about 20 KB a connection: 20 MiB at
	// the cap) and the rate of new connections, httpMaxConns/httpHeaderGrace
	// a second, a client needs to hold a probe up past httpHeaderGrace.
	httpMaxConns = 1024
	// httpHeaderGrace is well under the kubelet's probe timeout (2s in
	// deploy/kubernetes) and far above a cluster's round trip.
	httpHeaderGrace = time.Second
	// fullRetry is how often Accept, at the cap, frees the connections
	// that turned idle or overstayed their grace.
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
	// closes the idle keep-alive connections and those that have not
	// sent their first request's header within HeaderGrace of their
	// accept, at once and every 100ms until one closes; the next
	// connection waits in the kernel's listen backlog meanwhile. So a
	// probe waits at most about HeaderGrace, unless clients open more
	// than MaxConns connections every HeaderGrace. A request whose
	// header was read is never cut short. Zero or less: no cap.
	MaxConns int
	// HeaderGrace is how long, at the cap, a new connection may take to
	// send its first request's header. Zero or less: it may take
	// ReadHeaderTimeout.
	HeaderGrace time.Duration

	track sync.Once // Serve wraps ConnState once
}

// NewHTTPServer returns the server for h: 5s to read a request's header,
// 10s its whole, 15s to write the response, 60s for an idle keep-alive
// connection (longer than the usual scrape intervals, so Prometheus
// keeps its connection), at most 1024 connections open, a new one closed
// at the cap if it has not sent a request's header within 1s. A test may
// lower them through the fields before Serve.
func NewHTTPServer(h http.Handler) *HTTPServer {
	return &HTTPServer{
		Server: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: httpReadHeaderTimeout,
			ReadTimeout:       httpReadTimeout,
			WriteTimeout:      httpWriteTimeout,
			IdleTimeout:       httpIdleTimeout,
		},
		MaxConns:    httpMaxConns,
		HeaderGrace: httpHeaderGrace,
	}
}

// Serve serves connections accepted on ln, at most MaxConns open at once,
// until Shutdown or Close, as http.Server.Serve does (it closes ln). Its
// first call wraps the server's ConnState hook (calling the one set
// before) to learn which connections it may close at the cap.
func (s *HTTPServer) Serve(ln net.Listener) error {
	if s.MaxConns > 0 {
		s.track.Do(func() {
			prev := s.ConnState
			s.ConnState = func(c net.Conn, st http.ConnState) {
				if lc, ok := c.(*limitConn); ok {
					lc.state.Store(int32(st))
				}
				if prev != nil {
					prev(c, st)
				}
			}
		})
		ln = &limitListener{Listener: ln, slots: make(chan struct{}, s.MaxConns), grace: s.HeaderGrace,
			closed: make(chan struct{}), open: make(map[*limitConn]struct{})}
	}
	return s.Server.Serve(ln)
}

// limitListener accepts a connection only while fewer than cap(slots) of
// those it accepted are open; while none is free it calls free, at once
// and every fullRetry.
type limitListener struct {
	net.Listener
	slots     chan struct{} // one token per open connection
	grace     time.Duration // see HTTPServer.HeaderGrace
	closed    chan struct{} // closed by Close: Accept stops waiting for a slot
	closeOnce sync.Once

	mu   sync.Mutex
	open map[*limitConn]struct{} // the connections holding a slot
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	default:
		// At the cap: free what holds a slot without a request in
		// progress, now and as more turns idle or overstays its grace
		// while Accept waits.
		l.free()
		tick := time.NewTicker(fullRetry)
		defer tick.Stop()
	wait:
		for {
			select {
			case l.slots <- struct{}{}:
				break wait
			case <-tick.C:
				l.free()
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
	lc := &limitConn{Conn: c, l: l, accepted: time.Now()}
	lc.state.Store(int32(http.StateNew))
	l.mu.Lock()
	l.open[lc] = struct{}{}
	l.mu.Unlock()
	return lc, nil
}

// free closes every open connection that is idle between requests, or
// new (no whole request header read) for grace or longer. Each is closed
// whole: a new one has not been answered, so closing loses no response.
func (l *limitListener) free() {
	now := time.Now()
	var stale []*limitConn
	l.mu.Lock()
	for c := range l.open {
		switch http.ConnState(c.state.Load()) {
		case http.StateIdle:
			stale = append(stale, c)
		case http.StateNew:
			if l.grace > 0 && now.Sub(c.accepted) >= l.grace {
				stale = append(stale, c)
			}
		}
	}
	l.mu.Unlock()
	for _, c := range stale {
		_ = c.Close() // its server goroutine's read fails and it returns
	}
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.closed) })
	return err
}

// limitConn gives its listener's slot back when first closed. state is
// its http.ConnState, as the server's ConnState hook last reported it.
type limitConn struct {
	net.Conn
	l        *limitListener
	accepted time.Time
	state    atomic.Int32
	once     sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.open, c)
		c.l.mu.Unlock()
		<-c.l.slots
	})
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
