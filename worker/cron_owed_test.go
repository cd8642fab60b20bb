package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/leadertest"
)

// failLoadOnce is a lock whose first checkpoint read of each key in fail
// fails: one lost read at the start of a term.
type failLoadOnce struct {
	*leadertest.Store
	mu   sync.Mutex
	fail map[string]bool
}

func (f *failLoadOnce) LoadCheckpoint(ctx context.Context, key string) (int64, bool, error) {
	f.mu.Lock()
	failing := f.fail[key]
	delete(f.fail, key)
	f.mu.Unlock()
	if failing {
		return 0, false, errors.New("injected: checkpoint read lost")
	}
	return f.Store.LoadCheckpoint(ctx, key)
}

// recordKey stores tick under the checkpoint key, as an earlier term did.
func recordKey(t *testing.T, lock *leadertest.Store, key string, tick time.Time) {
	t.Helper()
	ctx := context.Background()
	_, rec, err := lock.Acquire(ctx, "earlier", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Checkpoint(ctx, rec.Lease, key, tick.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(ctx, rec.Lease); err != nil {
		t.Fatal(err)
	}
}

// TestCron_OwedTickSurvivesAFailedRead: the first checkpoint read of a new
// term fails once. An at-least-once job whose last leader fired tick -10
// but completed only -20 still runs -10 (before, the term gave it up,
// completed tick 10, and the owed tick was lost for good: no later term
// runs a tick before the completed one); an at-most-once job with misfire
// run-once still runs its latest missed tick, 0, once.
//
// Mutation: with a single read (the old catchUp) this fails with
// "at-least-once: ran [10 20], want [-10 10 20]" and "run-once: ran
// [10 20], want [0 10 20]".
func TestCron_OwedTickSurvivesAFailedRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := time.Now().UTC() // 2000-01-01T00:00:00Z in the bubble
		inner := leadertest.New()
		recordKey(t, inner, cronDoneKey("a-owed"), base.Add(-20*time.Second))
		recordKey(t, inner, cronKey("a-owed"), base.Add(-10*time.Second))
		recordKey(t, inner, cronKey("b-once"), base.Add(-30*time.Second))
		lock := &failLoadOnce{Store: inner, fail: map[string]bool{cronKey("a-owed"): true, cronKey("b-once"): true}}
		r := newCronRig(t, lock)
		owed, once := &ticks{base: base}, &ticks{base: base}
		for _, err := range []error{
			r.w.Cron("a-owed", "*/10 * * * * *", owed.run, WithDelivery(AtLeastOnce)),
			r.w.Cron("b-once", "*/10 * * * * *", once.run, WithMisfire(MisfireRunOnce)),
		} {
			if err != nil {
				t.Fatal(err)
			}
		}
		stop := r.start()
		time.Sleep(25 * time.Second)
		stop()
		if got := owed.String(); got != "[-10 10 20]" {
			t.Errorf("at-least-once: ran %s, want [-10 10 20] (the owed tick -10 first)", got)
		}
		if got := once.String(); got != "[0 10 20]" {
			t.Errorf("run-once: ran %s, want [0 10 20] (the latest missed tick, 0, once)", got)
		}
	})
}

// failWriteOnce is a lock whose first checkpoint write of each key in fail
// fails, with err or else a lost reply; with executed set it is recorded
// first (a write whose reply was lost, or that too few replicas
// acknowledged), else not (a lost request).
type failWriteOnce struct {
	*leadertest.Store
	mu       sync.Mutex
	fail     map[string]bool
	executed bool
	err      error
}

func (f *failWriteOnce) Checkpoint(ctx context.Context, lease leader.Lease, key string, n int64) error {
	f.mu.Lock()
	failing := f.fail[key]
	delete(f.fail, key)
	f.mu.Unlock()
	if !failing {
		return f.Store.Checkpoint(ctx, lease, key, n)
	}
	if f.executed {
		if err := f.Store.Checkpoint(ctx, lease, key, n); err != nil {
			return err
		}
	}
	if f.err != nil {
		return f.err
	}
	return errors.New("injected: checkpoint reply lost")
}

// TestCron_OwedTickSurvivesAFailedWrite: the write that records an
// at-least-once tick as fired fails once. Whether the failed write was lost
// (the owed tick -10, left by the last leader) or ran and only its reply
// was lost (the new tick 10), the tick still runs (before, fireCron
// skipped it, the term completed the next tick, and the completion record
// moved past one fired and never completed: lost for good). A write that
// too few replicas acknowledged counts as not recorded and is made again
// (leader answers ErrNotReplicated to the repeat, "not advanced" on the
// primary, until a replica acknowledges it; this lock answers at once):
// the tick runs once recorded.
//
// Mutation: skipping the tick on a failed write (the old fireCron) fails
// with "lost request: ran [10 20], want [-10 10 20]" and "lost reply: ran
// [20], want [10 20]"; giving the tick up after an unreplicated write
// fails with "not replicated: ran [20], want [10 20]".
func TestCron_OwedTickSurvivesAFailedWrite(t *testing.T) {
	for _, tc := range []struct {
		name     string
		executed bool
		err      error
		want     string
	}{
		{"lost request", false, nil, "[-10 10 20]"},
		{"lost reply", true, nil, "[10 20]"},
		{"not replicated", true, leader.ErrNotReplicated, "[10 20]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				base := time.Now().UTC() // 2000-01-01T00:00:00Z in the bubble
				inner := leadertest.New()
				if !tc.executed {
					recordKey(t, inner, cronDoneKey("a"), base.Add(-20*time.Second))
					recordKey(t, inner, cronKey("a"), base.Add(-10*time.Second))
				}
				lock := &failWriteOnce{Store: inner, fail: map[string]bool{cronKey("a"): true}, executed: tc.executed, err: tc.err}
				r := newCronRig(t, lock)
				got := &ticks{base: base}
				if err := r.w.Cron("a", "*/10 * * * * *", got.run, WithDelivery(AtLeastOnce)); err != nil {
					t.Fatal(err)
				}
				stop := r.start()
				time.Sleep(25 * time.Second)
				stop()
				if s := got.String(); s != tc.want {
					t.Errorf("%s: ran %s, want %s", tc.name, s, tc.want)
				}
			})
		})
	}
}

// failLoad is a lock whose checkpoint reads of the keys in fail always
// fail, with that key's error.
type failLoad struct {
	*leadertest.Store
	fail map[string]error
}

func (f *failLoad) LoadCheckpoint(ctx context.Context, key string) (int64, bool, error) {
	if err := f.fail[key]; err != nil {
		return 0, false, err
	}
	return f.Store.LoadCheckpoint(ctx, key)
}

// TestCron_UnreadableCheckpointStopsNoOtherJob: one job's checkpoint can
// never be read at the start of the term: a MisfireSkip job's read keeps
// failing (its read decides only a log line: made once), an
// at-least-once job's value is not an integer (no read mends it). Every
// job still runs its ticks; before, the catch-up read them again until
// the term ended, and as catch-ups run one job after another before the
// scheduler starts, no cron job of the term ever fired ("b ran [], want
// [10 20]").
func TestCron_UnreadableCheckpointStopsNoOtherJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := time.Now().UTC()
		inner := leadertest.New()
		lock := &failLoad{Store: inner, fail: map[string]error{
			cronKey("a-skip"): errors.New("injected: checkpoint read lost"),
			cronKey("c-owed"): fmt.Errorf("load checkpoint: %w", &strconv.NumError{Func: "ParseInt", Num: "x", Err: strconv.ErrSyntax}),
		}}
		r := newCronRig(t, lock)
		a, b, c := &ticks{base: base}, &ticks{base: base}, &ticks{base: base}
		for _, err := range []error{
			r.w.Cron("a-skip", "*/10 * * * * *", a.run),
			r.w.Cron("b", "*/10 * * * * *", b.run),
			r.w.Cron("c-owed", "*/10 * * * * *", c.run, WithDelivery(AtLeastOnce)),
		} {
			if err != nil {
				t.Fatal(err)
			}
		}
		stop := r.start()
		time.Sleep(25 * time.Second)
		stop()
		for name, got := range map[string]*ticks{"a-skip": a, "b": b, "c-owed": c} {
			if got.String() != "[10 20]" {
				t.Errorf("%s ran %s, want [10 20]", name, got)
			}
		}
	})
}
