package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// sentinelCount is how many sentinels watch the primary; quorum is 2.
	sentinelCount = 3
	// sentinelTimeout bounds the wait for the sentinels to discover each
	// other and the replica. They announce themselves every 2s.
	sentinelTimeout = 30 * time.Second
	// failoverTimeout bounds Failover.
	failoverTimeout = 20 * time.Second
	// syncTimeout bounds the wait for a replica to finish its full sync.
	syncTimeout = 20 * time.Second
)

// replicationArgs make the initial sync start at once; by default a primary
// waits 5s for more replicas before a diskless full sync.
var replicationArgs = []string{"--repl-diskless-sync-delay", "0"}

// Sentinel is a primary, its replicas (one unless StartSentinelWith says
// otherwise) and three sentinels monitoring them, all on loopback. Its
// methods are safe for concurrent use.
type Sentinel struct {
	name      string
	sentinels []*Server

	mu       sync.Mutex
	primary  *Server
	replicas []*Server
}

// SentinelOptions shape the group StartSentinelWith starts.
type SentinelOptions struct {
	// Replicas is the number of replicas of the primary. Default 1.
	Replicas int
	// ParallelSyncs is the sentinels' parallel-syncs: how many of the other
	// replicas a failover points at the new master at once. Default 1, as
	// in Redis. The failover's leading sentinel announces the new master
	// (+switch-master) only once every other replica replicates from it,
	// about a second per batch on loopback.
	ParallelSyncs int
}

// StartSentinel starts a primary, a replica of it and three sentinels
// (redis-server --sentinel) that monitor the primary as masterName with
// quorum 2, down-after-milliseconds 1000 and failover-timeout 5000. It returns
// once the replica is in sync (master_link_status:up) and every sentinel knows
// the master, the replica and the two other sentinels (bounded). Everything
// is killed in t.Cleanup.
func StartSentinel(t testing.TB, masterName string) *Sentinel {
	t.Helper()
	return StartSentinelWith(t, masterName, SentinelOptions{})
}

// StartSentinelWith is StartSentinel with o.Replicas replicas and the
// sentinels' parallel-syncs set to o.ParallelSyncs.
func StartSentinelWith(t testing.TB, masterName string, o SentinelOptions) *Sentinel {
	t.Helper()
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.ParallelSyncs == 0 {
		o.ParallelSyncs = 1
	}
	primary := start(t, modePlain, replicationArgs, nil)
	s := &Sentinel{name: masterName, primary: primary}
	for range o.Replicas {
		s.replicas = append(s.replicas, start(t, modePlain,
			append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(primary.Port())}, replicationArgs...), nil))
	}
	for _, r := range s.replicas {
		waitInSync(t, r, primary)
	}

	conf := fmt.Sprintf(`sentinel resolve-hostnames no
sentinel monitor %[1]s 127.0.0.1 %[2]d 2
sentinel down-after-milliseconds %[1]s 1000
sentinel failover-timeout %[1]s 5000
sentinel parallel-syncs %[1]s %[3]d
`, masterName, primary.Port(), o.ParallelSyncs)
	for range sentinelCount {
		// Sentinel rewrites its config file, so each attempt gets a fresh
		// one at an absolute path (the server changes into its dir).
		s.sentinels = append(s.sentinels, start(t, modeSentinel, nil, func(srv *Server) error {
			srv.conf = filepath.Join(srv.dir, "sentinel.conf")
			if err := os.WriteFile(srv.conf, []byte(conf), 0o644); err != nil {
				return fmt.Errorf("write sentinel config: %w", err)
			}
			return nil
		}))
	}

	admins := s.admins()
	defer closeAll(admins)
	waitFor(t, sentinelTimeout, "sentinels to know master, replicas and each other", func(ctx context.Context) error {
		for i, a := range admins {
			if err := knowsAll(ctx, a, masterName, s.replicas); err != nil {
				return fmt.Errorf("sentinel %s: %w", s.sentinels[i].Addr(), err)
			}
		}
		return nil
	})
	return s
}

// MasterName returns the name the sentinels monitor the primary under.
func (s *Sentinel) MasterName() string {
	return s.name
}

// SentinelAddrs returns the addresses of the three sentinels.
func (s *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(s.sentinels))
	for i, srv := range s.sentinels {
		addrs[i] = srv.Addr()
	}
	return addrs
}

// Sentinels returns the sentinel servers, for killing or freezing them.
func (s *Sentinel) Sentinels() []*Server {
	return append([]*Server(nil), s.sentinels...)
}

// FailoverSentinelAddr returns the address of the sentinel Failover sends
// SENTINEL FAILOVER to. It leads the failovers, so it is the last to
// announce the new master: clients that listen to it follow last.
func (s *Sentinel) FailoverSentinelAddr() string {
	return s.sentinels[0].Addr()
}

// Primary returns the current primary. It changes after Failover.
func (s *Sentinel) Primary() *Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.primary
}

// Replica returns the current replica (the first one when there are
// several). It changes after Failover.
func (s *Sentinel) Replica() *Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.replicas[0]
}

// Replicas returns the current replicas. They change after Failover.
func (s *Sentinel) Replicas() []*Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Server(nil), s.replicas...)
}

// FailoverClient returns a go-redis failover client that finds the primary
// through the sentinels, closed in t.Cleanup. opts adjust the options before
// the client is built.
func (s *Sentinel) FailoverClient(t testing.TB, opts ...func(*redis.FailoverOptions)) *redis.Client {
	t.Helper()
	o := &redis.FailoverOptions{MasterName: s.name, SentinelAddrs: s.SentinelAddrs()}
	for _, opt := range opts {
		opt(o)
	}
	c := redis.NewFailoverClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Failover forces a failover with SENTINEL FAILOVER on one sentinel
// (FailoverSentinelAddr) and waits (bounded by 20s) until every sentinel
// reports the same replica as the master, it has taken the master role and
// the leading sentinel has ended the failover: it points the other
// replicas at the new master first, then announces it (+switch-master).
// Until then the old primary is a master too and takes writes of clients
// that have not followed. Failover then points the old primary at the new
// one, as the sentinels would themselves some seconds later, and waits
// until it is in sync, so that Failover can be called again. It returns the new primary; the old primary takes its place among
// the replicas (with one replica, Primary and Replica swap).
func (s *Sentinel) Failover(t testing.TB) *Server {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	oldPrimary := s.primary

	admins := s.admins()
	defer closeAll(admins)
	waitFor(t, failoverTimeout, "SENTINEL FAILOVER to be accepted", func(ctx context.Context) error {
		// NOGOODSLAVE and INPROG are transient: the replica's state may be
		// stale, or an earlier failover has not finished.
		return admins[0].Failover(ctx, s.name).Err()
	})
	var newPrimary *Server
	waitFor(t, failoverTimeout, "sentinels to report one of the replicas as master", func(ctx context.Context) error {
		newPrimary = nil
		for i, a := range admins {
			addr, err := a.GetMasterAddrByName(ctx, s.name).Result()
			if err != nil {
				return fmt.Errorf("sentinel %s: %w", s.sentinels[i].Addr(), err)
			}
			got := net.JoinHostPort(addr[0], addr[1])
			if newPrimary != nil && got != newPrimary.Addr() {
				return fmt.Errorf("sentinel %s reports master %s, another %s", s.sentinels[i].Addr(), got, newPrimary.Addr())
			}
			for _, r := range s.replicas {
				if r.Addr() == got {
					newPrimary = r
				}
			}
			if newPrimary == nil {
				return fmt.Errorf("sentinel %s reports master %s", s.sentinels[i].Addr(), got)
			}
			// The leading sentinel reports the new master as soon as it
			// starts pointing the other replicas at it, before it announces
			// it (+switch-master): wait for the end of its failover, so that
			// the old primary is not demoted before clients are told.
			m, err := a.Master(ctx, s.name).Result()
			if err != nil {
				return fmt.Errorf("sentinel %s: %w", s.sentinels[i].Addr(), err)
			}
			if strings.Contains(m["flags"], "failover_in_progress") {
				return fmt.Errorf("sentinel %s still fails over (%s)", s.sentinels[i].Addr(), m["failover-state"])
			}
		}
		return role(ctx, newPrimary, "master")
	})

	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: oldPrimary.Addr(), MaxRetries: -1})
	defer c.Close()
	if err := c.ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(newPrimary.Port())).Err(); err != nil {
		t.Fatalf("failover: replicaof on old primary %s: %v", oldPrimary.Addr(), err)
	}
	waitInSync(t, oldPrimary, newPrimary)

	var replicas []*Server
	for _, r := range s.replicas {
		if r != newPrimary {
			replicas = append(replicas, r)
		}
	}
	s.primary, s.replicas = newPrimary, append(replicas, oldPrimary)
	return newPrimary
}

// admins returns one sentinel client per sentinel; the caller closes them.
func (s *Sentinel) admins() []*redis.SentinelClient {
	admins := make([]*redis.SentinelClient, len(s.sentinels))
	for i, srv := range s.sentinels {
		admins[i] = redis.NewSentinelClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	}
	return admins
}

// closeAll closes sentinel clients.
func closeAll(cs []*redis.SentinelClient) {
	for _, c := range cs {
		_ = c.Close()
	}
}

// knowsAll checks that a sentinel knows master name, each of its replicas
// with a working link, and the other sentinels.
func knowsAll(ctx context.Context, a *redis.SentinelClient, name string, replicas []*Server) error {
	m, err := a.Master(ctx, name).Result()
	if err != nil {
		return err
	}
	if m["flags"] != "master" {
		return fmt.Errorf("master flags %q", m["flags"])
	}
	if got, want := m["num-other-sentinels"], strconv.Itoa(sentinelCount-1); got != want {
		return fmt.Errorf("num-other-sentinels %s, want %s", got, want)
	}
	known, err := a.Replicas(ctx, name).Result()
	if err != nil {
		return err
	}
	for _, want := range replicas {
		if !slices.ContainsFunc(known, func(r map[string]string) bool {
			return r["port"] == strconv.Itoa(want.Port()) && r["flags"] == "slave" && r["master-link-status"] == "ok"
		}) {
			return fmt.Errorf("replica on port %d not known and healthy: %v", want.Port(), known)
		}
	}
	return nil
}

// waitInSync waits until replica reports an up link to primary.
func waitInSync(t testing.TB, replica, primary *Server) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: replica.Addr(), MaxRetries: -1})
	defer c.Close()
	waitFor(t, syncTimeout, replica.Addr()+" in sync with "+primary.Addr(), func(ctx context.Context) error {
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if got := infoField(info, "master_port"); got != strconv.Itoa(primary.Port()) {
			return fmt.Errorf("master_port %q", got)
		}
		if got := infoField(info, "master_link_status"); got != "up" {
			return fmt.Errorf("master_link_status %q", got)
		}
		return nil
	})
}

// role checks that srv reports the given replication role.
func role(ctx context.Context, srv *Server, want string) error {
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	defer c.Close()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	if got := infoField(info, "role"); got != want {
		return errors.New(srv.Addr() + " has role " + strings.TrimSpace(got) + ", want " + want)
	}
	return nil
}
