package leader

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/batch"
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
// their notices share one pub/sub connection, and their renewals due
// together share a pipeline (per Redis node; renewals under
// Config.MinReplicas keep their own round trip). Build hundreds of
// elections with one Hub (WithHub, Hub.NewRedisStore); for a few, none is
// needed. A frozen node delays only the elections it serves, except for
// notices, which live on one node. Close it after the Electors and stores
// using it stopped. See docs/design.md, "Many elections in one process:
// the Hub".
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

	// Renewals.
	qmu    sync.Mutex                           // guards queues and qclosed
	queues map[string]*batch.Batcher[*hubRenew] // by node address; "" on a non-cluster client
	// qclosed is set by Close; later renewals fail and no batcher starts.
	qclosed bool
	dropped sync.WaitGroup // closes of the queues removed while idle

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
// RedisStore and Elector built with it (WithHub, Hub.NewRedisStore) over one
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
		queues: make(map[string]*batch.Batcher[*hubRenew]),
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
	queues := slices.Collect(maps.Values(h.queues))
	h.qmu.Unlock()

	h.cancel()
	h.mux.Close()
	for _, q := range queues {
		q.Close(func(r *hubRenew) {
			r.err = errHubClosed
			close(r.done)
		})
	}
	h.dropped.Wait() // no more start: qclosed is set
	return nil
}

// WithHub builds the Elector's RedisStore on h: its notices come over the
// hub's shared pub/sub connection and its renewals are batched with the
// other elections' (see Hub). h must have been made for the client given
// to New. It has no effect on NewWithStore; use Hub.NewRedisStore there.
func WithHub(h *Hub) Option {
	return optionFunc(func(o *options) { o.hub = h })
}

// NewRedisStore is NewRedisStore on the hub's client, with the store's Watch
// and Renew going through the hub.
func (h *Hub) NewRedisStore(cfg Config) (*RedisStore, error) {
	l, err := NewRedisStore(h.client, cfg)
	if err != nil {
		return nil, err
	}
	l.hub = h
	return l, nil
}

// newRedisElector is New after its checks: the Elector on a RedisStore,
// which uses the hub of a WithHub option.
func newRedisElector(client redis.UniversalClient, cfg Config, opts []Option) (*Elector, error) {
	l := newRedisStore(client, cfg)
	if err := l.useHub(opts); err != nil {
		return nil, err
	}
	return NewWithStore(l, cfg, opts...)
}

// useHub attaches the hub of opts, if any, to l (New's WithHub).
func (l *RedisStore) useHub(opts []Option) error {
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

// renewEval runs the renew script, through the hub's batches when the store
// has a hub and needs no replica acknowledgement.
func (l *RedisStore) renewEval(ctx context.Context, lease Lease, ttl time.Duration) (any, int64, error) {
	if l.hub == nil || l.minReplicas > 0 {
		return l.eval(ctx, renewScript, []string{l.leaseKey, l.infoKey}, lease.String(), pxMillis(ttl))
	}
	res, err := l.hub.renew(ctx, l.leaseKey, lease.String(), pxMillis(ttl))
	return res, 0, err
}
