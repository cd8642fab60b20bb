package lock

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/hooks"
)

var (
	//go:embed acquire.lua
	acquireLua    string
	acquireScript = newScript(acquireLua)

	//go:embed renew.lua
	renewLua    string
	renewScript = newScript(renewLua)

	//go:embed release.lua
	releaseLua    string
	releaseScript = newScript(releaseLua)

	//go:embed abandon.lua
	abandonLua    string
	abandonScript = newScript(abandonLua)

	//go:embed fair_acquire.lua
	fairAcquireLua    string
	fairAcquireScript = newScript(fairAcquireLua)

	//go:embed fair_release.lua
	fairReleaseLua    string
	fairReleaseScript = newScript(fairReleaseLua)

	//go:embed fair_abandon.lua
	fairAbandonLua    string
	fairAbandonScript = newScript(fairAbandonLua)
)

// script is one Lua script, sent as EVALSHA (EVAL after NOSCRIPT, as
// redis.Script.Run). Its SHA is boxed once, and a call's arguments are
// built by the caller in one slice from a per-store head whose keys and
// constant arguments are boxed once too: a call allocates its argument
// slice, the boxes of its variable arguments and the command.
type script struct {
	src string
	sha any
}

func newScript(src string) *script {
	return &script{src: src, sha: redis.NewScript(src).Hash()}
}

// head returns the start of this script's command line for keys:
// EVALSHA SHA NUMKEYS KEYS..., with room for the arguments.
func (s *script) head(keys ...string) []any {
	h := make([]any, 0, 3+len(keys))
	h = append(h, "evalsha", s.sha, len(keys))
	for _, k := range keys {
		h = append(h, k)
	}
	return h
}

// args returns a new command line: head followed by n arguments to append.
func args(head []any, n int) []any {
	a := make([]any, len(head), len(head)+n)
	copy(a, head)
	return a
}

// run sends the command line a (made by args from s's head).
func (s *script) run(ctx context.Context, c redis.UniversalClient, a []any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, a...)
	cmd.SetFirstKeyPos(3)
	_ = c.Process(ctx, cmd)
	if isNoScript(cmd.Err()) {
		return s.eval(ctx, c, a)
	}
	return cmd
}

// eval sends a as EVAL with the script's source, which also loads it.
func (s *script) eval(ctx context.Context, c redis.UniversalClient, a []any) *redis.Cmd {
	e := slices.Clone(a)
	e[0], e[1] = "eval", s.src
	cmd := redis.NewCmd(ctx, e...)
	cmd.SetFirstKeyPos(3)
	_ = c.Process(ctx, cmd)
	return cmd
}

// callOf returns the call of an attempt's owner ("CALL.N").
func callOf(owner string) string {
	if i := strings.LastIndexByte(owner, '.'); i >= 0 {
		return owner[:i]
	}
	return owner
}

// tombstoneLife is how long an abandoned attempt stays refused: a request
// delayed on the network for longer (TCP retransmissions can take
// minutes) may still take the lock for a call that has ended, which holds
// it up until its TTL (never two holders: the owner is unique and nobody
// uses it).
func tombstoneLife(ttl time.Duration) time.Duration { return max(10*ttl, time.Minute) }

// redisStore is the store of one lock name in Redis. The command heads
// (script, keys) and the constant arguments (TTL, channel, slot) are built
// and boxed once, so a call allocates only its argument slice, the boxes
// of its owner or field, and its command.
type redisStore struct {
	client   redis.UniversalClient
	batch    *batcher // nil: every call goes alone
	key      string   // the lock hash, for errors
	lockKeys []string // lock hash, term key (Redlock's scripts)
	oneKey   []string // lock hash (Redlock's scripts)
	ttl      string   // milliseconds
	channel  string
	ttlArg   any      // ttl, boxed once
	chanArg  any      // channel, boxed once
	goneKeys []string // lock hash, tombstones
	allKeys  []string // lock hash, term key, tombstones (Redlock's release by owner)
	goneArg  any      // tombstone lifetime, milliseconds, boxed once
	fair     bool
	// notice, when set, is told of every release that deleted the lock
	// ("released FIELD", or "granted FIELD" when a fair release handed it
	// to the queue's head), as soon as the reply comes: the Client wakes
	// its own waiters without waiting for the pub/sub notice.
	notice func(msg string)
	slot   any // fair: a waiter's slot lifetime, milliseconds, as a string
	// eviction checks the server's eviction policy before an acquire and
	// after a renewal (nil: never).
	eviction *evictionCheck
	// minReplicas > 0: acquires and renewals pipeline a WAIT (unbatched).
	minReplicas    int
	replicaTimeout time.Duration

	acquireHead, fairAcquireHead []any
	renewHead, releaseHead       []any
	fairReleaseHead              []any
	abandonHead, fairAbandonHead []any
}

func newRedisStore(client redis.UniversalClient, cfg Config, name string) *redisStore {
	base := cfg.KeyPrefix + ":{" + name + "}:"
	lock, term, queue, timeouts := base+"lock", base+"lock.term", base+"lock.queue", base+"lock.timeouts"
	gone := base + "lock.gone"
	ttl, channel := strconv.FormatInt(pxMillis(cfg.TTL), 10), base+"lock.events"
	return &redisStore{
		client:         client,
		key:            lock,
		lockKeys:       []string{lock, term},
		oneKey:         []string{lock},
		ttl:            ttl,
		channel:        channel,
		minReplicas:    cfg.MinReplicas,
		replicaTimeout: cfg.ReplicaTimeout,
		ttlArg:         ttl,
		chanArg:        channel,
		goneKeys:       []string{lock, gone},
		allKeys:        []string{lock, term, gone},
		goneArg:        strconv.FormatInt(tombstoneLife(cfg.TTL).Milliseconds(), 10),
		// A waiter sleeps at most the holder's PTTL (≤ TTL) plus jitter, or
		// RetryInterval, between attempts, and each attempt refreshes its
		// slot: two TTLs keep a live waiter's slot, and bound how long a
		// dead one holds up the queue.
		slot:            strconv.FormatInt((2*cfg.TTL + cfg.RetryInterval).Milliseconds(), 10),
		acquireHead:     acquireScript.head(lock, term, gone),
		fairAcquireHead: fairAcquireScript.head(lock, term, queue, timeouts, gone),
		renewHead:       renewScript.head(lock),
		releaseHead:     releaseScript.head(lock, gone),
		fairReleaseHead: fairReleaseScript.head(lock, term, queue, timeouts, gone),
		abandonHead:     abandonScript.head(lock, gone),
		fairAbandonHead: fairAbandonScript.head(lock, gone, queue, timeouts),
	}
}

// run sends a of sc, in a batch when the store has a batcher.
func (s *redisStore) run(ctx context.Context, sc *script, a []any) *redis.Cmd {
	if s.batch != nil {
		return s.batch.run(ctx, sc, a)
	}
	return sc.run(ctx, s.client, a)
}

// runWait sends a of sc and a WAIT for minReplicas in one pipeline, on one
// connection (the slot's master with a Cluster client: a WAIT elsewhere
// would count another node's replicas), so the WAIT covers exactly that
// write. It returns the script's reply and the replicas that
// acknowledged it.
func (s *redisStore) runWait(ctx context.Context, sc *script, a []any) (*redis.Cmd, int64, error) {
	var c redis.Cmdable = s.client
	if cc, ok := s.client.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, s.key)
		if err != nil {
			return failedCmd(ctx, a, err), 0, err
		}
		c = node
	}
	cmd, acked, err := s.pipeWait(ctx, c, a)
	if isNoScript(err) {
		e := slices.Clone(a)
		e[0], e[1] = "eval", sc.src
		cmd, acked, err = s.pipeWait(ctx, c, e)
	}
	return cmd, acked, err
}

func (s *redisStore) pipeWait(ctx context.Context, c redis.Cmdable, a []any) (*redis.Cmd, int64, error) {
	p := c.Pipeline()
	cmd := redis.NewCmd(ctx, a...)
	cmd.SetFirstKeyPos(3)
	_ = p.Process(ctx, cmd)
	// Pipeliner's interface lacks WAIT, but every go-redis pipeline has it.
	waiter, ok := p.(interface {
		Wait(ctx context.Context, numReplicas int, timeout time.Duration) *redis.IntCmd
	})
	if !ok {
		err := fmt.Errorf("pipeline without WAIT")
		return failedCmd(ctx, a, err), 0, err
	}
	w := waiter.Wait(ctx, s.minReplicas, s.replicaTimeout)
	_, _ = p.Exec(ctx) // errors are read per command below
	if err := cmd.Err(); err != nil {
		return cmd, 0, err
	}
	acked, err := w.Result()
	if err != nil {
		return cmd, 0, fmt.Errorf("wait for replicas: %w", err)
	}
	return cmd, acked, nil
}

// send runs a of sc: with a WAIT when minReplicas is set (acked is then
// the replicas that acknowledged it), else batched when it can be.
func (s *redisStore) send(ctx context.Context, sc *script, a []any) (cmd *redis.Cmd, acked int64) {
	if s.minReplicas > 0 {
		cmd, acked, _ = s.runWait(ctx, sc, a)
		return cmd, acked
	}
	return s.run(ctx, sc, a), 0
}

// channelName is the lock's notice channel.
func (s *redisStore) channelName() string { return s.channel }

func (s *redisStore) Acquire(ctx context.Context, owner string, adopt []string, reenter string, wait bool) (hooks.AcquireReply, error) {
	var (
		cmd   *redis.Cmd
		acked int64
	)
	if err := s.eviction.check(ctx, s.key); err != nil {
		return hooks.AcquireReply{}, err
	}
	if s.fair {
		q := "0"
		if wait {
			q = "1"
		}
		a := append(args(s.fairAcquireHead, 6+len(adopt)), owner, s.ttlArg, reenter, q, s.slot, s.queueEntry(callOf(owner)))
		for _, o := range adopt {
			a = append(a, o)
		}
		cmd, acked = s.send(ctx, fairAcquireScript, a)
	} else {
		a := append(args(s.acquireHead, 3+len(adopt)), owner, s.ttlArg, reenter)
		for _, o := range adopt {
			a = append(a, o)
		}
		cmd, acked = s.send(ctx, acquireScript, a)
	}
	res, err := cmd.Slice()
	if err != nil {
		return hooks.AcquireReply{}, fmt.Errorf("acquire %s: %w", s.key, err)
	}
	r, err := parseAcquire(res)
	if err == nil && s.minReplicas > 0 && acked < int64(s.minReplicas) &&
		(r.Code == hooks.CodeAcquired || r.Code == hooks.CodeAdopted || r.Code == hooks.CodeReentered) {
		// The caller hands an acquire back by its field (never holds it);
		// a re-entry's extra count goes with the term's last release.
		return r, fmt.Errorf("acquire %s: %d of %d replicas acknowledged: %w", s.key, acked, s.minReplicas, ErrNotReplicated)
	}
	return r, err
}

// fieldOf returns the field of an acquired or adopted hold: r.Field, or
// "TERM OWNER" of the attempt's own owner.
func fieldOf(r hooks.AcquireReply, owner string) string {
	if r.Field != "" {
		return r.Field
	}
	return makeField(r.Term, owner)
}

func parseAcquire(res []any) (hooks.AcquireReply, error) {
	if len(res) == 0 {
		return hooks.AcquireReply{}, fmt.Errorf("acquire: unexpected reply %v", res)
	}
	code, _ := res[0].(int64)
	r := hooks.AcquireReply{Code: int(code)}
	switch r.Code {
	case hooks.CodeAcquired:
		if len(res) < 2 {
			return r, fmt.Errorf("acquire: unexpected reply %v", res)
		}
		t, _ := res[1].(int64)
		r.Term = uint64(t)
	case hooks.CodeAdopted:
		// The adopted hold is an earlier attempt's: its own field and term.
		if len(res) < 2 {
			return r, fmt.Errorf("acquire: unexpected reply %v", res)
		}
		r.Field, _ = res[1].(string)
		t, _, _ := strings.Cut(r.Field, " ")
		term, err := strconv.ParseUint(t, 10, 64)
		if err != nil {
			return r, fmt.Errorf("acquire: unexpected reply %v", res)
		}
		r.Term = term
	case hooks.CodeReentered:
		if len(res) < 2 {
			return r, fmt.Errorf("acquire: unexpected reply %v", res)
		}
		r.Count, _ = res[1].(int64)
	case hooks.CodeHeld:
		if len(res) < 3 {
			return r, fmt.Errorf("acquire: unexpected reply %v", res)
		}
		r.Holder, _ = res[1].(string)
		p, _ := res[2].(int64)
		r.PTTL = time.Duration(p) * time.Millisecond
		if len(res) > 3 {
			t, _ := res[3].(int64)
			r.Seen = uint64(max(t, 0))
		}
	case hooks.CodeGone, hooks.CodeAbandoned:
	default:
		return r, fmt.Errorf("acquire: unexpected reply %v", res)
	}
	return r, nil
}

func (s *redisStore) Renew(ctx context.Context, field string) (bool, error) {
	a := append(args(s.renewHead, 2), field, s.ttlArg)
	cmd, acked := s.send(ctx, renewScript, a)
	n, err := cmd.Int64()
	if err != nil {
		return false, fmt.Errorf("renew %s: %w", s.key, err)
	}
	if n == 1 && s.minReplicas > 0 && acked < int64(s.minReplicas) {
		return false, fmt.Errorf("renew %s: %d of %d replicas acknowledged: %w", s.key, acked, s.minReplicas, errRenewNotReplicated)
	}
	if n == 1 {
		return true, s.eviction.renewed(s.key)
	}
	return false, nil
}

func (s *redisStore) Release(ctx context.Context, field string, last bool) (int64, error) {
	flag := "0"
	if last {
		flag = "1"
	}
	if s.fair {
		a := append(args(s.fairReleaseHead, 4), field, flag, s.chanArg, s.ttlArg)
		res, err := s.run(ctx, fairReleaseScript, a).Slice()
		if err != nil {
			return 0, fmt.Errorf("release %s: %w", s.key, err)
		}
		var n int64
		ok := len(res) > 0
		if ok {
			n, ok = res[0].(int64)
		}
		if !ok {
			return 0, fmt.Errorf("release %s: unexpected reply %v", s.key, res)
		}
		if n == 0 && s.notice != nil {
			if len(res) > 1 {
				g, _ := res[1].(string)
				s.notice("granted " + g)
			} else {
				s.notice("released " + field)
			}
		}
		return n, nil
	}
	a := append(args(s.releaseHead, 4), field, flag, s.chanArg, s.ttlArg)
	n, err := s.run(ctx, releaseScript, a).Int64()
	if err != nil {
		return 0, fmt.Errorf("release %s: %w", s.key, err)
	}
	if n == 0 && last && s.notice != nil {
		s.notice("released " + field)
	}
	return n, nil
}

// queueEntry is a fair call's entry in the queue, "CALL!TTL": the call,
// marked as one that takes grants for the lock's TTL in ms
// (fair_release.lua grants it for that TTL, the one the call times its
// hold by). Every attempt and the abandon of a call name the same entry.
func (s *redisStore) queueEntry(call string) string { return call + "!" + s.ttl }

// grantOwner is the owner under which fair_release.lua grants the lock to
// call: no attempt of a call is numbered 0.
func grantOwner(call string) string { return call + ".0" }

func (s *redisStore) Abandon(ctx context.Context, call string, owners []string) error {
	var a []any
	sc := abandonScript
	if s.fair {
		sc = fairAbandonScript
		a = append(args(s.fairAbandonHead, 3+len(owners)), s.chanArg, s.goneArg, s.queueEntry(call))
	} else {
		a = append(args(s.abandonHead, 2+len(owners)), s.chanArg, s.goneArg)
	}
	for _, o := range owners {
		a = append(a, o)
	}
	if err := s.run(ctx, sc, a).Err(); err != nil {
		return fmt.Errorf("abandon %s: %w", s.key, err)
	}
	return nil
}

// pxMillis is a TTL as Redis's PX milliseconds, rounded up, never down:
// a key that died a fraction of a millisecond before the hold's deadline
// (TTL 1.9ms sent as PX 1) would let another owner in while the hold's
// context lives. Rounding up only makes the key outlive the hold's own
// view a little longer.
func pxMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
