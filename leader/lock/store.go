package lock

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
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

	//go:embed abandon.lua
	abandonLua    string
	abandonScript = redis.NewScript(abandonLua)

	//go:embed fair_acquire.lua
	fairAcquireLua    string
	fairAcquireScript = redis.NewScript(fairAcquireLua)

	//go:embed fair_abandon.lua
	fairAbandonLua    string
	fairAbandonScript = redis.NewScript(fairAbandonLua)
)

// Outcomes of the acquire script.
const (
	codeGone      = -1 // the hold to re-enter is gone
	codeHeld      = 0
	codeAcquired  = 1
	codeAdopted   = 2
	codeReentered = 3
)

// acquireReply is the acquire script's answer.
type acquireReply struct {
	code   int
	term   uint64        // acquired, adopted
	count  int64         // re-entered: holds of the term now
	holder string        // held: "TERM OWNER" of the holder
	pttl   time.Duration // held: the holder's time left
}

// store keeps one lock. Every method is one atomic step (one script);
// redisStore is the production one, tests use fakes for timing.
type store interface {
	// acquire takes the lock for owner, adopts it when owner already
	// holds it, or (reenter non-empty) adds one hold to the term whose
	// field is reenter. wait says the caller will wait (a fair lock
	// queues it).
	acquire(ctx context.Context, owner, reenter string, wait bool) (acquireReply, error)
	// renew extends the lock if field still holds it.
	renew(ctx context.Context, field string) (bool, error)
	// release drops one hold (all when last) of field; returns the holds
	// left, or -1 when field does not hold the lock.
	release(ctx context.Context, field string, last bool) (int64, error)
	// abandon deletes the lock if owner holds it.
	abandon(ctx context.Context, owner string) error
}

// redisStore is the store of one lock name in Redis. Keys and constant
// arguments are built once, so a call allocates only its command.
type redisStore struct {
	client   redis.UniversalClient
	lockKeys []string // lock hash, term key
	oneKey   []string // lock hash
	ttl      string   // milliseconds
	channel  string
	fair     bool
	fairKeys []string // lock hash, term key, queue, slot timeouts
	slot     string   // fair: a waiter's slot lifetime, milliseconds
}

func newRedisStore(client redis.UniversalClient, cfg Config, name string) *redisStore {
	base := cfg.KeyPrefix + ":{" + name + "}:"
	return &redisStore{
		client:   client,
		lockKeys: []string{base + "lock", base + "lock.term"},
		oneKey:   []string{base + "lock"},
		ttl:      strconv.FormatInt(cfg.TTL.Milliseconds(), 10),
		channel:  base + "lock.events",
		fairKeys: []string{base + "lock", base + "lock.term", base + "lock.queue", base + "lock.timeouts"},
		// A waiter sleeps at most the holder's PTTL (≤ TTL) plus jitter, or
		// RetryInterval, between attempts, and each attempt refreshes its
		// slot: two TTLs keep a live waiter's slot, and bound how long a
		// dead one holds up the queue.
		slot: strconv.FormatInt((2*cfg.TTL + cfg.RetryInterval).Milliseconds(), 10),
	}
}

func (s *redisStore) acquire(ctx context.Context, owner, reenter string, wait bool) (acquireReply, error) {
	var (
		res []any
		err error
	)
	if s.fair {
		q := "0"
		if wait {
			q = "1"
		}
		res, err = fairAcquireScript.Run(ctx, s.client, s.fairKeys, owner, s.ttl, reenter, q, s.slot).Slice()
	} else {
		res, err = acquireScript.Run(ctx, s.client, s.lockKeys, owner, s.ttl, reenter).Slice()
	}
	if err != nil {
		return acquireReply{}, fmt.Errorf("acquire %s: %w", s.oneKey[0], err)
	}
	return parseAcquire(res)
}

func parseAcquire(res []any) (acquireReply, error) {
	if len(res) == 0 {
		return acquireReply{}, fmt.Errorf("acquire: unexpected reply %v", res)
	}
	code, _ := res[0].(int64)
	r := acquireReply{code: int(code)}
	switch r.code {
	case codeAcquired, codeAdopted:
		if len(res) < 2 {
			return r, fmt.Errorf("acquire: unexpected reply %v", res)
		}
		t, _ := res[1].(int64)
		r.term = uint64(t)
	case codeReentered:
		if len(res) < 2 {
			return r, fmt.Errorf("acquire: unexpected reply %v", res)
		}
		r.count, _ = res[1].(int64)
	case codeHeld:
		if len(res) < 3 {
			return r, fmt.Errorf("acquire: unexpected reply %v", res)
		}
		r.holder, _ = res[1].(string)
		p, _ := res[2].(int64)
		r.pttl = time.Duration(p) * time.Millisecond
	case codeGone:
	default:
		return r, fmt.Errorf("acquire: unexpected reply %v", res)
	}
	return r, nil
}

func (s *redisStore) renew(ctx context.Context, field string) (bool, error) {
	n, err := renewScript.Run(ctx, s.client, s.oneKey, field, s.ttl).Int64()
	if err != nil {
		return false, fmt.Errorf("renew %s: %w", s.oneKey[0], err)
	}
	return n == 1, nil
}

func (s *redisStore) release(ctx context.Context, field string, last bool) (int64, error) {
	flag := "0"
	if last {
		flag = "1"
	}
	n, err := releaseScript.Run(ctx, s.client, s.oneKey, field, flag, s.channel, "released "+field).Int64()
	if err != nil {
		return 0, fmt.Errorf("release %s: %w", s.oneKey[0], err)
	}
	return n, nil
}

func (s *redisStore) abandon(ctx context.Context, owner string) error {
	script, keys := abandonScript, s.oneKey
	if s.fair {
		script, keys = fairAbandonScript, s.fairKeys
	}
	if err := script.Run(ctx, s.client, keys, owner, s.channel).Err(); err != nil {
		return fmt.Errorf("abandon %s: %w", s.oneKey[0], err)
	}
	return nil
}
