package leader

import (
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// go-redis's defaults for a zero ReadTimeout and WriteTimeout.
const goRedisDefaultTimeout = 3 * time.Second

// clientTimeouts returns the read/write timeout a client's calls wait at
// most when the context is not honoured (0 for none), and whether it
// honours context deadlines. ok is false for clients it cannot inspect.
func clientTimeouts(client redis.UniversalClient) (bound time.Duration, ctxHonoured, ok bool) {
	var read, write time.Duration
	switch c := client.(type) {
	case *redis.Client:
		o := c.Options()
		read, write, ctxHonoured = o.ReadTimeout, o.WriteTimeout, o.ContextTimeoutEnabled
	case *redis.ClusterClient:
		o := c.Options()
		read, write, ctxHonoured = o.ReadTimeout, o.WriteTimeout, o.ContextTimeoutEnabled
	default:
		return 0, false, false
	}
	eff := func(d time.Duration) time.Duration {
		switch {
		case d == 0:
			return goRedisDefaultTimeout
		case d < 0: // -1 no timeout, -2 no deadline set at all
			return 0
		}
		return d
	}
	r, w := eff(read), eff(write)
	if r == 0 || w == 0 {
		return 0, ctxHonoured, true
	}
	return max(r, w), ctxHonoured, true
}

// warnClientTimeouts logs once, at New, when a call of client can outlast
// the renew budget. Safety does not depend on it (the elector bounds every
// call with its own timers and never starts a term confirmed after its
// deadline), but such a client keeps a hung call's connection and
// goroutine busy past the budget, and its errors come later than they
// could.
func (e *Elector) warnClientTimeouts(client redis.UniversalClient) {
	bound, ctxHonoured, ok := clientTimeouts(client)
	if !ok || ctxHonoured {
		return
	}
	budget := e.cfg.RenewDeadline - e.cfg.RenewInterval
	if bound != 0 && bound <= budget {
		return
	}
	e.log.Warn("redis client calls can outlast the renew budget; set ContextTimeoutEnabled, or read/write timeouts below it (leadership stays safe: the elector bounds every call itself)",
		zap.Duration("client_timeout", bound), zap.Bool("context_timeout_enabled", ctxHonoured),
		zap.Duration("renew_budget", budget))
}
