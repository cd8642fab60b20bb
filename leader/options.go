package leader

import (
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
