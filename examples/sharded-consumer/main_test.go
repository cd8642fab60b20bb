package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/solo-run/solo/examples/internal/proctest"
	"github.com/solo-run/solo/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestShardedConsumer runs 3 real consumer processes on 16 shards while
// 4,000 messages are produced, SIGKILLs one of them mid-way and starts it
// again: every message ends up stored exactly once, every instance wrote
// some, and no stale write was accepted.
//
// Mutation check: with the position update removed from the fenced
// transaction, a shard that moved re-reads its stream from the start, its
// inserts hit the unique key and fail, the shard stalls, and the test fails
// with "check: exit 1" (messages missing) at its deadline.
func TestShardedConsumer(t *testing.T) {
	bin := proctest.Build(t, ".")
	srv := redistest.Start(t)
	db := t.TempDir() + "/orders.db"
	common := []string{"-redis", "redis://" + srv.Addr() + "/0", "-db", db}
	consumer := func(name string) *proctest.Proc {
		p := proctest.Start(t, name, bin, nil, append([]string{"consume", "-id", name, "-ttl", "1s"}, common...)...)
		if _, _, err := p.Await(0, 10*time.Second, proctest.Msg("consuming")); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b := consumer("a"), consumer("b")
	c := consumer("c")
	prod := proctest.Start(t, "produce", bin, nil, append([]string{"produce", "-n", "4000", "-rate", "2000"}, common...)...)
	// Wait until c runs shards, then kill it while messages flow.
	if _, _, err := c.Await(0, 10*time.Second, proctest.Msg("shard started")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if err := c.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _ = c.Wait(5 * time.Second)
	consumer("c2")
	if code, err := prod.Wait(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("produce: exit %d, %v", code, err)
	}
	var out string
	deadline := time.Now().Add(20 * time.Second)
	for {
		chk := proctest.Start(t, "check", bin, nil, append([]string{"check", "-n", "4000"}, common...)...)
		code, err := chk.Wait(10 * time.Second)
		out = strings.Join(chk.Lines(), "\n")
		if err == nil && code == 0 {
			break
		}
		if strings.Contains(out, "stored twice") || strings.Contains(out, "stale") || time.Now().After(deadline) {
			t.Fatalf("check: exit %d, %v:\n%s", code, err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Log(out)
	if !strings.Contains(out, "written by 4 instances") {
		t.Errorf("want the work spread over all four instances (a, b, c, c2):\n%s", out)
	}
	for _, p := range []*proctest.Proc{a, b} {
		if err := p.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code, err := p.Wait(10 * time.Second); err != nil || code != 0 {
			t.Errorf("%s: exit %d, %v", p.Name, code, err)
		}
	}
}
