package leader_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/leadertest"
)

// changeLog collects what an observer reports, as "kind who" lines.
type changeLog struct {
	mu    sync.Mutex
	lines []string
	names map[string]string // elector ID → test name
}

func (l *changeLog) add(c leader.Change) {
	l.mu.Lock()
	defer l.mu.Unlock()
	who := l.names[c.Holder.ID]
	if who == "" {
		who = c.Holder.ID
	}
	l.lines = append(l.lines, c.Kind.String()+" "+who)
}

func (l *changeLog) get() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, ", ")
}

func TestObserve_ReportsEveryChangeWithoutPolling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := leadertest.New()
		cfg := fastConfig("a") // TTL 3s
		a := newElector(t, lock, cfg)
		b := newElector(t, lock, fastConfig("b"))
		obs := newElector(t, lock, fastConfig("observer")) // only observes
		log := &changeLog{names: map[string]string{a.ID(): "a", b.ID(): "b"}}
		octx, ostop := context.WithCancel(context.Background())
		observed := make(chan error, 1)
		go func() { observed <- obs.Observe(octx, log.add) }()

		recA, recB := newRecorder(), newRecorder()
		stopA := run(t, a, recA.fn("a"))
		<-recA.started
		synctest.Wait()
		// At rest: one read of the lease per holder TTL, not a poll.
		before := lock.Calls(leadertest.OpInspect)
		time.Sleep(10 * cfg.TTL)
		if n := lock.Calls(leadertest.OpInspect) - before; n > 11 {
			t.Fatalf("%d lease reads in 10 TTLs at rest, want about one per TTL", n)
		}

		// A graceful stop: released, then b (already waiting) is elected.
		stopB := run(t, b, recB.fn("b"))
		synctest.Wait()
		_ = stopA()
		<-recB.started
		synctest.Wait()

		// A resign request: resigned; then a, running again, takes over.
		stopA = run(t, a, recA.fn("a"))
		synctest.Wait()
		if _, err := lock.RequestResign(context.Background(), b.Term()); err != nil {
			t.Fatal(err)
		}
		<-recA.started
		synctest.Wait()

		// A crash: the lease vanishes without a notice (Redis lost it, or
		// a holder that stopped renewing ran out): expired.
		_ = stopB()
		lock.SetBefore(func(_ context.Context, op leadertest.Op) error {
			if op == leadertest.OpRenew || op == leadertest.OpAcquire {
				return fmt.Errorf("partitioned")
			}
			return nil
		})
		lock.Expire()
		time.Sleep(2 * cfg.TTL)
		synctest.Wait()

		ostop()
		if err := <-observed; err != nil {
			t.Fatalf("Observe() = %v", err)
		}
		want := "elected a, released a, elected b, resigned b, elected a, expired a"
		if got := log.get(); got != want {
			t.Fatalf("changes:\n got %s\nwant %s", got, want)
		}
		lock.SetBefore(nil)
		_ = stopA()
	})
}

func TestRedis_ObserveFollowsHandoffsByNotice(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	cfg := redisConfig(t, "a")
	cfg.TTL, cfg.RetryInterval = 20*time.Second, 10*time.Second // a poll would show as a 10s wait
	cfgB := cfg
	cfgB.ID = "b"
	a, b := mustNew(t, c, cfg), mustNew(t, c, cfgB)
	log := &changeLog{names: map[string]string{a.ID(): "a", b.ID(): "b"}}
	changes := make(chan leader.Change, 10)
	octx, ostop := context.WithCancel(context.Background())
	defer ostop()
	go func() {
		_ = leader.Observe(octx, c, leader.Config{Name: cfg.Name}, func(ch leader.Change) {
			log.add(ch)
			changes <- ch
		})
	}()
	next := func(want string) {
		t.Helper()
		select {
		case <-changes:
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s within 5s; changes so far: %s", want, log.get())
		}
	}
	stopA := runRedis(t, a, func(ctx context.Context) error { <-ctx.Done(); return nil })
	next("elected a")
	runRedis(t, b, func(ctx context.Context) error { <-ctx.Done(); return nil })
	waitFor(t, 5*time.Second, "b observes a", func() bool { return b.Status().Holder.ID == a.ID() })
	waitSubscribed(t, c, cfg.EventsChannel(), 3) // a, b and the observer
	_ = stopA()
	next("released a")
	next("elected b")
	if got, want := log.get(), "elected a, released a, elected b"; got != want {
		t.Fatalf("changes %q, want %q", got, want)
	}
}
