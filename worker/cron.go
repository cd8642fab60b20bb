package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
	"go.uber.org/zap"

	"github.com/solo-run/solo/leader"
)

// ErrNeverFires is CheckSchedule's error for a spec that parses but has no
// tick: robfig/cron's Next gives up after five years.
var ErrNeverFires = errors.New("worker: no date in the next five years matches it")

// cronParser accepts what the worker schedules: 5 fields, 6 with seconds
// first, or a descriptor.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// CheckSchedule reports whether Cron accepts spec: robfig/cron's parse
// error, ErrNeverFires, or nil.
func CheckSchedule(spec string) error {
	_, err := parseSchedule(spec)
	return err
}

// parseSchedule parses spec and refuses schedules without a tick, such as
// "0 0 30 2 *". Dates are checked in UTC: the zone shifts a tick by hours,
// never makes an impossible date possible. "@every D" becomes an
// everySchedule: its ticks are fixed multiples of D, not D after whenever
// a scheduler started.
func parseSchedule(spec string) (cron.Schedule, error) {
	s, err := cronParser.Parse(spec)
	if err != nil {
		return nil, err
	}
	if d, ok := s.(cron.ConstantDelaySchedule); ok {
		s = everySchedule{every: d.Delay}
	}
	if s.Next(time.Now().UTC()).IsZero() {
		return nil, ErrNeverFires
	}
	return s, nil
}

// everySchedule is "@every D" anchored at the Unix epoch: it ticks at every
// multiple of D since 1970-01-01T00:00:00Z, whatever the time zone. robfig/cron's
// ConstantDelaySchedule ticks D after the time it is asked from, so
// a scheduler started each term (as the worker's is) would restart the
// cadence at every term: with terms shorter than D the job would never run,
// and each failover would shift it. Anchored, every instance and every term
// agree on the ticks, and the tick checkpoint (cp:cron:JOB) keeps a tick
// from running twice. D is at least a second, as robfig/cron rounds it.
type everySchedule struct{ every time.Duration }

// Next returns the first multiple of every after t, in t's location.
func (s everySchedule) Next(t time.Time) time.Time {
	d := s.every
	n := t.UnixNano()
	next := (n/int64(d) + 1) * int64(d)
	if n < 0 && n%int64(d) != 0 {
		next -= int64(d) // before 1970 division truncates towards zero
	}
	return time.Unix(0, next).In(t.Location())
}

// maxCatchUp bounds the count of missed ticks examined after a gap.
const maxCatchUp = 100_000

// testHookRunStart, when set (by tests only, before Run), is called first
// thing in every cron run's goroutine: it stands for a goroutine that the
// Go scheduler starts late (CPU starvation, a GC pause).
var testHookRunStart func(job string)

// cronEntry is one cron job during one term.
type cronEntry struct {
	job *job
	log *zap.Logger
	// next is the next tick to fire; zero once the schedule has no more
	// ticks (robfig/cron's Next returns the zero time when it finds none
	// within five years), and then the entry is never scheduled again.
	next time.Time
	// running is set while a run of this entry is going: a tick that comes
	// meanwhile is skipped (skip-if-still-running).
	running atomic.Bool
}

// cronTick is one tick a run of a cron entry is for. why is the line that
// says why it ran when it was not simply due (a catch-up, a late loop's
// missed tick), with its fields: fireCron logs it after the run, so a term
// that no longer leads (a stale ex-leader woken from a pause) never claims
// a run it does not make, and a blocked log sink never delays a run.
type cronTick struct {
	at     time.Time
	why    string
	fields []zap.Field
}

// runCron schedules the term's cron jobs until ctx ends, then waits for
// their runs. A fresh scheduler per term keeps no state between terms; the
// last fired tick of each job lives in Redis (leader.Elector.Checkpoint),
// so the next leader neither repeats a tick nor loses the ones that fell
// into the failover gap silently.
func (w *Worker) runCron(ctx context.Context, log *zap.Logger, jobs []*job, runs *runningSet, cp checkpointFunc, giveUp chan<- error, healthy chan<- struct{}) {
	var wg sync.WaitGroup
	defer wg.Wait()
	election := w.elector.Config().Name
	// fire starts one run of e for ticks, in order (one tick, or two when a
	// late loop runs a missed tick once), unless e's previous run is still
	// going: then the ticks are skipped. Each run carries its own ticks.
	fire := func(e *cronEntry, ticks ...cronTick) {
		if !e.running.CompareAndSwap(false, true) {
			at := make([]time.Time, len(ticks))
			for i, t := range ticks {
				at[i] = t.at
			}
			e.log.Info("tick skipped: the previous run is still going", zap.Times("ticks", at))
			w.metrics.TicksSkipped(election, e.job.name, len(ticks))
			return
		}
		wg.Go(func() {
			defer e.running.Store(false)
			if h := testHookRunStart; h != nil {
				h(e.job.name)
			}
			for _, tick := range ticks {
				w.fireCron(ctx, e.log, e.job, tick, runs, cp, giveUp, healthy)
			}
		})
	}
	now := time.Now().In(w.loc)
	entries := make([]*cronEntry, 0, len(jobs))
	for _, j := range jobs {
		e := &cronEntry{job: j, log: log.With(zap.String("job", j.name))}
		e.setNext(w.catchUp(ctx, e, now, cp != nil, fire))
		entries = append(entries, e)
	}
	for {
		var earliest time.Time
		for _, e := range entries {
			if !e.next.IsZero() && (earliest.IsZero() || e.next.Before(earliest)) {
				earliest = e.next
			}
		}
		if earliest.IsZero() {
			// No schedule has a tick left: nothing to wait for but the end.
			<-ctx.Done()
			return
		}
		t := time.NewTimer(time.Until(earliest))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		// Under the simulator's hooks, a previous run ending at this
		// instant has ended before fire looks. An end of ctx at this
		// instant wins over the tick, whichever the select saw.
		if w.hooks.Settle != nil { // the key is built only for the simulator
			w.hooks.Settle("cron " + election)
		}
		if ctx.Err() != nil {
			return
		}
		now := time.Now().In(w.loc)
		for _, e := range entries {
			if !e.next.IsZero() && !e.next.After(now) {
				w.fireDue(e, now, fire)
			}
		}
	}
}

// fireDue fires e's due tick. When the loop woke up so late (a GC pause, a
// suspended host, a slow checkpoint read at the start of the term) that
// later ticks are due too, those follow the job's misfire policy, as the
// ticks of a failover gap do: skip them (counted, logged), or run the
// latest of them once, right after the due tick, in the same run.
func (w *Worker) fireDue(e *cronEntry, now time.Time, fire func(*cronEntry, ...cronTick)) {
	j := e.job
	due := e.next
	var first, latest time.Time
	missed := 0
	for n := j.schedule.Next(due); !n.IsZero() && !n.After(now) && missed < maxCatchUp; n = j.schedule.Next(n) {
		if missed == 0 {
			first = n
		}
		latest, missed = n, missed+1
	}
	switch {
	case missed == 0:
		fire(e, cronTick{at: due})
	case j.misfire == MisfireRunOnce:
		fire(e, cronTick{at: due}, cronTick{at: latest,
			why:    "scheduler ran late: ran the latest missed tick once, after the due one",
			fields: []zap.Field{zap.Time("due", due), zap.Int("missed", missed)}})
	default:
		fire(e, cronTick{at: due})
		w.metrics.TicksSkipped(w.elector.Config().Name, j.name, missed)
		e.log.Info("scheduler ran late: skipping the ticks missed after the due one",
			zap.Time("due", due), zap.Int("missed", missed), zap.Time("first", first), zap.Time("last", latest))
	}
	e.setNext(j.schedule.Next(now))
}

// setNext sets the entry's next tick; a zero one stops the entry for the
// term, logged once.
func (e *cronEntry) setNext(next time.Time) {
	e.next = next
	if next.IsZero() {
		e.log.Error("cron schedule has no further ticks (none within five years); the job is not scheduled again this term",
			zap.String("schedule", e.job.spec))
	}
}

// catchUp decides a job's first tick in a new term from the last tick
// recorded by any term. Ticks missed in between follow the job's misfire
// policy: skip them, or run once, late, for the latest one. A zero time
// means the schedule has no tick left.
func (w *Worker) catchUp(ctx context.Context, e *cronEntry, now time.Time, fenced bool, fire func(*cronEntry, ...cronTick)) time.Time {
	j := e.job
	log := e.log
	if !fenced {
		return j.schedule.Next(now)
	}
	if j.delivery == AtLeastOnce {
		return w.catchUpOwed(ctx, e, now, fire)
	}
	// Under MisfireSkip the read decides only what is logged and counted:
	// it is made once, never in front of the other jobs' start.
	load := w.loadTick
	if j.misfire != MisfireRunOnce {
		load = w.loadTickOnce
	}
	last, ok, err := load(ctx, log, cronKey(j.name))
	if err != nil {
		log.Warn("cannot read the last fired tick; missed ticks are not caught up", zap.Error(err))
		return j.schedule.Next(now)
	}
	if !ok {
		return j.schedule.Next(now)
	}
	first := j.schedule.Next(time.UnixMilli(last).In(w.loc))
	if first.IsZero() || first.After(now) {
		// No gap: the next tick after the last one.
		return first
	}
	latest, missed := first, 1
	for n := j.schedule.Next(latest); !n.IsZero() && !n.After(now) && missed < maxCatchUp; n = j.schedule.Next(n) {
		latest, missed = n, missed+1
	}
	switch j.misfire {
	case MisfireRunOnce:
		fire(e, cronTick{at: latest, why: "ran a missed tick once, late", fields: []zap.Field{zap.Int("missed", missed)}})
	default:
		log.Info("skipping ticks missed during the failover", zap.Int("missed", missed),
			zap.Time("first", first), zap.Time("last", latest))
		w.metrics.TicksSkipped(w.elector.Config().Name, j.name, missed)
	}
	return j.schedule.Next(now)
}

// loadTick reads a tick checkpoint at the start of a term. The catch-up it
// decides (an owed at-least-once tick, a misfire run-once) is owed to the
// job, so a failed read is not the end of it: it reads again until the
// term ends (retryInTerm; the scheduler loop waits, and ticks that come
// due meanwhile follow the misfire policy, as after any late start). Each
// read is bounded by the renew deadline. It returns an error once ctx
// ended, for a lock that keeps no checkpoints, and for a value no read
// can mend (not an integer, or not a string: logged at error).
func (w *Worker) loadTick(ctx context.Context, log *zap.Logger, key string) (n int64, ok bool, err error) {
	err = w.retryInTerm(ctx, log, "cannot read a tick checkpoint at the start of the term; reading it again", key, func() (err error) {
		n, ok, err = w.loadTickOnce(ctx, log, key)
		if errors.Is(err, leader.ErrNoCheckpoints) || errors.Is(err, leader.ErrNotReplicated) || unreadable(err) {
			return finalError{err}
		}
		return err
	})
	if unreadable(err) {
		log.Error("a tick checkpoint holds what no read can mend; its catch-up is not made", zap.String("checkpoint", key), zap.Error(err))
	}
	return n, ok, err
}

// loadTickOnce reads a tick checkpoint once, bounded by the renew
// deadline.
func (w *Worker) loadTickOnce(ctx context.Context, _ *zap.Logger, key string) (int64, bool, error) {
	rctx, cancel := context.WithTimeout(ctx, w.elector.Config().RenewDeadline)
	defer cancel()
	return w.elector.LoadCheckpoint(rctx, key)
}

// unreadable reports whether err is a checkpoint read's that no retry
// mends: a value that is not an integer, or a key of another type.
func unreadable(err error) bool {
	var num *strconv.NumError
	return errors.As(err, &num) || redis.HasErrorPrefix(err, "WRONGTYPE")
}

// finalError marks an error retryInTerm returns at once (unwrapped): a
// call that fails the same way however often it is made.
type finalError struct{ error }

// retryInTerm calls call until it returns nil, or a finalError (its error
// is returned), or ctx ends (then an error naming
// key, ctx's error and call's last one). Between calls it waits the pull
// jobs' back-off and logs msg. It is for a call at a term's boundary whose
// failure must not drop what the term owes a job: one lost request or
// reply is retried, never taken as an answer.
func (w *Worker) retryInTerm(ctx context.Context, log *zap.Logger, msg, key string, call func() error) error {
	wait := w.policy.RestartBackoff
	for attempt := 1; ; attempt++ {
		err := call()
		var final finalError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &final):
			return final.error
		}
		log.Warn(msg, zap.String("checkpoint", key), zap.Error(err), zap.Int("attempt", attempt), zap.Duration("backoff", wait))
		if !sleep(ctx, wait) {
			return fmt.Errorf("checkpoint %s: %w (last error: %w)", key, ctx.Err(), err)
		}
		wait = min(wait*2, w.policy.RestartBackoffMax)
	}
}

// ensureDoneRecord records 0 as j's last completed tick when no completion
// is recorded yet (fenced, monotonic: it never lowers one).
func (w *Worker) ensureDoneRecord(ctx context.Context, j *job, cp checkpointFunc) error {
	_, ok, err := w.elector.LoadCheckpoint(ctx, cronDoneKey(j.name))
	if err != nil || ok {
		return err
	}
	if err := cp(ctx, cronDoneKey(j.name), 0); err != nil && !errors.Is(err, leader.ErrCheckpointNotAdvanced) {
		return err
	}
	return nil
}

// catchUpOwed is catchUp for an at-least-once job: first the tick that was
// fired but never completed (the last fired one, when it is after the last
// completed one), then the ticks never fired by the misfire policy.
func (w *Worker) catchUpOwed(ctx context.Context, e *cronEntry, now time.Time, fire func(*cronEntry, ...cronTick)) time.Time {
	j, log := e.job, e.log
	fired, fok, err1 := w.loadTick(ctx, log, cronKey(j.name))
	done, dok, err2 := w.loadTick(ctx, log, cronDoneKey(j.name))
	if err := errors.Join(err1, err2); err != nil {
		// The term ended before the ticks could be read (or the lock
		// keeps no checkpoints): this term fires nothing, and the owed
		// tick stays owed to the next.
		log.Warn("cannot read the job's fired and completed ticks; an unfinished tick is not run again now", zap.Error(err))
		return j.schedule.Next(now)
	}
	switch {
	case !fok && (!dok || done == 0):
		// A new job, or one whose fired tick was lost: nothing owed. (A
		// completion record of 0 only marks that the job runs
		// at-least-once: nothing completed yet; see ensureDoneRecord.)
		return j.schedule.Next(now)
	case !dok:
		done = fired // fired under at-most-once: taken as completed
	case !fok || fired < done:
		fired = done
	}
	var ticks []cronTick
	if fired > done {
		owed := time.UnixMilli(fired).In(w.loc)
		if owed.After(now) {
			// Fired by a leader whose clock ran ahead: it comes due here
			// in its time, and runs then unless its completion is recorded.
			return owed
		}
		ticks = append(ticks, cronTick{at: owed, why: "ran again a tick whose run did not complete",
			fields: []zap.Field{zap.Time("last_completed", time.UnixMilli(done).In(w.loc))}})
	}
	first := j.schedule.Next(time.UnixMilli(fired).In(w.loc))
	if first.IsZero() || first.After(now) {
		if len(ticks) > 0 {
			fire(e, ticks...)
		}
		return first
	}
	latest, missed := first, 1
	for n := j.schedule.Next(latest); !n.IsZero() && !n.After(now) && missed < maxCatchUp; n = j.schedule.Next(n) {
		latest, missed = n, missed+1
	}
	switch j.misfire {
	case MisfireRunOnce:
		ticks = append(ticks, cronTick{at: latest, why: "ran a missed tick once, late", fields: []zap.Field{zap.Int("missed", missed)}})
	default:
		log.Info("skipping ticks missed during the failover", zap.Int("missed", missed),
			zap.Time("first", first), zap.Time("last", latest))
		w.metrics.TicksSkipped(w.elector.Config().Name, j.name, missed)
	}
	if len(ticks) > 0 {
		fire(e, ticks...)
	}
	return j.schedule.Next(now)
}

// fireCron runs one tick. It records the tick as fired first (fenced,
// monotonic). At most once, the tick runs only if that succeeded, so no
// tick ever runs twice across terms. At least once, a tick fired before
// (by a term that did not complete it) runs again unless its completion is
// recorded; see runUntilDone. A successful run signals healthy; a panic is
// logged with its stack and counted as a failed run; a run that returns
// leader.ErrResigned gives up the term (jobAsksToResign; see unfenced).
func (w *Worker) fireCron(ctx context.Context, log *zap.Logger, j *job, t cronTick, runs *runningSet, cp checkpointFunc, giveUp chan<- error, healthy chan<- struct{}) {
	if ctx.Err() != nil {
		return
	}
	tick := t.at
	log = log.With(zap.Time("tick", tick))
	election := w.elector.Config().Name
	if j.delivery == AtLeastOnce && cp != nil {
		if !w.recordOwed(ctx, log, j, tick, cp) {
			return
		}
		if w.runUntilDone(ctx, log, j, t, runs, cp, giveUp) {
			signal(healthy)
		}
		return
	}
	if cp != nil {
		err := cp(ctx, cronKey(j.name), tick.UnixMilli())
		switch {
		case errors.Is(err, leader.ErrCheckpointNotAdvanced):
			log.Info("tick already ran on another term; skipped")
			return
		case errors.Is(err, leader.ErrLeaseLost):
			// The term ended on the server before this instance heard of
			// it (a pause, a lost renewal): not a failed run.
			log.Debug("tick skipped: not leader (the term ended)", zap.Error(err))
			return
		case err != nil:
			log.Warn("cannot record the tick; skipped", zap.Error(err))
			w.metrics.JobRan(election, j.name, fmt.Errorf("record tick: %w", err))
			return
		}
	}
	err := w.runTick(ctx, log, j, tick, runs)
	if t.why != "" {
		// After the run: a blocked log sink must not delay it.
		log.Info(t.why, t.fields...)
	}
	switch {
	case errors.Is(err, leader.ErrResigned):
		jobAsksToResign(log, giveUp, j, err)
	case err != nil:
		log.Warn("cron job failed", zap.Error(err))
	default:
		signal(healthy)
		log.Debug("cron job done")
	}
}

// recordOwed records an at-least-once tick as fired (fenced, monotonic;
// one fired before, by any term, counts as recorded), first making sure a
// completion record exists: catchUpOwed takes a fired tick without one as
// completed (a job that ran at-most-once before), so without it the first
// tick of a new job, or the first after Redis lost its data, would be
// dropped if its run never completed. A failed call is made again until
// the term ends (retryInTerm), never taken as a skip: a write whose reply
// was lost may have recorded the tick as fired, and a term that skipped it
// would complete the next tick and move the completion record past one it
// owes. A write too few replicas acknowledged (leader.ErrNotReplicated)
// counts as not recorded (a run must never start on a record a failover
// can lose) and is made again too: sent again, it answers "not advanced"
// for its own value, and leader returns ErrNotReplicated for that until a
// replica acknowledges it. Meanwhile the job's later ticks are skipped
// (its run is still going), so none completes past the owed one. It
// reports whether the tick is recorded; if not (the term ended), the tick
// is not run in this term.
func (w *Worker) recordOwed(ctx context.Context, log *zap.Logger, j *job, tick time.Time, cp checkpointFunc) bool {
	err := w.retryInTerm(ctx, log, "cannot record the tick as fired; recording it again", cronKey(j.name), func() error {
		err := w.ensureDoneRecord(ctx, j, cp)
		if err == nil {
			err = cp(ctx, cronKey(j.name), tick.UnixMilli())
		}
		if err == nil || errors.Is(err, leader.ErrCheckpointNotAdvanced) {
			return nil // fired now, or before: whether it completed decides
		}
		w.metrics.JobRan(w.elector.Config().Name, j.name, fmt.Errorf("record tick: %w", err))
		if errors.Is(err, leader.ErrNoCheckpoints) {
			return finalError{err}
		}
		return err
	})
	if err != nil {
		log.Warn("cannot record the tick as fired; it is not run in this term", zap.Error(err))
		return false
	}
	return true
}

// runUntilDone runs an at-least-once tick until its run succeeded and its
// completion is recorded, or the term ends: after a failure it runs it
// again with back-off. Before every run it reads the completed tick, so a
// tick whose completion is recorded (by any term) never runs again. A run
// whose error wraps leader.ErrResigned is not run again: it asks to give
// up the term (jobAsksToResign), and the next leader runs the tick. It
// reports whether the tick ran to success.
func (w *Worker) runUntilDone(ctx context.Context, log *zap.Logger, j *job, t cronTick, runs *runningSet, cp checkpointFunc, giveUp chan<- error) (ran bool) {
	tick := t.at
	backoff := w.policy.RestartBackoff
	for attempt := 1; ; attempt++ {
		done, ok, err := w.elector.LoadCheckpoint(ctx, cronDoneKey(j.name))
		switch {
		case err != nil:
			err = fmt.Errorf("read the completed tick: %w", err)
		case ok && done >= tick.UnixMilli():
			log.Info("tick already completed; not run again", zap.Time("completed", time.UnixMilli(done).In(w.loc)))
			return false
		default:
			err = w.runTick(ctx, log, j, tick, runs)
			if err == nil {
				w.recordDone(ctx, log, j, tick, cp)
			}
			if attempt == 1 && t.why != "" {
				// After the run and its record: a blocked log sink must
				// delay neither.
				log.Info(t.why, t.fields...)
			}
			if err == nil {
				return true
			}
			if errors.Is(err, leader.ErrResigned) {
				jobAsksToResign(log, giveUp, j, err)
				return false
			}
		}
		if ctx.Err() != nil {
			log.Info("the term ended before the tick completed; the next leader runs it again", zap.Error(err))
			return false
		}
		log.Warn("tick not completed; running it again", zap.Error(err), zap.Int("attempt", attempt), zap.Duration("backoff", backoff))
		if !sleep(ctx, backoff) {
			log.Info("the term ended before the tick completed; the next leader runs it again")
			return false
		}
		backoff = min(backoff*2, w.policy.RestartBackoffMax)
	}
}

// recordDone records tick as the job's last completed one, fenced by the
// term. It outlives the term's context by up to the renew deadline: on a
// voluntary step-down the lease is still ours while jobs drain, and a
// completion recorded then saves the next leader a repeated run.
func (w *Worker) recordDone(ctx context.Context, log *zap.Logger, j *job, tick time.Time, cp checkpointFunc) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.elector.Config().RenewDeadline)
	defer cancel()
	switch err := cp(rctx, cronDoneKey(j.name), tick.UnixMilli()); {
	case err == nil:
		log.Debug("cron job done; completion recorded")
	case errors.Is(err, leader.ErrCheckpointNotAdvanced):
		log.Info("cron job done; a later completed tick is recorded already")
	default:
		log.Warn("cron job done, but its completion was not recorded: the next leader runs this tick again", zap.Error(err))
	}
}

// runTick runs j for tick, counting the run; a panic is logged with its
// stack and returned as an error.
func (w *Worker) runTick(ctx context.Context, log *zap.Logger, j *job, tick time.Time, runs *runningSet) (err error) {
	runs.add(j.name)
	defer runs.remove(j.name)
	defer func() {
		if r := recover(); r != nil {
			log.Error("cron job panicked", zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
			err = fmt.Errorf("panic: %v", r)
		}
		w.metrics.JobRan(w.elector.Config().Name, j.name, err)
	}()
	return j.run(withTick(ctx, tick))
}

// cronKey is the checkpoint of a cron job's last fired tick; cronDoneKey
// that of its last completed tick (at-least-once jobs only).
func cronKey(job string) string     { return "cron:" + job }
func cronDoneKey(job string) string { return "cron-done:" + job }
