package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/solo-run/solo/leader/lock"
)

// errWatchdog is the renew of a peer that renews on its own (leader/lock's
// watchdog) and has no renew to call.
var errWatchdog = errors.New("renewed by its own watchdog")

// lockMutex is a leader/lock Mutex as a peer: TryLock for tryAcquire, Lock
// for wait, Hold.Unlock for release. It owns its lock.Client (one per
// mutex, as one process each), which the figure closes after the run.
type lockMutex struct {
	c    *lock.Client // nil: shared, closed by its owner
	m    *lock.Mutex
	hold *lock.Hold
	term uint64 // of the last hold: the fencing token the cycle gets
}

func newLockMutex(cs clients, key, id string, t timing) mutex {
	m, err := newLockMutexWith(cs, key, id, t)
	if err != nil {
		return errMutex{err}
	}
	return m
}

// newLockGroup returns the locks on keys of ONE lock.Client, as a process
// whose goroutines lock keys of their own would have them: their
// concurrent calls share round trips. The closer closes the Client.
func newLockGroup(cs clients, keys []string, id string, t timing) ([]mutex, func() error, error) {
	c, err := newLockClient(cs, id, t)
	if err != nil {
		return nil, nil, err
	}
	ms := make([]mutex, len(keys))
	for i, k := range keys {
		m, err := sharedLockMutex(c, k)
		if err != nil {
			_ = c.Close()
			return nil, nil, err
		}
		ms[i] = m
	}
	return ms, c.Close, nil
}

// newLockMutexWith returns the lock named key with timing t and opts (such
// as lock.WithFair()).
func newLockMutexWith(cs clients, key, id string, t timing, opts ...lock.Option) (*lockMutex, error) {
	c, err := newLockClient(cs, id, t)
	if err != nil {
		return nil, err
	}
	m, err := c.Mutex(key, opts...)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return &lockMutex{c: c, m: m}, nil
}

func (m *lockMutex) tryAcquire(ctx context.Context) (bool, error) {
	h, err := m.m.TryLock(ctx)
	if errors.Is(err, lock.ErrNotObtained) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	m.hold, m.term = h, h.Term()
	return true, nil
}

func (m *lockMutex) wait(ctx context.Context) error {
	h, err := m.m.Lock(ctx)
	if err != nil {
		return err
	}
	m.hold, m.term = h, h.Term()
	return nil
}

func (m *lockMutex) renew(context.Context) error { return errWatchdog }

func (m *lockMutex) release(ctx context.Context) error {
	if m.hold == nil {
		return fmt.Errorf("lock %s: release without a hold", m.m.Name())
	}
	h := m.hold
	m.hold = nil
	return h.Unlock(ctx)
}

// newLockClient returns a lock.Client over cs[0] with timing t.
func newLockClient(cs clients, id string, t timing) (*lock.Client, error) {
	return lock.NewClient(cs[0], lock.WithID(id), lock.WithConfig(lock.Config{TTL: t.ttl}))
}

// sharedLockMutex returns the lock named key of the shared Client c,
// which the caller closes.
func sharedLockMutex(c *lock.Client, key string, opts ...lock.Option) (*lockMutex, error) {
	m, err := c.Mutex(key, opts...)
	if err != nil {
		return nil, err
	}
	return &lockMutex{m: m}, nil
}

// Close closes the lock.Client, unless it is shared.
func (m *lockMutex) Close() error {
	if m.c == nil {
		return nil
	}
	return m.c.Close()
}

// closeMutex closes m if it owns something (leader/lock's Client).
func closeMutex(m mutex) error {
	if c, ok := m.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}
