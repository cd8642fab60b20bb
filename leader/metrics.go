package leader

import "time"

// Metrics receives an elector's measurements. Calls come from the
// elector's goroutines and must not block. An implementation embeds
// NopMetrics, so that a method added later is a no-op for it.
// worker/workerprom provides a Prometheus implementation.
type Metrics interface {
	// Transition reports a step in the life of the term given: Elected,
	// Released, Expired or StepDown.
	Transition(t Transition, term uint64)
	// Renew reports one renew round trip and its result.
	Renew(took time.Duration, err error)
	// Overrun reports a leader function still running past its stop budget.
	Overrun(term uint64)
	// Redis reports the outcome of each acquire and renew: nil when Redis
	// answered (whatever the answer), else the error.
	Redis(err error)
	// RedisConfigError reports each acquire or renew that Redis refused
	// as a configuration error (err wraps ErrRedisConfig).
	RedisConfigError(err error)
	// ProtocolRefused reports whether acquires are refused for version
	// skew (the holder speaks a protocol this build does not share an
	// election with: ErrProtocolSkew), after every answered acquire that
	// changes it.
	ProtocolRefused(refused bool)
	// RedisEviction reports what the store last read of the server's
	// eviction policy (EvictionGuard), after every answered or failed call.
	RedisEviction(state EvictionState)
}

// NopMetrics records nothing; embed it in a Metrics implementation.
type NopMetrics struct{}

var _ Metrics = NopMetrics{}

func (NopMetrics) Transition(Transition, uint64) {}
func (NopMetrics) Renew(time.Duration, error)    {}
func (NopMetrics) Overrun(uint64)                {}
func (NopMetrics) Redis(error)                   {}
func (NopMetrics) RedisConfigError(error)        {}
func (NopMetrics) ProtocolRefused(bool)          {}
func (NopMetrics) RedisEviction(EvictionState)   {}
