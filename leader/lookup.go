package leader

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Holder describes the current leader of an election as Redis reports it.
type Holder struct {
	// ID is the holder's candidate ID.
	ID string `json:"id"`
	// Term is the holder's fencing term.
	Term uint64 `json:"term"`
	// TTL is the time left on the lease when Redis answered.
	TTL time.Duration `json:"ttl"`
	// Since is when the term was minted, read off the term itself: a term
	// is the Redis server's clock in microseconds at the acquire (or one
	// more than the previous term, when that is larger).
	Since time.Time `json:"since"`
	// LastRenew estimates the holder's last renewal on the caller's clock
	// as now − (TTL in config − TTL left); zero when the lease has more
	// time left than the configured TTL (the holder uses another TTL).
	LastRenew time.Time `json:"last_renew"`
}

// Lookup returns the current holder of the election cfg names, in one
// round trip. It returns ErrNoLeader when nobody holds the lease, and a
// *ConfigError for a bad cfg. Only Name, KeyPrefix and TTL are used.
func Lookup(ctx context.Context, client redis.UniversalClient, cfg Config) (Holder, error) {
	lock, cfg, err := lockFor(client, cfg)
	if err != nil {
		return Holder{}, err
	}
	rec, err := lock.Inspect(ctx)
	if err != nil {
		return Holder{}, err
	}
	return holderOf(rec, cfg.TTL, time.Now()), nil
}

// RequestResign asks the current holder of the election to step down
// gracefully, as Elector.Resign would, by publishing a resign notice for its
// term (a later leader ignores it). It returns the holder it asked. It
// returns ErrNoLeader when nobody leads, and an error when no candidate was
// subscribed to hear it.
func RequestResign(ctx context.Context, client redis.UniversalClient, cfg Config) (Holder, error) {
	lock, cfg, err := lockFor(client, cfg)
	if err != nil {
		return Holder{}, err
	}
	rec, err := lock.Inspect(ctx)
	if err != nil {
		return Holder{}, err
	}
	h := holderOf(rec, cfg.TTL, time.Now())
	n, err := lock.RequestResign(ctx, rec.Term)
	if err != nil {
		return h, err
	}
	if n == 0 {
		return h, errors.New("leader: no candidate is subscribed to " + cfg.EventsChannel())
	}
	return h, nil
}

func lockFor(client redis.UniversalClient, cfg Config) (*RedisLock, Config, error) {
	if client == nil {
		return nil, cfg, errors.New("leader: nil redis client")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, cfg, err
	}
	return newRedisLock(client, cfg), cfg, nil
}

func holderOf(rec Record, ttl time.Duration, now time.Time) Holder {
	h := Holder{ID: rec.ID, Term: rec.Term, TTL: rec.TTL}
	if rec.Term <= 1<<62 {
		h.Since = time.UnixMicro(int64(rec.Term))
	}
	if rec.TTL > 0 && rec.TTL <= ttl {
		h.LastRenew = now.Add(-(ttl - rec.TTL))
	}
	return h
}
