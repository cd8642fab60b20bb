package main

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/solo-run/solo/examples/internal/proctest"
	"github.com/solo-run/solo/internal/pgtest"
	"github.com/solo-run/solo/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestFxPostgres runs 3 instances of the fx service as real processes
// against a real redis-server and PostgreSQL while a producer feeds the
// stream: it SIGSTOPs the leader inside a fenced transaction (each batch's
// stays open -hold), lets another instance take over, SIGCONTs the frozen
// one, then SIGKILLs the second leader. Every message is stored exactly
// once, the batches' terms never go down in commit order (no stale write
// was accepted), and the leaders claimed their terms through the guard
// the fx graph provides. It logs how long after the SIGSTOP the next
// leader stored its first batch: the lease's failover (TTL 1s) and the
// fence's (the frozen transaction ends at the guard's idle timeout).
//
// Mutation check: with workerfx.Module no longer taking the graph's
// *fence.Guard as its fence, the test fails with "c: the worker did not
// claim its term through the graph's guard: c wrote no awaited line
// within 0s" (the job's first write still claims the term, but after the
// job read its position).
func TestFxPostgres(t *testing.T) {
	bin := proctest.Build(t, ".")
	rs := redistest.Start(t)
	pg := pgtest.Start(t)
	db := pg.DB(t)
	rdb := rs.Client(t)
	start := func(id string) *proctest.Proc {
		p := proctest.Start(t, id, bin, nil, "-redis", "redis://"+rs.Addr()+"/0", "-pg", pg.DSN(),
			"-id", id, "-ttl", "1s", "-hold", "150ms")
		if _, _, err := p.Await(0, 20*time.Second, proctest.Msg("instance started")); err != nil {
			t.Fatal(err)
		}
		return p
	}
	procs := []*proctest.Proc{start("a"), start("b"), start("c")}

	// The producer: one message every 4ms until stopped.
	var produced atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(4 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			n := produced.Load() + 1
			if err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: "orders", Values: map[string]any{"n": n}}).Err(); err != nil {
				t.Errorf("XADD %d: %v", n, err)
				return
			}
			produced.Store(n)
		}
	})
	stopProducer := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopProducer()

	// leader waits for one of procs, other than those excepted, to store a
	// batch after its mark.
	leader := func(marks map[*proctest.Proc]int, except ...*proctest.Proc) *proctest.Proc {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			for _, p := range procs {
				if slices.Contains(except, p) {
					continue
				}
				if _, _, err := p.Await(marks[p], 0, proctest.Msg("batch stored")); err == nil {
					return p
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatal("no instance stored a batch within 30s")
		return nil
	}
	markAll := func() map[*proctest.Proc]int {
		m := map[*proctest.Proc]int{}
		for _, p := range procs {
			m[p] = p.Mark()
		}
		return m
	}

	first := leader(markAll())
	// Freeze it, most likely inside a batch's open transaction.
	marks := markAll()
	frozenAt := time.Now()
	if err := first.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	second := leader(marks, first)
	t.Logf("%s frozen; %s stored its first batch %v later (TTL 1s, fence idle timeout default)", first.Name, second.Name, time.Since(frozenAt).Round(10*time.Millisecond))
	if _, _, err := second.Await(marks[second], 0, proctest.Msg("term claimed in the fence")); err != nil {
		t.Errorf("%s: the worker did not claim its term through the graph's guard: %v", second.Name, err)
	}
	if err := first.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// Kill the second leader mid-stream.
	marks = markAll()
	if _, _, err := second.Await(marks[second], 20*time.Second, proctest.Msg("batch stored")); err != nil {
		t.Fatal(err)
	}
	marks = markAll()
	if err := second.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _ = second.Wait(10 * time.Second)
	third := leader(marks, second)
	if _, _, err := third.Await(marks[third], 20*time.Second, proctest.Msg("batch stored")); err != nil {
		t.Fatal(err)
	}
	stopProducer()
	n := produced.Load()

	// Wait for the last messages, then check.
	ctx := t.Context()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var stored int64
		if err := db.QueryRowContext(ctx, `SELECT count(DISTINCT n) FROM messages`).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if stored == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages stored after 30s", stored, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var rows, lo, hi int64
	if err := db.QueryRowContext(ctx, `SELECT count(*), min(n), max(n) FROM messages`).Scan(&rows, &lo, &hi); err != nil {
		t.Fatal(err)
	}
	if rows != n || lo != 1 || hi != n {
		t.Errorf("%d rows for %d messages (n %d..%d): stored twice", rows, n, lo, hi)
	}
	// In commit order (the sequence is drawn inside the fenced
	// transaction, after the check), terms never go down: a stale
	// leader's batch accepted after a newer term's would.
	rs2, err := db.QueryContext(ctx, `SELECT seq, term, instance FROM batches ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rs2.Close()
	var maxTerm int64
	holders := map[int64]string{}
	for rs2.Next() {
		var seq, term int64
		var inst string
		if err := rs2.Scan(&seq, &term, &inst); err != nil {
			t.Fatal(err)
		}
		if term < maxTerm {
			t.Errorf("batch %d of term %d (%s) committed after term %d: a stale write was accepted", seq, term, inst, maxTerm)
		}
		if h, ok := holders[term]; ok && h != inst {
			t.Errorf("term %d written by %s and %s", term, h, inst)
		}
		holders[term], maxTerm = inst, max(maxTerm, term)
	}
	if err := rs2.Err(); err != nil {
		t.Fatal(err)
	}
	if len(holders) < 3 {
		t.Errorf("%d terms wrote, want at least 3 (three leaders): %v", len(holders), holders)
	}
	t.Logf("%d messages stored exactly once by %d terms: %v", n, len(holders), holders)
	for _, p := range procs {
		if p == second {
			continue
		}
		if err := p.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code, err := p.Wait(20 * time.Second); err != nil || code != 0 {
			t.Errorf("%s: exit %d, %v", p.Name, code, err)
		}
	}
}
