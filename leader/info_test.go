package leader_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/leadertest"
)

// The info hash beside the lease and the candidates set, against a real redis-server.

func TestRedis_InfoLivesAndDiesWithTheLease(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	direct := newClient(t, srv.Addr())
	ctx := context.Background()
	cfg := redisConfig(t, "a")
	cfg.TTL, cfg.RenewInterval, cfg.RenewDeadline = 4*time.Second, 1300*time.Millisecond, 2600*time.Millisecond
	cfg.Value = "10.0.0.7:8080"
	lock, err := leader.NewRedisStore(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, rec, err := lock.Acquire(ctx, "a", cfg.TTL)
	if err != nil {
		t.Fatal(err)
	}
	// Written with the lease, same expiry.
	info := direct.HGetAll(ctx, cfg.InfoKey()).Val()
	if info["lease"] != rec.Lease.String() || info["ttl_ms"] != "4000" || info["renew_ms"] != "1300" || info["value"] != cfg.Value || info["since_ms"] == "" {
		t.Fatalf("info after acquire = %v", info)
	}
	if d := direct.PTTL(ctx, cfg.InfoKey()).Val(); d <= 3*time.Second || d > 4*time.Second {
		t.Fatalf("info PTTL after acquire = %s, want the lease's (4s)", d)
	}
	// A reader with another TTL (the default 10s) sees the holder's.
	reader := leader.Config{Name: cfg.Name}
	h, err := leader.Lookup(ctx, c, reader)
	if err != nil {
		t.Fatal(err)
	}
	if h.LeaseTTL != 4*time.Second || h.RenewInterval != 1300*time.Millisecond || h.Value != cfg.Value {
		t.Fatalf("Lookup() = %+v, want the holder's TTL, renew interval and value", h)
	}
	if h.LastRenew.IsZero() || time.Since(h.LastRenew) > time.Second || h.Since.After(time.Now()) || time.Since(h.Since) > time.Second {
		t.Fatalf("Lookup() last renewal %s ago, since %s ago: want both just now", time.Since(h.LastRenew), time.Since(h.Since))
	}
	// Renew refreshes the info's expiry with the lease's.
	direct.PExpire(ctx, cfg.InfoKey(), time.Second)
	direct.PExpire(ctx, cfg.LeaseKey(), time.Second)
	if err := lock.Renew(ctx, rec.Lease, cfg.TTL); err != nil {
		t.Fatal(err)
	}
	if d := direct.PTTL(ctx, cfg.InfoKey()).Val(); d <= 3*time.Second {
		t.Fatalf("info PTTL after renew = %s, want refreshed to 4s", d)
	}
	// A renew by a stale holder touches neither.
	direct.PExpire(ctx, cfg.InfoKey(), 2*time.Second)
	if err := lock.Renew(ctx, leader.Lease{Term: rec.Term - 1, ID: "a"}, time.Minute); !errors.Is(err, leader.ErrLeaseLost) {
		t.Fatalf("stale Renew() = %v", err)
	}
	if d := direct.PTTL(ctx, cfg.InfoKey()).Val(); d > 2*time.Second {
		t.Fatalf("info PTTL after a stale renew = %s: the stale holder refreshed it", d)
	}
	// Proclaim: fenced by the exact lease.
	if err := lock.Proclaim(ctx, leader.Lease{Term: rec.Term + 1, ID: "a"}, "stale"); !errors.Is(err, leader.ErrLeaseLost) {
		t.Fatalf("Proclaim() with another lease = %v, want ErrLeaseLost", err)
	}
	if v := direct.HGet(ctx, cfg.InfoKey(), "value").Val(); v != cfg.Value {
		t.Fatalf("value after a stale proclaim = %q", v)
	}
	if err := lock.Proclaim(ctx, rec.Lease, "10.0.0.8:8080"); err != nil {
		t.Fatal(err)
	}
	if h, _ := leader.Lookup(ctx, c, reader); h.Value != "10.0.0.8:8080" {
		t.Fatalf("value after Proclaim = %q", h.Value)
	}
	// Expires with the lease.
	direct.PExpire(ctx, cfg.LeaseKey(), 50*time.Millisecond)
	direct.PExpire(ctx, cfg.InfoKey(), 50*time.Millisecond)
	waitFor(t, time.Second, "expiry", func() bool { return direct.Exists(ctx, cfg.InfoKey()).Val() == 0 })
	// Deleted on release.
	_, rec, err = lock.Acquire(ctx, "a", cfg.TTL)
	if err != nil {
		t.Fatal(err)
	}
	if v := direct.HGet(ctx, cfg.InfoKey(), "value").Val(); v != "10.0.0.8:8080" {
		t.Fatalf("a later lease proclaims %q, want the value Proclaim set", v)
	}
	if err := lock.Release(ctx, rec.Lease); err != nil {
		t.Fatal(err)
	}
	// Nothing of the holder is left: only the release's note (so that a
	// second run of the same release answers as the first), for a TTL.
	if m := direct.HGetAll(ctx, cfg.InfoKey()).Val(); len(m) != 1 || m["released"] != rec.Lease.String() {
		t.Fatalf("info left after release: %v", m)
	}
	if d := direct.PTTL(ctx, cfg.InfoKey()).Val(); d <= 0 || d > cfg.TTL {
		t.Fatalf("the release's note lives %s, want at most the TTL %s", d, cfg.TTL)
	}
	// A lease without info (an older solo took it): the holder's TTL is
	// unknown, so no last renewal is made up from the reader's TTL.
	direct.Set(ctx, cfg.LeaseKey(), "7 old", 4*time.Second)
	h, err = leader.Lookup(ctx, c, reader)
	if err != nil || h.ID != "old" || h.LeaseTTL != 0 || !h.LastRenew.IsZero() {
		t.Fatalf("Lookup() of a lease without info = %+v, %v; want no holder TTL and no last renewal", h, err)
	}
	// Info of another lease is ignored.
	direct.HSet(ctx, cfg.InfoKey(), "lease", "6 older", "ttl_ms", "9000", "value", "x")
	if h, _ := leader.Lookup(ctx, c, reader); h.LeaseTTL != 0 || h.Value != "" {
		t.Fatalf("Lookup() used the info of another lease: %+v", h)
	}
}

func TestRedis_CandidatesListedExpiredBoundedAndWithdrawn(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	direct := newClient(t, srv.Addr())
	ctx := context.Background()
	cfg := redisConfig(t, "lead") // TTL 1.5s, retry 300ms: window 3.3s
	lock, err := leader.NewRedisStore(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, lead, err := lock.Acquire(ctx, "lead", cfg.TTL)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"f2", "f1"} {
		if out, _, err := lock.Acquire(ctx, id, cfg.TTL); err != nil || out != leader.Held {
			t.Fatalf("follower acquire = %v %v", out, err)
		}
	}
	v, err := leader.LookupView(ctx, c, leader.Config{Name: cfg.Name})
	if err != nil || v.Holder == nil || v.Holder.ID != "lead" || !slices.Equal(v.Candidates, []string{"f1", "f2"}) {
		t.Fatalf("LookupView() = %+v, %v; want lead holding, f1 and f2 waiting", v, err)
	}
	// The score outlives a follower's sleep until the lease runs out: the
	// holder's time left plus the window.
	now := time.Now().UnixMilli()
	score := direct.ZScore(ctx, cfg.CandidatesKey(), "f1").Val()
	if left := time.Duration(int64(score)-now) * time.Millisecond; left < 4*time.Second || left > 5*time.Second {
		t.Fatalf("f1 listed for %s, want about PTTL 1.5s + window 3.3s", left)
	}
	if d := direct.PTTL(ctx, cfg.CandidatesKey()).Val(); d < 4*time.Second {
		t.Fatalf("candidates key PTTL = %s, want at least the latest member's", d)
	}
	// Expired members are not listed, and pruned by the next acquire.
	direct.ZAdd(ctx, cfg.CandidatesKey(), redisZ(float64(now-1000), "gone"))
	v, _ = leader.LookupView(ctx, c, leader.Config{Name: cfg.Name})
	if slices.Contains(v.Candidates, "gone") {
		t.Fatalf("an expired candidate is listed: %v", v.Candidates)
	}
	if _, _, err := lock.Acquire(ctx, "f1", cfg.TTL); err != nil {
		t.Fatal(err)
	}
	if direct.ZScore(ctx, cfg.CandidatesKey(), "gone").Err() == nil {
		t.Fatal("acquire did not prune the expired candidate")
	}
	// Bounded: a flood of IDs keeps the set at MaxCandidates, the most
	// recently seen kept.
	for i := range leader.MaxCandidates + 20 {
		if _, _, err := lock.Acquire(ctx, fmt.Sprintf("flood-%03d", i), cfg.TTL); err != nil {
			t.Fatal(err)
		}
	}
	if n := direct.ZCard(ctx, cfg.CandidatesKey()).Val(); n != leader.MaxCandidates {
		t.Fatalf("candidates after a flood = %d, want %d", n, leader.MaxCandidates)
	}
	if direct.ZScore(ctx, cfg.CandidatesKey(), fmt.Sprintf("flood-%03d", leader.MaxCandidates+19)).Err() != nil {
		t.Fatal("the most recent candidate was dropped")
	}
	// Withdraw and acquiring take an ID off.
	if err := lock.Withdraw(ctx, "flood-119"); err != nil {
		t.Fatal(err)
	}
	if direct.ZScore(ctx, cfg.CandidatesKey(), "flood-119").Err() == nil {
		t.Fatal("Withdraw left the candidate")
	}
	if err := lock.Release(ctx, lead.Lease); err != nil {
		t.Fatal(err)
	}
	if _, _, err := lock.Acquire(ctx, "flood-118", cfg.TTL); err != nil {
		t.Fatal(err)
	}
	v, _ = leader.LookupView(ctx, c, leader.Config{Name: cfg.Name})
	if slices.Contains(v.Candidates, "flood-118") || v.Holder == nil || v.Holder.ID != "flood-118" {
		t.Fatalf("the new holder is still a candidate: %+v", v)
	}
}

// TestRedis_ElectorProclaimsAndWithdraws: an Elector's Config.Value is
// stored at acquire, Proclaim replaces it while leading, and a follower's
// ID leaves the candidates when its Run ends.
func TestRedis_ElectorProclaimsAndWithdraws(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	ctx := context.Background()
	cfgA := redisConfig(t, "a")
	cfgA.Value = "addr-a"
	a := mustNew(t, c, cfgA)
	if err := a.Proclaim(ctx, "early"); !errors.Is(err, leader.ErrNotLeader) {
		t.Fatalf("Proclaim() before leading = %v, want ErrNotLeader", err)
	}
	if err := a.Proclaim(ctx, strings.Repeat("x", leader.MaxValueLen+1)); err == nil || !strings.Contains(err.Error(), "value") {
		t.Fatalf("Proclaim() of a too long value = %v", err)
	}
	stopA := runRedis(t, a, func(ctx context.Context) error { <-ctx.Done(); return nil })
	defer stopA()
	waitFor(t, 5*time.Second, "a leads", a.IsLeader)
	if h, err := a.Leader(ctx); err != nil || h.Value != "early" {
		t.Fatalf("Leader() = %+v, %v; want the value proclaimed before the term", h, err)
	}
	if err := a.Proclaim(ctx, "addr-a2"); err != nil {
		t.Fatal(err)
	}
	b := mustNew(t, c, redisConfig(t, "b"))
	stopB := runRedis(t, b, func(ctx context.Context) error { <-ctx.Done(); return nil })
	waitFor(t, 5*time.Second, "b listed", func() bool {
		v, _ := a.View(ctx)
		return slices.Contains(v.Candidates, b.ID())
	})
	v, _ := a.View(ctx)
	if v.Holder == nil || v.Holder.Value != "addr-a2" || v.Holder.ID != a.ID() {
		t.Fatalf("View() = %+v", v)
	}
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	if v, _ := a.View(ctx); slices.Contains(v.Candidates, b.ID()) {
		t.Fatalf("b still listed after its Run ended: %v", v.Candidates)
	}
}

func redisZ(score float64, member string) redis.Z { return redis.Z{Score: score, Member: member} }

// TestRedis_ObserveReportsTheHoldersInfo: an observer with the default TTL
// (10s) reports, for a holder elected while it watches (the notice path),
// the holder's own TTL, renew interval and value, and a last renewal
// computed from them.
func TestRedis_ObserveReportsTheHoldersInfo(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	cfg := redisConfig(t, "a")
	cfg.Value = "10.0.0.7:8080"
	changes := make(chan leader.Change, 10)
	octx, ostop := context.WithCancel(context.Background())
	done := make(chan struct{})
	defer func() { ostop(); <-done }()
	go func() {
		defer close(done)
		_ = leader.Observe(octx, c, leader.Config{Name: cfg.Name}, func(ch leader.Change) { changes <- ch })
	}()
	waitSubscribed(t, c, cfg.EventsChannel(), 1)
	a := mustNew(t, c, cfg)
	stopA := runRedis(t, a, func(ctx context.Context) error { <-ctx.Done(); return nil })
	defer stopA()
	select {
	case ch := <-changes:
		h := ch.Holder
		if ch.Kind != leader.TransitionElected || h.ID != a.ID() || h.LeaseTTL != cfg.TTL || h.RenewInterval != cfg.RenewInterval ||
			h.Value != cfg.Value || h.LastRenew.IsZero() || h.LastRenew.Before(h.Since) {
			t.Fatalf("first change = %v %+v; want a elected with its TTL %s, renew %s, value and last renewal", ch.Kind, h, cfg.TTL, cfg.RenewInterval)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no change within 5s")
	}
}

// TestRedis_HubRenewalsRefreshTheInfo: the Hub's pipelined renewals run
// renew.lua with the info key too.
func TestRedis_HubRenewalsRefreshTheInfo(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	direct := newClient(t, srv.Addr())
	ctx := context.Background()
	hub := leader.NewHub(c)
	defer hub.Close()
	cfg := redisConfig(t, "a")
	lock, err := hub.NewRedisStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, rec, err := lock.Acquire(ctx, "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	direct.PExpire(ctx, cfg.InfoKey(), time.Second)
	if err := lock.Renew(ctx, rec.Lease, time.Minute); err != nil {
		t.Fatal(err)
	}
	if d := direct.PTTL(ctx, cfg.InfoKey()).Val(); d <= 50*time.Second {
		t.Fatalf("info PTTL after a hub renewal = %s, want refreshed to 1m", d)
	}
}

// TestElector_ViewWithTheFake: the in-memory Store models the info and the
// candidates as RedisStore does, for the Elector's View and Proclaim.
func TestElector_ViewWithTheFake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := leadertest.New()
		ctx := context.Background()
		a := newElector(t, lock, fastConfig("a"))
		stopA := run(t, a, func(ctx context.Context) error { <-ctx.Done(); return nil })
		defer stopA()
		synctest.Wait()
		if !a.IsLeader() {
			t.Fatal("a does not lead")
		}
		b := newElector(t, lock, fastConfig("b"))
		stopB := run(t, b, func(ctx context.Context) error { <-ctx.Done(); return nil })
		synctest.Wait()
		if err := a.Proclaim(ctx, "addr-a"); err != nil {
			t.Fatal(err)
		}
		v, err := a.View(ctx)
		if err != nil || v.Holder == nil || v.Holder.ID != a.ID() || v.Holder.LeaseTTL != a.Config().TTL || v.Holder.Value != "addr-a" ||
			!slices.Equal(v.Candidates, []string{b.ID()}) {
			t.Fatalf("View() = %+v, %v", v, err)
		}
		if err := b.Proclaim(ctx, "addr-b"); !errors.Is(err, leader.ErrNotLeader) {
			t.Fatalf("follower Proclaim() = %v, want ErrNotLeader", err)
		}
		if err := stopB(); err != nil {
			t.Fatal(err)
		}
		if v, _ := a.View(ctx); len(v.Candidates) != 0 || v.Holder.Value != "addr-a" {
			t.Fatalf("View() after b stopped = %+v", v)
		}
	})
}
