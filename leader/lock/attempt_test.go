package lock_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader/lock"
)

// The tests of this file reproduce, against a real redis-server, the ways
// a cleanup or a late attempt acted on another attempt's hold before every
// attempt had an owner of its own: a
// go-redis hook delays chosen script calls, either their reply (the
// script runs at once) or the request itself (it reaches the server later,
// on a connection of its own, after its caller gave up, as bytes already
// written on a slow connection do).

// scriptNames maps the SHA1 of each of the lock's scripts to its file
// name without ".lua", and loads them into rdb (a delayed EVALSHA must
// find its script).
func scriptNames(t testing.TB, rdb *redis.Client) map[string]string {
	t.Helper()
	files, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	for _, f := range files {
		name, ok := strings.CutSuffix(f.Name(), ".lua")
		if !ok {
			continue
		}
		src, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		names[redis.NewScript(string(src)).Hash()] = name
		if err := rdb.ScriptLoad(context.Background(), string(src)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return names
}

// lag is what a laggard does to one script call.
type lag struct {
	before  time.Duration // the script runs this late (the caller waits)
	reply   time.Duration // then its reply comes this late
	request time.Duration // the request reaches the server this late, after the caller gave up (at its context's end)
	// copy: the script runs at once but its reply is lost, and a copy of
	// the request (go-redis re-sending it after a dropped connection)
	// reaches the server this late.
	copy time.Duration
}

// laggard is a go-redis hook that delays the script calls rule picks, by
// script name and by how many calls of that script came before (n from
// 0). A delayed request is sent by late, a client of its own, so that
// the caller's own command is never written twice.
type laggard struct {
	t     testing.TB
	names map[string]string
	late  *redis.Client
	rule  func(script string, n int) lag

	mu    sync.Mutex
	count map[string]int
	wg    sync.WaitGroup // delayed requests
	sent  []string       // scripts whose delayed request reached the server
}

func newLaggard(t testing.TB, srv *redistest.Server, rule func(script string, n int) lag) *laggard {
	late := newRedis(t, srv.Addr())
	g := &laggard{t: t, names: scriptNames(t, late), late: late, rule: rule, count: map[string]int{}}
	t.Cleanup(g.wg.Wait)
	return g
}

// landed waits until every delayed request reached the server.
func (g *laggard) landed() { g.wg.Wait() }

func (g *laggard) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *laggard) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (g *laggard) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) < 2 || !strings.EqualFold(cmd.Name(), "evalsha") {
			return next(ctx, cmd)
		}
		sha, _ := args[1].(string)
		script := g.names[sha]
		g.mu.Lock()
		n := g.count[script]
		g.count[script]++
		g.mu.Unlock()
		l := g.rule(script, n)
		switch {
		case l.copy > 0:
			if err := next(ctx, cmd); err != nil {
				return err
			}
			g.wg.Go(func() { g.send(l.copy, script, args) })
			cmd.SetErr(errors.New("laggard: reply lost"))
			return cmd.Err()
		case l.request > 0:
			landed := make(chan struct{})
			g.wg.Go(func() {
				defer close(landed)
				g.send(l.request, script, args)
			})
			// The caller gives up at its context's end (the inline
			// deadline, the goroutine mode's bound); its request is on
			// its way all the same.
			select {
			case <-ctx.Done():
				cmd.SetErr(ctx.Err())
			case <-landed:
				cmd.SetErr(errors.New("laggard: reply lost"))
			}
			return cmd.Err()
		case l.before > 0 || l.reply > 0:
			time.Sleep(l.before)
			err := next(ctx, cmd)
			time.Sleep(l.reply)
			return err
		}
		return next(ctx, cmd)
	}
}

// send sends args (script's request) after d on the laggard's own client.
func (g *laggard) send(d time.Duration, script string, args []any) {
	time.Sleep(d)
	if err := g.late.Do(context.Background(), args...).Err(); err != nil && !errors.Is(err, redis.Nil) {
		g.t.Errorf("delayed %s: %v", script, err)
	}
	g.mu.Lock()
	g.sent = append(g.sent, script)
	g.mu.Unlock()
}

// lockExists reports whether name's lock hash exists, and its PTTL.
func lockExists(t testing.TB, rdb *redis.Client, name string) (bool, time.Duration) {
	t.Helper()
	d, err := rdb.PTTL(context.Background(), "solo:{"+name+"}:lock").Result()
	if err != nil {
		t.Fatal(err)
	}
	return d != -2, d
}

// lockStays reports whether name's lock is still held after up to d (it
// polls until the lock is gone), and its PTTL then.
func lockStays(t testing.TB, rdb *redis.Client, name string, d time.Duration) (bool, time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
		held, pttl := lockExists(t, rdb, name)
		if !held || time.Now().After(end) {
			return held, pttl
		}
	}
}

// TestAttempt_StaleReleaseNeverFreesTheRetry: an acquire lands
// late and its reply comes after the renew deadline, so the hold is handed
// back with a release; the release is still on its way when its bound
// passes and Lock retries. The
// retry must not adopt the handed-back hold (it was the same owner, and
// the stale release then deleted the adopted lock, letting another owner
// in while the first hold's context lived). Before the fix: "two holders:
// B took term … while A's hold of term … is live".
func TestAttempt_StaleReleaseNeverFreesTheRetry(t *testing.T) {
	srv, rdb := startRedis(t)
	name := lockName(t)
	cfg := lock.Config{TTL: 1500 * time.Millisecond, RenewInterval: 500 * time.Millisecond, RenewDeadline: time.Second,
		RetryInterval: 100 * time.Millisecond}
	g := newLaggard(t, srv, func(script string, n int) lag {
		switch {
		case script == "acquire" && n == 0:
			// Runs near the renew deadline (so the key outlives the
			// hand-back's bound), confirmed after it.
			return lag{before: 950 * time.Millisecond, reply: 100 * time.Millisecond}
		case script == "release" && n == 0:
			return lag{request: 1200 * time.Millisecond} // the hand-back lands after its bound
		}
		return lag{}
	})
	// A client without deadlines, with inline calls: the late reply is
	// the call's return (WithInlineCalls).
	arb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = arb.Close() })
	arb.AddHook(g)
	a := mustMutex(t, newLockClient(t, arb, lock.WithConfig(cfg), lock.WithInlineCalls()), name)
	b := mustMutex(t, newLockClient(t, rdb, lock.WithConfig(cfg)), name)

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ha, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g.landed() // the stale release reached the server
	hb, err := b.TryLock(ctx)
	if err == nil {
		if ha.Context().Err() == nil {
			t.Fatalf("two holders: B took term %d while A's hold of term %d is live", hb.Term(), ha.Term())
		}
		_ = hb.Unlock(ctx)
	} else if !errors.Is(err, lock.ErrNotObtained) {
		t.Fatal(err)
	}
	if err := ha.Unlock(ctx); err != nil && ha.Context().Err() == nil {
		t.Fatal(err)
	}
}

// TestAttempt_AbandonIsRightInEitherOrder: a TryLock gives up
// while its request is still on its way on a slow connection; its abandon
// goes on another connection and lands first. The request must take
// nothing when it lands. Before the fix: "the lock is held by nobody for
// its TTL (PTTL …) after the TryLock gave up".
func TestAttempt_AbandonIsRightInEitherOrder(t *testing.T) {
	srv, rdb := startRedis(t)
	name := lockName(t)
	g := newLaggard(t, srv, func(script string, n int) lag {
		if script == "acquire" && n == 0 {
			return lag{request: 300 * time.Millisecond}
		}
		return lag{}
	})
	arb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = arb.Close() })
	arb.AddHook(g)
	c := newLockClient(t, arb, lock.WithConfig(lock.Config{TTL: 5 * time.Second}))
	m := mustMutex(t, c, name)

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if _, err := m.TryLock(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryLock: %v, want a deadline", err)
	}
	g.landed()
	// The abandon is sent by a goroutine of the Client's: give it a
	// little while (the lock's TTL is 5s).
	if held, pttl := lockStays(t, rdb, name, 2*time.Second); held {
		t.Fatalf("the lock is held by nobody for its TTL (PTTL %s) after the TryLock gave up", pttl)
	}
	if _, err := mustMutex(t, newLockClient(t, rdb), name).TryLock(t.Context()); err != nil {
		t.Fatalf("another owner: %v", err)
	}
}

// TestAttempt_EarlierAttemptLandingAfterUnlock: a Lock call's
// first attempt lands late, and the caller unlocks before it does. Either
// the attempt is stalled on its connection and the retry takes the lock
// ("stalled"), or it ran at once, its reply was lost, the retry adopted
// its hold, and a copy of its request (go-redis re-sending it) is stalled
// ("copy"). When the late request lands, it must take nothing (before the
// fix it took the lock for an owner that no longer existed: "held by
// nobody for its TTL"), and with WithFair it must not queue the finished
// call (before: the next waiter waited for the dead call's slot, "C
// waited …"). The adopted owner of "copy" is abandoned when its hold's
// term ends.
func TestAttempt_EarlierAttemptLandingAfterUnlock(t *testing.T) {
	for _, tc := range []struct {
		name string
		fair bool
		lag  lag
	}{
		{"plain/stalled", false, lag{request: 1600 * time.Millisecond}},
		{"fair/stalled", true, lag{request: 1600 * time.Millisecond}},
		{"plain/copy", false, lag{copy: 1600 * time.Millisecond}},
		{"fair/copy", true, lag{copy: 1600 * time.Millisecond}},
	} {
		fair := tc.fair
		t.Run(tc.name, func(t *testing.T) {
			srv, rdb := startRedis(t)
			name := lockName(t)
			cfg := lock.Config{TTL: 1500 * time.Millisecond, RenewInterval: 500 * time.Millisecond,
				RenewDeadline: time.Second, RetryInterval: 100 * time.Millisecond}
			opts := []lock.Option{lock.WithConfig(cfg)}
			if fair {
				opts = append(opts, lock.WithFair())
			}
			acquire := "acquire"
			if fair {
				acquire = "fair_acquire"
			}
			g := newLaggard(t, srv, func(script string, n int) lag {
				if script == acquire && n == 0 {
					return tc.lag
				}
				return lag{}
			})
			// The default go-redis client (no deadlines): the call is
			// bounded by RenewDeadline on a goroutine of its own.
			arb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			t.Cleanup(func() { _ = arb.Close() })
			arb.AddHook(g)
			a := mustMutex(t, newLockClient(t, arb, opts...), name)
			b := mustMutex(t, newLockClient(t, rdb, opts...), name)

			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			ha, err := a.Lock(ctx) // the first attempt stalls; the retry takes it
			if err != nil {
				t.Fatal(err)
			}
			if err := ha.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if !fair {
				g.landed()
				if held, pttl := lockStays(t, rdb, name, time.Second); held {
					t.Fatalf("held by nobody for its TTL (PTTL %s) after the only caller unlocked", pttl)
				}
				return
			}
			// Fair: B holds when the late attempt lands, which would
			// queue A's finished call; then C waits behind it.
			hb, err := b.TryLock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			g.landed()
			cm := mustMutex(t, newLockClient(t, rdb, opts...), name)
			got := make(chan time.Time, 1)
			go func() {
				hc, err := cm.Lock(ctx)
				if err != nil {
					t.Error(err)
					got <- time.Time{}
					return
				}
				got <- time.Now()
				_ = hc.Unlock(context.Background())
			}()
			time.Sleep(100 * time.Millisecond) // C queued
			released := time.Now()
			if err := hb.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			at := <-got
			// The dead call's slot would last 2 TTL + RetryInterval
			// (3.1s); C should take it about one round trip after B's
			// release. One TTL is far from both.
			if waited := at.Sub(released); waited > cfg.TTL {
				t.Fatalf("C waited %s after B's release: A's finished call was queued ahead of it", waited)
			}
		})
	}
}

// TestAttempt_RedlockUndoNeverHitsTheNextAttempt: a Redlock
// attempt without a quorum undoes its partial acquisitions on every
// master; the undo to a slow master lands during the next attempt. Before
// every attempt had an owner of its own the next attempt adopted that
// master's key, counted it in its quorum, and the late undo deleted it:
// another owner then formed a quorum while the first hold lived ("two
// quorums: B took term … while A's hold of term … is live").
func TestAttempt_RedlockUndoNeverHitsTheNextAttempt(t *testing.T) {
	srvs := startMasters(t, 3)
	name := lockName(t)
	cfg := lock.Config{TTL: 3 * time.Second, RenewInterval: time.Second, RenewDeadline: 2 * time.Second,
		RetryInterval: 100 * time.Millisecond}
	// Master 2 is held by another owner for a while: A's first attempt
	// wins master 0 only, as master 1 answers too late.
	m2 := newRedis(t, srvs[2].Addr())
	if err := m2.HSet(t.Context(), "solo:{"+name+"}:lock", "1 Y", 1).Err(); err != nil {
		t.Fatal(err)
	}
	m2.PExpire(t.Context(), "solo:{"+name+"}:lock", 10*time.Second)
	g := newLaggard(t, srvs[1], func(script string, n int) lag {
		switch {
		case script == "acquire" && n == 0:
			return lag{reply: 400 * time.Millisecond} // runs at once, answers after acquireWait
		case script == "redlock_undo" && n == 0:
			return lag{request: 1200 * time.Millisecond} // lands during A's next attempts
		}
		return lag{}
	})
	masters := make([]redis.UniversalClient, 3)
	for i, s := range srvs {
		c := newRedis(t, s.Addr())
		if i == 1 {
			c.AddHook(g)
		}
		masters[i] = c
	}
	ac, err := lock.NewRedlockClient(masters, lock.WithConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ac.Close() })
	a := mustMutex(t, ac, name)
	b := mustMutex(t, newRedlock(t, srvs, lock.WithConfig(cfg)), name)

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ha, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g.landed() // the first attempt's undo reached master 1
	m2.Del(ctx, "solo:{"+name+"}:lock")
	hb, err := b.TryLock(ctx)
	if err == nil {
		if ha.Context().Err() == nil {
			t.Fatalf("two quorums: B took term %d while A's hold of term %d is live", hb.Term(), ha.Term())
		}
		_ = hb.Unlock(ctx)
	} else if !errors.Is(err, lock.ErrNotObtained) {
		t.Fatal(err)
	}
	_ = ha.Unlock(ctx)
}

// TestAttempt_ReentryOnlyThroughItsClient: a context carrying
// a hold of one Client, used with another Client's Mutex of the same name
// (another Redis), must not re-enter the first hold there, nor end it.
// Before the fix: "A's hold ended: … lock lost".
func TestAttempt_ReentryOnlyThroughItsClient(t *testing.T) {
	_, r1 := startRedis(t)
	_, r2 := startRedis(t)
	name := lockName(t)
	a := mustMutex(t, newLockClient(t, r1), name)
	b := mustMutex(t, newLockClient(t, r2), name)
	ha, err := a.TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	hb, err := b.TryLock(ha.Context())
	if err != nil {
		t.Fatalf("B: %v", err)
	}
	if err := ha.Context().Err(); err != nil {
		t.Fatalf("A's hold ended: %v", context.Cause(ha.Context()))
	}
	if hb.Term() == ha.Term() && lock.Field(hb) == lock.Field(ha) {
		t.Fatal("B re-entered A's hold")
	}
	if err := hb.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := ha.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestAttempt_RenewChecksTheOwner: a hold whose lock was
// deleted behind its back, and then taken by another owner, must be lost
// at its next renewal, not keep renewing the other owner's lock. Mutation
// check: renew.lua without its HEXISTS owner check fails with "A's hold is
// still live 1.5s after B took the lock".
func TestAttempt_RenewChecksTheOwner(t *testing.T) {
	_, rdb := startRedis(t)
	name := lockName(t)
	cfg := lock.WithConfig(lock.Config{TTL: 3 * time.Second, RenewInterval: 200 * time.Millisecond, RenewDeadline: 2 * time.Second})
	a := mustMutex(t, newLockClient(t, rdb, cfg), name)
	b := mustMutex(t, newLockClient(t, rdb, cfg), name)
	ha, err := a.TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(t.Context(), "solo:{"+name+"}:lock").Err(); err != nil {
		t.Fatal(err)
	}
	hb, err := b.TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hb.Unlock(context.Background()) }()
	// Several renewal intervals, well inside the renew deadline.
	select {
	case <-ha.Context().Done():
	case <-time.After(1500 * time.Millisecond):
		t.Fatal("A's hold is still live 1.5s after B took the lock")
	}
	if cause := context.Cause(ha.Context()); !errors.Is(cause, lock.ErrLockLost) {
		t.Fatalf("A's cause = %v, want ErrLockLost", cause)
	}
}

// TestAttempt_RedlockLateAcquireAfterUnlock: a Redlock hold's acquire on
// a slow master lands after the hold's Unlock. The release by owner on
// that master leaves a tombstone, so the late acquire takes nothing
// (found by the simulator's connection model, "R": before, the master
// kept the finished call's lock for a TTL: "master 2 is held by a finished
// call's owner (PTTL 4.99s)").
func TestAttempt_RedlockLateAcquireAfterUnlock(t *testing.T) {
	srvs := startMasters(t, 3)
	name := lockName(t)
	g := newLaggard(t, srvs[2], func(script string, n int) lag {
		if script == "acquire" && n == 0 {
			return lag{before: 500 * time.Millisecond} // runs after the Unlock
		}
		return lag{}
	})
	masters := make([]redis.UniversalClient, 3)
	for i, s := range srvs {
		c := redis.NewClient(&redis.Options{Addr: s.Addr()}) // waits for the slow call
		t.Cleanup(func() { _ = c.Close() })
		if i == 2 {
			c.AddHook(g)
		}
		masters[i] = c
	}
	ac, err := lock.NewRedlockClient(masters, lock.WithConfig(lock.Config{TTL: 5 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ac.Close() })
	// Background, not t.Context(): master 2's call outlives the test's
	// body until the Client closes.
	h, err := mustMutex(t, ac, name).Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Master 2's acquire runs about 500ms after Lock began: watch the
	// master until well after that (it must never hold the lock), then
	// close the Client, which waits for that call.
	m2 := newRedis(t, srvs[2].Addr())
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if held, pttl := lockExists(t, m2, name); held {
			_ = ac.Close()
			t.Fatalf("master 2 is held by a finished call's owner (PTTL %s)", pttl)
		}
	}
	_ = ac.Close()
}
