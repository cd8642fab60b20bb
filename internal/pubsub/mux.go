// Package pubsub multiplexes reference-counted Redis pub/sub channels over
// one connection, for an election's notices (leader), a Hub's and a lock
// Client's (leader/lock). A channel is subscribed while it has references
// and unsubscribed after the last goes. The connection is checked with a
// PING after a health interval of silence; one that answers nothing for
// another interval, fails, or on which a SUBSCRIBE or UNSUBSCRIBE could not
// be written is closed and, after a pause, replaced by a new one, on which
// every referenced channel is subscribed again and counts as live only once
// the new connection confirms it.
package pubsub

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrClosed is returned by Add on a closed Mux.
var ErrClosed = errors.New("pubsub: closed")

// Config configures a Mux. Its callbacks run on the Mux's receive
// goroutine, one at a time and without the Mux's lock held; they may call
// the Mux, and must not block for long (the health check waits for them).
type Config struct {
	// Values is the context whose values (not its end) the connection's
	// commands carry; nil: none.
	Values context.Context
	// Every is the health interval: an idle connection is PINGed after
	// Every of silence and replaced after another Every without an answer.
	// Lower shortens it.
	Every time.Duration
	// Pause is the most a replaced connection waits before it is dialled
	// (at most Every), so a Redis that refuses connections is not dialled
	// in a loop. One replaced because a subscription was refused waits
	// twice as long each time in a row, up to 30s.
	Pause time.Duration
	// Chunk is the most channels one SUBSCRIBE or UNSUBSCRIBE names; 0
	// names them all in one.
	Chunk int
	// Refusal returns the configuration error a receive error is (an ACL
	// without SUBSCRIBE or the channel), or nil when it is none.
	Refusal func(error) error
	// Refused is called when a refusal starts an episode: the first since
	// the Mux began or since a SUBSCRIBE was last confirmed.
	Refused func(error)
	// Message is called with each message received.
	Message func(channel, payload string)
	// Resubscribed is called when a channel subscribed again on a new
	// connection is confirmed: a message may have been lost meanwhile.
	Resubscribed func(channel string)
}

// Mux is one pub/sub connection shared by reference-counted channels. It
// owns two goroutines, started by the first Add: a control goroutine, the
// only one sending SUBSCRIBE and UNSUBSCRIBE (in order, so the commands of
// one channel never reorder), and a receive goroutine reading the
// connection. Close stops and waits for both.
//
// Replacing the connection, rather than letting go-redis reconnect inside
// it, keeps the confirmation counts exact: go-redis resubscribes on its own
// after an error, with confirmations nobody counted a SUBSCRIBE for.
type Mux struct {
	client redis.UniversalClient
	cfg    Config

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	kick   chan struct{} // size one: subscription changes wanted

	live    atomic.Bool           // the connection answers
	refused atomic.Pointer[error] // the refusal of this episode, nil when none

	mu      sync.Mutex // guards the fields below
	closed  bool
	started bool
	ps      *redis.PubSub
	every   time.Duration
	chans   map[string]*channel
}

// channel is one channel's references and subscription.
type channel struct {
	refs int
	// subscribed: the control goroutine sent SUBSCRIBE on the current
	// connection (and no UNSUBSCRIBE since). sent and acked count the
	// SUBSCRIBEs on the current connection and their confirmations; the
	// subscription is live when they match, as Redis answers in order. A
	// new connection starts them at zero: nothing sent on an earlier one
	// is ever confirmed on it.
	subscribed  bool
	sent, acked int
	ready       chan struct{} // closed once live
	// redialed: subscribed again on a new connection; Resubscribed is
	// called when that is confirmed.
	redialed bool
}

// New returns a Mux over client. It connects lazily: nothing is dialled
// before the first Add.
func New(client redis.UniversalClient, cfg Config) *Mux {
	base := context.Background()
	if cfg.Values != nil {
		base = context.WithoutCancel(cfg.Values)
	}
	ctx, cancel := context.WithCancel(base)
	return &Mux{
		client: client,
		cfg:    cfg,
		ctx:    ctx,
		cancel: cancel,
		kick:   make(chan struct{}, 1),
		every:  cfg.Every,
		chans:  map[string]*channel{},
	}
}

// Add takes a reference to name, subscribing it if it had none, and
// returns the channel's current ready channel, closed once the
// subscription is live (a later Remove of every reference or a replaced
// connection makes a new one).
func (m *Mux) Add(name string) (ready <-chan struct{}, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	m.startLocked()
	ch := m.chans[name]
	if ch == nil {
		ch = &channel{ready: make(chan struct{})}
		m.chans[name] = ch
	}
	ch.refs++
	if !ch.subscribed {
		m.kickLocked()
	}
	return ch.ready, nil
}

// AddIfLive takes a reference to name only when its subscription is live
// now (then a message published after this call reaches Message), and
// returns its ready channel, closed; ok is false otherwise.
func (m *Mux) AddIfLive(name string) (ready <-chan struct{}, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch := m.chans[name]
	if m.closed || ch == nil || !ch.subscribed || !Closed(ch.ready) {
		return nil, false
	}
	ch.refs++
	return ch.ready, true
}

// Remove drops a reference to name; the last has it unsubscribed.
func (m *Mux) Remove(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch := m.chans[name]
	if ch == nil || ch.refs == 0 {
		return
	}
	ch.refs--
	if ch.refs == 0 {
		m.kickLocked()
	}
}

// Confirmed reports whether the current connection confirmed name's
// subscription (and it was not unsubscribed since).
func (m *Mux) Confirmed(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch := m.chans[name]
	return ch != nil && ch.subscribed && Closed(ch.ready)
}

// Live reports whether the connection answers and name's subscription is
// confirmed on it.
func (m *Mux) Live(name string) bool {
	return m.live.Load() && m.Confirmed(name)
}

// Refusal returns the configuration error that refused a subscription,
// until a SUBSCRIBE is confirmed; nil when none did.
func (m *Mux) Refusal() error {
	if p := m.refused.Load(); p != nil {
		return *p
	}
	return nil
}

// Lower shortens the health interval to d if d is shorter.
func (m *Mux) Lower(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.every == 0 || d < m.every {
		m.every = d
	}
}

// Close stops the goroutines, closes the connection and waits. Live is
// false afterwards and Add fails. It is idempotent.
func (m *Mux) Close() {
	m.mu.Lock()
	m.closed = true
	ps := m.ps
	m.mu.Unlock()
	m.cancel()
	if ps != nil {
		_ = ps.Close() // unblocks a pending receive
	}
	m.wg.Wait()
	m.live.Store(false) // after the receiver's last word
}

func (m *Mux) startLocked() {
	if m.started {
		return
	}
	m.started = true
	ps := m.client.Subscribe(m.ctx) // no channel: does not dial
	m.ps = ps
	m.wg.Go(m.control)
	m.wg.Go(func() { m.receive(ps) })
}

func (m *Mux) kickLocked() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

func (m *Mux) interval() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.every
}

func (m *Mux) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-m.ctx.Done():
		return false
	}
}

// Closed reports whether c is closed: a ready channel, whether the
// subscription it stands for is live.
func Closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
