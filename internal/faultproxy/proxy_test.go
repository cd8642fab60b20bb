package faultproxy_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/solo-run/solo/internal/faultproxy"
	"github.com/solo-run/solo/internal/redistest"
)

// opTimeout is the read/write timeout of the client behind the proxy.
const opTimeout = 300 * time.Millisecond

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// env is a redis-server, a proxy in front of it, a client through the proxy
// and a direct client as the outside witness.
type env struct {
	srv     *redistest.Server
	proxy   *faultproxy.Proxy
	proxied *redis.Client
	direct  *redis.Client
}

func setup(t *testing.T) env {
	t.Helper()
	srv := redistest.Start(t)
	p, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatalf("new proxy: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close proxy: %v", err)
		}
	})
	proxied := redis.NewClient(&redis.Options{
		Addr:         p.Addr(),
		DialTimeout:  opTimeout,
		ReadTimeout:  opTimeout,
		WriteTimeout: opTimeout,
		MaxRetries:   -1,
	})
	t.Cleanup(func() { _ = proxied.Close() })
	e := env{srv: srv, proxy: p, proxied: proxied, direct: srv.Client(t)}
	// Warm up one pooled connection, so faults hit an open connection.
	if err := proxied.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("ping through proxy: %v", err)
	}
	return e
}

func TestProxy_Forwards(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := t.Context()

	if err := e.proxied.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("set through proxy: %v", err)
	}
	if got, err := e.direct.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("direct get = %q, %v; want \"v\"", got, err)
	}
	if got, err := e.proxied.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("get through proxy = %q, %v; want \"v\"", got, err)
	}
	st := e.proxy.Stats()
	if st.Accepted < 1 || st.Active < 1 || st.RequestBytes == 0 || st.ReplyBytes == 0 {
		t.Fatalf("stats = %+v, want accepted, active and bytes both ways", st)
	}
	if st.DroppedRequestBytes != 0 || st.DroppedReplyBytes != 0 {
		t.Fatalf("stats = %+v, want nothing dropped", st)
	}
}

func TestProxy_BlackholeReplies(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := t.Context()
	e.proxy.BlackholeReplies(true)

	// The request reaches Redis; only its reply is lost.
	if err := e.proxied.Set(ctx, "k", "v", 0).Err(); !isTimeout(err) {
		t.Fatalf("set with replies blackholed: err = %v, want a timeout", err)
	}
	if got, err := e.direct.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("direct get = %q, %v; want \"v\" (the set landed)", got, err)
	}
	if err := e.proxied.Get(ctx, "k").Err(); !isTimeout(err) {
		t.Fatalf("get with replies blackholed: err = %v, want a timeout", err)
	}
	if st := e.proxy.Stats(); st.DroppedReplyBytes == 0 || st.DroppedRequestBytes != 0 {
		t.Fatalf("stats = %+v, want reply bytes dropped and no request bytes", st)
	}

	e.proxy.Heal()
	if got, err := e.proxied.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("get after heal = %q, %v; want \"v\"", got, err)
	}
}

func TestProxy_BlackholeRequests(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := t.Context()
	e.proxy.BlackholeRequests(true)

	if err := e.proxied.Set(ctx, "k", "v", 0).Err(); !isTimeout(err) {
		t.Fatalf("set with requests blackholed: err = %v, want a timeout", err)
	}
	// The bytes were read and counted as dropped, so they cannot arrive
	// later: the set never lands.
	if st := e.proxy.Stats(); st.DroppedRequestBytes == 0 {
		t.Fatalf("stats = %+v, want request bytes dropped", st)
	}
	if err := e.direct.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("direct get: err = %v, want redis.Nil (the set did not land)", err)
	}

	e.proxy.Heal()
	if err := e.proxied.Set(ctx, "k", "v2", 0).Err(); err != nil {
		t.Fatalf("set after heal: %v", err)
	}
	if got, err := e.direct.Get(ctx, "k").Result(); err != nil || got != "v2" {
		t.Fatalf("direct get after heal = %q, %v; want \"v2\"", got, err)
	}
}

func TestProxy_Blackhole(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := t.Context()
	e.proxy.Blackhole(true)

	if err := e.proxied.Ping(ctx).Err(); !isTimeout(err) {
		t.Fatalf("ping with both directions blackholed: err = %v, want a timeout", err)
	}
	if st := e.proxy.Stats(); st.DroppedRequestBytes == 0 {
		t.Fatalf("stats = %+v, want request bytes dropped", st)
	}
	e.proxy.Heal()
	if err := e.proxied.Ping(ctx).Err(); err != nil {
		t.Fatalf("ping after heal: %v", err)
	}
}

func TestProxy_ResetAll(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := t.Context()

	raw, err := net.DialTimeout("tcp", e.proxy.Addr(), time.Second)
	if err != nil {
		t.Fatalf("dial proxy: %v", err)
	}
	defer raw.Close()
	r := bufio.NewReader(raw)
	if err := rawPing(raw, r); err != nil {
		t.Fatalf("raw ping before reset: %v", err)
	}
	accepted := e.proxy.Stats().Accepted

	e.proxy.ResetAll()
	if st := e.proxy.Stats(); st.Active != 0 {
		t.Fatalf("stats after reset = %+v, want no active connections", st)
	}
	if err := raw.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadByte(); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after reset: err = %v, want ECONNRESET", err)
	}

	// go-redis drops the dead pooled connection and dials a new one.
	if err := retry(t, 5*time.Second, func() error { return e.proxied.Ping(ctx).Err() }); err != nil {
		t.Fatalf("ping after reset: %v", err)
	}
	if st := e.proxy.Stats(); st.Accepted <= accepted {
		t.Fatalf("stats = %+v, want a new connection after reset (accepted was %d)", st, accepted)
	}
}

func TestProxy_Refuse(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := t.Context()

	e.proxy.Refuse(true)
	e.proxy.ResetAll()
	// The pooled connection may be noticed dead on checkout, then the
	// redial is refused; either way the command fails.
	for range 2 {
		if err := e.proxied.Ping(ctx).Err(); err == nil {
			t.Fatal("ping while cut: err = nil, want an error")
		}
	}
	if st := e.proxy.Stats(); st.Refused == 0 {
		t.Fatalf("stats = %+v, want refused connections", st)
	}

	e.proxy.Heal()
	if err := retry(t, 5*time.Second, func() error { return e.proxied.Ping(ctx).Err() }); err != nil {
		t.Fatalf("ping after heal: %v", err)
	}
}

func TestProxy_Latency(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := t.Context()
	const d = 150 * time.Millisecond
	slow := redis.NewClient(&redis.Options{Addr: e.proxy.Addr(), MaxRetries: -1})
	defer slow.Close()
	if err := slow.Ping(ctx).Err(); err != nil {
		t.Fatalf("ping: %v", err)
	}

	e.proxy.SetLatency(d)
	start := time.Now()
	if err := slow.Ping(ctx).Err(); err != nil {
		t.Fatalf("ping with latency: %v", err)
	}
	// Only a lower bound: a noisy machine may add any amount on top.
	if rtt := time.Since(start); rtt < d {
		t.Fatalf("ping round trip with latency %v took %v, want at least %v", d, rtt, d)
	}

	e.proxy.SetLatency(0)
	if err := slow.Ping(ctx).Err(); err != nil {
		t.Fatalf("ping after latency off: %v", err)
	}
}

func TestProxy_CloseIsPrompt(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatalf("new proxy: %v", err)
	}
	raw, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err != nil {
		t.Fatalf("dial proxy: %v", err)
	}
	defer raw.Close()
	r := bufio.NewReader(raw)
	if err := rawPing(raw, r); err != nil {
		t.Fatalf("raw ping: %v", err)
	}
	// A pump now sleeps for an hour on the next chunk; Close must not.
	p.SetLatency(time.Hour)
	if _, err := raw.Write([]byte("PING\r\n")); err != nil {
		t.Fatalf("write: %v", err)
	}
	// Give the pump a moment to read the chunk and start its delay; Close
	// must be prompt either way.
	time.Sleep(100 * time.Millisecond)

	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("close still blocked after 10s")
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if c, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		_ = c.Close()
		t.Fatal("dial after close: connected, want refused")
	}
}

func TestProxy_ConcurrentFaults(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()

	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			e.proxy.BlackholeRequests(i%3 == 0)
			e.proxy.BlackholeReplies(i%5 == 0)
			e.proxy.SetLatency(time.Duration(i%4) * time.Millisecond)
			e.proxy.Refuse(i%7 == 0)
			if i%11 == 0 {
				e.proxy.ResetAll()
			}
			_ = e.proxy.Stats()
			time.Sleep(5 * time.Millisecond)
		}
	})
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				_ = e.proxied.Set(ctx, "k", "v", 0).Err() // errors are expected
			}
		})
	}
	wg.Wait()

	e.proxy.Heal()
	if err := retry(t, 5*time.Second, func() error { return e.proxied.Ping(t.Context()).Err() }); err != nil {
		t.Fatalf("ping after heal: %v", err)
	}
}

// rawPing sends an inline PING on conn and expects +PONG.
func rawPing(conn net.Conn, r *bufio.Reader) error {
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return err
	}
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return errors.New("unexpected reply " + line)
	}
	return nil
}

// isTimeout reports whether err is a network timeout.
func isTimeout(err error) bool {
	var nerr net.Error
	return errors.As(err, &nerr) && nerr.Timeout()
}

// retry calls f until it succeeds or timeout passes, and returns its last
// error.
func retry(t *testing.T, timeout time.Duration, f func() error) error {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}
