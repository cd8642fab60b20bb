package leader_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/solo-run/solo/internal/hooks"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/leadertest"
)

// floodStore is the in-memory store whose watches, once flood is closed,
// always have a notice ready: a peer PUBLISHing on the election's channel
// without pause.
type floodStore struct {
	*leadertest.Store
	flood chan struct{}
	wg    sync.WaitGroup
}

// floodWatch is a watch of a floodStore.
type floodWatch struct {
	ch   chan leader.Event
	stop chan struct{}
	once sync.Once
}

func (w *floodWatch) Events() <-chan leader.Event { return w.ch }
func (w *floodWatch) Live() bool                  { return true }
func (w *floodWatch) Close() error {
	w.once.Do(func() { close(w.stop) })
	return nil
}

func (l *floodStore) Watch(ctx context.Context) (leader.Watch, error) {
	w := &floodWatch{ch: make(chan leader.Event, 1), stop: make(chan struct{})}
	ev := leader.Event{Kind: leader.EventReleased, Lease: leader.Lease{ID: "peer", Term: 1 << 40}}
	l.wg.Go(func() {
		defer close(w.ch)
		select {
		case <-l.flood:
		case <-w.stop:
			return
		}
		for {
			select {
			case w.ch <- ev:
			case <-w.stop:
				return
			}
		}
	})
	return w, nil
}

// A stream of notices on the election's channel must not keep the renewal
// timer from being taken: the term loop takes the timers before notices.
// Each turn of the loop takes 1ms (its settle hook sleeps), so a notice is
// always ready again when the loop looks, together with the due timer.
func TestElector_NoticeFloodDoesNotStarveRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := &floodStore{Store: leadertest.New(), flood: make(chan struct{})}
		cfg := fastConfig("a")
		slow := leader.WithHooks(hooks.Hooks{Settle: func(string) { time.Sleep(time.Millisecond) }})
		e := newElector(t, lock, cfg, slow)
		rec := newRecorder()
		stop := run(t, e, rec.fn("a"))
		<-rec.started
		close(lock.flood)
		// Renewals are due at +1s, +2s, +3s; without one the deadline ends
		// the term at +2s.
		time.Sleep(3500 * time.Millisecond)
		if n := lock.Calls(leadertest.OpRenew); n < 3 {
			t.Errorf("%d renewals in 3.5s of notices, want 3", n)
		}
		if ended := rec.ended(); len(ended) != 0 {
			t.Errorf("the term ended under a stream of notices: %+v", ended)
		}
		_ = stop()
		lock.wg.Wait()
	})
}
