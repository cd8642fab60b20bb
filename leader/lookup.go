package leader

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// Holder describes the current leader of an election as Redis reports it.
// Its JSON form (MarshalJSON) is the "holder" object of /leader and of
// `solo status --json`.
type Holder struct {
	// ID is the holder's candidate ID.
	ID string
	// Term is the holder's fencing term.
	Term uint64
	// TTLLeft is the time left on the lease when Redis answered.
	TTLLeft time.Duration
	// Since is when the term began, on the Redis server's clock: as the
	// holder recorded it, else read off the term (docs/design.md, "Redis
	// data, per election").
	Since time.Time
	// LeaseTTL is the lease length the holder uses (its Config.TTL), from
	// the info it keeps beside the lease; zero when unknown (a lease taken
	// by an older solo).
	LeaseTTL time.Duration
	// RenewInterval is how often the holder renews; zero when unknown.
	RenewInterval time.Duration
	// LastRenew estimates the holder's last renewal on the caller's clock
	// as now − (LeaseTTL − TTLLeft); zero when LeaseTTL is unknown (the
	// reader's own TTL says nothing about the holder's).
	LastRenew time.Time
	// Value is the value the holder proclaims (Config.Value,
	// Elector.Proclaim); empty when none.
	Value string
	// Protocol is the protocol the holder speaks and MinPeerProtocol the
	// oldest it shares an election with; zero when the holder recorded
	// none (a solo before v0.1.0, which speaks protocol 1).
	Protocol        int
	MinPeerProtocol int
}

// View is an election as one read of Redis shows it.
type View struct {
	// Holder is the current holder; nil when nobody leads.
	Holder *Holder
	// Candidates are the IDs of the candidates waiting for the lease (seen
	// by their last acquire attempt within about two of their TTLs), sorted.
	// At most MaxCandidates.
	Candidates []string
}

// Lookup returns the current holder of the election cfg names, in one
// round trip. It returns ErrNoLeader when nobody holds the lease, and a
// *ConfigError for a bad cfg. Only Name and KeyPrefix are used.
func Lookup(ctx context.Context, client redis.UniversalClient, cfg Config) (Holder, error) {
	v, err := LookupView(ctx, client, cfg)
	if err != nil {
		return Holder{}, err
	}
	if v.Holder == nil {
		return Holder{}, ErrNoLeader
	}
	return *v.Holder, nil
}

// LookupView returns the holder and the waiting candidates of the
// election cfg names, in one round trip. Nobody leading is not an error
// (View.Holder is nil). Only Name and KeyPrefix of cfg are used.
func LookupView(ctx context.Context, client redis.UniversalClient, cfg Config) (View, error) {
	lock, _, err := lockFor(client, cfg)
	if err != nil {
		return View{}, err
	}
	return viewOf(ctx, lock)
}

// View is LookupView through this elector's own Store.
func (e *Elector) View(ctx context.Context) (View, error) {
	return viewOf(ctx, e.lock)
}

func viewOf(ctx context.Context, lock Store) (View, error) {
	rec, err := lock.Inspect(ctx)
	if err != nil && !errors.Is(err, ErrNoLeader) {
		return View{}, err
	}
	v := View{Candidates: slices.Sorted(slices.Values(rec.Candidates))}
	if err == nil {
		h := holderOf(rec, time.Now())
		v.Holder = &h
	}
	return v, nil
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
	h := holderOf(rec, time.Now())
	n, err := lock.RequestResign(ctx, rec.Term)
	if err != nil {
		return h, err
	}
	if n == 0 {
		return h, errors.New("leader: no candidate is subscribed to " + cfg.EventsChannel())
	}
	return h, nil
}

func lockFor(client redis.UniversalClient, cfg Config) (*RedisStore, Config, error) {
	if client == nil {
		return nil, cfg, errors.New("leader: nil redis client")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, cfg, err
	}
	return newRedisStore(client, cfg), cfg, nil
}

func holderOf(rec Record, now time.Time) Holder {
	h := Holder{ID: rec.ID, Term: rec.Term, TTLLeft: rec.TTLLeft, Since: rec.Since,
		LeaseTTL: rec.LeaseTTL, RenewInterval: rec.RenewInterval, Value: rec.Value,
		Protocol: rec.Protocol, MinPeerProtocol: rec.MinPeerProtocol}
	if h.Since.IsZero() && rec.Term <= 1<<62 {
		h.Since = time.UnixMicro(int64(rec.Term))
	}
	if rec.TTLLeft > 0 && rec.TTLLeft <= h.LeaseTTL {
		h.LastRenew = now.Add(-(h.LeaseTTL - rec.TTLLeft))
	}
	return h
}
