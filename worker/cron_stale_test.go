package worker

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/leadertest"
)

// staleStore is stallLoad whose checkpoints are refused with
// leader.ErrLeaseLost once stale is set: the term has ended on the server
// while this instance, paused, has not yet heard of it.
type staleStore struct {
	*stallLoad
	stale atomic.Bool
}

func (s *staleStore) Checkpoint(ctx context.Context, lease leader.Lease, key string, n int64) error {
	if s.stale.Load() {
		return fmt.Errorf("checkpoint %s term %d: %w", key, lease.Term, leader.ErrLeaseLost)
	}
	return s.Store.Checkpoint(ctx, lease, key, n)
}

// A stale ex-leader whose scheduler wakes late, after its term ended on
// the server, runs no tick and claims none: the line that a missed tick
// runs once comes only with a run, and the refused record is neither a
// warning nor a failed run. Old code: "scheduler ran late: running the
// latest missed tick once, after the due one" at info for a tick never
// run, "cannot record the tick; skipped" at warn and a failed run counted.
func TestCron_StaleExLeaderClaimsNoRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := time.Now().UTC()
		lock := &staleStore{stallLoad: &stallLoad{Store: leadertest.New(), key: cronKey("c-stall"), release: make(chan struct{})}}
		r := newCronRig(t, lock, WithPolicy(Policy{RestartBackoff: 100 * time.Millisecond, RestartBackoffMax: 100 * time.Millisecond}))
		once := &ticks{base: base}
		nop := func(context.Context) error { return nil }
		for _, err := range []error{
			r.w.Cron("b-once", "*/10 * * * * *", once.run, WithMisfire(MisfireRunOnce)),
			r.w.Cron("c-stall", "@hourly", nop, WithMisfire(MisfireRunOnce)),
		} {
			if err != nil {
				t.Fatal(err)
			}
		}
		stop := r.start()
		time.Sleep(35 * time.Second) // the loop is held until 0:35; ticks 10, 20, 30 are due
		lock.stale.Store(true)       // meanwhile the term ended on the server
		close(lock.release)
		time.Sleep(time.Second)
		stop()

		if got := once.String(); got != "[]" {
			t.Errorf("ran %s, want nothing: the term ended", got)
		}
		for _, msg := range []string{"running", "cannot record the tick"} {
			if l := r.logs.FilterMessageSnippet(msg).All(); len(l) > 0 {
				t.Errorf("logged %q for a tick never run", l[0].Message)
			}
		}
		for _, l := range r.logs.FilterLevelExact(zapcore.WarnLevel).All() {
			if !strings.Contains(l.Message, "at the start of the term") { // the stalled read, injected
				t.Errorf("warned %q: a stale term's refused record is not a fault", l.Message)
			}
		}
		if got := r.m.get("failures jobs b-once"); got != 0 {
			t.Errorf("counted %v failed runs, want 0", got)
		}
	})
}
