package leader_test

import (
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/leadertest"
)

// conformanceRun numbers the elections of the conformance suites, so that
// every subtest (and every run of it, with -count) starts empty on a
// shared server.
var conformanceRun atomic.Int64

// conformanceConfig is a fresh election on a server shared by subtests.
func conformanceConfig(t *testing.T) leader.Config {
	return leader.Config{Name: electionName(t) + "." + strconv.FormatInt(conformanceRun.Add(1), 10)}
}

// TestConformance_RedisStore runs the store conformance suite against
// RedisStore over a real redis-server.
func TestConformance_RedisStore(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	leadertest.TestStore(t, func(t *testing.T) leader.Store {
		l, err := leader.NewRedisStore(c, conformanceConfig(t))
		if err != nil {
			t.Fatal(err)
		}
		return l
	})
}

// TestConformance_HubRedisStore runs the store conformance suite against
// RedisStores sharing one Hub: its pub/sub connection and batched renewals.
func TestConformance_HubRedisStore(t *testing.T) {
	srv := redistest.Start(t)
	hub := leader.NewHub(newClient(t, srv.Addr()))
	t.Cleanup(func() { _ = hub.Close() })
	leadertest.TestStore(t, func(t *testing.T) leader.Store {
		l, err := hub.NewRedisStore(conformanceConfig(t))
		if err != nil {
			t.Fatal(err)
		}
		return l
	})
}
