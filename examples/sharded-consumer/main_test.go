package main

import (
	"strconv"
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
// 4,000 messages are produced in two halves, SIGKILLs one of them after it
// stored a batch and starts it again before the second half: every message
// ends up stored exactly once, every instance wrote some, and no stale
// write was accepted. The test waits on what the processes log (a batch
// stored, a shard started), never on a sleep: under CI load a consumer
// killed on a timer may have stored nothing yet.
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
	produce := func(from, n int) {
		t.Helper()
		prod := proctest.Start(t, "produce", bin, nil, append([]string{"produce", "-from", strconv.Itoa(from), "-n", strconv.Itoa(n), "-rate", "2000"}, common...)...)
		if code, err := prod.Wait(30 * time.Second); err != nil || code != 0 {
			t.Fatalf("produce: exit %d, %v", code, err)
		}
	}
	a, b := consumer("a"), consumer("b")
	c := consumer("c")
	// c must hold shards before the first half goes out, and store some of
	// it before it is killed.
	if _, _, err := c.Await(0, 10*time.Second, proctest.Msg("shard started")); err != nil {
		t.Fatal(err)
	}
	produce(1, 2000)
	if _, _, err := c.Await(0, 20*time.Second, proctest.Msg("first batch stored")); err != nil {
		t.Fatal(err)
	}
	if err := c.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _ = c.Wait(5 * time.Second)
	// c2 holds shards before the second half goes out: every shard's stream
	// gets messages, so c2 stores some.
	c2 := consumer("c2")
	if _, _, err := c2.Await(0, 20*time.Second, proctest.Msg("shard started")); err != nil {
		t.Fatal(err)
	}
	produce(2001, 2000)
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
