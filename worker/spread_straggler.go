package worker

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/solo-run/solo/leader"
)

// A job's function that ignored cancellation past shutdown_timeout is left
// running when Run returns leader.ErrStopTimeout (its lease left to
// expire). Each Run builds its jobs' electors afresh, so the rule an
// Elector keeps within itself — a Run after ErrStopTimeout waits for the
// straggling function before campaigning — is kept here, per job, across
// Runs: a later Run does not campaign for that job until its function
// returned (the return kicks a rebalance), and returns ErrStopTimeout for
// it again if it ends first.

// run records that job's function runs here; the func it returns records
// its return. s.mu is held for both.
func (s *Spread) run(job string) (returned func()) {
	done := make(chan struct{})
	if s.busy == nil {
		s.busy = map[string]chan struct{}{}
	}
	s.busy[job] = done
	return func() {
		if s.busy[job] == done {
			delete(s.busy, job)
		}
		close(done)
	}
}

// straggling reports whether u's job still runs here from an earlier Run,
// saying so once per Run; s.mu is held.
func (c *control) straggling(u *unit) bool {
	if _, ok := c.s.busy[u.name]; !ok || u.held {
		return false
	}
	if !u.waiting {
		u.waiting = true
		c.s.log.Warn("not campaigning for a job whose function of an earlier run is still running; waiting for it to return",
			zap.String("job", u.name))
	}
	return true
}

// stragglerErrs sets the error of each unit whose job's function of an
// earlier Run still runs as this Run ends: ErrStopTimeout, as an Elector's
// Run returns when its ctx ends while it waits for one.
func (s *Spread) stragglerErrs(units []*unit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, u := range units {
		if _, ok := s.busy[u.name]; ok && u.err == nil {
			u.err = fmt.Errorf("job %q: %w", u.name, leader.ErrStopTimeout)
		}
	}
}
