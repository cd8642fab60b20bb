package batch

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type call struct {
	ctx  context.Context
	key  string
	done chan struct{}
}

func (c *call) Context() context.Context { return c.ctx }

func newCall(key string) func() *call {
	return func() *call { return &call{ctx: context.Background(), key: key, done: make(chan struct{})} }
}

// recorder is a Send that holds each batch until release gets a token.
type recorder struct {
	mu      sync.Mutex
	batches [][]string
	hold    chan struct{} // nil: no hold
}

func (r *recorder) send(b []*call) {
	if r.hold != nil {
		<-r.hold
	}
	keys := make([]string, len(b))
	for i, c := range b {
		keys[i] = c.key
		close(c.done)
	}
	r.mu.Lock()
	r.batches = append(r.batches, keys)
	r.mu.Unlock()
}

// TestBatcher_InlineThenOneBatch: calls that find a lane free are their
// callers' own; those that come while every lane is taken leave as one
// batch when a lane frees, and Done frees the lane when nothing waits.
func TestBatcher_InlineThenOneBatch(t *testing.T) {
	rec := &recorder{}
	b := New(Options[*call]{Send: rec.send, Lanes: 2, Inline: true})
	for range 2 {
		if _, inline := b.Join(newCall("inline")); !inline {
			t.Fatal("a call finding a lane free was queued")
		}
	}
	var queued []*call
	for _, k := range []string{"a", "b", "c"} {
		c, inline := b.Join(newCall(k))
		if inline {
			t.Fatalf("call %s sent inline with every lane taken", k)
		}
		queued = append(queued, c)
	}
	if !b.Unqueue(queued[1]) || b.Unqueue(queued[1]) {
		t.Fatal("Unqueue of a queued call: want true once, then false")
	}
	b.Done() // the queue leaves on a goroutine of the batcher's
	<-queued[0].done
	<-queued[2].done
	b.Done() // nothing queued: the lane is free
	b.Close(nil)
	if !b.Idle() {
		t.Fatal("lanes taken after every send ended")
	}
	if want := [][]string{{"a", "c"}}; !slices.EqualFunc(rec.batches, want, slices.Equal) {
		t.Fatalf("batches %v, want %v", rec.batches, want)
	}
}

// TestBatcher_QueuedLaneMaxOrderLinger: without Inline every call is
// queued; a lane's goroutine takes at most Max calls per batch, in Order
// after Settle, lingers for more, then exits and says so (Idle).
func TestBatcher_QueuedLaneMaxOrderLinger(t *testing.T) {
	rec := &recorder{hold: make(chan struct{})}
	idle := make(chan struct{}, 1)
	settles := 0
	b := New(Options[*call]{Send: rec.send, Lanes: 1, Max: 2, Linger: 20 * time.Millisecond,
		Settle: func() { settles++ },
		Order:  func(a, b *call) int { return strings.Compare(a.key, b.key) },
		Idle:   func() { idle <- struct{}{} }})
	first, _ := b.Join(newCall("z")) // taken at once, held by the send
	waitFor(t, func() bool { return b.Len() == 0 })
	var cs []*call
	for _, k := range []string{"d", "c", "b", "a"} {
		c, _ := b.Join(newCall(k))
		cs = append(cs, c)
	}
	for range 3 {
		rec.hold <- struct{}{}
	}
	<-first.done
	for _, c := range cs {
		<-c.done
	}
	<-idle
	if !b.Idle() {
		t.Fatal("not idle after lingering")
	}
	b.Close(nil)
	want := [][]string{{"z"}, {"a", "b"}, {"c", "d"}}
	if !slices.EqualFunc(rec.batches, want, slices.Equal) {
		t.Fatalf("batches %v, want %v", rec.batches, want)
	}
	if settles < 3 {
		t.Fatalf("settled %d times, want before each take", settles)
	}
}

// TestBatcher_CloseFailsQueued: Close with fail hands every queued call
// to it, ends a lingering goroutine and waits for it.
func TestBatcher_CloseFailsQueued(t *testing.T) {
	rec := &recorder{hold: make(chan struct{})}
	b := New(Options[*call]{Send: rec.send, Lanes: 1, Linger: time.Hour})
	first, _ := b.Join(newCall("sent"))
	waitFor(t, func() bool { return b.Len() == 0 })
	late, _ := b.Join(newCall("late"))
	var failed []string
	go func() { rec.hold <- struct{}{} }()
	b.Close(func(c *call) { failed = append(failed, c.key); close(c.done) })
	<-first.done
	<-late.done
	if !slices.Equal(failed, []string{"late"}) {
		t.Fatalf("failed %v, want [late]", failed)
	}
}

func waitFor(t *testing.T, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestBatcher_JoinAfterClose: once Close was called no goroutine starts;
// a queued call that finds a lane free is sent on its caller's goroutine
// and answered when Join returns.
func TestBatcher_JoinAfterClose(t *testing.T) {
	slow := func(b []*call) {
		time.Sleep(20 * time.Millisecond)
		for _, c := range b {
			close(c.done)
		}
	}
	b := New(Options[*call]{Send: slow, Lanes: 1, Linger: time.Second})
	b.Close(nil)
	c, inline := b.Join(newCall("late"))
	if inline {
		t.Fatal("a batcher without Inline answered inline")
	}
	select {
	case <-c.done:
	default:
		t.Fatal("Join after Close returned before its call was answered: a goroutine nobody waits for sends it")
	}
	if !b.Idle() {
		t.Fatal("the lane is still taken after the call was answered")
	}
	goleak.VerifyNone(t)
}
