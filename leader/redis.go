package leader

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/pubsub"
)

var (
	//go:embed acquire.lua
	acquireLua    string
	acquireScript = redis.NewScript(acquireLua)

	//go:embed renew.lua
	renewLua    string
	renewScript = redis.NewScript(renewLua)

	//go:embed release.lua
	releaseLua    string
	releaseScript = redis.NewScript(releaseLua)

	//go:embed inspect.lua
	inspectLua    string
	inspectScript = redis.NewScript(inspectLua)

	//go:embed proclaim.lua
	proclaimLua    string
	proclaimScript = redis.NewScript(proclaimLua)
)

// errRenewNotReplicated marks a renew that fewer than MinReplicas replicas
// acknowledged. It counts as a failed renew (retried), not as a lost lease.
var errRenewNotReplicated = errors.New("leader: renew not acknowledged by enough replicas")

// RedisStore is the Store kept in Redis: every operation is one Lua
// script, one round trip (docs/design.md, "Redis data, per election").
type RedisStore struct {
	client         redis.UniversalClient
	prefix         string // PREFIX:{NAME}:
	leaseKey       string
	termKey        string
	infoKey        string
	candKey        string
	noteKey        string        // the release's note, which no acquire clears (release.lua)
	cpSeq          atomic.Uint64 // the last Checkpoint request's ID
	releaseNoteMs  int64         // how long a release's note answers a second run of it (TTL)
	spreadKey      string        // PREFIX:{NAME}:spread: a spread group of the name excludes this election
	channel        string
	renewMs        int64
	windowMs       int64                  // how long a candidate stays listed past the holder's TTL
	proto          int                    // the protocol this store speaks (protocol)
	protoMin       int                    // the oldest it shares an election with (minPeerProtocol)
	value          atomic.Pointer[string] // proclaimed with the next lease (Config.Value, Proclaim)
	minReplicas    int
	replicaTimeout time.Duration
	healthEvery    time.Duration
	hub            *Hub           // shared notices and batched renewals; nil: own subscription, own round trips
	guard          *EvictionGuard // the eviction policy's check, without a hub (a hub has its own)
}

var _ Store = (*RedisStore)(nil)

// NewRedisStore returns the Redis Store of the election cfg names. client may
// be a single-node, Sentinel failover or Cluster client: all keys of one
// election share the hash tag {NAME}, so they live in one Cluster slot.
func NewRedisStore(client redis.UniversalClient, cfg Config) (*RedisStore, error) {
	if client == nil {
		return nil, errors.New("leader: nil redis client")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return newRedisStore(client, cfg), nil
}

func newRedisStore(client redis.UniversalClient, cfg Config) *RedisStore {
	l := &RedisStore{
		client:         client,
		prefix:         cfg.Key(""),
		leaseKey:       cfg.LeaseKey(),
		termKey:        cfg.TermKey(),
		infoKey:        cfg.InfoKey(),
		candKey:        cfg.CandidatesKey(),
		noteKey:        cfg.Key("released"),
		spreadKey:      cfg.Key("spread"),
		channel:        cfg.EventsChannel(),
		renewMs:        cfg.RenewInterval.Milliseconds(),
		windowMs:       candidateWindow(cfg).Milliseconds(),
		proto:          protocol,
		protoMin:       minPeerProtocol,
		minReplicas:    cfg.MinReplicas,
		replicaTimeout: cfg.ReplicaTimeout,
		healthEvery:    cfg.TTL,
		releaseNoteMs:  pxMillis(cfg.TTL),
		guard:          newSharedGuard(client),
	}
	v := cfg.Value
	l.value.Store(&v)
	return l
}

// candidateWindow is how long past the holder's remaining TTL a candidate
// that found the lease held stays listed: longer than a follower sleeps
// between attempts (the holder's TTL left, or RetryInterval without
// notices) with room for one more TTL, so a live follower never drops
// out, and a dead one drops out within about twice its TTL.
func candidateWindow(cfg Config) time.Duration {
	return 2*cfg.TTL + cfg.RetryInterval
}

// infoKeyOf returns the info key of the election whose lease key is key.
func infoKeyOf(leaseKey string) string {
	return strings.TrimSuffix(leaseKey, "lease") + "info"
}

// Acquire implements Store. With MinReplicas it may return ErrNotReplicated
// with the lease it took or adopted: fewer replicas acknowledged it, so the
// caller must not lead on it and releases it itself.
func (l *RedisStore) Acquire(ctx context.Context, id string, ttl time.Duration) (Outcome, Record, error) {
	if err := l.evictionGuard().Check(ctx); err != nil {
		return Held, Record{}, fmt.Errorf("acquire %s: %w", l.leaseKey, err)
	}
	keys := []string{l.leaseKey, l.termKey, l.infoKey, l.candKey, l.spreadKey}
	res, acked, err := l.eval(ctx, acquireScript, keys, id, pxMillis(ttl), l.channel,
		l.renewMs, *l.value.Load(), l.windowMs, MaxCandidates, l.proto, l.protoMin)
	if err != nil {
		return Held, Record{}, fmt.Errorf("acquire %s: %w", l.leaseKey, err)
	}
	outcome, rec, err := parseAcquire(res, l.proto, l.protoMin)
	if errors.Is(err, ErrSpreadGroupLive) {
		return Held, rec, fmt.Errorf("acquire %s: member %s of the spread group %s: %w", l.leaseKey, rec.ID, l.spreadKey, err)
	}
	if errors.Is(err, ErrProtocolSkew) {
		return Held, rec, fmt.Errorf("acquire %s: %w", l.leaseKey, err)
	}
	if err != nil {
		return Held, Record{}, fmt.Errorf("acquire %s: %w", l.leaseKey, err)
	}
	// Left in place for the caller: a release from here could race with
	// the caller's retry and delete the lease that retry adopted.
	if outcome != Held && l.minReplicas > 0 && acked < int64(l.minReplicas) {
		return outcome, rec, fmt.Errorf("acquire %s: %d of %d replicas acknowledged: %w", l.leaseKey, acked, l.minReplicas, ErrNotReplicated)
	}
	return outcome, rec, nil
}

// Renew implements Store. May return ErrLeaseLost.
func (l *RedisStore) Renew(ctx context.Context, lease Lease, ttl time.Duration) error {
	res, acked, err := l.renewEval(ctx, lease, ttl) // hub.go: batched with a Hub
	if err != nil {
		return fmt.Errorf("renew %s: %w", l.leaseKey, err)
	}
	if n, _ := res.(int64); n != 1 {
		return fmt.Errorf("renew %s term %d: %w", l.leaseKey, lease.Term, ErrLeaseLost)
	}
	if l.minReplicas > 0 && acked < int64(l.minReplicas) {
		return fmt.Errorf("renew %s: %d of %d replicas acknowledged: %w", l.leaseKey, acked, l.minReplicas, errRenewNotReplicated)
	}
	if err := l.evictionGuard().Err(); err != nil {
		return fmt.Errorf("renew %s: %w", l.leaseKey, err) // renewed, but Redis may evict it: step down
	}
	return nil
}

// Release implements Store. May return ErrLeaseLost.
func (l *RedisStore) Release(ctx context.Context, lease Lease) error {
	msg := eventMessage(Event{Kind: EventReleased, Lease: lease})
	keys := []string{l.leaseKey, l.infoKey, l.candKey, l.noteKey}
	n, err := releaseScript.Run(ctx, l.client, keys, lease.String(), l.channel, msg, lease.ID, l.releaseNoteMs).Int64()
	if err != nil {
		return fmt.Errorf("release %s: %w", l.leaseKey, err)
	}
	if n != 1 {
		return fmt.Errorf("release %s term %d: %w", l.leaseKey, lease.Term, ErrLeaseLost)
	}
	return nil
}

// Inspect implements Store. May return ErrNoLeader (with the candidates).
func (l *RedisStore) Inspect(ctx context.Context) (Record, error) {
	keys := []string{l.leaseKey, l.infoKey, l.candKey}
	res, err := inspectScript.Run(ctx, l.client, keys, MaxCandidates).Slice()
	if err != nil {
		return Record{}, fmt.Errorf("inspect %s: %w", l.leaseKey, err)
	}
	if len(res) != 4 {
		return Record{}, fmt.Errorf("inspect %s: unexpected reply %v", l.leaseKey, res)
	}
	var rec Record
	cands, _ := res[3].([]any)
	for _, c := range cands {
		if id, ok := c.(string); ok {
			rec.Candidates = append(rec.Candidates, id)
		}
	}
	v, _ := res[0].(string)
	if v == "" {
		return rec, ErrNoLeader
	}
	lease, ok := parseLease(v)
	if !ok {
		return Record{}, fmt.Errorf("inspect %s: malformed lease %q", l.leaseKey, v)
	}
	pttl, _ := res[1].(int64)
	rec.Lease, rec.TTLLeft = lease, time.Duration(pttl)*time.Millisecond
	flat, _ := res[2].([]any)
	parseInfo(&rec, flat, v)
	return rec, nil
}

// Proclaim implements Proclaimer: one round trip, fenced by the lease.
// The value is kept for leases this store takes later, whatever the outcome.
func (l *RedisStore) Proclaim(ctx context.Context, lease Lease, value string) error {
	if err := checkValue(value); err != nil {
		return err
	}
	l.value.Store(&value)
	n, err := proclaimScript.Run(ctx, l.client, []string{l.leaseKey, l.infoKey}, lease.String(), value).Int64()
	if err != nil {
		return fmt.Errorf("proclaim %s: %w", l.leaseKey, err)
	}
	if n != 1 {
		return fmt.Errorf("proclaim %s term %d: %w", l.leaseKey, lease.Term, ErrLeaseLost)
	}
	return nil
}

// Withdraw implements Withdrawer: ZREM of id from the candidates.
func (l *RedisStore) Withdraw(ctx context.Context, id string) error {
	if err := l.client.ZRem(ctx, l.candKey, id).Err(); err != nil {
		return fmt.Errorf("withdraw from %s: %w", l.candKey, err)
	}
	return nil
}

// parseInfo reads into rec the info hash (HGETALL's flat reply) of the
// lease "TERM ID" v; fields of another lease, or malformed, are left zero.
func parseInfo(rec *Record, flat []any, v string) {
	m := make(map[string]string, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		k, _ := flat[i].(string)
		m[k], _ = flat[i+1].(string)
	}
	if m["lease"] != v {
		return
	}
	ms := func(k string) int64 {
		n, err := strconv.ParseInt(m[k], 10, 64)
		if err != nil || n < 0 {
			return 0
		}
		return n
	}
	rec.LeaseTTL = time.Duration(ms("ttl_ms")) * time.Millisecond
	rec.RenewInterval = time.Duration(ms("renew_ms")) * time.Millisecond
	rec.Value = m["value"]
	rec.Protocol, rec.MinPeerProtocol = int(ms("proto")), int(ms("proto_min"))
	if s := ms("since_ms"); s > 0 {
		rec.Since = time.UnixMilli(s)
	}
}

// RequestResign implements Store. On a Cluster client the count is the
// larger of PUBLISH's (the receiving node's subscribers only) and the sum of
// PUBSUB NUMSUB over every node; a node that does not answer is left out,
// its error returned only when no subscriber was found.
func (l *RedisStore) RequestResign(ctx context.Context, term uint64) (int64, error) {
	n, err := l.client.Publish(ctx, l.channel, eventMessage(Event{Kind: EventResign, Lease: Lease{Term: term}})).Result()
	if err != nil {
		return 0, fmt.Errorf("publish resign on %s: %w", l.channel, err)
	}
	cc, ok := l.client.(*redis.ClusterClient)
	if !ok {
		return n, nil
	}
	var sum atomic.Int64
	err = cc.ForEachShard(ctx, func(ctx context.Context, node *redis.Client) error {
		m, err := node.PubSubNumSub(ctx, l.channel).Result()
		if err != nil {
			return fmt.Errorf("%s: %w", node.Options().Addr, err)
		}
		sum.Add(m[l.channel])
		return nil
	})
	n = max(n, sum.Load())
	if n == 0 && err != nil {
		return 0, fmt.Errorf("publish resign on %s: count subscribers: %w", l.channel, err)
	}
	return n, nil
}

// Watch implements Store. It returns at once, without waiting for the
// SUBSCRIBE; the subscription reconnects on its own, and Live is false
// until the server confirmed it and while it is down. With a Hub it shares
// the hub's connection.
func (l *RedisStore) Watch(ctx context.Context) (Watch, error) {
	if l.hub != nil {
		return l.hub.watch(l)
	}
	w := &redisWatch{channel: l.channel, events: make(chan Event), stop: make(chan struct{})}
	w.mux = pubsub.New(l.client, pubsub.Config{
		Values:  ctx,
		Every:   l.healthEvery,
		Pause:   time.Second,
		Refusal: refusal,
		Message: w.message,
	})
	if _, err := w.mux.Add(l.channel); err != nil {
		return nil, err
	}
	return w, nil
}

// eval runs a script; with MinReplicas it pipelines a WAIT after it on the
// same connection and returns the number of acknowledging replicas.
func (l *RedisStore) eval(ctx context.Context, s *redis.Script, keys []string, args ...any) (any, int64, error) {
	if l.minReplicas == 0 {
		res, err := s.Run(ctx, l.client, keys, args...).Result()
		return res, 0, err
	}
	var c redis.Cmdable = l.client
	if cc, ok := l.client.(*redis.ClusterClient); ok {
		// A cluster pipeline would send the keyless WAIT to any node; the
		// WAIT must follow the write on the slot's own master.
		node, err := cc.MasterForKey(ctx, keys[0])
		if err != nil {
			return nil, 0, err
		}
		c = node
	}
	res, acked, err := l.evalWait(ctx, c, s, true, keys, args)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		res, acked, err = l.evalWait(ctx, c, s, false, keys, args)
	}
	return res, acked, err
}

func (l *RedisStore) evalWait(ctx context.Context, c redis.Cmdable, s *redis.Script, sha bool, keys []string, args []any) (any, int64, error) {
	p := c.Pipeline()
	var ev *redis.Cmd
	if sha {
		ev = s.EvalSha(ctx, p, keys, args...)
	} else {
		ev = s.Eval(ctx, p, keys, args...)
	}
	// Pipeliner's interface lacks WAIT, but every go-redis pipeline has it.
	waiter, ok := p.(interface {
		Wait(ctx context.Context, numReplicas int, timeout time.Duration) *redis.IntCmd
	})
	if !ok {
		return nil, 0, errors.New("pipeline without WAIT")
	}
	wait := waiter.Wait(ctx, l.minReplicas, l.replicaTimeout)
	_, _ = p.Exec(ctx) // errors are read per command below
	res, err := ev.Result()
	if err != nil {
		return nil, 0, err
	}
	acked, err := wait.Result()
	if err != nil {
		return nil, 0, fmt.Errorf("wait for replicas: %w", err)
	}
	return res, acked, nil
}

// parseAcquire reads acquire.lua's reply to a caller speaking protocol
// proto (sharing an election with protoMin and up).
func parseAcquire(res any, proto, protoMin int) (Outcome, Record, error) {
	arr, ok := res.([]any)
	if !ok || len(arr) != 3 && len(arr) != 4 {
		return Held, Record{}, fmt.Errorf("unexpected reply %v", res)
	}
	code, _ := arr[0].(int64)
	v, _ := arr[1].(string)
	pttl, _ := arr[2].(int64)
	lease, ok := parseLease(v)
	if !ok {
		return Held, Record{}, fmt.Errorf("malformed lease %q", v)
	}
	rec := Record{Lease: lease, TTLLeft: time.Duration(pttl) * time.Millisecond}
	switch code {
	case 1:
		return Acquired, rec, nil
	case 2:
		return Adopted, rec, nil
	case 3:
		return Held, rec, ErrSpreadGroupLive
	case 4:
		pe := &ProtocolError{Holder: lease, Own: proto, OwnMinPeer: protoMin}
		if s, _ := arr[3].(string); len(arr) != 4 || !parseProtocols(s, &pe.Protocol, &pe.MinPeer) {
			return Held, Record{}, fmt.Errorf("unexpected reply %v", res)
		}
		return Held, rec, pe
	default:
		return Held, rec, nil
	}
}

// redisWatch turns the election's pub/sub channel into Events, over a
// multiplexer of its own (internal/pubsub) holding its one channel: an
// idle subscription is checked with a PING every TTL, and one that fails
// or stays silent is made anew on a new connection. Close stops and waits
// for the multiplexer's goroutines.
type redisWatch struct {
	mux     *pubsub.Mux
	channel string
	events  chan Event
	stop    chan struct{}
	once    sync.Once
}

func (w *redisWatch) Events() <-chan Event { return w.events }

func (w *redisWatch) Live() bool { return w.mux.Live(w.channel) }

// configErr implements refusedWatch.
func (w *redisWatch) configErr() error { return w.mux.Refusal() }

func (w *redisWatch) Close() error {
	w.once.Do(func() {
		close(w.stop) // unblocks a pending delivery
		w.mux.Close()
		close(w.events)
	})
	return nil
}

// message hands a notice to the reader, waiting for it or Close.
func (w *redisWatch) message(_, payload string) {
	ev, ok := parseEvent(payload)
	if !ok {
		return
	}
	select {
	case w.events <- ev:
	case <-w.stop:
	}
}

// pxMillis is a TTL as Redis's PX milliseconds, rounded up: truncating
// 10.5ms to PX 10 would let the key die before the holder's deadline when
// RenewDeadline sits within a millisecond of TTL × (1 − Drift). Rounding
// up only makes the key outlive the holder's own view a little longer.
func pxMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
