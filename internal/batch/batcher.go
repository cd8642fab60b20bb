package batch

import (
	"slices"
	"sync"
	"time"
)

// Options configure a Batcher.
type Options[C Call] struct {
	// Send sends one batch and answers each of its calls.
	Send func(batch []C)
	// Lanes is how many sends may be in flight at once (at least 1).
	Lanes int
	// Inline: a call that finds a lane free is sent by its caller alone
	// (Join returns true), as without a batcher; otherwise every call is
	// queued and sent by a goroutine of the Batcher's.
	Inline bool
	// Max is the most calls in one batch; 0: no limit.
	Max int
	// Linger is how long a sending goroutine that found nothing queued
	// waits for more before it frees its lane and exits.
	Linger time.Duration
	// Settle, when set, is called before each batch is taken off the
	// queue; the queue is then sorted by Order, when set.
	Settle func()
	Order  func(a, b C) int
	// Idle is called when a sending goroutine exits with nothing queued,
	// without the Batcher's lock held.
	Idle func()
}

// Batcher gathers the calls of concurrent callers into batches: calls
// that arrive while every lane is busy are queued and leave together as
// one batch when a lane frees, so a busy process sends one batch per round
// trip instead of one call each. The queued calls are sent by a goroutine
// of the Batcher's, started when a lane frees with calls queued (or by the
// first call, without Inline) and ended when the queue is empty (after
// Linger); Close waits for it.
type Batcher[C interface {
	comparable
	Call
}] struct {
	o    Options[C]
	kick chan struct{} // size one: a lingering sender has work
	stop chan struct{} // closed by Close
	wg   sync.WaitGroup

	mu       sync.Mutex
	inflight int  // lanes taken, at most o.Lanes
	closed   bool // Close was called: no more goroutines
	queue    []C
}

// New returns a Batcher with options o.
func New[C interface {
	comparable
	Call
}](o Options[C]) *Batcher[C] {
	o.Lanes = max(o.Lanes, 1)
	return &Batcher[C]{o: o, kick: make(chan struct{}, 1), stop: make(chan struct{})}
}

// Join hands a call to the Batcher. With Inline and a lane free it takes
// the lane and returns true: the caller sends its call itself and then
// calls Done. Otherwise the call newCall makes is queued for the next
// batch (Unqueue takes it back) and returned; once Close was called, a
// call that finds a lane free is sent on the caller's goroutine, as Done's
// batches are, and is answered when Join returns.
func (b *Batcher[C]) Join(newCall func() C) (c C, inline bool) {
	b.mu.Lock()
	if b.inflight < b.o.Lanes {
		b.inflight++
		if b.o.Inline {
			b.mu.Unlock()
			return c, true
		}
		c = newCall()
		b.queue = append(b.queue, c)
		if b.closed {
			b.mu.Unlock()
			b.drain(nil) // answered before Join returns
			return c, false
		}
		b.wg.Go(func() { b.drain(nil) })
		b.mu.Unlock()
		return c, false
	}
	c = newCall()
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	select {
	case b.kick <- struct{}{}:
	default: // already woken
	}
	return c, false
}

// Unqueue takes c out of the queue; false if it was already taken into a
// batch (or was never queued).
func (b *Batcher[C]) Unqueue(c C) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := slices.Index(b.queue, c)
	if i < 0 {
		return false
	}
	b.queue = slices.Delete(b.queue, i, i+1)
	return true
}

// Done ends a caller's own send (Join returned true): the lane is free
// again, or the calls queued meanwhile leave at once as the next batch, on
// a goroutine of the Batcher's (on this one once Close was called).
func (b *Batcher[C]) Done() {
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.inflight--
		b.mu.Unlock()
		return
	}
	batch := b.takeLocked() // the lane passes to the drain
	if b.closed {
		b.mu.Unlock()
		b.drain(batch)
		return
	}
	b.wg.Go(func() { b.drain(batch) })
	b.mu.Unlock()
}

// Len returns how many calls are queued.
func (b *Batcher[C]) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// Idle reports whether no lane is taken and nothing is queued.
func (b *Batcher[C]) Idle() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inflight == 0 && len(b.queue) == 0
}

// Close stops starting goroutines and waits for those running. With fail
// set, the calls queued are taken out and handed to it; otherwise they
// stay, sent by the callers' own sends as they return (Done).
func (b *Batcher[C]) Close(fail func(C)) {
	b.mu.Lock()
	var queued []C
	if !b.closed {
		b.closed = true
		close(b.stop)
		if fail != nil {
			queued, b.queue = b.queue, nil
		}
	}
	b.mu.Unlock()
	for _, c := range queued {
		fail(c)
	}
	b.wg.Wait()
}

// drain sends batch, then the batches queued after it until nothing is
// queued (for Linger), then frees its lane.
func (b *Batcher[C]) drain(batch []C) {
	for {
		if len(batch) > 0 {
			b.o.Send(batch)
		}
		if b.o.Settle != nil {
			b.o.Settle()
		}
		b.mu.Lock()
		batch = b.takeLocked()
		b.mu.Unlock()
		if len(batch) > 0 {
			continue
		}
		if b.linger() {
			continue
		}
		if b.o.Idle != nil {
			b.o.Idle()
		}
		return
	}
}

// takeLocked takes the next batch off the queue; mu is held.
func (b *Batcher[C]) takeLocked() []C {
	if b.o.Order != nil {
		slices.SortStableFunc(b.queue, b.o.Order)
	}
	n := len(b.queue)
	if b.o.Max > 0 {
		n = min(n, b.o.Max)
	}
	batch := slices.Clone(b.queue[:n])
	if n == len(b.queue) {
		clear(b.queue)
		b.queue = b.queue[:0]
	} else {
		b.queue = append(b.queue[:0], b.queue[n:]...)
	}
	return batch
}

// linger waits up to Linger for a call; false when the lane was freed
// (nothing came, or Close).
func (b *Batcher[C]) linger() bool {
	if b.o.Linger > 0 {
		t := time.NewTimer(b.o.Linger)
		defer t.Stop()
		select {
		case <-b.kick:
			return true
		case <-t.C:
		case <-b.stop:
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) > 0 {
		return true
	}
	b.inflight--
	return false
}
