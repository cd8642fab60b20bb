package pubsub

import (
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// control sends SUBSCRIBE and UNSUBSCRIBE as channels gain and lose
// references, one batch at a time, so the commands for one channel never
// reorder.
func (m *Mux) control() {
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-m.kick:
		}
		sub, unsub, ps := m.changes()
		var err error
		for len(unsub) > 0 {
			n := m.chunk(len(unsub))
			err = errors.Join(err, ps.Unsubscribe(m.ctx, unsub[:n]...))
			unsub = unsub[n:]
		}
		for len(sub) > 0 {
			n := m.chunk(len(sub))
			err = errors.Join(err, ps.Subscribe(m.ctx, sub[:n]...))
			sub = sub[n:]
		}
		if err != nil {
			// go-redis may have dialled again inside ps and resubscribed
			// on its own, which the counts do not follow: the receive
			// goroutine replaces the whole connection instead, once it
			// sees ps closed.
			_ = ps.Close()
		}
	}
}

// changes returns the channels to subscribe and to unsubscribe, counted as
// sent, and the connection they go to: taken with the counts, under mu, as
// a redial swaps the connection and resets the counts in one step, so these
// commands count on the connection they go to (or on a closed one, and are
// redone).
func (m *Mux) changes() (sub, unsub []string, ps *redis.PubSub) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, ch := range m.chans {
		switch {
		case ch.refs > 0 && !ch.subscribed:
			ch.subscribed = true
			ch.sent++
			sub = append(sub, name)
		case ch.refs == 0 && ch.subscribed:
			ch.subscribed = false
			ch.ready = make(chan struct{})
			unsub = append(unsub, name)
		case ch.refs == 0 && ch.sent == ch.acked:
			delete(m.chans, name) // no confirmation pending
		}
	}
	return sub, unsub, m.ps
}

func (m *Mux) chunk(n int) int {
	if m.cfg.Chunk > 0 {
		return min(n, m.cfg.Chunk)
	}
	return n
}

// receive reads messages and confirmations on ps, the current connection.
// An idle connection is checked with a PING every health interval. One
// that answers nothing for two intervals, fails or was closed is replaced
// by redial: go-redis reconnects on a broken connection but not on a
// silent one (a black-holed link, a dead peer the kernel has not given up
// on yet: ~15 min on Linux), and its own resubscribe is not one the counts
// could follow.
//
// A connection replaced because a subscription was refused waits longer
// each time (refusalPause): a Redis whose ACL refuses a channel is not
// sent every SUBSCRIBE again every second.
func (m *Mux) receive(ps *redis.PubSub) {
	pinged := false
	var backoff time.Duration // the pause after the last refused connection
	since := time.Now()       // when ps became current
	for {
		every := m.interval()
		msg, err := ps.ReceiveTimeout(m.ctx, every)
		if m.ctx.Err() != nil {
			return
		}
		if err != nil {
			refused := m.refuse(err)
			var ne interface{ Timeout() bool }
			if errors.As(err, &ne) && ne.Timeout() && !pinged {
				pinged = true
				if ps.Ping(m.ctx) == nil {
					continue
				}
			}
			pinged = false
			pause := min(every, m.cfg.Pause)
			if refused {
				backoff = refusalPause(backoff, pause, time.Since(since))
				pause = backoff
			}
			if ps = m.redial(ps, pause); ps == nil {
				return
			}
			since = time.Now()
			continue
		}
		pinged = false
		m.live.Store(true)
		switch msg := msg.(type) {
		case *redis.Subscription:
			if msg.Kind == "subscribe" {
				m.refused.Store(nil) // the episode ends
				m.confirmed(msg.Channel)
			}
		case *redis.Message:
			if m.cfg.Message != nil {
				m.cfg.Message(msg.Channel, msg.Payload)
			}
		}
	}
}

// refuse records err when it is a refusal, reports an episode's first,
// and returns whether err is one.
func (m *Mux) refuse(err error) bool {
	if m.cfg.Refusal == nil {
		return false
	}
	ce := m.cfg.Refusal(err)
	if ce == nil {
		return false
	}
	if old := m.refused.Swap(&ce); old == nil && m.cfg.Refused != nil {
		m.cfg.Refused(ce)
	}
	return true
}

// maxRefusalPause is the longest a refused connection waits before the
// next is dialled: how long a fixed ACL may take to be noticed.
const maxRefusalPause = 30 * time.Second

// refusalPause returns the pause before redialling after a connection,
// current for up, was refused: base after the first refusal, or after a
// connection that lasted longer than maxRefusalPause; otherwise twice the
// last pause, up to maxRefusalPause. Confirmed subscriptions of other
// channels on a refused connection do not reset it, so a refusal of some
// channels of many backs off as one of all.
func refusalPause(last, base, up time.Duration) time.Duration {
	if last == 0 || up > maxRefusalPause {
		return base
	}
	return max(min(2*last, maxRefusalPause), base)
}

// redial marks the connection and every subscription not live, closes old,
// waits pause and makes a new connection current: every channel with
// references is subscribed on it again (by the control goroutine), live
// only once the new connection confirms it. It returns nil when the Mux is
// closed.
func (m *Mux) redial(old *redis.PubSub, pause time.Duration) *redis.PubSub {
	_ = old.Close() // a pending command on it fails at once
	m.down()
	if !m.pause(pause) {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	ps := m.client.Subscribe(m.ctx) // dials on its first use
	m.ps = ps
	for name, ch := range m.chans {
		if ch.refs == 0 {
			delete(m.chans, name) // nothing is pending on the new connection
			continue
		}
		ch.subscribed = false
		ch.sent, ch.acked = 0, 0
		ch.redialed = true
	}
	m.kickLocked()
	return ps
}

// down marks the connection and every subscription not live.
func (m *Mux) down() {
	m.live.Store(false)
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ch := range m.chans {
		if Closed(ch.ready) {
			ch.ready = make(chan struct{}) // not live until confirmed again
		}
	}
}

// confirmed counts a SUBSCRIBE's confirmation of name: the subscription is
// live once every SUBSCRIBE sent on this connection is confirmed.
func (m *Mux) confirmed(name string) {
	m.mu.Lock()
	ch := m.chans[name]
	if ch == nil {
		m.mu.Unlock()
		return
	}
	ch.acked++
	if !ch.subscribed && ch.refs == 0 && ch.acked >= ch.sent {
		delete(m.chans, name)
		m.mu.Unlock()
		return
	}
	redialed := false
	if ch.subscribed && ch.acked >= ch.sent {
		if !Closed(ch.ready) {
			close(ch.ready)
		}
		redialed, ch.redialed = ch.redialed, false
	}
	m.mu.Unlock()
	if redialed && m.cfg.Resubscribed != nil {
		m.cfg.Resubscribed(name)
	}
}
