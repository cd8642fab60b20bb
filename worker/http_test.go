package worker_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/jsonshape"
	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
	"github.com/solo-run/solo/worker/workerprom"
)

// TestHandler: a leader's /livez and /readyz answer 200, /leader serves
// the election in the words of solo status --json, and /metrics (added by
// workerprom.Handler) its gauges.
func TestHandler(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	cfg := leader.Config{Name: strings.ReplaceAll(t.Name(), "/", "."), TTL: 2 * time.Second}
	cfg.Value = "10.0.0.7:8080"
	reg := prometheus.NewRegistry()
	m, _ := workerprom.New(reg)
	e, err := leader.New(client, cfg, leader.WithMetrics(m.Elector(cfg.Name)))
	if err != nil {
		t.Fatal(err)
	}
	w, _ := worker.New(e, worker.WithMetrics(m))
	started := make(chan struct{}, 1)
	_ = w.Pull("p", func(ctx context.Context) error { started <- struct{}{}; <-ctx.Done(); return nil })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-started

	hs := httptest.NewServer(workerprom.Handler(worker.Handler(w), reg))
	defer hs.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, p := range []string{"/livez", "/readyz"} {
		if code, _ := get(p); code != http.StatusOK {
			t.Fatalf("%s = %d", p, code)
		}
	}
	code, body := get("/leader")
	var info leaderBody
	if err := json.Unmarshal([]byte(body), &info); err != nil || code != http.StatusOK {
		t.Fatalf("/leader = %d %s (%v)", code, body, err)
	}
	if info.Self.Role != "leader" || info.Self.ID != e.ID() || info.Holder == nil || info.Holder.ID != e.ID() || info.Holder.Term != e.Term() ||
		info.Holder.LeaseTTL != cfg.TTL || info.Holder.TTLLeft <= 0 || info.Holder.RenewInterval != e.Config().RenewInterval.Truncate(time.Millisecond) ||
		info.Holder.Value != cfg.Value || info.Holder.LastRenew.IsZero() || info.Candidates == nil {
		t.Fatalf("/leader = %s", body)
	}
	// One vocabulary with solo status --json: the exact keys.
	var raw map[string]json.RawMessage
	_ = json.Unmarshal([]byte(body), &raw)
	var self map[string]json.RawMessage
	_ = json.Unmarshal(raw["self"], &self)
	if got, want := strings.Join(slices.Sorted(maps.Keys(raw)), ","), "candidates,election,holder,self"; got != want {
		t.Fatalf("/leader keys = %s, want %s", got, want)
	}
	if err := jsonshape.Holder(raw["holder"]); err != nil {
		t.Fatalf("/leader: %v:\n%s", err, body)
	}
	if err := jsonshape.Times([]byte(body)); err != nil {
		t.Fatalf("/leader: %v:\n%s", err, body)
	}
	if got, want := strings.Join(slices.Sorted(maps.Keys(self)), ","), "id,last_renew,role,since,term"; got != want {
		t.Fatalf("/leader self keys = %s, want %s", got, want)
	}
	if _, body := get("/metrics"); !strings.Contains(body, `solo_election_leader{election="`+cfg.Name+`"} 1`) {
		t.Fatalf("/metrics = %s", body)
	}
}

// get1 sends one keep-alive GET on c and reads its response; the error
// of either.
func get1(c net.Conn, r *bufio.Reader) error {
	if _, err := io.WriteString(c, "GET /livez HTTP/1.1\r\nHost: solo\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return err
}

// serveHTTP serves h on 127.0.0.1 with hs until the test ends.
func serveHTTP(t *testing.T, hs *worker.HTTPServer) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Close()
		_ = hs.Shutdown(ctx)
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve = %v", err)
		}
	})
	return ln.Addr().String()
}

// dialHTTP connects to addr until the test ends.
func dialHTTP(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func okHandler() http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(rw, "ok\n") })
}

// TestHTTPServer_CapsConnections: NewHTTPServer's server keeps at most
// MaxConns connections open: with that many waiting for their request
// (within HeaderGrace), the next waits, unserved, until one closes; idle
// keep-alive connections give their place up to it at once. Before, solo's server accepted every
// connection and kept each idle one for ever (only a ReadHeaderTimeout):
// about 12,000 of them took solo past its 256Mi limit.
func TestHTTPServer_CapsConnections(t *testing.T) {
	hs := worker.NewHTTPServer(okHandler())
	if hs.ReadHeaderTimeout <= 0 || hs.ReadTimeout <= 0 || hs.WriteTimeout <= 0 || hs.IdleTimeout <= 0 || hs.MaxConns <= 0 || hs.MaxConns > 4096 || hs.HeaderGrace <= 0 {
		t.Fatalf("limits: read header %s, read %s, write %s, idle %s, connections %d, header grace %s: want every one set",
			hs.ReadHeaderTimeout, hs.ReadTimeout, hs.WriteTimeout, hs.IdleTimeout, hs.MaxConns, hs.HeaderGrace)
	}
	hs.HeaderGrace = time.Minute // the slow connections below stay within it
	addr := serveHTTP(t, hs)
	dial := func() net.Conn { t.Helper(); return dialHTTP(t, addr) }

	// Connections that have not sent their request yet (slow clients)
	// hold their place: the next is not served.
	var slow []net.Conn
	for range hs.MaxConns {
		slow = append(slow, dial())
	}
	for _, c := range slow { // each sends part of its header, slowly
		if _, err := io.WriteString(c, "GET /livez HTTP/1.1\r\nHost: solo\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	extra := dial() // the kernel's backlog takes it
	r := bufio.NewReader(extra)
	_ = extra.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if err := get1(extra, r); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection %d of a cap of %d: %v, want it unserved while the others are open", hs.MaxConns+1, hs.MaxConns, err)
	}
	slow[0].Close()
	_ = extra.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(r, nil) // the request already sent
	if err != nil {
		t.Fatalf("once a connection closed, the waiting one: %v", err)
	}
	resp.Body.Close()

	// Idle keep-alive connections make room: the server closes them.
	for _, c := range slow[1:] {
		c.Close()
	}
	var idle []net.Conn
	for i := range hs.MaxConns - 1 { // with extra, the cap
		c := dial()
		if err := get1(c, bufio.NewReader(c)); err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
		idle = append(idle, c)
	}
	probe := dial()
	_ = probe.SetReadDeadline(time.Now().Add(10 * time.Second))
	if err := get1(probe, bufio.NewReader(probe)); err != nil {
		t.Fatalf("a probe with %d idle connections open: %v, want it served", hs.MaxConns, err)
	}
	_ = idle[0].SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := idle[0].Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("an idle connection at the cap: read %d, %v; want it closed (EOF)", n, err)
	}
}

// TestHTTPServer_ServesProbesPastSlowConnections: at the cap, connections
// that have not sent a whole request header HeaderGrace after their
// accept (silent, or a partial header) give their place up to a probe,
// which is answered long before ReadHeaderTimeout would free one. Before,
// the cap closed only idle keep-alive connections, which these are not:
// MaxConns silent clients kept every probe out for ReadHeaderTimeout.
func TestHTTPServer_ServesProbesPastSlowConnections(t *testing.T) {
	for name, sent := range map[string]string{
		"silent":         "",
		"partial header": "GET /livez HTTP/1.1\r\nHost: solo\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			hs := worker.NewHTTPServer(okHandler())
			hs.MaxConns, hs.HeaderGrace = 16, 50*time.Millisecond
			hs.ReadHeaderTimeout = time.Minute // only the cap frees them
			addr := serveHTTP(t, hs)
			var slow []net.Conn
			for range hs.MaxConns {
				c := dialHTTP(t, addr)
				if _, err := io.WriteString(c, sent); err != nil {
					t.Fatal(err)
				}
				slow = append(slow, c)
			}
			probe := dialHTTP(t, addr)
			_ = probe.SetReadDeadline(time.Now().Add(5 * time.Second)) // 100 graces
			if err := get1(probe, bufio.NewReader(probe)); err != nil {
				t.Fatalf("a probe with %d %s connections open: %v, want it served", hs.MaxConns, name, err)
			}
			_ = slow[0].SetReadDeadline(time.Now().Add(5 * time.Second))
			if n, err := slow[0].Read(make([]byte, 1)); err != io.EOF {
				t.Fatalf("the oldest %s connection at the cap: read %d, %v; want it closed (EOF)", name, n, err)
			}
		})
	}
}

// TestHTTPServer_ClosesIdleConnections: an idle keep-alive connection is
// closed after IdleTimeout, and one that sends nothing after
// ReadHeaderTimeout (here lowered to keep the test short).
func TestHTTPServer_ClosesIdleConnections(t *testing.T) {
	hs := worker.NewHTTPServer(okHandler())
	hs.IdleTimeout, hs.ReadHeaderTimeout = 100*time.Millisecond, 100*time.Millisecond
	addr := serveHTTP(t, hs)
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	r := bufio.NewReader(idle)
	if err := get1(idle, r); err != nil {
		t.Fatal(err)
	}
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	for name, c := range map[string]net.Conn{"idle keep-alive": idle, "silent": silent} {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		var rd io.Reader = c
		if c == idle {
			rd = r
		}
		if n, err := rd.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("%s connection: read %d, %v; want it closed by the server (EOF)", name, n, err)
		}
	}
}

// countingHook counts the commands a client sends.
type countingHook struct{ n atomic.Int64 }

func (*countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(int64(len(cmds))); return next(ctx, cmds) }
}

// flood sends n concurrent GET /leader to h and checks each answers 200
// with a holder; it returns when it began.
func flood(t *testing.T, h http.Handler, n int, held func([]byte) bool) {
	t.Helper()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/leader", nil))
			if rec.Code != http.StatusOK || !held(rec.Body.Bytes()) {
				t.Errorf("/leader = %d %s", rec.Code, rec.Body)
			}
		})
	}
	wg.Wait()
}

// TestLeader_FloodSendsNoRedisCommands: /leader, of a Worker and of a
// Spread, answers a flood of requests from one shared read: the client's
// Redis commands do not grow with the requests (at most one read per
// second of flood). Before, each request cost a round trip (a Spread's,
// one per job): a flood pushed the leader's renewals from about 40ms to
// seconds.
func TestLeader_FloodSendsNoRedisCommands(t *testing.T) {
	srv := redistest.Start(t)
	cfg := leader.Config{Name: "flood", TTL: 10 * time.Second}
	holder, err := leader.New(srv.Client(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	elected := make(chan struct{})
	go func() {
		done <- holder.Run(ctx, func(ctx context.Context) error { close(elected); <-ctx.Done(); return nil })
	}()
	defer func() { cancel(); <-done }()
	<-elected

	count := &countingHook{}
	client := srv.Client(t)
	client.AddHook(count)
	const n = 200
	check := func(what string, h http.Handler, held func([]byte) bool) {
		flood(t, h, 1, held) // the first read
		before, start := count.n.Load(), time.Now()
		flood(t, h, n, held)
		// A read is at most one per second (leaderMaxAge).
		if got, most := count.n.Load()-before, int64(time.Since(start)/time.Second); got > most {
			t.Errorf("%s: %d requests to /leader sent %d Redis commands, want at most %d", what, n, got, most)
		}
	}

	e, err := leader.New(client, cfg) // a follower's view; it does not campaign
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(e)
	if err != nil {
		t.Fatal(err)
	}
	check("a Worker", worker.Handler(w), func(b []byte) bool {
		var info leaderBody
		return json.Unmarshal(b, &info) == nil && info.Holder != nil && info.Holder.ID == holder.ID() && info.Holder.TTLLeft > 0
	})

	s, err := worker.NewSpread(client, leader.Config{Name: "floodgroup", TTL: 10 * time.Second}, worker.SpreadConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range []string{"a", "b", "c"} {
		if err := s.Pull(j, func(ctx context.Context) error { <-ctx.Done(); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	check("a Spread", s.Handler(), func(b []byte) bool {
		var info spreadBody
		return json.Unmarshal(b, &info) == nil && len(info.Jobs) == 3 && info.Error == ""
	})
}
