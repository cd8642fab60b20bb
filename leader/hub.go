package leader

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	shared "github.com/solo-run/solo/internal/batch"
	"github.com/solo-run/solo/internal/hooks"
	"github.com/solo-run/solo/internal/pubsub"
)

// Defaults of a Hub.
const (
	// DefaultHubBatch is the most renewals a Hub sends in one pipeline.
	DefaultHubBatch = 512
	// hubSubscribeChunk is the most channels in one SUBSCRIBE/UNSUBSCRIBE.
	hubSubscribeChunk = 1024
	// hubWatchQueue is the most notices a watch keeps for a reader that
	// lags; older ones are dropped beyond it.
	hubWatchQueue = 64
	// hubQueueIdle is how long a renewal queue's batcher waits without work
	// before it exits (a new renewal for its node starts another).
	hubQueueIdle = time.Minute
)

var errHubClosed = errors.New("leader: hub closed")

// Hub shares one client's connections among many elections of one process:
// it multiplexes the notices of every election built with it over ONE
// pub/sub connection, and batches their renewals into pipelines.
//
// Without a Hub every running Elector holds a pub/sub connection of its own
// (go-redis keeps about 64 KiB of buffers per connection, and pings each
// one every TTL) and sends each renewal as a round trip of its own. That is
// the right default for one or a few elections per process. With hundreds
// or thousands of elections in one process, build them all with one Hub
// (WithHub, Hub.NewRedisLock): the process then holds the client's pool
// plus one pub/sub connection, one health PING per interval in all, and
// renewals due at about the same time share a pipeline.
//
// Renewals under Config.MinReplicas are not batched: their WAIT must follow
// their own write on the same connection, so they keep their own round trip.
//
// Renewals are queued per Redis node and each queue has its own batcher,
// which sends one pipeline at a time: renewals queued while a pipeline is in
// flight share the next one. On a single-node or Sentinel failover client
// there is one queue. On a Cluster client each renewal goes to the queue of
// the master that serves its election's slot (as the client's slot map
// knows it; the pipeline still follows MOVED and ASK), so the masters'
// pipelines run independently.
//
// What a frozen or slow node costs: its pipeline is held until the
// client's timeouts or the latest renew deadline in the batch end it, and
// the renewals queued behind it wait for it, so the elections whose slots
// it serves miss their renew deadline and lose their terms once it has
// been frozen for longer than that, as they would without a Hub. The
// elections on the other masters are not delayed: their queues, batchers
// and the client's per-node connection pools are separate. Notices are
// the exception: all elections share the hub's one pub/sub connection,
// which lives on one node. While that node is frozen the watches are not
// live — followers wait RetryInterval instead of the holder's TTL and miss
// release notices, and resign requests (RequestResign) do not reach the
// leaders — until it answers again or the hub replaces the connection.
// Renewals never depend on notices.
//
// A Hub owns a pub/sub multiplexer (internal/pubsub: two goroutines,
// started by the first Watch) and one renewal batcher per queue, started
// by the queue's first renewal and ended after a minute without work;
// Close stops them all. Close it after
// the Electors and RedisLocks using it stopped: afterwards their Watch and
// Renew fail.
type Hub struct {
	client  redis.UniversalClient
	cluster *redis.ClusterClient // client, when it is a Cluster client: queues per master
	batch   int
	idle    time.Duration // a batcher without work this long exits (hubQueueIdle)
	// hooks are the simulator's (WithHooks): its Settle runs before each
	// take from a renewal queue, which is then ordered by key.
	hooks hooks.Hooks
	guard *EvictionGuard // the eviction policy's check, shared by the hub's locks

	ctx    context.Context // cancelled by Close: bounds pipelines, dials and receives
	cancel context.CancelFunc
	stop   chan struct{}
	wg     sync.WaitGroup

	// Renewals.
	qmu    sync.Mutex           // guards queues, their items, and qclosed
	queues map[string]*hubQueue // by node address; "" on a non-cluster client
	// qclosed is set by Close; later renewals fail and no batcher starts.
	qclosed bool

	// Notices: one subscription per channel watched; the health check
	// interval is the shortest TTL watched.
	mux *pubsub.Mux

	mu     sync.Mutex // guards the fields below
	closed bool
	chans  map[string][]*hubWatch // the open watches, by channel
}

// HubOption configures a Hub.
type HubOption interface {
	applyHub(*Hub)
}

type hubOptionFunc func(*Hub)

func (f hubOptionFunc) applyHub(h *Hub) { f(h) }

// WithHubBatch sets the most renewals sent in one pipeline (default
// DefaultHubBatch). Values below 1 keep the default.
func WithHubBatch(n int) HubOption {
	return hubOptionFunc(func(h *Hub) {
		if n > 0 {
			h.batch = n
		}
	})
}

// NewHub returns a Hub that multiplexes the election notices of every
// RedisLock and Elector built with it (WithHub, Hub.NewRedisLock) over one
// pub/sub connection of client, and batches their renewals into pipelines
// on client. It connects lazily: no connection is opened before the first
// Watch or Renew. Close stops it, after the electors using it stopped.
func NewHub(client redis.UniversalClient, opts ...HubOption) *Hub {
	ctx, cancel := context.WithCancel(context.Background())
	h := &Hub{
		client: client,
		batch:  DefaultHubBatch,
		idle:   hubQueueIdle,
		ctx:    ctx,
		cancel: cancel,
		stop:   make(chan struct{}),
		queues: make(map[string]*hubQueue),
		chans:  make(map[string][]*hubWatch),
		guard:  newSharedGuard(client),
	}
	h.cluster, _ = client.(*redis.ClusterClient)
	for _, o := range opts {
		o.applyHub(h)
	}
	h.mux = pubsub.New(client, pubsub.Config{
		Pause:   time.Second,
		Chunk:   hubSubscribeChunk,
		Refusal: refusal,
		Message: h.message,
	})
	return h
}

// Close stops the Hub's goroutines and closes its pub/sub connection. The
// watches still open see their connection go down (Live false, no more
// notices) and must still be closed; renewals fail from now on. Close
// returns once the goroutines have exited. It is idempotent.
func (h *Hub) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	h.mu.Unlock()
	h.qmu.Lock()
	h.qclosed = true
	h.qmu.Unlock()

	close(h.stop)
	h.cancel()
	h.mux.Close()
	h.wg.Wait()
	return nil
}

// WithHub builds the Elector's RedisLock on h: its notices come over the
// hub's shared pub/sub connection and its renewals are batched with the
// other elections' (see Hub). h must have been made for the client given
// to New. It has no effect on NewWithLock; use Hub.NewRedisLock there.
func WithHub(h *Hub) Option {
	return optionFunc(func(o *options) { o.hub = h })
}

// NewRedisLock is NewRedisLock on the hub's client, with the lock's Watch
// and Renew going through the hub.
func (h *Hub) NewRedisLock(cfg Config) (*RedisLock, error) {
	l, err := NewRedisLock(h.client, cfg)
	if err != nil {
		return nil, err
	}
	l.hub = h
	return l, nil
}

// newRedisElector is New after its checks: the Elector on a RedisLock,
// which uses the hub of a WithHub option.
func newRedisElector(client redis.UniversalClient, cfg Config, opts []Option) (*Elector, error) {
	l := newRedisLock(client, cfg)
	if err := l.useHub(opts); err != nil {
		return nil, err
	}
	return NewWithLock(l, cfg, opts...)
}

// useHub attaches the hub of opts, if any, to l (New's WithHub).
func (l *RedisLock) useHub(opts []Option) error {
	var o options
	for _, opt := range opts {
		opt.apply(&o)
	}
	if o.hub == nil {
		return nil
	}
	if o.hub.client != l.client {
		return errors.New("leader: WithHub: the hub was made for another redis client")
	}
	l.hub = o.hub
	return nil
}

// renewEval runs the renew script, through the hub's batches when the lock
// has a hub and needs no replica acknowledgement.
func (l *RedisLock) renewEval(ctx context.Context, lease Lease, ttl time.Duration) (any, int64, error) {
	if l.hub == nil || l.minReplicas > 0 {
		return l.eval(ctx, renewScript, []string{l.leaseKey, l.infoKey}, lease.String(), pxMillis(ttl))
	}
	res, err := l.hub.renew(ctx, l.leaseKey, lease.String(), pxMillis(ttl))
	return res, 0, err
}

// ---- renewals -------------------------------------------------------------

// hubRenew is one queued renewal and, once done is closed, its answer.
type hubRenew struct {
	ctx  context.Context
	key  string
	val  string
	ttl  int64
	res  any
	err  error
	done chan struct{}
}

func (r *hubRenew) Context() context.Context { return r.ctx }

// hubQueue is the renewal queue of one node, served by its own batcher.
type hubQueue struct {
	addr  string        // its key in Hub.queues
	items []*hubRenew   // guarded by Hub.qmu
	kick  chan struct{} // size one: wakes the batcher
}

// renew queues one renew script on the queue of the node serving key and
// waits for its answer or ctx. The script's reply is the same as an
// unbatched EVALSHA's (NOSCRIPT falls back to EVAL).
func (h *Hub) renew(ctx context.Context, key, val string, ttl int64) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r := &hubRenew{ctx: ctx, key: key, val: val, ttl: ttl, done: make(chan struct{})}
	addr := h.nodeOf(ctx, key)
	h.qmu.Lock()
	if h.qclosed {
		h.qmu.Unlock()
		return nil, errHubClosed
	}
	q := h.queues[addr]
	if q == nil {
		// Started under qmu while not closed: Close sets qclosed under qmu
		// before it waits for the group.
		q = &hubQueue{addr: addr, kick: make(chan struct{}, 1)}
		h.queues[addr] = q
		h.wg.Go(func() { h.batcher(q) })
	}
	q.items = append(q.items, r)
	h.qmu.Unlock()
	select {
	case q.kick <- struct{}{}:
	default: // the batcher is already woken
	}
	select {
	case <-r.done:
		return r.res, r.err
	case <-ctx.Done():
		// The batcher still answers r; nobody reads it.
		return nil, ctx.Err()
	}
}

// nodeOf returns the queue key of a renewal of key: on a Cluster client the
// address of the master serving its slot, else "". The lookup runs in the
// caller's goroutine, so it can only ever hold up this renewal: it reads
// the client's slot map without waiting (a stale map is refreshed in the
// background), except before the client's first command, when it loads
// the map within ctx and the client's timeouts. Without an answer the
// renewal goes to the "" queue, whose pipeline finds the node itself.
func (h *Hub) nodeOf(ctx context.Context, key string) string {
	if h.cluster == nil {
		return ""
	}
	node, err := h.cluster.MasterForKey(ctx, key)
	if err != nil {
		return ""
	}
	return node.Options().Addr
}

// batcher sends q's renewals, up to h.batch per pipeline. It adds no delay:
// renewals queued while a pipeline is in flight share the next one. After
// h.idle without work it removes q and exits.
func (h *Hub) batcher(q *hubQueue) {
	var batch []*hubRenew
	idle := time.NewTimer(h.idle)
	defer idle.Stop()
	for {
		select {
		case <-q.kick:
		case <-idle.C:
			h.qmu.Lock()
			if len(q.items) == 0 {
				delete(h.queues, q.addr)
				h.qmu.Unlock()
				return
			}
			h.qmu.Unlock()
		case <-h.stop:
			h.qmu.Lock()
			rs := q.items
			q.items = nil
			h.qmu.Unlock()
			for _, r := range rs {
				r.err = errHubClosed
				close(r.done)
			}
			return
		}
		for {
			h.hooks.SettleAt("hub")
			h.qmu.Lock()
			if h.hooks.Settle != nil {
				// The whole queue: in the simulator it never holds more
				// than a batch, so no renewal waits behind later ones.
				slices.SortStableFunc(q.items, func(a, b *hubRenew) int { return strings.Compare(a.key, b.key) })
			}
			n := min(len(q.items), h.batch)
			batch = append(batch[:0], q.items[:n]...)
			if n == len(q.items) {
				clear(q.items)
				q.items = q.items[:0]
			} else {
				q.items = append(q.items[:0], q.items[n:]...)
			}
			h.qmu.Unlock()
			if n == 0 {
				break
			}
			h.sendRenewals(batch)
			clear(batch)
		}
		idle.Reset(h.idle)
	}
}

// sendRenewals runs batch in one pipeline and answers each request. A
// request whose context is already done is answered with its error and not
// sent. The pipeline's context ends at the latest deadline of the batch (or
// at Close).
func (h *Hub) sendRenewals(batch []*hubRenew) {
	live := shared.Live(batch, func(r *hubRenew, err error) {
		r.err = err
		close(r.done)
	})
	if len(live) == 0 {
		return
	}
	ctx, cancel := shared.Bound(h.ctx, live)
	defer cancel()
	cmds := h.runRenewals(ctx, live, true)
	var retry []int
	for i, c := range cmds {
		if shared.NoScript(c.Err()) {
			retry = append(retry, i)
		}
	}
	if len(retry) > 0 {
		// The server lost its script cache: EVAL loads the script again.
		again := make([]*hubRenew, len(retry))
		for j, i := range retry {
			again[j] = live[i]
		}
		for j, c := range h.runRenewals(ctx, again, false) {
			cmds[retry[j]] = c
		}
	}
	for i, r := range live {
		r.res, r.err = cmds[i].Result()
		close(r.done)
	}
}

// runRenewals sends the renew script of each of rs in one pipeline, as
// EVALSHA or (sha false) EVAL.
func (h *Hub) runRenewals(ctx context.Context, rs []*hubRenew, sha bool) []*redis.Cmd {
	head := []any{"evalsha", renewScript.Hash()}
	if !sha {
		head = []any{"eval", renewLua}
	}
	cmds := make([]*redis.Cmd, len(rs))
	for i, r := range rs {
		cmds[i] = redis.NewCmd(ctx, head[0], head[1], 2, r.key, infoKeyOf(r.key), r.val, r.ttl)
		cmds[i].SetFirstKeyPos(3)
	}
	shared.Exec(ctx, h.client, cmds)
	return cmds
}

// queued returns how many renewals wait for a pipeline, in all queues
// (tests).
func (h *Hub) queued() int {
	h.qmu.Lock()
	defer h.qmu.Unlock()
	n := 0
	for _, q := range h.queues {
		n += len(q.items)
	}
	return n
}
