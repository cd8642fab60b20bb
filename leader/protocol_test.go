package leader_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
)

// TestRedis_ProtocolSkew: the acquire script records the holder's
// protocol in the info hash and refuses, atomically and without listing
// it as a candidate, a caller whose protocol does not share an election
// with the holder's, in either direction; a holder that recorded none (a
// solo before v0.1.0) counts as protocol 1; compatible protocols wait as
// usual. Mutation: acquire.lua without the check fails with `protocol 2
// (from 2) beside a protocol 1 holder: held 1795716987186825 a <nil>,
// want a *ProtocolError`.
func TestRedis_ProtocolSkew(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	ctx := context.Background()
	cfg := redisConfig(t, "a")
	lockAs := func(p, m int) *leader.RedisStore {
		l, err := leader.NewRedisStore(c, cfg)
		if err != nil {
			t.Fatal(err)
		}
		leader.SetProtocol(l, p, m)
		return l
	}
	v1, v2, v21 := lockAs(1, 1), lockAs(2, 2), lockAs(2, 1)
	refused := func(what string, l *leader.RedisStore, id string, holder leader.Lease, p, m int) {
		t.Helper()
		o, rec, err := l.Acquire(ctx, id, time.Minute)
		var pe *leader.ProtocolError
		if !errors.As(err, &pe) || !errors.Is(err, leader.ErrProtocolSkew) || o != leader.Held {
			t.Fatalf("%s: %v %+v %v, want a *ProtocolError", what, o, rec, err)
		}
		if pe.Holder != holder || pe.Protocol != p || pe.MinPeer != m || rec.Lease != holder || rec.TTLLeft <= 0 {
			t.Fatalf("%s: %+v (record %+v), want holder %v speaking %d from %d", what, pe, rec, holder, p, m)
		}
		if _, err := c.ZScore(ctx, cfg.CandidatesKey(), id).Result(); err == nil {
			t.Fatalf("%s: the refused %s is listed as a candidate", what, id)
		}
	}

	o, a, err := v1.Acquire(ctx, "a", time.Minute)
	if err != nil || o != leader.Acquired {
		t.Fatalf("protocol 1 acquire = %v %v", o, err)
	}
	if got := c.HMGet(ctx, cfg.InfoKey(), "proto", "proto_min").Val(); got[0] != "1" || got[1] != "1" {
		t.Fatalf("info proto, proto_min = %v, want 1 1", got)
	}
	refused("protocol 2 (from 2) beside a protocol 1 holder", v2, "b", a.Lease, 1, 1)
	if o, rec, err := v21.Acquire(ctx, "c", time.Minute); err != nil || o != leader.Held || rec.Lease != a.Lease {
		t.Fatalf("protocol 2 (from 1) beside a protocol 1 holder = %v %+v %v, want Held", o, rec, err)
	}
	// A holder that recorded no protocol: a solo before v0.1.0.
	c.HDel(ctx, cfg.InfoKey(), "proto", "proto_min")
	refused("protocol 2 (from 2) beside an unrecorded holder", v2, "b", a.Lease, 1, 1)
	if h, err := leader.Lookup(ctx, c, cfg); err != nil || h.Protocol != 0 || h.MinPeerProtocol != 0 {
		t.Fatalf("Lookup of an unrecorded holder = %+v %v, want protocol 0 (unrecorded)", h, err)
	}
	if err := v1.Release(ctx, a.Lease); err != nil {
		t.Fatal(err)
	}

	// The other way round: a protocol 1 build meets a holder that dropped it.
	o, b, err := v2.Acquire(ctx, "b", time.Minute)
	if err != nil || o != leader.Acquired {
		t.Fatalf("protocol 2 acquire of the free lease = %v %v", o, err)
	}
	if h, err := leader.Lookup(ctx, c, cfg); err != nil || h.Protocol != 2 || h.MinPeerProtocol != 2 {
		t.Fatalf("Lookup = %+v %v, want protocol 2 from 2", h, err)
	}
	refused("protocol 1 beside a protocol 2 (from 2) holder", v1, "a", b.Lease, 2, 2)
	if o, rec, err := v21.Acquire(ctx, "c", time.Minute); err != nil || o != leader.Held || rec.Lease != b.Lease {
		t.Fatalf("protocol 2 (from 1) beside a protocol 2 holder = %v %+v %v, want Held", o, rec, err)
	}
	// Adopting its own lease is never refused.
	if o, rec, err := v2.Acquire(ctx, "b", time.Minute); err != nil || o != leader.Adopted || rec.Lease != b.Lease {
		t.Fatalf("re-acquire by the holder = %v %v, want Adopted", o, err)
	}

	// A candidate listed under a compatible holder is taken off the
	// candidates when an incompatible one follows.
	if o, _, err := v2.Acquire(ctx, "d", time.Minute); err != nil || o != leader.Held {
		t.Fatalf("protocol 2 candidate = %v %v, want Held", o, err)
	}
	if _, err := c.ZScore(ctx, cfg.CandidatesKey(), "d").Result(); err != nil {
		t.Fatalf("d not listed under a compatible holder: %v", err)
	}
	if err := v2.Release(ctx, b.Lease); err != nil {
		t.Fatal(err)
	}
	o, a, err = v1.Acquire(ctx, "a", time.Minute)
	if err != nil || o != leader.Acquired {
		t.Fatalf("protocol 1 acquire = %v %v", o, err)
	}
	refused("the listed protocol 2 candidate beside a new protocol 1 holder", v2, "d", a.Lease, 1, 1)
}

// protoMetrics records ProtocolRefused calls.
type protoMetrics struct {
	leader.NopMetrics
	mu   sync.Mutex
	seen []bool
}

func (m *protoMetrics) ProtocolRefused(r bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seen = append(m.seen, r)
}

func (m *protoMetrics) last() (bool, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.seen) == 0 {
		return false, 0
	}
	return m.seen[len(m.seen)-1], len(m.seen)
}

// TestElector_ProtocolSkewRefusesLoudly: an elector whose build does not
// share an election with the holder's protocol does not campaign: one
// error log for the episode, Status.ProtocolErr, the metrics told; it is
// not listed as a candidate, and it leads once that holder is gone (and
// says so). Mutation: acquireFailed treating the refusal as a Redis error
// fails with `timed out after 5s waiting for a few refused acquires`.
func TestElector_ProtocolSkewRefusesLoudly(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	ctx := context.Background()
	cfg := redisConfig(t, "old")
	cfg.RetryInterval = 50 * time.Millisecond
	old, err := leader.NewRedisStore(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, held, err := old.Acquire(ctx, "old-1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	next, err := leader.NewRedisStore(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	leader.SetProtocol(next, 2, 2)
	core, logs := observer.New(zapcore.InfoLevel)
	m := &protoMetrics{}
	cfg.ID = "next"
	e, err := leader.NewWithStore(next, cfg, leader.WithLogger(zap.New(core)), leader.WithMetrics(m))
	if err != nil {
		t.Fatal(err)
	}
	led := make(chan struct{}, 1)
	stop := runRedis(t, e, func(ctx context.Context) error { led <- struct{}{}; <-ctx.Done(); return nil })
	defer func() { _ = stop() }()

	waitFor(t, 5*time.Second, "a refused acquire", func() bool { _, n := m.last(); return n >= 1 && logs.Len() > 0 })
	// Three more refusals (each one reported to the metrics): still one
	// log line.
	_, n0 := m.last()
	waitFor(t, 5*time.Second, "three more refused acquires", func() bool { _, n := m.last(); return n >= n0+3 })
	var pe *leader.ProtocolError
	if st := e.Status(); !errors.As(st.ProtocolErr, &pe) || pe.Holder != held.Lease || pe.Protocol != 1 || pe.Own != 2 || st.Leading {
		t.Fatalf("Status while refused = %+v, want ProtocolErr naming the protocol 1 holder", st)
	}
	if r, _ := m.last(); !r {
		t.Fatal("metrics: ProtocolRefused(true) not reported")
	}
	errs := logs.FilterLevelExact(zapcore.ErrorLevel).FilterMessageSnippet("not campaigning").All()
	if len(errs) != 1 {
		t.Fatalf("%d \"not campaigning\" error logs, want exactly 1 (no \"not campaigning\" error log: %v)", len(errs), logs.All())
	}
	if !strings.Contains(errs[0].ContextMap()["error"].(string), "speaks protocol 1") {
		t.Fatalf("error log %v does not name the holder's protocol", errs[0].ContextMap())
	}
	if v, _ := leader.LookupView(ctx, c, cfg); len(v.Candidates) != 0 {
		t.Fatalf("candidates %v: a refusing elector is listed", v.Candidates)
	}

	if err := old.Release(ctx, held.Lease); err != nil {
		t.Fatal(err)
	}
	select {
	case <-led:
	case <-time.After(5 * time.Second):
		t.Fatal("the refusing elector did not lead once the holder was gone")
	}
	if st := e.Status(); st.ProtocolErr != nil {
		t.Fatalf("Status.ProtocolErr = %v after leading", st.ProtocolErr)
	}
	if r, _ := m.last(); r {
		t.Fatal("metrics: ProtocolRefused(false) not reported after leading")
	}
	if logs.FilterMessageSnippet("campaigning again").Len() != 1 {
		t.Fatalf("no \"campaigning again\" log: %v", logs.All())
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
