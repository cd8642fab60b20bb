package lock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/hooks"
	"github.com/solo-run/solo/leader"
)

var (
	//go:embed redlock_renew.lua
	redlockRenewLua    string
	redlockRenewScript = redis.NewScript(redlockRenewLua)

	//go:embed redlock_renew_owner.lua
	redlockRenewOwnerLua    string
	redlockRenewOwnerScript = redis.NewScript(redlockRenewOwnerLua)

	//go:embed redlock_release_owner.lua
	redlockReleaseOwnerLua    string
	redlockReleaseOwnerScript = redis.NewScript(redlockReleaseOwnerLua)

	//go:embed redlock_undo.lua
	redlockUndoLua    string
	redlockUndoScript = redis.NewScript(redlockUndoLua)

	//go:embed redlock_release.lua
	redlockReleaseLua    string
	redlockReleaseScript = redis.NewScript(redlockReleaseLua)
)

// ErrNoQuorum is returned (wrapped, with the masters' errors) when too few
// Redlock masters answered for an acquire, renewal or release to reach
// its quorum, and no other owner holds the lock.
var ErrNoQuorum = errors.New("lock: no quorum of masters")

// NewRedlockClient returns a Client whose Mutexes are Redlock locks over
// masters: independent Redis servers (not replicas of one another, not one
// Cluster), quorum len(masters)/2 + 1; an odd number is advised. Its holds
// are NewClient's *Hold, with the same contract. It returns a
// *leader.ConfigError for an empty list, a nil client or MinReplicas, an
// error for a repeated client, and NewClient's errors for bad options; a
// Mutex WithFair is refused. It does not contact Redis. Close waits for the
// master calls still pending (use clients with ContextTimeoutEnabled). Read
// docs/design.md, "Redlock", before choosing it over one master with WAIT.
func NewRedlockClient(masters []redis.UniversalClient, opts ...Option) (*Client, error) {
	if len(masters) == 0 {
		return nil, &leader.ConfigError{Field: "masters", Value: 0,
			Reason: "must list at least one Redis master (3 or 5 independent ones are advised)"}
	}
	for i, m := range masters {
		if m == nil {
			return nil, &leader.ConfigError{Field: fmt.Sprintf("masters[%d]", i), Value: nil, Reason: "must be a Redis client"}
		}
		if j := slices.Index(masters[:i], m); j >= 0 {
			return nil, fmt.Errorf("lock: invalid masters[%d]: the same client as masters[%d] (every master counts once toward the quorum)", i, j)
		}
	}
	var probe options
	for _, opt := range opts {
		opt.apply(&probe)
	}
	if probe.cfg.MinReplicas > 0 {
		return nil, &leader.ConfigError{Field: "min_replicas", Value: probe.cfg.MinReplicas,
			Reason: "is not available with Redlock: its masters are independent primaries (use one master with replicas and MinReplicas instead)"}
	}
	ms := slices.Clone(masters)
	all := make([]Option, 0, len(opts)+1)
	all = append(all, opts...)
	all = append(all, optionFunc(func(o *options) {
		o.newStore = func(m *Mutex) hooks.Store {
			if m.fair || m.cfg.MinReplicas > 0 {
				return nil // Mutex refuses it: no FIFO queue across masters, no WAIT
			}
			return newQuorumStore(m, ms)
		}
	}))
	c, err := NewClient(ms[0], all...)
	if err != nil {
		return nil, err
	}
	for _, rdb := range ms[1:] {
		x, err := NewClient(rdb, opts...)
		if err != nil {
			_ = c.Close()
			return nil, err
		}
		c.notices = append(c.notices, x)
	}
	return c, nil
}

// master is one Redlock master's lock: the store's steps, with renewals
// and releases that also raise the master's term counter to floor.
type master interface {
	Acquire(ctx context.Context, owner string, adopt []string, reenter string, wait bool) (hooks.AcquireReply, error)
	renewFloor(ctx context.Context, field, floor string) (bool, error)
	// renewOwner renews the lock if owner holds it, whatever the term
	// (a master whose acquire reply came after the quorum's).
	renewOwner(ctx context.Context, owner, floor string) (bool, error)
	releaseFloor(ctx context.Context, field string, last bool, floor string) (int64, error)
	// releaseOwner deletes the lock if owner holds it, whatever the term,
	// and tombstones owner (its acquire may still land):
	// 0 deleted, -1 not owner's.
	releaseOwner(ctx context.Context, owner, floor string) (int64, error)
	Abandon(ctx context.Context, call string, owners []string) error
	// undo ends one failed attempt on this master: abandon of owner
	// without the release notice.
	undo(ctx context.Context, owner string) error
}

// redlockMaster is a master in Redis.
type redlockMaster struct{ *redisStore }

func (s redlockMaster) renewFloor(ctx context.Context, field, floor string) (bool, error) {
	n, err := redlockRenewScript.Run(ctx, s.client, s.lockKeys, field, s.ttl, floor).Int64()
	if err != nil {
		return false, fmt.Errorf("renew %s: %w", s.oneKey[0], err)
	}
	if n == 1 {
		return true, s.eviction.renewed(s.oneKey[0])
	}
	return false, nil
}

func (s redlockMaster) renewOwner(ctx context.Context, owner, floor string) (bool, error) {
	n, err := redlockRenewOwnerScript.Run(ctx, s.client, s.lockKeys, owner, s.ttl, floor).Int64()
	if err != nil {
		return false, fmt.Errorf("renew %s: %w", s.oneKey[0], err)
	}
	return n == 1, nil
}

func (s redlockMaster) releaseOwner(ctx context.Context, owner, floor string) (int64, error) {
	n, err := redlockReleaseOwnerScript.Run(ctx, s.client, s.allKeys, owner, s.channel, floor, s.goneArg).Int64()
	if err != nil {
		return 0, fmt.Errorf("release %s: %w", s.oneKey[0], err)
	}
	return n, nil
}

func (s redlockMaster) releaseFloor(ctx context.Context, field string, last bool, floor string) (int64, error) {
	flag := "0"
	if last {
		flag = "1"
	}
	n, err := redlockReleaseScript.Run(ctx, s.client, s.allKeys, field, flag, s.channel, "released "+field, floor, s.ttl).Int64()
	if err != nil {
		return 0, fmt.Errorf("release %s: %w", s.oneKey[0], err)
	}
	return n, nil
}

func (s redlockMaster) undo(ctx context.Context, owner string) error {
	if err := redlockUndoScript.Run(ctx, s.client, s.goneKeys, s.goneArg, owner).Err(); err != nil {
		return fmt.Errorf("undo %s: %w", s.oneKey[0], err)
	}
	return nil
}
