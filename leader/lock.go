package leader

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// Store stores one election's lease. The Elector sees storage only through
// it; RedisStore is the production implementation and leadertest.Store an
// in-memory fake. Every method is one atomic step on the store.
type Store interface {
	// Acquire takes the lease for id with the given TTL if nobody holds it,
	// minting a new term; if id holds it already (a retry after a lost
	// reply) it refreshes and adopts it; otherwise it reports the holder,
	// never taking a lease another candidate holds. With an error wrapping
	// ErrNotReplicated the lease was taken but is not safe to lead on: the
	// Record carries it, left in place for the caller to release.
	Acquire(ctx context.Context, id string, ttl time.Duration) (Outcome, Record, error)

	// Renew extends the lease to ttl if it is still exactly l. Returns
	// ErrLeaseLost when it is not; it never re-creates a missing lease.
	Renew(ctx context.Context, l Lease, ttl time.Duration) error

	// Release deletes the lease if it is still exactly l and publishes a
	// release notice. Returns ErrLeaseLost when it is not.
	Release(ctx context.Context, l Lease) error

	// Inspect returns the current holder, or ErrNoLeader. A store that
	// keeps them fills in what the holder recorded and Record.Candidates; with
	// ErrNoLeader the Record carries only the Candidates.
	Inspect(ctx context.Context) (Record, error)

	// Watch subscribes to the election's notices. The returned Watch must be
	// closed. Notices are an optimisation: an error or a missed notice only
	// slows a handoff down to the holder's remaining TTL.
	Watch(ctx context.Context) (Watch, error)

	// RequestResign publishes a request that the holder of term step down.
	// It returns how many subscribers received it.
	RequestResign(ctx context.Context, term uint64) (int64, error)
}

// Lease is the value identifying one holding of the lease: the term and the
// holder's ID. It is unique per lease because the term is.
type Lease struct {
	Term uint64
	ID   string
}

// String returns the stored form "TERM ID".
func (l Lease) String() string { return strconv.FormatUint(l.Term, 10) + " " + l.ID }

// parseLease parses "TERM ID".
func parseLease(s string) (Lease, bool) {
	t, id, ok := strings.Cut(s, " ")
	if !ok {
		return Lease{}, false
	}
	term, err := strconv.ParseUint(t, 10, 64)
	if err != nil {
		return Lease{}, false
	}
	return Lease{Term: term, ID: id}, true
}

// Record describes the lease as the store reported it: the lease, its time
// left, and what the holder recorded beside it for readers. A zero field
// of what the holder recorded is unknown: Acquire and Renew do not report
// it, a store may not keep it, or an older solo took the lease.
type Record struct {
	Lease
	// TTL is the time left on the lease when the store answered.
	TTLLeft time.Duration
	// LeaseTTL is the lease length the holder acquires and renews with
	// (Inspect only).
	LeaseTTL time.Duration
	// RenewInterval is how often the holder renews (Inspect only).
	RenewInterval time.Duration
	// Value is the value the holder proclaims (Config.Value, Proclaim;
	// Inspect only).
	Value string
	// Since is when the lease was acquired, on the store's clock (Inspect
	// only).
	Since time.Time
	// Protocol and MinPeerProtocol are the holder's protocol and the
	// oldest it shares an election with (see Protocol; Inspect only); zero
	// when it recorded none: a solo before v0.1.0, which speaks protocol 1.
	Protocol, MinPeerProtocol int
	// Candidates are the IDs of the candidates that recently found the
	// lease held and wait for it, soonest gone first (Inspect only; at
	// most MaxCandidates).
	Candidates []string
}

// MaxCandidates bounds the candidates an election records (the most
// recently seen are kept), so a flood of IDs cannot grow the set.
const MaxCandidates = 100

// Proclaimer is implemented by a Store that can replace the proclaimed
// value of a lease it holds (RedisStore, leadertest.Store); Elector.Proclaim
// uses it.
type Proclaimer interface {
	// Proclaim sets the value proclaimed with lease l if l is still
	// exactly the lease, and keeps value for leases taken later. It
	// returns ErrLeaseLost when l is not the lease.
	Proclaim(ctx context.Context, l Lease, value string) error
}

// Withdrawer is implemented by a Store that records waiting candidates;
// the Elector calls it, best effort, when a Run that was following ends.
type Withdrawer interface {
	// Withdraw removes id from the election's candidates.
	Withdraw(ctx context.Context, id string) error
}

// Outcome says what an Acquire did.
type Outcome int

const (
	// Held means another candidate holds the lease; nothing changed.
	Held Outcome = iota
	// Acquired means the lease was free and is now ours with a new term.
	Acquired
	// Adopted means the lease was already ours (an earlier attempt whose
	// reply was lost, or a lease we stopped using); it was refreshed.
	Adopted
)

// String returns the outcome's name.
func (o Outcome) String() string {
	switch o {
	case Acquired:
		return "acquired"
	case Adopted:
		return "adopted"
	default:
		return "held"
	}
}

// Watch delivers an election's notices.
type Watch interface {
	// Events delivers notices in order. It is closed when the Watch closes.
	Events() <-chan Event
	// Live reports whether notices are currently being received.
	Live() bool
	// Close stops the watch and waits for its goroutines.
	Close() error
}

// EventKind is the kind of an election notice.
type EventKind int

const (
	// EventReleased: the holder of Lease released it.
	EventReleased EventKind = iota + 1
	// EventResign: someone asks the holder of Lease.Term to step down.
	EventResign
	// EventElected: Lease was just acquired (a new term; adoptions and
	// renewals are not announced).
	EventElected
)

// Event is one notice on the election's channel.
type Event struct {
	Kind  EventKind
	Lease Lease // for EventResign only Term is set (0 = whoever leads)
}

// eventMessage encodes an event for the channel: "released TERM ID",
// "elected TERM ID" or "resign TERM".
func eventMessage(ev Event) string {
	switch ev.Kind {
	case EventReleased:
		return "released " + ev.Lease.String()
	case EventElected:
		return "elected " + ev.Lease.String()
	case EventResign:
		return "resign " + strconv.FormatUint(ev.Lease.Term, 10)
	}
	return ""
}

// parseEvent decodes eventMessage's output.
func parseEvent(s string) (Event, bool) {
	kind, rest, _ := strings.Cut(s, " ")
	switch kind {
	case "released":
		l, ok := parseLease(rest)
		return Event{Kind: EventReleased, Lease: l}, ok
	case "elected":
		l, ok := parseLease(rest)
		return Event{Kind: EventElected, Lease: l}, ok
	case "resign":
		t, err := strconv.ParseUint(rest, 10, 64)
		if err != nil {
			return Event{}, false
		}
		return Event{Kind: EventResign, Lease: Lease{Term: t}}, true
	}
	return Event{}, false
}
