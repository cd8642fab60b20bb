package leader

import (
	"time"

	"go.uber.org/zap"

	"github.com/solo-run/solo/internal/hooks"
)

// Option configures an Elector's collaborators.
type Option interface {
	apply(*options)
}

type options struct {
	log     *zap.Logger
	logSet  bool // WithLogger was given a logger
	metrics Metrics
	hub     *Hub // WithHub; read by New only
	hooks   hooks.Hooks
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithLogger sets the logger. The elector logs under the name "leader" with
// the fields election and id. Default: no logging.
func WithLogger(log *zap.Logger) Option {
	return optionFunc(func(o *options) {
		if log != nil {
			o.log, o.logSet = log, true
		}
	})
}

// UseLogger makes the elector log through log, as WithLogger would have,
// unless New was given a logger (WithLogger) or Run is running; it
// reports whether it did. It is for code that wraps an elector and has a
// logger of its own, such as worker.New, so that a user who configures
// one logger gets the elector's lines too. Call it before Run.
func (e *Elector) UseLogger(log *zap.Logger) bool {
	if log == nil || e.logSet || e.running.Load() {
		return false
	}
	e.log = log.Named("leader").With(zap.String("election", e.cfg.Name), zap.String("id", e.cfg.ID))
	e.logSet = true
	return true
}

// WithMetrics sets the receiver of the elector's measurements. Default: none.
func WithMetrics(m Metrics) Option {
	return optionFunc(func(o *options) {
		if m != nil {
			o.metrics = m
		}
	})
}

// Metrics receives an elector's measurements. Calls come from the elector's
// goroutines and must not block. worker provides a Prometheus implementation.
type Metrics interface {
	// Transition reports a role change of the term given.
	Transition(t Transition, term uint64)
	// Renew reports one renew round trip and its result.
	Renew(took time.Duration, err error)
	// Overrun reports a leader function still running past its stop budget.
	Overrun(term uint64)
}

// RedisMetrics is an optional extension of Metrics: an elector whose
// Metrics implement it reports the outcome of each acquire and renew, nil
// when Redis answered (whatever the answer), else the error. Calls must not
// block.
type RedisMetrics interface {
	Redis(err error)
}

// ProtocolMetrics is an optional extension of Metrics: an elector whose
// Metrics implement it reports whether its acquires are refused for
// version skew (the holder speaks a protocol this build does not share an
// election with: ErrProtocolSkew), after every answered acquire that
// changes it. Calls must not block.
type ProtocolMetrics interface {
	ProtocolRefused(refused bool)
}

// RedisConfigMetrics is an optional extension of Metrics: an elector whose
// Metrics implement it reports each acquire or renew that Redis refused as
// a configuration error (err wraps ErrRedisConfig). Calls must not block.
type RedisConfigMetrics interface {
	RedisConfigError(err error)
}

type nopMetrics struct{}

func (nopMetrics) Transition(Transition, uint64) {}
func (nopMetrics) Renew(time.Duration, error)    {}
func (nopMetrics) Overrun(uint64)                {}
