package leader

import (
	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"
	"go.uber.org/zap"
)

// Module provides an *Elector built from a redis.UniversalClient and a
// Config that the application provides. It only provides: running the
// elector is the worker module's job (or the application's, through Run).
var Module = fx.Module("leader",
	fx.Provide(NewFromParams),
)

// Params are the inputs of NewFromParams.
type Params struct {
	fx.In

	Client  redis.UniversalClient
	Config  Config
	Logger  *zap.Logger `optional:"true"`
	Metrics Metrics     `optional:"true"`
}

// NewFromParams is New for fx.
func NewFromParams(p Params) (*Elector, error) {
	return New(p.Client, p.Config, WithLogger(p.Logger), WithMetrics(p.Metrics))
}
