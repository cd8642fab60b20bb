package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"
)

// leave ends a Run whose ctx is done. It leaves the members first, so that
// the others count one member fewer and campaign for the jobs this
// instance is about to release, but keeps its exclusion entry (see
// spread.lua) until every job stopped, so that no elect-mode candidate of
// the name takes the name meanwhile. Then it stops every job (drain,
// release, notice) and waits for wg, and returns each job's first error,
// in job-name order.
//
// The entry is extended to cover the drain's bound, max(member_ttl,
// shutdown_timeout) from now, plus TTL: a job still running at that bound
// is past shutdown_timeout, its lease left to expire as the elector does
// on shutdown. A leave call that fails is sent again every heartbeat while
// jobs drain, until one is answered or the bound passes, so that the entry
// written by the last accepted heartbeat (member_ttl + TTL after it)
// cannot expire under a draining job because one call failed; a leave
// that finds the entry gone does not write it again (spread.lua's XX).
func (s *Spread) leave(units []*unit, wg *sync.WaitGroup, closeWatch func()) error {
	bound := time.Now().Add(max(s.sc.MemberTTL, s.cfg.ShutdownTimeout))
	extend := func() bool {
		lctx, cancel := context.WithTimeout(context.Background(), s.cfg.RenewDeadline)
		defer cancel()
		_, _, err := s.heartbeat(lctx, nil, 0, max(time.Until(bound), 0)+s.cfg.TTL)
		if err != nil {
			s.log.Warn("leave the group; sent again while jobs drain", zap.Error(err))
		}
		return err == nil
	}
	held := extend()
	s.mu.Lock()
	for _, u := range units {
		if u.cancel != nil {
			u.cancel()
		}
	}
	s.mu.Unlock()
	closeWatch()
	drained := make(chan struct{})
	go func() { // ends once wg's goroutines ended; waited for below
		wg.Wait()
		close(drained)
	}()
	if !held {
		t := time.NewTimer(s.sc.Heartbeat)
	retry:
		for {
			select {
			case <-drained:
				break retry
			case <-t.C:
			}
			if !time.Now().Before(bound) || extend() {
				break
			}
			t.Reset(s.sc.Heartbeat)
		}
		t.Stop()
	}
	<-drained
	s.stragglerErrs(units)
	// Each job's first error, in job-name order (units are sorted): which
	// of two jobs failing at one instant failed first is the scheduler's
	// choice, not something to report.
	var jerrs []error
	for _, u := range units {
		if u.err != nil {
			jerrs = append(jerrs, u.err)
		}
	}
	err := errors.Join(jerrs...)
	if err == nil {
		// Every job returned and its lease was released: the name is free.
		// (After ErrStopTimeout the entry expires with the leases.)
		lctx, cancel := context.WithTimeout(context.Background(), s.cfg.RenewDeadline)
		if _, _, err := s.heartbeat(lctx, nil, 0, 0); err != nil {
			s.log.Warn("leave the group", zap.Error(err))
		}
		cancel()
	}
	return err
}
