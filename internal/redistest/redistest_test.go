package redistest_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/solo-run/solo/internal/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestServer_SetGet(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := t.Context()

	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("set: %v", err)
	}
	got, err := c.Get(ctx, "k").Result()
	if err != nil || got != "v" {
		t.Fatalf("get = %q, %v; want \"v\", nil", got, err)
	}
	if want := fmt.Sprintf("127.0.0.1:%d", srv.Port()); srv.Addr() != want {
		t.Fatalf("Addr() = %q, want %q", srv.Addr(), want)
	}
	if srv.Pid() <= 0 {
		t.Fatalf("Pid() = %d, want > 0", srv.Pid())
	}
}

func TestServer_ExtraArgs(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--maxmemory", "7mb")
	got, err := srv.Client(t).ConfigGet(t.Context(), "maxmemory").Result()
	if err != nil {
		t.Fatalf("config get: %v", err)
	}
	if got["maxmemory"] != "7340032" {
		t.Fatalf("maxmemory = %q, want 7340032", got["maxmemory"])
	}
	// The defaults hold unless overridden: no persistence.
	got, err = srv.Client(t).ConfigGet(t.Context(), "save").Result()
	if err != nil || got["save"] != "" {
		t.Fatalf("save = %q, %v; want empty", got["save"], err)
	}
}

func TestServer_Restart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := t.Context()
	port, pid := srv.Port(), srv.Pid()

	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("set: %v", err)
	}
	srv.Restart(t)

	if srv.Port() != port {
		t.Fatalf("port after restart = %d, want %d", srv.Port(), port)
	}
	if srv.Pid() == pid {
		t.Fatalf("pid after restart unchanged: %d", pid)
	}
	// The pooled connection died with the old process; go-redis redials.
	err := retry(t, 5*time.Second, func() error { return c.Ping(ctx).Err() })
	if err != nil {
		t.Fatalf("ping after restart: %v", err)
	}
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("get after restart: err = %v, want redis.Nil (data lost)", err)
	}
	if err := c.Set(ctx, "k2", "v2", 0).Err(); err != nil {
		t.Fatalf("set after restart: %v", err)
	}
}

func TestServer_Kill(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	addr := srv.Addr()
	srv.Kill(t)
	if srv.Pid() != 0 {
		t.Fatalf("Pid() after kill = %d, want 0", srv.Pid())
	}
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		_ = conn.Close()
		t.Fatalf("dial %s after kill: connected, want refused", addr)
	}
	srv.Kill(t) // idempotent
}

func TestServer_StopCont(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client(t, func(o *redis.Options) {
		o.ReadTimeout = 300 * time.Millisecond
		o.MaxRetries = -1
	})
	ctx := t.Context()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("ping: %v", err)
	}

	srv.Stop(t)
	stopped := true
	defer func() {
		if stopped {
			srv.Cont(t)
		}
	}()
	err := c.Ping(ctx).Err()
	var nerr net.Error
	if !errors.As(err, &nerr) || !nerr.Timeout() {
		t.Fatalf("ping while stopped: err = %v, want a timeout", err)
	}

	srv.Cont(t)
	stopped = false
	if err := retry(t, 5*time.Second, func() error { return c.Ping(ctx).Err() }); err != nil {
		t.Fatalf("ping after cont: %v", err)
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	if n := len(cl.Addrs()); n != 3 {
		t.Fatalf("len(Addrs()) = %d, want 3", n)
	}
	c := cl.Client(t)
	ctx := t.Context()

	for i := range 200 {
		key := fmt.Sprintf("{tag%d}:k", i)
		if err := c.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatalf("set %s: %v", key, err)
		}
	}
	for i := range 200 {
		key := fmt.Sprintf("{tag%d}:k", i)
		if got, err := c.Get(ctx, key).Int(); err != nil || got != i {
			t.Fatalf("get %s = %d, %v; want %d", key, got, err, i)
		}
	}

	var total int64
	for _, addr := range cl.Addrs() {
		node := redis.NewClient(&redis.Options{Addr: addr})
		info, err := node.ClusterInfo(ctx).Result()
		if err != nil || !strings.Contains(info, "cluster_state:ok") {
			_ = node.Close()
			t.Fatalf("cluster info on %s: %q, %v", addr, info, err)
		}
		n, err := node.DBSize(ctx).Result()
		_ = node.Close()
		if err != nil {
			t.Fatalf("dbsize on %s: %v", addr, err)
		}
		if n == 0 {
			t.Errorf("node %s holds no keys; slots are not spread", addr)
		}
		total += n
	}
	if total != 200 {
		t.Fatalf("keys over all nodes = %d, want 200", total)
	}
}

func TestSentinel_Failover(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t, "mymaster")
	if s.MasterName() != "mymaster" {
		t.Fatalf("MasterName() = %q", s.MasterName())
	}
	if n := len(s.SentinelAddrs()); n != 3 {
		t.Fatalf("len(SentinelAddrs()) = %d, want 3", n)
	}
	oldPrimary, oldReplica := s.Primary(), s.Replica()
	c := s.FailoverClient(t)
	ctx := t.Context()

	if err := c.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatalf("set before failover: %v", err)
	}
	// The write reached the primary, not the replica.
	if err := oldPrimary.Client(t).Get(ctx, "before").Err(); err != nil {
		t.Fatalf("get before from primary: %v", err)
	}

	newPrimary := s.Failover(t)
	if newPrimary != oldReplica || s.Primary() != oldReplica || s.Replica() != oldPrimary {
		t.Fatalf("after failover: primary %s, replica %s; want %s, %s",
			s.Primary().Addr(), s.Replica().Addr(), oldReplica.Addr(), oldPrimary.Addr())
	}

	// The client learns of the switch asynchronously; it may see READONLY
	// or a closed connection for a moment.
	err := retry(t, 15*time.Second, func() error { return c.Set(ctx, "after", "2", 0).Err() })
	if err != nil {
		t.Fatalf("set after failover: %v", err)
	}
	got, err := newPrimary.Client(t).Get(ctx, "after").Result()
	if err != nil || got != "2" {
		t.Fatalf("get after from new primary = %q, %v; want \"2\"", got, err)
	}
	if got, err := c.Get(ctx, "before").Result(); err != nil || got != "1" {
		t.Fatalf("get before after failover = %q, %v; want \"1\" (replicated)", got, err)
	}

	// Failover leaves a synced pair behind, so it works again.
	if back := s.Failover(t); back != oldPrimary {
		t.Fatalf("second failover: new primary %s, want %s", back.Addr(), oldPrimary.Addr())
	}
	err = retry(t, 15*time.Second, func() error { return c.Set(ctx, "again", "3", 0).Err() })
	if err != nil {
		t.Fatalf("set after second failover: %v", err)
	}
	if got, err := oldPrimary.Client(t).Get(ctx, "again").Result(); err != nil || got != "3" {
		t.Fatalf("get again from primary = %q, %v; want \"3\"", got, err)
	}
}

// TestSentinel_FailoverReplicas: with three replicas the sentinels choose
// the new primary among them, Failover returns once the leading sentinel
// announced it (every replica follows it by then), and the old primary
// joins the replicas.
func TestSentinel_FailoverReplicas(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinelWith(t, "mymaster3", redistest.SentinelOptions{Replicas: 3})
	oldPrimary, oldReplicas := s.Primary(), s.Replicas()
	if len(oldReplicas) != 3 {
		t.Fatalf("len(Replicas()) = %d, want 3", len(oldReplicas))
	}
	if s.FailoverSentinelAddr() != s.SentinelAddrs()[0] {
		t.Fatalf("FailoverSentinelAddr() = %s, want the first of %v", s.FailoverSentinelAddr(), s.SentinelAddrs())
	}
	ctx := t.Context()
	// A client that listens to the leading sentinel only, connected to the
	// old primary.
	c := s.FailoverClient(t, func(o *redis.FailoverOptions) { o.SentinelAddrs = []string{s.FailoverSentinelAddr()} })
	if err := c.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatalf("set before failover: %v", err)
	}
	newPrimary := s.Failover(t)
	// The leading sentinel told it (+switch-master) before Failover
	// returned: its connection to the old primary, a replica now, is gone.
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		t.Fatalf("info after failover: %v", err)
	}
	if got := strings.TrimSpace(infoLine(info, "tcp_port")); got != strconv.Itoa(newPrimary.Port()) {
		t.Fatalf("the failover client still talks to port %s after Failover returned, want the new primary's %d", got, newPrimary.Port())
	}
	if !slices.Contains(oldReplicas, newPrimary) || s.Primary() != newPrimary {
		t.Fatalf("new primary %s (Primary() %s), want one of the replicas", newPrimary.Addr(), s.Primary().Addr())
	}
	replicas := s.Replicas()
	if len(replicas) != 3 || !slices.Contains(replicas, oldPrimary) || slices.Contains(replicas, newPrimary) {
		t.Fatalf("replicas after failover %v: want the old primary and the two other replicas", addrs(replicas))
	}
	// Every replica follows the new primary and has its data.
	for _, r := range replicas {
		err := retry(t, 15*time.Second, func() error {
			info, err := r.Client(t).Info(ctx, "replication").Result()
			if err != nil {
				return err
			}
			if want := "master_port:" + strconv.Itoa(newPrimary.Port()); !strings.Contains(info, want) || !strings.Contains(info, "master_link_status:up") {
				return fmt.Errorf("%s: want %s and a link up:\n%s", r.Addr(), want, info)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := r.Client(t).Get(ctx, "before").Result(); err != nil || got != "1" {
			t.Fatalf("get before on %s = %q, %v; want \"1\"", r.Addr(), got, err)
		}
	}
}

// infoLine returns the value of key in an INFO reply.
func infoLine(info, key string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return v
		}
	}
	return ""
}

func addrs(servers []*redistest.Server) []string {
	var out []string
	for _, s := range servers {
		out = append(out, s.Addr())
	}
	return out
}

// retry calls f until it succeeds or timeout passes, and returns its last
// error.
func retry(t *testing.T, timeout time.Duration, f func() error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}
