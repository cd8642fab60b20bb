package lock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/solo-run/solo/internal/pubsub"
	"github.com/solo-run/solo/leader"
)

// Client makes the Mutexes of one process over one Redis client and shares
// one pub/sub connection among all their waiters for the release notices.
// Close stops it and waits for its goroutines; holds do not outlive it:
// close the Client after unlocking.
type Client struct {
	rdb redis.UniversalClient
	// batch lets the Mutexes' concurrent calls share round trips (nil
	// for a Cluster or Ring client); Close waits for its goroutine.
	batch *batcher
	opts  options
	cfg   Config
	log   *zap.Logger
	base  string // owner ID base: ID-RANDOM
	seq   atomic.Uint64

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mux    *pubsub.Mux // the release notices' subscriptions, one reference per waiter

	mu       sync.Mutex // guards the fields below
	closed   bool
	channels map[string]*channelState // by channel, while it has waiters
	holds    map[*lease]struct{}      // live leases, stopped by Close

	// guards are the eviction checks, one per Redis client (evictionFor).
	guards map[redis.UniversalClient]*evictionCheck

	// notices are Redlock's other masters' Clients, used only for their
	// release notices; closed by Close.
	notices []*Client
}

// channelState is one notice channel's waiters.
type channelState struct {
	waiters map[*waiter]struct{}
	// fifo holds the waiters in the order they came. A release wakes only
	// its head (see deliverLocked); the head that leaves without the lock
	// wakes the next.
	fifo []*waiter
	// recent are the last notices delivered: a release of this process
	// is delivered twice, at once by the releaser and later by its
	// notice, and wakes only once.
	recent [4]string
	next   int
}

// waiter is one Lock call waiting for a lock name.
type waiter struct {
	channel string
	// call is the call's ID ("BASE-SEQ") when a fair release may grant
	// it the lock ("TERM BASE-SEQ.0"), else "".
	call  string
	since time.Time // when the call began: how long it has waited
	// fair: woken by every notice that is not a grant (those are rare
	// in fair mode: a release grants the lock to the queue's head).
	fair   bool
	notify chan struct{}   // size one: a release notice (or a resubscribe after a re-dial) came
	grant  chan string     // size one: a fair release granted the lock to call: "TERM OWNER"
	ready  <-chan struct{} // the channel's ready when the waiter joined: closed once live
	also   []*waiter       // Redlock: the same wait on the other masters' Clients
	owner  *Client
}

// live reports whether a notice now reaches w: its subscription is live
// (Redlock: on any master, as waitReady).
func (w *waiter) live() bool {
	if pubsub.Closed(w.ready) {
		return true
	}
	for _, x := range w.also {
		if pubsub.Closed(x.ready) {
			return true
		}
	}
	return false
}

// NewClient returns a Client over rdb (single node, Sentinel failover or
// Cluster client: a lock's keys share the hash tag {NAME}). opts set the
// defaults of its Mutexes. It validates the configuration and returns a
// *leader.ConfigError naming the bad field and value. It does not contact
// Redis.
func NewClient(rdb redis.UniversalClient, opts ...Option) (*Client, error) {
	if rdb == nil {
		return nil, errors.New("lock: nil redis client")
	}
	o := options{log: zap.NewNop()}
	for _, opt := range opts {
		opt.apply(&o)
	}
	cfg, err := o.resolve("client")
	if err != nil {
		return nil, err
	}
	base := o.id
	if base == "" {
		base = defaultBaseID()
	} else if strings.IndexFunc(base, badIDRune) >= 0 {
		return nil, fmt.Errorf("lock: invalid id %q: must not contain white space, control characters, '{' or '}'", base)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{
		rdb:      rdb,
		batch:    newBatcher(rdb),
		opts:     o,
		cfg:      cfg,
		log:      o.log.Named("lock"),
		base:     base + "-" + randomToken(),
		ctx:      ctx,
		cancel:   cancel,
		channels: map[string]*channelState{},
		holds:    map[*lease]struct{}{},
	}
	c.mux = pubsub.New(rdb, pubsub.Config{
		Every:        max(cfg.TTL, time.Second),
		Pause:        100 * time.Millisecond,
		Refusal:      refusal,
		Refused:      c.refused,
		Message:      c.deliver,
		Resubscribed: c.resubscribed,
	})
	return c, nil
}

// Mutex returns the lock named name. opts override the Client's for this
// Mutex. Mutexes of one name (in this or another process) exclude one
// another; a Mutex is safe for concurrent use and cheap to make.
func (c *Client) Mutex(name string, opts ...Option) (*Mutex, error) {
	o := c.opts
	for _, opt := range opts {
		opt.apply(&o)
	}
	cfg, err := o.resolve(name)
	if err != nil {
		return nil, err
	}
	bounded := honoursDeadlines(c.rdb)
	m := &Mutex{c: c, name: name, cfg: cfg, fixed: o.fixed != 0, inline: o.inline || bounded, ctxBound: bounded,
		hooks: o.hooks, log: c.log.With(zap.String("lock", name))}
	m.key = holdKey{c: c, lock: cfg.KeyPrefix + ":{" + name + "}"}
	m.live = livePolicy(cfg, m.fixed)
	rs := newRedisStore(c.rdb, cfg, name)
	rs.batch = c.batch
	rs.eviction = c.evictionFor(c.rdb)
	rs.fair = o.fair
	m.fair = o.fair
	m.channel = rs.channelName()
	rs.notice = func(msg string) { c.deliver(m.channel, msg) }
	m.st = rs
	m.grants = o.fair && o.newStore == nil
	if o.newStore != nil {
		if m.st = o.newStore(m); m.st == nil {
			// The store refuses the options (Redlock has no fair mode,
			// and no replicas to wait for).
			if o.fair {
				return nil, fmt.Errorf("lock %s: fair mode is not available with Redlock", name)
			}
			return nil, &leader.ConfigError{Field: "min_replicas", Value: cfg.MinReplicas,
				Reason: "is not available with Redlock: its masters are independent primaries"}
		}
	}
	return m, nil
}

// Close stops the Client's goroutines and cancels the context of every
// hold still held (with ErrClosed), stopping their renewals; the locks are
// left to expire. Waiters return ErrClosed. Close is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.wg.Wait()
		if c.batch != nil {
			c.batch.wait()
		}
		return nil
	}
	c.closed = true
	holds := make([]*lease, 0, len(c.holds))
	for l := range c.holds {
		holds = append(holds, l)
	}
	c.mu.Unlock()
	c.cancel()
	c.mux.Close()
	for _, l := range holds {
		l.expire(ErrClosed)
		l.stopWatchdog()
		l.abandonStrays()
	}
	c.wg.Wait()
	if c.batch != nil {
		c.batch.wait()
	}
	for _, x := range c.notices {
		_ = x.Close()
	}
	return nil
}

// owner returns the owner ID of the next attempt of call seq, "BASE-SEQ.N"
// (n counts the call's attempts): unique per attempt, so that nothing
// aimed at one attempt can act on another's hold. One allocation.
func (c *Client) owner(seq uint64, n *uint64) string {
	*n++
	var buf [80]byte
	b := append(buf[:0], c.base...)
	b = append(b, '-')
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, '.')
	b = strconv.AppendUint(b, *n, 10)
	return string(b)
}

// callID returns the ID of call seq, "BASE-SEQ": its place in a fair
// lock's queue.
func (c *Client) callID(seq uint64) string {
	return c.base + "-" + strconv.FormatUint(seq, 10)
}

// honoursDeadlines reports whether rdb bounds every call by its context's
// deadline (go-redis ContextTimeoutEnabled): then Lock, TryLock and Unlock
// send their calls on the caller's goroutine with a RenewDeadline
// deadline, and need no goroutine and timer of their own. Sentinel
// failover clients are *redis.Client. Other clients (a Ring, a wrapper)
// are not inspected: their calls keep the goroutine bound.
func honoursDeadlines(rdb redis.UniversalClient) bool {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

func (c *Client) track(l *lease) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.holds[l] = struct{}{}
	return true
}

// spawn runs f on a goroutine that Close waits for, unless the Client is
// closed (then it returns false and f does not run).
func (c *Client) spawn(f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.wg.Go(f)
	return true
}

func (c *Client) untrack(l *lease) {
	c.mu.Lock()
	delete(c.holds, l)
	c.mu.Unlock()
}

// subscribe registers a waiter for channel. The waiter's ready is closed
// once the subscription is live; notify gets a token on every release
// notice (and when a new connection confirms the channel, as notices may
// have been missed).
//
// The waiter joins the tail of the Client's queue for channel; since is
// when its call began, call and fair as in waiter.
func (c *Client) subscribe(channel, call string, fair bool, since time.Time) (*waiter, error) {
	w, err := c.subscribeNotify(channel, &waiter{call: call, fair: fair, since: since,
		notify: make(chan struct{}, 1), grant: make(chan string, 1)})
	if err != nil {
		return nil, err
	}
	// Redlock: a notice from any master wakes the waiter.
	for _, x := range c.notices {
		if xw, err := x.subscribeNotify(channel, &waiter{fair: fair, since: since, notify: w.notify}); err == nil {
			w.also = append(w.also, xw)
		}
	}
	return w, nil
}

func (c *Client) subscribeNotify(channel string, w *waiter) (*waiter, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	ready, err := c.mux.Add(channel)
	if err != nil {
		return nil, ErrClosed
	}
	w.channel, w.ready, w.owner = channel, ready, c
	c.enqueueLocked(w)
	return w, nil
}

// enqueueLocked adds w to the tail of its channel's queue; mu is held.
func (c *Client) enqueueLocked(w *waiter) {
	st := c.channels[w.channel]
	if st == nil {
		st = &channelState{waiters: map[*waiter]struct{}{}}
		c.channels[w.channel] = st
	}
	st.waiters[w] = struct{}{}
	st.fifo = append(st.fifo, w)
}

// unsubscribe removes a waiter; the channel is unsubscribed when it was
// the last. passOn: the waiter leaves without the lock, so if it was the
// queue's head (the one a release wakes) the next waiter is woken in its
// place: the lock may be free, and the notice that said so was its.
func (c *Client) unsubscribe(w *waiter, passOn bool) {
	for _, xw := range w.also {
		xw.owner.unsubscribe(xw, passOn)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.channels[w.channel]
	if st == nil {
		return
	}
	if _, ok := st.waiters[w]; !ok {
		return
	}
	delete(st.waiters, w)
	c.mux.Remove(w.channel)
	head := len(st.fifo) > 0 && st.fifo[0] == w
	st.fifo = slices.DeleteFunc(st.fifo, func(x *waiter) bool { return x == w })
	if len(st.waiters) == 0 {
		delete(c.channels, w.channel)
	} else if head && passOn {
		st.wakeHeadLocked()
	}
}

// join is the start of a Lock call that will wait. It registers a waiter
// (as subscribe) only when channel's subscription is live already, so
// that no notice sent after the call's first attempt lands can miss it
// (nil otherwise, and for Redlock, whose other masters' subscriptions are
// not checked). starving reports whether the head of the queue is a
// waiter that has waited longer than bound: the new call then goes behind
// it instead of trying first (sync.Mutex's starvation mode; never in
// fair mode, whose order is the server's).
func (c *Client) join(channel, call string, fair bool, since time.Time, bound time.Duration) (w *waiter, starving bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.channels[channel]
	if c.closed || st == nil || len(st.fifo) == 0 {
		return nil, false
	}
	h := st.fifo[0]
	starving = !fair && !h.fair && time.Since(h.since) > bound
	if len(c.notices) > 0 {
		return nil, starving
	}
	ready, ok := c.mux.AddIfLive(channel)
	if !ok {
		return nil, starving
	}
	w = &waiter{call: call, fair: fair, since: since, notify: make(chan struct{}, 1), grant: make(chan string, 1),
		channel: channel, ready: ready, owner: c}
	c.enqueueLocked(w)
	return w, starving
}

// deliver routes a notice of channel ("released FIELD", "granted FIELD",
// "left CALL") to this Client's waiters: from the pub/sub connection, or
// at once from this process's own release.
func (c *Client) deliver(channel, msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.channels[channel]; st != nil {
		st.deliverLocked(msg)
	}
}

// resubscribed wakes every waiter of channel, subscribed again on a new
// connection: a notice sent while no connection was subscribed is lost,
// so each tries again, now that a new one would come.
func (c *Client) resubscribed(channel string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.channels[channel]; st != nil {
		st.wakeLocked()
	}
}

// refusal returns err as the configuration error it is, or nil.
func refusal(err error) error {
	if ce := leader.RedisConfig(err); errors.Is(ce, leader.ErrRedisConfig) {
		return ce
	}
	return nil
}

// refused logs a refused subscription, once per episode: an ACL without
// SUBSCRIBE or the channel. Waiters still wake when the holder's lease
// runs out, but never on a release.
func (c *Client) refused(err error) {
	c.log.Error("subscribe refused by redis: a configuration error, retrying will not cure it; fix it (waiters wake only when the holder's lease runs out meanwhile)",
		zap.Error(err))
}

// deliverLocked routes msg; the Client's mu is held. A grant goes to its
// call's waiter only; a release wakes the queue's head only (no herd: the
// others could not take the lock anyway, and each process wakes one);
// anything else ("left": a fair waiter gave up) every waiter. A notice
// delivered already (by its releaser, then by the pub/sub) is dropped.
func (st *channelState) deliverLocked(msg string) {
	if slices.Contains(st.recent[:], msg) {
		return
	}
	st.recent[st.next] = msg
	st.next = (st.next + 1) % len(st.recent)
	kind, arg, _ := strings.Cut(msg, " ")
	switch kind {
	case "granted":
		call := callOf(ownerOf(arg))
		for _, w := range st.fifo {
			if w.call != "" && w.call == call {
				select {
				case w.grant <- arg:
				default:
				}
				return
			}
		}
	case "released":
		st.wakeHeadLocked()
	default:
		st.wakeLocked()
	}
}

// wakeHeadLocked wakes the queue's head; a fair head wakes every waiter
// (a fair release grants the lock, so a notice that is not a grant is
// rare and its waiters' order is the server's, not this queue's).
func (st *channelState) wakeHeadLocked() {
	if len(st.fifo) == 0 {
		return
	}
	if h := st.fifo[0]; !h.fair {
		select {
		case h.notify <- struct{}{}:
		default:
		}
		return
	}
	st.wakeLocked()
}

// wakeLocked gives every waiter of the channel a token; the Client's mu
// is held.
func (st *channelState) wakeLocked() {
	for w := range st.waiters {
		select {
		case w.notify <- struct{}{}:
		default:
		}
	}
}

// randomToken returns 48 random bits in hex: the per-Client part of owners.
func randomToken() string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux since Go 1.24
	return hex.EncodeToString(b[:])
}

func badIDRune(r rune) bool {
	return unicode.IsSpace(r) || unicode.IsControl(r) || r == '{' || r == '}'
}

// defaultBaseID returns HOST-PID.
func defaultBaseID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	host = strings.Map(func(r rune) rune {
		if badIDRune(r) {
			return '_'
		}
		return r
	}, host)
	return host + "-" + strconv.Itoa(os.Getpid())
}
