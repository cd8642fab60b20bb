package worker

import (
	"errors"
	"fmt"
)

// WithWaitForRedis makes /readyz fail (503, with a reason naming Redis)
// until Redis first answered this instance: an acquire or renewal of its
// elector (leader.Status.Reached), or, for a Spread, a heartbeat
// (Spread.HeartbeatAnswered). Then /readyz keeps its meaning: a later
// outage is said in its body, not failed on. A refusal is an answer, and
// fails /readyz by itself (a configuration error). Modes always and
// standby make no such call: there the option changes nothing.
//
// For a process that serves no traffic of its own (solo run): a rollout of
// a wrong URL, a missing CA or a blocked network then stalls on its first
// new instance instead of replacing every working one. Default: off, ready
// before Redis answers, as a service that serves traffic as a follower is.
func WithWaitForRedis() Option {
	return optionFunc(func(w *Worker) { w.waitRedis = true })
}

// errNotAnswered is redisWait's error before Redis answered.
var errNotAnswered = errors.New("waiting for redis: it has not answered this instance yet")

// redisWait returns, under WithWaitForRedis, why /readyz fails until Redis
// first answered the elector (with the error of its last call, if any);
// else nil.
func (w *Worker) redisWait() error {
	if !w.waitRedis || w.mode == ModeAlways || w.mode == ModeStandby {
		return nil
	}
	st := w.elector.Status()
	switch {
	case st.Reached:
		return nil
	case st.RedisErr != nil:
		return fmt.Errorf("%w: %w", errNotAnswered, st.RedisErr)
	}
	return errNotAnswered
}

// redisWait is Worker.redisWait for a Spread: until Redis first answered a
// heartbeat of its Run.
func (s *Spread) redisWait() error {
	if !s.tmpl.waitRedis || s.HeartbeatAnswered() {
		return nil
	}
	return errNotAnswered
}
