package leader

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed checkpoint.lua
	checkpointLua    string
	checkpointScript = redis.NewScript(checkpointLua)
)

// ErrCheckpointNotAdvanced is returned by Checkpoint when the recorded value
// is already at or above the one offered (another term recorded it).
var ErrCheckpointNotAdvanced = errors.New("leader: checkpoint not advanced")

// ErrNoCheckpoints is returned when the elector's Store cannot keep
// checkpoints.
var ErrNoCheckpoints = errors.New("leader: lock keeps no checkpoints")

// Checkpointer is implemented by Stores that keep small fenced counters beside
// the lease (RedisStore, leadertest.Store). worker records each cron job's
// last fired tick this way, so a failover never runs a tick twice.
type Checkpointer interface {
	// Checkpoint sets key to n if lease still holds and n is greater than
	// the recorded value. Returns ErrLeaseLost or ErrCheckpointNotAdvanced.
	Checkpoint(ctx context.Context, lease Lease, key string, n int64) error
	// LoadCheckpoint returns the recorded value; ok is false if none.
	LoadCheckpoint(ctx context.Context, key string) (n int64, ok bool, err error)
}

var _ Checkpointer = (*RedisStore)(nil)

// Checkpoint implements Checkpointer; the key is PREFIX:{NAME}:cp:KEY, in
// the lease's Cluster slot, without expiry. With MinReplicas, a checkpoint
// (or a "not advanced" answer) fewer replicas acknowledged returns
// ErrNotReplicated and counts as not recorded.
func (l *RedisStore) Checkpoint(ctx context.Context, lease Lease, key string, n int64) error {
	// The request's ID lets a second run of it (go-redis's retry) answer
	// as the first.
	req := l.cpSeq.Add(1)
	reply, acked, err := l.eval(ctx, checkpointScript, []string{l.leaseKey, l.cpKey(key), l.infoKey}, lease.String(), n, req)
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", l.cpKey(key), err)
	}
	res, _ := reply.(int64)
	switch res {
	case 1:
		if l.minReplicas > 0 && acked < int64(l.minReplicas) {
			return fmt.Errorf("checkpoint %s: %d of %d replicas acknowledged: %w", l.cpKey(key), acked, l.minReplicas, ErrNotReplicated)
		}
		return nil
	case 0:
		// The recorded value, written again, is ours to trust only once
		// replicas acknowledge it: it may be an unreplicated write of an
		// earlier request (its reply lost), not yet safe from a failover.
		if l.minReplicas > 0 && acked < int64(l.minReplicas) {
			return fmt.Errorf("checkpoint %s: the recorded value: %d of %d replicas acknowledged: %w", l.cpKey(key), acked, l.minReplicas, ErrNotReplicated)
		}
		return fmt.Errorf("checkpoint %s to %d: %w", l.cpKey(key), n, ErrCheckpointNotAdvanced)
	default:
		return fmt.Errorf("checkpoint %s term %d: %w", l.cpKey(key), lease.Term, ErrLeaseLost)
	}
}

// LoadCheckpoint implements Checkpointer.
func (l *RedisStore) LoadCheckpoint(ctx context.Context, key string) (int64, bool, error) {
	v, err := l.client.Get(ctx, l.cpKey(key)).Result()
	if errors.Is(err, redis.Nil) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("load checkpoint %s: %w", l.cpKey(key), err)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("load checkpoint %s: %w", l.cpKey(key), err)
	}
	return n, true, nil
}

func (l *RedisStore) cpKey(key string) string { return l.prefix + "cp:" + key }

// Checkpoint records n under key beside the lease, fenced by the term ctx
// carries (TermFrom): only while that term holds the lease, and only if n
// is above the recorded value. It returns ErrLeaseLost (also for a ctx
// without the current term), ErrCheckpointNotAdvanced or ErrNoCheckpoints.
// It returns when ctx ends, even if the Redis client ignores ctx.
func (e *Elector) Checkpoint(ctx context.Context, key string, n int64) error {
	cp, ok := e.lock.(Checkpointer)
	if !ok {
		return ErrNoCheckpoints
	}
	term, ok := TermFrom(ctx)
	if !ok || term == 0 {
		return fmt.Errorf("checkpoint %q without a term: %w", key, ErrLeaseLost)
	}
	_, err := callBounded(ctx, func() (struct{}, error) {
		return struct{}{}, cp.Checkpoint(ctx, Lease{Term: term, ID: e.cfg.ID}, key, n)
	})
	return err
}

// LoadCheckpoint returns the value recorded under key; ok is false if none.
// It returns when ctx ends, as Checkpoint does.
func (e *Elector) LoadCheckpoint(ctx context.Context, key string) (n int64, ok bool, err error) {
	cp, ok := e.lock.(Checkpointer)
	if !ok {
		return 0, false, ErrNoCheckpoints
	}
	type loaded struct {
		n  int64
		ok bool
	}
	r, err := callBounded(ctx, func() (loaded, error) {
		n, ok, err := cp.LoadCheckpoint(ctx, key)
		return loaded{n, ok}, err
	})
	return r.n, r.ok, err
}

// Leader returns the current holder of the election as the store reports
// it, or ErrNoLeader. It is Lookup through this elector's own Store.
func (e *Elector) Leader(ctx context.Context) (Holder, error) {
	rec, err := e.lock.Inspect(ctx)
	if err != nil {
		return Holder{}, err
	}
	return holderOf(rec, time.Now()), nil
}
