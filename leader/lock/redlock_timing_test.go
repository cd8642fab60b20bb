package lock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/hooks"
)

// fakeMaster is a Redlock master over a fakeStore (the floor is not
// modelled: the fake's terms are set by the test).
type fakeMaster struct{ *fakeStore }

func (f fakeMaster) renewFloor(ctx context.Context, field, _ string) (bool, error) {
	return f.Renew(ctx, field)
}

func (f fakeMaster) renewOwner(ctx context.Context, owner, _ string) (bool, error) {
	f.mu.Lock()
	field := f.field
	f.mu.Unlock()
	if !strings.HasSuffix(field, " "+owner) {
		return false, nil
	}
	return f.Renew(ctx, field)
}

func (f fakeMaster) releaseOwner(ctx context.Context, owner, _ string) (int64, error) {
	f.mu.Lock()
	field := f.field
	f.mu.Unlock()
	if !strings.HasSuffix(field, " "+owner) {
		return -1, nil
	}
	return f.Release(ctx, field, true)
}

func (f fakeMaster) undo(ctx context.Context, owner string) error {
	return f.Abandon(ctx, callOf(owner), []string{owner})
}

func (f fakeMaster) releaseFloor(ctx context.Context, field string, last bool, _ string) (int64, error) {
	return f.Release(ctx, field, last)
}

// newFakeRedlock returns a Redlock Mutex over fakes, in the calling
// synctest bubble.
func newFakeRedlock(t *testing.T, fakes []*fakeStore, opts ...Option) (*Mutex, *Client) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never used: the masters are fake
	t.Cleanup(func() { _ = rdb.Close() })
	opts = append(opts, optionFunc(func(o *options) {
		o.newStore = func(m *Mutex) hooks.Store {
			ms := make([]master, len(fakes))
			for i, f := range fakes {
				ms[i] = fakeMaster{f}
			}
			return newQuorumOf(m, ms)
		}
	}))
	c, err := NewClient(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Mutex("x")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fakes {
		f.ttl = m.cfg.TTL
	}
	return m, c
}

var redlockTiming = WithConfig(Config{TTL: 3 * time.Second, RenewInterval: time.Second, RenewDeadline: 2 * time.Second})

// TestRedlockTiming_SlowQuorumShortensDeadline: Redlock's validity rule.
// The quorum is reached 1.5s after the send time (masters answer after
// 0.5s, 1.5s and never); the hold's term is the highest of the quorum's,
// and with renewals hanging its context ends at the send time +
// RenewDeadline (2s), only 0.5s after Lock returned: the elapsed time came
// off its validity. Mutation check: arming the deadline from the quorum's
// reply time fails with "cancelled at 3.5s, want 2s".
func TestRedlockTiming_SlowQuorumShortensDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hang := make(chan struct{})
		fakes := []*fakeStore{
			{replyDelay: 500 * time.Millisecond, term: 10, renewHang: hang},
			{replyDelay: 1500 * time.Millisecond, term: 40, renewHang: hang},
			{replyDelay: time.Hour, term: 90, renewHang: hang},
		}
		m, c := newFakeRedlock(t, fakes, redlockTiming)
		t0 := time.Now()
		h, err := m.Lock(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if got := time.Since(t0); got != 1500*time.Millisecond {
			t.Fatalf("Lock returned at %s, want 1.5s (the second master's reply)", got)
		}
		if h.Term() != 41 {
			t.Fatalf("term %d, want 41: the highest of the quorum's (11, 41)", h.Term())
		}
		<-h.Context().Done()
		if got := time.Since(t0); got != 2*time.Second {
			t.Fatalf("cancelled at %s, want 2s (send time + renew deadline)", got)
		}
		if !errors.Is(context.Cause(h.Context()), ErrRenewDeadline) {
			t.Fatalf("cause %v", context.Cause(h.Context()))
		}
		close(hang)
		_ = h.Unlock(t.Context())
		_ = c.Close()
		fakes[2].mu.Lock()
		fakes[2].replyDelay = 0
		fakes[2].mu.Unlock()
	})
}

// TestRedlockTiming_SlowQuorumRenewsInTime: a hold whose quorum took 1.5s
// of its 2s deadline renews at once (its first renewal is due at the send
// time + RenewInterval, already past), so it lives on. Mutation check:
// the first renewal timed from the hold's start (RenewInterval after the
// reply, 2.5s) fails with "hold ended at 9.5s: lock: renew deadline
// passed" (it ended at 2s; the check runs after the sleep).
func TestRedlockTiming_SlowQuorumRenewsInTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := []*fakeStore{
			{replyDelay: 500 * time.Millisecond},
			{replyDelay: 1500 * time.Millisecond},
			{replyDelay: 10 * time.Second},
		}
		m, c := newFakeRedlock(t, fakes, redlockTiming)
		defer c.Close()
		t0 := time.Now()
		h, err := m.Lock(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(8 * time.Second)
		if err := context.Cause(h.Context()); err != nil {
			t.Fatalf("hold ended at %s: %v", time.Since(t0), err)
		}
		if err := h.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second) // the third master's reply goroutine ends
		for i, f := range fakes {
			f.mu.Lock()
			live := f.liveLocked()
			f.mu.Unlock()
			if live {
				t.Errorf("master %d still locked after Unlock", i)
			}
		}
	})
}

// TestRedlockTiming_QuorumAfterDeadline: every master answers after the
// renew deadline (2.5s of 2s): no hold, and the locks the masters took at
// once are abandoned on all of them. Mutation check: without the
// Mutex's abandon the fakes stay locked: "master 0 left locked by the
// failed TryLock".
func TestRedlockTiming_QuorumAfterDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := []*fakeStore{
			{replyDelay: 2500 * time.Millisecond},
			{replyDelay: 2500 * time.Millisecond},
			{replyDelay: 2500 * time.Millisecond},
		}
		m, c := newFakeRedlock(t, fakes, redlockTiming)
		defer c.Close()
		h, err := m.TryLock(t.Context())
		if err == nil {
			t.Fatalf("TryLock held term %d on a quorum confirmed after its deadline", h.Term())
		}
		synctest.Wait()
		for i, f := range fakes {
			f.mu.Lock()
			live := f.liveLocked()
			f.mu.Unlock()
			if live {
				t.Errorf("master %d left locked by the failed TryLock (%v)", i, err)
			}
		}
		time.Sleep(time.Second)
	})
}
