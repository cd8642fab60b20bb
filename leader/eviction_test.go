package leader_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
)

// onHub returns opts, with a Hub of client's (closed at the test's end)
// when hub is set.
func onHub(t *testing.T, client redis.UniversalClient, hub bool, opts ...leader.Option) []leader.Option {
	if hub {
		h := leader.NewHub(client)
		t.Cleanup(func() { _ = h.Close() })
		opts = append(opts, leader.WithHub(h))
	}
	return opts
}

// evictionMetrics records the eviction states an elector reports.
type evictionMetrics struct {
	configMetrics
	emu  sync.Mutex
	last leader.EvictionState
}

func (m *evictionMetrics) RedisEviction(s leader.EvictionState) {
	m.emu.Lock()
	defer m.emu.Unlock()
	m.last = s
}

func (m *evictionMetrics) state() leader.EvictionState {
	m.emu.Lock()
	defer m.emu.Unlock()
	return m.last
}

func TestParseEviction(t *testing.T) {
	for _, tt := range []struct {
		info string
		want leader.EvictionState
	}{
		{"# Memory\r\nused_memory:1\r\nmaxmemory:0\r\nmaxmemory_policy:allkeys-lru\r\n", leader.EvictionSafe},
		{"maxmemory:104857600\r\nmaxmemory_policy:noeviction\r\n", leader.EvictionSafe},
		{"maxmemory:104857600\r\nmaxmemory_policy:volatile-lru\r\n", leader.EvictionUnsafe},
		{"maxmemory:104857600\r\nmaxmemory_policy:volatile-ttl\r\n", leader.EvictionUnsafe},
		{"maxmemory:1\r\nmaxmemory_policy:allkeys-lfu\r\n", leader.EvictionUnsafe},
		{"maxmemory:1\r\n", leader.EvictionUnverified},
		{"", leader.EvictionUnverified},
	} {
		s, err := leader.ParseEviction(tt.info)
		if s != tt.want || (s == leader.EvictionSafe) != (err == nil) {
			t.Errorf("ParseEviction(%q) = %v, %v; want state %v", tt.info, s, err, tt.want)
		}
		if s == leader.EvictionUnsafe && (!errors.Is(err, leader.ErrEvictionPolicy) || !errors.Is(err, leader.ErrRedisConfig) ||
			!strings.Contains(err.Error(), "maxmemory-policy noeviction")) {
			t.Errorf("ParseEviction(%q) error %v: want ErrEvictionPolicy, ErrRedisConfig and the fix", tt.info, err)
		}
	}
}

// An elector (plain, and on a Hub as spread mode's are) on a Redis that
// may evict its lease does not campaign: Status.ConfigErr names the policy
// and the fix, one error line, the metrics say so. The policy fixed live,
// it leads without a restart. Old code: it led, on a server that may drop
// its lease under memory pressure.
func TestEviction_ElectorRefusesUntilFixed(t *testing.T) {
	for _, hub := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "hub"}[hub], func(t *testing.T) {
			srv := redistest.Start(t, "--maxmemory", "100mb", "--maxmemory-policy", "volatile-lru")
			client := newClient(t, srv.Addr())
			core, logs := observer.New(zapcore.DebugLevel)
			m := &evictionMetrics{}
			e := mustNew(t, client, redisConfig(t, "a"), onHub(t, client, hub, leader.WithLogger(zap.New(core)), leader.WithMetrics(m))...)
			led := make(chan struct{}, 1)
			stop := runRedis(t, e, func(ctx context.Context) error { led <- struct{}{}; <-ctx.Done(); return nil })
			defer func() { _ = stop() }()
			waitFor(t, 10*time.Second, "two refused acquires", func() bool { return m.count() >= 2 })

			st := e.Status()
			if !errors.Is(st.ConfigErr, leader.ErrEvictionPolicy) || !errors.Is(st.ConfigErr, leader.ErrRedisConfig) || st.Leading {
				t.Fatalf("Status = %+v, want ConfigErr wrapping ErrEvictionPolicy and ErrRedisConfig, not leading", st)
			}
			if msg := st.ConfigErr.Error(); !strings.Contains(msg, "maxmemory-policy volatile-lru") || !strings.Contains(msg, "CONFIG SET maxmemory-policy noeviction") {
				t.Fatalf("ConfigErr %q: want the policy and the fix named", msg)
			}
			if s := m.state(); s != leader.EvictionUnsafe {
				t.Fatalf("metrics state %v, want unsafe", s)
			}
			if n := logs.FilterLevelExact(zapcore.ErrorLevel).Len(); n != 1 {
				t.Fatalf("%d error lines, want one: %+v", n, logs.FilterLevelExact(zapcore.ErrorLevel).All())
			}
			if n, err := client.Exists(context.Background(), e.Config().LeaseKey()).Result(); err != nil || n != 0 {
				t.Fatalf("lease key exists %d (%v): the refused elector wrote it", n, err)
			}

			if err := srv.Client(t).ConfigSet(context.Background(), "maxmemory-policy", "noeviction").Err(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-led:
			case <-time.After(10 * time.Second):
				t.Fatalf("not leading 10s after the fix: %+v", e.Status())
			}
			if st := e.Status(); st.ConfigErr != nil || m.state() != leader.EvictionSafe {
				t.Fatalf("after the fix: ConfigErr %v, metrics state %v; want nil, safe", st.ConfigErr, m.state())
			}
		})
	}
}

// A leader whose Redis starts evicting (maxmemory and a volatile policy
// set live) steps down at its next renewal once the policy is re-read,
// without a round trip on the renewal's path, and leads again once fixed.
// Old code: it led on.
func TestEviction_LeaderStepsDownOnLiveChange(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr())
	m := &evictionMetrics{}
	e := mustNew(t, client, redisConfig(t, "a"), leader.WithMetrics(m))
	leader.EvictionGuardOf(e).SetPeriod(50 * time.Millisecond)
	causes := make(chan error, 4)
	stop := runRedis(t, e, func(ctx context.Context) error {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil
	})
	defer func() { _ = stop() }()
	waitFor(t, 10*time.Second, "leading", e.IsLeader)

	admin := srv.Client(t)
	ctx := context.Background()
	if err := admin.ConfigSet(ctx, "maxmemory", "100mb").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-causes:
		if !errors.Is(cause, leader.ErrEvictionPolicy) {
			t.Fatalf("term ended with %v, want ErrEvictionPolicy", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("still leading 10s after the policy changed: %+v", e.Status())
	}
	waitFor(t, 10*time.Second, "ConfigErr and the metric", func() bool {
		return errors.Is(e.Status().ConfigErr, leader.ErrEvictionPolicy) && m.state() == leader.EvictionUnsafe
	})
	if err := admin.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "leading again after the fix", func() bool { return e.IsLeader() && e.Status().ConfigErr == nil })
}

// INFO refused (an ACL user without +info): the elector cannot verify the
// policy, says so once at warn, reports it to the metrics, and leads.
func TestEviction_InfoRefusedWarnsAndLeads(t *testing.T) {
	srv := redistest.Start(t)
	client := aclUser(t, srv, "~*", "&*", "+@all", "-info")
	core, logs := observer.New(zapcore.DebugLevel)
	m := &evictionMetrics{}
	e := mustNew(t, client, redisConfig(t, "a"), leader.WithLogger(zap.New(core)), leader.WithMetrics(m))
	stop := runRedis(t, e, func(ctx context.Context) error { <-ctx.Done(); return nil })
	defer func() { _ = stop() }()
	waitFor(t, 10*time.Second, "leading", e.IsLeader)
	if s := m.state(); s != leader.EvictionUnverified {
		t.Fatalf("metrics state %v, want unverified", s)
	}
	warns := logs.FilterMessageSnippet("cannot verify that redis will not evict").All()
	if len(warns) != 1 || warns[0].Level != zapcore.WarnLevel || !strings.Contains(warns[0].ContextMap()["error"].(string), "+info") {
		t.Fatalf("warn lines %+v, want one naming +info", warns)
	}
	if st := e.Status(); st.ConfigErr != nil {
		t.Fatalf("ConfigErr %v, want nil", st.ConfigErr)
	}
}

// On a Cluster every master is read: one that may evict (allkeys-lfu set
// on one node of three) refuses the election whatever its slot; a
// master killed then is left out while the others answer, so the
// elections on the others go on.
func TestEviction_ClusterReadsEveryMaster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	client := cl.Client(t)
	ctx := context.Background()
	g := leader.NewEvictionGuard(client)
	if err := g.Check(ctx); err != nil || g.State() != leader.EvictionSafe {
		t.Fatalf("Check = %v, state %v; want nil, safe", err, g.State())
	}
	node := cl.Nodes()[1].Client(t)
	if err := node.ConfigSet(ctx, "maxmemory", "100mb").Err(); err != nil {
		t.Fatal(err)
	}
	if err := node.ConfigSet(ctx, "maxmemory-policy", "allkeys-lfu").Err(); err != nil {
		t.Fatal(err)
	}
	g = leader.NewEvictionGuard(client)
	if err := g.Check(ctx); !errors.Is(err, leader.ErrEvictionPolicy) || !strings.Contains(err.Error(), "allkeys-lfu") {
		t.Fatalf("Check = %v, want ErrEvictionPolicy naming allkeys-lfu", err)
	}
	if err := node.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	cl.Nodes()[2].Kill(t)
	g = leader.NewEvictionGuard(client)
	if err := g.Check(ctx); err != nil || g.State() != leader.EvictionSafe {
		t.Fatalf("one master down: Check = %v, state %v; want nil, safe (the others answered)", err, g.State())
	}
}

// busyScript runs a script that loops on srv from another client until
// the returned func kills it (SCRIPT KILL) and waits for it: meanwhile
// every other client's command gets a BUSY reply.
func busyScript(t *testing.T, srv *redistest.Server) (stop func()) {
	t.Helper()
	admin := srv.Client(t)
	ctx := context.Background()
	if err := admin.ConfigSet(ctx, "busy-reply-threshold", "10").Err(); err != nil {
		t.Fatal(err)
	}
	runner := srv.Client(t, func(o *redis.Options) { o.ReadTimeout = -1 })
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = runner.Eval(ctx, "while true do end", nil).Err() // killed
	}()
	waitFor(t, 10*time.Second, "BUSY replies", func() bool {
		return redis.HasErrorPrefix(admin.Ping(ctx).Err(), "BUSY")
	})
	var once sync.Once
	stop = func() {
		once.Do(func() {
			if err := admin.ScriptKill(ctx).Err(); err != nil {
				t.Errorf("SCRIPT KILL: %v", err)
			}
			<-done
		})
	}
	t.Cleanup(stop)
	return stop
}

// A BUSY reply to INFO (another client's slow script) is no answer: the
// guard keeps its unsafe verdict, Check returns the BUSY error, nothing
// is cached, and the next call reads again. INFO refused for good (an
// unknown command, as NOPERM) is "cannot verify". Old code: BUSY was
// taken for a refusal, the unsafe verdict cleared and trusted for the
// period.
func TestEviction_BusyReplyKeepsVerdict(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "100mb", "--maxmemory-policy", "volatile-lru")
	client := newClient(t, srv.Addr())
	ctx := context.Background()
	g := leader.NewEvictionGuard(client)
	if err := g.Check(ctx); !errors.Is(err, leader.ErrEvictionPolicy) {
		t.Fatalf("Check = %v, want ErrEvictionPolicy", err)
	}
	stop := busyScript(t, srv)
	err := g.Check(ctx)
	if err == nil || !strings.Contains(err.Error(), "BUSY") {
		t.Fatalf("Check while BUSY = %v, want the BUSY error (state %v)", err, g.State())
	}
	if s, why := g.State(), g.Unverified(); s != leader.EvictionUnsafe || why != nil || !errors.Is(g.Err(), leader.ErrEvictionPolicy) {
		t.Fatalf("while BUSY: state %v, unverified %v, Err %v; want the unsafe verdict kept", s, why, g.Err())
	}
	stop()
	if err := g.Check(ctx); !errors.Is(err, leader.ErrEvictionPolicy) {
		t.Fatalf("Check after the script = %v, want ErrEvictionPolicy", err)
	}

	renamed := redistest.Start(t, "--rename-command", "INFO", "solo-test-info")
	g = leader.NewEvictionGuard(newClient(t, renamed.Addr()))
	if err := g.Check(ctx); err != nil || g.State() != leader.EvictionUnverified {
		t.Fatalf("INFO renamed: Check = %v, state %v; want nil, unverified", err, g.State())
	}
	if why := g.Unverified(); why == nil || !strings.Contains(why.Error(), "unknown command") {
		t.Fatalf("INFO renamed: Unverified = %v, want the unknown command", why)
	}
}

// A server that answers INFO memory with an error of its own (miniredis,
// which the demo embeds: "section (memory) is not supported"; a proxy)
// refuses it for good: unverified, and calls go on. Mutation: counting
// every reply but NOPERM and an unknown command as no answer left the
// demo on miniredis without a leader ("nobody was elected within 10s").
func TestEviction_SectionNotServedIsUnverified(t *testing.T) {
	mr := miniredis.RunT(t)
	g := leader.NewEvictionGuard(newClient(t, mr.Addr()))
	if err := g.Check(context.Background()); err != nil || g.State() != leader.EvictionUnverified {
		t.Fatalf("Check = %v, state %v; want nil, unverified", err, g.State())
	}
	if why := g.Unverified(); why == nil || !strings.Contains(why.Error(), "not supported") {
		t.Fatalf("Unverified = %v, want miniredis's refusal", why)
	}
}

// On a Cluster, a read a master did not answer (BUSY) is partial: it lets
// calls go on while the others are safe, but is not trusted for the
// period. Once that master answers, the next Check, and a holder's next
// Refresh, read it again and see it may evict. Old code: the partial
// read was stored as safe for the whole period.
func TestEviction_ClusterPartialReadNotFresh(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	client := cl.Client(t)
	ctx := context.Background()
	checked, refreshed := leader.NewEvictionGuard(client), leader.NewEvictionGuard(client)
	stop := busyScript(t, cl.Nodes()[1])
	if err := checked.Check(ctx); err != nil || checked.State() != leader.EvictionSafe {
		t.Fatalf("one master BUSY: Check = %v, state %v; want nil, safe (the others answered)", err, checked.State())
	}
	refreshed.Refresh(ctx)
	if err := refreshed.Err(); err != nil {
		t.Fatalf("one master BUSY: Refresh left Err %v, want nil", err)
	}
	stop()
	node := cl.Nodes()[1].Client(t)
	if err := node.ConfigSet(ctx, "maxmemory", "100mb").Err(); err != nil {
		t.Fatal(err)
	}
	if err := node.ConfigSet(ctx, "maxmemory-policy", "volatile-lru").Err(); err != nil {
		t.Fatal(err)
	}
	if err := checked.Check(ctx); !errors.Is(err, leader.ErrEvictionPolicy) {
		t.Fatalf("after the partial read: Check = %v, want ErrEvictionPolicy (the silent master read again)", err)
	}
	refreshed.Refresh(ctx)
	if err := refreshed.Err(); !errors.Is(err, leader.ErrEvictionPolicy) {
		t.Fatalf("after the partial read: Refresh left Err %v, want ErrEvictionPolicy", err)
	}
}
