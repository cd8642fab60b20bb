package leader

import (
	"errors"
	"sync"
)

// watch registers a watch of l's channel. The subscription itself is sent
// by the multiplexer's goroutine, so Watch never waits for Redis.
func (h *Hub) watch(l *RedisStore) (Watch, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, errHubClosed
	}
	h.mux.Lower(l.healthEvery)
	if _, err := h.mux.Add(l.channel); err != nil {
		return nil, errHubClosed
	}
	w := &hubWatch{h: h, channel: l.channel, events: make(chan Event), stop: make(chan struct{})}
	h.chans[l.channel] = append(h.chans[l.channel], w)
	return w, nil
}

// unwatch removes w; the last watch of a channel has it unsubscribed.
func (h *Hub) unwatch(w *hubWatch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ws := h.chans[w.channel]
	for i, x := range ws {
		if x == w {
			ws[i] = ws[len(ws)-1]
			ws[len(ws)-1] = nil
			ws = ws[:len(ws)-1]
			h.mux.Remove(w.channel)
			break
		}
	}
	if len(ws) == 0 {
		delete(h.chans, w.channel)
	} else {
		h.chans[w.channel] = ws
	}
}

// message hands a notice received on channel to the channel's watches.
func (h *Hub) message(channel, payload string) {
	ev, ok := parseEvent(payload)
	if !ok {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range h.chans[channel] {
		w.deliver(ev)
	}
}

// refusal returns err as the configuration error it is (a SUBSCRIBE an
// ACL refused), or nil.
func refusal(err error) error {
	if ce := RedisConfig(err); errors.Is(ce, ErrRedisConfig) {
		return ce
	}
	return nil
}

// hubWatch is one Watch on a hub channel. Notices reach Events in order;
// the hub's multiplexer never blocks on a slow reader: what the reader is not
// ready for is queued (at most hubWatchQueue notices, the oldest dropped
// beyond) and handed over by a forwarding goroutine of the watch, which
// runs only while the queue is not empty, stops on Close and is awaited by
// it.
type hubWatch struct {
	h       *Hub
	channel string
	events  chan Event
	stop    chan struct{}

	mu         sync.Mutex // guards the fields below
	closed     bool
	queue      []Event
	forwarding bool
	fwd        sync.WaitGroup
}

func (w *hubWatch) Events() <-chan Event { return w.events }

// Live reports whether the hub's connection is up and the server confirmed
// this channel's subscription on it.
func (w *hubWatch) Live() bool { return w.h.mux.Live(w.channel) }

// configErr implements refusedWatch.
func (w *hubWatch) configErr() error { return w.h.mux.Refusal() }

// Close unregisters the watch (the channel is unsubscribed when no other
// watch of the hub uses it), stops its forwarding and closes Events.
func (w *hubWatch) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.queue = nil
	w.mu.Unlock()
	w.h.unwatch(w)
	close(w.stop)
	w.fwd.Wait()
	close(w.events)
	return nil
}

// deliver hands ev to the reader without blocking: directly if it waits
// and nothing is queued before ev, else through the queue.
func (w *hubWatch) deliver(ev Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	if !w.forwarding {
		select {
		case w.events <- ev:
			return
		default:
		}
	}
	if len(w.queue) == hubWatchQueue {
		w.queue = w.queue[1:]
	}
	w.queue = append(w.queue, ev)
	if !w.forwarding {
		w.forwarding = true
		w.fwd.Go(w.forward)
	}
}

func (w *hubWatch) forward() {
	for {
		w.mu.Lock()
		if w.closed || len(w.queue) == 0 {
			w.forwarding = false
			w.mu.Unlock()
			return
		}
		ev := w.queue[0]
		w.queue = w.queue[1:]
		w.mu.Unlock()
		select {
		case w.events <- ev:
		case <-w.stop:
			w.mu.Lock()
			w.forwarding = false
			w.mu.Unlock()
			return
		}
	}
}
