package lock_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/solo-run/solo/internal/hooks"
	"github.com/solo-run/solo/leader/lock"
)

// hookStore is an in-memory hooks.Store (WithHooks' NewLockStore) whose
// release replies come replyDelay after the release executed.
type hookStore struct {
	mu           sync.Mutex
	field        string
	count        int64
	term         uint64
	replyDelay   time.Duration // a release's reply comes this late
	reenterDelay time.Duration // a re-entry executes this late
	releaseDelay time.Duration // a release executes this late
}

func (s *hookStore) Acquire(_ context.Context, owner string, adopt []string, reenter string, _ bool) (hooks.AcquireReply, error) {
	if reenter != "" {
		time.Sleep(s.reenterDelay)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if reenter != "" {
		if s.field != reenter {
			return hooks.AcquireReply{Code: hooks.CodeGone}, nil
		}
		s.count++
		return hooks.AcquireReply{Code: hooks.CodeReentered, Count: s.count}, nil
	}
	if s.field != "" {
		if slices.Contains(adopt, s.field[strings.IndexByte(s.field, ' ')+1:]) {
			return hooks.AcquireReply{Code: hooks.CodeAdopted, Term: s.term, Field: s.field}, nil
		}
		return hooks.AcquireReply{Code: hooks.CodeHeld, Holder: s.field, PTTL: time.Second}, nil
	}
	s.term++
	s.field, s.count = strconv.FormatUint(s.term, 10)+" "+owner, 1
	return hooks.AcquireReply{Code: hooks.CodeAcquired, Term: s.term}, nil
}

func (s *hookStore) Renew(_ context.Context, field string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.field == field, nil
}

func (s *hookStore) Release(_ context.Context, field string, last bool) (int64, error) {
	time.Sleep(s.releaseDelay)
	s.mu.Lock()
	n := int64(-1)
	if s.field == field {
		s.count--
		if last || s.count == 0 {
			s.field, s.count = "", 0
		}
		n = s.count
	}
	d := s.replyDelay
	s.mu.Unlock()
	time.Sleep(d)
	return n, nil
}

func (s *hookStore) Abandon(context.Context, string, []string) error { return nil }

// hookMutex returns the Mutex "x" of a Client over st (WithHooks), closed
// when the test ends.
func hookMutex(t *testing.T, st *hookStore, opts ...lock.Option) *lock.Mutex {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never used: no waiter
	t.Cleanup(func() { _ = rdb.Close() })
	opts = append(opts, lock.WithHooks(hooks.Hooks{NewLockStore: func(hooks.Lock) hooks.Store { return st }}))
	c, err := lock.NewClient(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	m, err := c.Mutex("x")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// unlockThenTake unlocks a on a goroutine and takes the lock (B) 50ms
// later, when the release executed and its reply is on its way: a's hold
// context must have ended by then, and its Unlock must succeed. It
// returns B's hold.
func unlockThenTake(t *testing.T, m *lock.Mutex, a *lock.Hold) *lock.Hold {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- a.Unlock(context.Background()) }()
	time.Sleep(50 * time.Millisecond) // the release executed; its reply is on its way
	b, err := m.TryLock(context.Background())
	if err != nil {
		t.Fatalf("B: %v", err)
	}
	if a.Context().Err() == nil {
		t.Errorf("A's hold context is still live while B holds term %d", b.Term())
	}
	if err := <-done; err != nil {
		t.Errorf("A's Unlock: %v", err)
	}
	return b
}

// TestUnlockCancelsBeforeTheLockPasses: the last Unlock ends the hold's
// context before its release can let another owner in, not when the
// release's reply comes back. Found by the simulator (internal/sim,
// TestSim_Lock seed 1: "c0's hold of term …884028 starts while c0's hold
// of term …730340 is live"). Before the fix: "A's hold context is still
// live while B holds term 2".
func TestUnlockCancelsBeforeTheLockPasses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &hookStore{replyDelay: 100 * time.Millisecond}
		m := hookMutex(t, st)
		a, err := m.TryLock(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		b := unlockThenTake(t, m, a)
		if cause := context.Cause(a.Context()); !errors.Is(cause, lock.ErrUnlocked) {
			t.Errorf("A's cause = %v, want ErrUnlocked", cause)
		}
		if err := b.Unlock(context.Background()); err != nil {
			t.Error(err)
		}
	})
}

// TestUnlockWithReentryInFlight: an Unlock that is not the term's last
// (a re-entry is in flight: counted by the Client, not yet by Redis) still
// brings Redis's count to zero and deletes the lock; the hold's context
// must end before that release is sent. Found by the simulator
// (TestSim_Lock seed 12: "c2's hold of term …072647 starts while c3's hold
// of term …838611 is live"). Before the fix: "A's hold context is still
// live while B holds term 2".
func TestUnlockWithReentryInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &hookStore{replyDelay: 100 * time.Millisecond, reenterDelay: 300 * time.Millisecond}
		m := hookMutex(t, st)
		a, err := m.TryLock(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		reentered := make(chan error, 1)
		go func() {
			h, err := m.TryLock(lock.WithHold(context.Background(), a))
			if err == nil {
				err = errors.New("re-entered a released term")
				_ = h.Unlock(context.Background())
			}
			reentered <- err
		}()
		time.Sleep(10 * time.Millisecond) // the re-entry is in flight
		b := unlockThenTake(t, m, a)
		if err := <-reentered; !errors.Is(err, lock.ErrLockLost) {
			t.Errorf("re-entry: %v, want ErrLockLost", err)
		}
		if err := b.Unlock(context.Background()); err != nil {
			t.Error(err)
		}
	})
}

// TestReentryRacingTheLastUnlock: a
// re-entry that starts while the term's last Unlock is under way (its
// release sent, not yet run) must not return a hold: the release deletes
// whatever the count. Before the fix the re-entry was counted in Redis
// and returned a hold whose context had already ended, with a nil error
// ("re-entry returned a dead hold with a nil error"). Now it takes the
// lock anew: here TryLock, so ErrNotObtained while the release is on its
// way.
func TestReentryRacingTheLastUnlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &hookStore{releaseDelay: 100 * time.Millisecond}
		m := hookMutex(t, st)
		a, err := m.TryLock(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- a.Unlock(context.Background()) }()
		time.Sleep(10 * time.Millisecond) // the last release is on its way
		h, err := m.TryLock(lock.WithHold(context.Background(), a))
		switch {
		case err == nil && h.Context().Err() != nil:
			t.Fatal("re-entry returned a dead hold with a nil error")
		case err == nil:
			t.Fatalf("re-entered term %d while its last Unlock was under way", h.Term())
		case !errors.Is(err, lock.ErrNotObtained):
			t.Fatalf("re-entry: %v, want ErrNotObtained", err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		b, err := m.TryLock(lock.WithHold(context.Background(), a))
		if err != nil {
			t.Fatalf("after the release: %v", err)
		}
		if b.Term() == a.Term() {
			t.Fatal("took the released term again")
		}
		_ = b.Unlock(context.Background())
	})
}

// failingRenewStore is hookStore whose renewals fail.
type failingRenewStore struct{ hookStore }

func (s *failingRenewStore) Renew(context.Context, string) (bool, error) {
	return false, errors.New("link down")
}

// blockingCore is a zap core whose Warn writes block until release is
// closed: a full stderr pipe.
type blockingCore struct {
	zapcore.LevelEnabler
	entered chan struct{}
	once    sync.Once
	release chan struct{}
}

func (c *blockingCore) With([]zapcore.Field) zapcore.Core { return c }
func (c *blockingCore) Sync() error                       { return nil }
func (c *blockingCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if e.Level >= zapcore.WarnLevel {
		return ce.AddCore(e, c)
	}
	return ce
}
func (c *blockingCore) Write(zapcore.Entry, []zapcore.Field) error {
	c.once.Do(func() { close(c.entered) })
	<-c.release
	return nil
}

// TestUnlockNotDelayedByBlockedLog: the watchdog logs a failed renewal
// after it let go of the lease's watchdog lock, so Unlock does not wait for
// a blocked log sink. Found by the simulator (TestSim_Lock under -race: a
// bubble hung with Unlock blocked on the watchdog's mutex while the
// watchdog was in a stalled log write). Real time, not synctest: before the
// fix a bubble would hang for ever. Before the fix: "Unlock still blocked
// 2s after it was called, behind a blocked log write".
func TestUnlockNotDelayedByBlockedLog(t *testing.T) {
	core := &blockingCore{LevelEnabler: zapcore.DebugLevel, entered: make(chan struct{}), release: make(chan struct{})}
	defer close(core.release)
	st := &failingRenewStore{}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never used: no waiter
	defer rdb.Close()
	c, err := lock.NewClient(rdb, lock.WithLogger(zap.New(core)),
		lock.WithConfig(lock.Config{TTL: 10 * time.Second, RenewInterval: 10 * time.Millisecond, RenewDeadline: 5 * time.Second}),
		lock.WithHooks(hooks.Hooks{NewLockStore: func(hooks.Lock) hooks.Store { return st }}))
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Mutex("x")
	if err != nil {
		t.Fatal(err)
	}
	h, err := m.TryLock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	<-core.entered // the watchdog's warning about the failed renewal blocks
	done := make(chan error, 1)
	go func() { done <- h.Unlock(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Unlock: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Errorf("Unlock still blocked 2s after it was called, behind a blocked log write")
		core.release <- struct{}{} // let it go (the deferred close follows)
		<-done
	}
	_ = c.Close()
}
