package worker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
)

// slowJob is tracker.job for a job that, while slow is set, keeps running
// for drain after its context is cancelled (it ignores cancellation that
// long); the witness stays exact: the job counts as running until it
// returns.
func (k *tracker) slowJob(inst, name string, slow *atomic.Bool, drain time.Duration, drained chan<- string) func(context.Context) error {
	fast := k.job(inst, name)
	return func(ctx context.Context) error {
		if !slow.Load() {
			return fast(ctx)
		}
		k.mu.Lock()
		if other, ok := k.running[name]; ok {
			k.t.Errorf("job %s runs on %s and %s at once", name, other, inst)
		}
		k.running[name] = inst
		k.starts[name]++
		k.mu.Unlock()
		<-ctx.Done()
		if slow.Load() {
			time.Sleep(drain) // ignores cancellation this long
		}
		k.mu.Lock()
		delete(k.running, name)
		k.mu.Unlock()
		select {
		case drained <- inst + ":" + name:
		default:
		}
		return nil
	}
}

// TestSpread_ShedRenewsWhileDraining: a job shed to rebalance is resigned
// in every respect: its lease is renewed while it drains, however long
// past TTL and shutdown_timeout that takes, and no other member starts it
// before it returned.
//
// Mutation: with the old shed (Resign bounded by ShutdownTimeout + TTL,
// then the campaign cancelled, i.e. a shutdown: renewing stops at
// shutdown_timeout and the lease expires under the draining job) this
// fails with "job jobNN runs on a and b at once".
func TestSpread_ShedRenewsWhileDraining(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	k := newTracker(t)
	var slow atomic.Bool
	slow.Store(true)
	drained := make(chan string, 4)
	const drain = 4 * time.Second // TTL 1s, shutdown_timeout 200ms
	start := func(name string) *spreadInst {
		cfg := leader.Config{Name: "shed", ID: name, TTL: time.Second, ShutdownTimeout: 200 * time.Millisecond}
		s, err := worker.NewSpread(client, cfg, worker.SpreadConfig{MinHold: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range []string{"job00", "job01"} {
			if err := s.Pull(j, k.slowJob(name, j, &slow, drain, drained)); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		in := &spreadInst{s: s, cancel: cancel, done: make(chan error, 1)}
		go func() { in.done <- s.Run(ctx) }()
		t.Cleanup(in.stop)
		return in
	}
	start("a")
	k.waitLoads(t, 10*time.Second, []int{2, 0}, "a", "b")
	start("b")
	select {
	case who := <-drained: // the shed job returned, drain later
		if who[:2] != "a:" {
			t.Fatalf("%s drained; want a job of a (shed)", who)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a never shed a job")
	}
	// The shed job moves to b once it returned, not before.
	k.waitLoads(t, 10*time.Second, []int{1, 1}, "a", "b")
	slow.Store(false)
}

// electInst is a Worker in election mode elect with the given jobs,
// recording into k as inst.
type electInst struct {
	w      *worker.Worker
	logs   *observer.ObservedLogs
	cancel context.CancelFunc
	done   chan error
}

func startElect(t *testing.T, client redis.UniversalClient, k *tracker, name, inst string, jobs ...string) *electInst {
	t.Helper()
	e, err := leader.New(client, leader.Config{Name: name, ID: inst, TTL: time.Second, RetryInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	w, err := worker.New(e, worker.WithLogger(zap.New(core)))
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if err := w.Pull(j, k.job(inst, j)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	in := &electInst{w: w, logs: logs, cancel: cancel, done: make(chan error, 1)}
	go func() { in.done <- w.Run(ctx) }()
	t.Cleanup(in.stop)
	return in
}

func (in *electInst) stop() {
	if in.cancel == nil {
		return
	}
	in.cancel()
	<-in.done
	in.cancel = nil
}

// TestSpread_ModeSwitchExcludes: the modes of one name exclude each other
// An elect-mode worker leads the name "sw" and
// runs job00 and job01; spread members of the group "sw" with the same
// jobs start beside it: they refuse to join (and say why in Info) and run
// nothing. The documented switch — stop the old mode's instances — hands
// the jobs over: once the elect worker stopped, the spread members run
// them. The reverse: a new elect-mode worker refuses to campaign while
// the group is live (logged once, at error level) and takes the jobs once
// the members stopped. The tracker fails the test if a job ever runs
// twice at once.
//
// Mutation: with the old spread.lua and acquire.lua (neither looks at the
// other mode) this fails at once with "job job00 runs on e and a at once".
func TestSpread_ModeSwitchExcludes(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	k := newTracker(t)
	jobs := []string{"job00", "job01"}
	e := startElect(t, client, k, "sw", "e", jobs...)
	k.waitLoads(t, 10*time.Second, []int{2}, "e")

	a := startInstance(t, client, k, "sw", "a", 2)
	b := startInstance(t, client, k, "sw", "b", 2)
	deadline := time.Now().Add(10 * time.Second)
	for spreadServed(t, a.s).Conflict == "" || spreadServed(t, b.s).Conflict == "" {
		if time.Now().After(deadline) {
			t.Fatal("spread members never reported the elect-mode lease that keeps them out")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(time.Second) // three heartbeats: still nothing runs on a or b
	if got := k.loads("e", "a", "b"); fmt.Sprint(got) != "[2 0 0]" {
		t.Fatalf("loads %v beside a live elect-mode leader, want [2 0 0]", got)
	}

	// Switch elect → spread: stop the elect-mode instance.
	e.stop()
	k.waitLoads(t, 10*time.Second, []int{0, 1, 1}, "e", "a", "b")
	if c := spreadServed(t, a.s).Conflict; c != "" {
		t.Errorf("conflict %q after joining", c)
	}

	// Switch spread → elect: a new elect-mode instance waits for the group.
	e2 := startElect(t, client, k, "sw", "e2", jobs...)
	deadline = time.Now().Add(10 * time.Second)
	for e2.logs.FilterMessageSnippet("a spread group of the same name runs its jobs").Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the elect-mode instance never said why it does not campaign")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(time.Second)
	if got := k.loads("e2", "a", "b"); fmt.Sprint(got) != "[0 1 1]" {
		t.Fatalf("loads %v beside a live spread group, want [0 1 1]", got)
	}
	a.stop()
	b.stop()
	k.waitLoads(t, 10*time.Second, []int{2}, "e2")
	if n := e2.logs.FilterLevelExact(zapcore.ErrorLevel).FilterMessageSnippet("a spread group of the same name").Len(); n != 1 {
		t.Errorf("refusal logged %d times, want once", n)
	}
}

// startJobs is startInstance with named jobs.
func startJobs(t *testing.T, client redis.UniversalClient, k *tracker, group, name string, jobs ...string) *spreadInst {
	t.Helper()
	return startJobsWith(t, client, k, group, name, nil, jobs...)
}

// startJobsWith is startJobs with the Spread's options opts.
func startJobsWith(t *testing.T, client redis.UniversalClient, k *tracker, group, name string, opts []worker.Option, jobs ...string) *spreadInst {
	t.Helper()
	cfg := spreadConfig(group)
	cfg.ID = name
	s, err := worker.NewSpread(client, cfg, worker.SpreadConfig{}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range jobs {
		if err := s.Pull(n, k.job(name, n)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	in := &spreadInst{s: s, cancel: cancel, done: make(chan error, 1)}
	go func() { in.done <- s.Run(ctx) }()
	t.Cleanup(in.stop)
	return in
}

// waitRunning waits until every job in jobs runs (somewhere) and returns
// job → instance.
func (k *tracker) waitRunning(t *testing.T, timeout time.Duration, jobs ...string) map[string]string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		k.mu.Lock()
		got := map[string]string{}
		for _, j := range jobs {
			if in, ok := k.running[j]; ok {
				got[j] = in
			}
		}
		k.mu.Unlock()
		if len(got) == len(jobs) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("running %v: want every one of %v within %s", got, jobs, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSpread_ShareCountsCapableMembers: a member counts toward the share
// of a job only if it registered that job. In a
// mixed group — a and b run job00..job02, c (a newer version, say) runs
// only "other" — every job runs somewhere, and a and b split job00..02
// 2/1, as if c were not there; with a and b capable of job00 only beside
// c, job00 still runs. Then the group turns over: c stops, and a
// member d with all four jobs joins: still every job runs.
//
// Mutation: with the share counted over every live member (the old
// ceil(jobs/members)) this fails with "running map[job.. ..]: want every
// one of [job00 job01 job02 other] within 10s": a and b stop at share 1.
func TestSpread_ShareCountsCapableMembers(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	k := newTracker(t)
	all := []string{"job00", "job01", "job02", "other"}
	startJobs(t, client, k, "cap", "a", "job00", "job01", "job02")
	startJobs(t, client, k, "cap", "b", "job00", "job01", "job02")
	c := startJobs(t, client, k, "cap", "c", "other")
	got := k.waitRunning(t, 10*time.Second, all...)
	if got["other"] != "c" {
		t.Errorf("other runs on %s, want c (the only member with it)", got["other"])
	}
	time.Sleep(time.Second) // settled: stays so
	k.waitRunning(t, 10*time.Second, all...)
	if l := k.loads("a", "b", "c"); l[0]+l[1] != 3 || l[0] == 0 || l[1] == 0 || l[2] != 1 {
		t.Errorf("loads %v: want a and b to split job00..02 (2/1 or 1/2) and c to run other", l)
	}
	c.stop()
	startJobs(t, client, k, "cap", "d", all...)
	got = k.waitRunning(t, 10*time.Second, all...)
	if got["other"] != "d" {
		t.Errorf("other runs on %s, want d", got["other"])
	}
	k.waitLoads(t, 10*time.Second, []int{1, 1, 2}, "a", "b", "d") // share: ceil(3/3 + 1) = 2 for d, 1 for a and b
}

// failHeartbeats is a go-redis hook that fails the group's heartbeat
// script (the calls naming the members key) while on is set; every other
// call (the jobs' renewals) goes through. With leaveOnce it fails only the
// first leave (member TTL 0) after on was set, and clears on.
type failHeartbeats struct {
	key       string
	on        atomic.Bool
	leaveOnce bool
	failed    atomic.Int32
}

// matches reports whether args are a call f fails (on aside).
func (f *failHeartbeats) matches(args []any) bool {
	if f.leaveOnce {
		// EVALSHA sha 6 KEYS[1..6] member ttl ...: KEYS[1] at 3, ttl at 10.
		return len(args) > 10 && args[3] == f.key && args[10] == int64(0) && f.on.CompareAndSwap(true, false)
	}
	return slices.Contains(args, any(f.key))
}

func (f *failHeartbeats) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f *failHeartbeats) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if f.on.Load() && f.matches(cmd.Args()) {
			f.failed.Add(1)
			err := errors.New("injected: heartbeat lost")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (f *failHeartbeats) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestSpread_MembershipLapseStopsJobs: a member whose heartbeats fail
// while its jobs' renewals still work (the group's slot down, say) stops
// its jobs once its membership is unconfirmed for member_ttl, so that
// they have stopped before its exclusion entry lets an elect-mode
// candidate of the name in; the candidate then runs them, never beside
// the member.
//
// Mutation: without the lapse (jobs run on while heartbeats fail) this
// fails with "job job00 runs on a and e at once".
func TestSpread_MembershipLapseStopsJobs(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	hook := &failHeartbeats{key: leader.Config{Name: "lapse"}.Key("members")}
	hooked := srv.Client(t)
	hooked.AddHook(hook)
	k := newTracker(t)
	startJobs(t, hooked, k, "lapse", "a", "job00", "job01")
	k.waitLoads(t, 10*time.Second, []int{2}, "a")
	hook.on.Store(true)
	// An elect-mode candidate of the name: refused while a's entry lives.
	startElect(t, client, k, "lapse", "e", "job00", "job01")
	k.waitLoads(t, 15*time.Second, []int{0, 2}, "a", "e")
}

// TestSpread_LeaveKeepsExclusionWhileDraining: a member shutting down
// leaves the members at once (the others rebalance) but keeps its
// exclusion entry until its jobs have returned: an elect-mode candidate
// of the name waiting for the group takes the jobs only after a job that
// drains slowly on shutdown returned.
//
// Mutation: with the exclusion entry removed in the first leave (before
// the jobs stop) this fails with "job job00 runs on a and e at once".
func TestSpread_LeaveKeepsExclusionWhileDraining(t *testing.T) {
	drainBesideElect(t, "leave", 1500*time.Millisecond, nil)
}

// TestSpread_FailedLeaveKeepsExclusionWhileDraining: the one call that
// extends a leaving member's exclusion entry over its drain fails; a job
// that drains for longer than the entry the last heartbeat wrote
// (member_ttl + TTL = 2s) still never runs beside the elect-mode instance
// waiting for the name: the leave is sent again while jobs drain.
//
// Mutation: with the leave sent once (the old Run) this fails with "job
// job00 runs on a and e at once" (the tracker's witness).
func TestSpread_FailedLeaveKeepsExclusionWhileDraining(t *testing.T) {
	drainBesideElect(t, "leave1", 3500*time.Millisecond, &failHeartbeats{leaveOnce: true})
}

// drainBesideElect runs job00 on a spread member a of group name (TTL 1s,
// shutdown_timeout 5s), starts an elect-mode instance e of the name, which
// waits, then stops a while job00 ignores cancellation for drain; e must
// take job00 only after it returned (the tracker fails the test on an
// overlap). hook, when not nil, is on a's client and set on as a stops.
func drainBesideElect(t *testing.T, name string, drain time.Duration, hook *failHeartbeats) {
	t.Helper()
	srv := redistest.Start(t)
	client := srv.Client(t)
	hooked := client
	if hook != nil {
		hook.key = leader.Config{Name: name}.Key("members")
		hooked = srv.Client(t)
		hooked.AddHook(hook)
	}
	k := newTracker(t)
	var slow atomic.Bool
	slow.Store(true)
	drained := make(chan string, 1)
	cfg := leader.Config{Name: name, ID: "a", TTL: time.Second, ShutdownTimeout: 5 * time.Second}
	s, err := worker.NewSpread(hooked, cfg, worker.SpreadConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Pull("job00", k.slowJob("a", "job00", &slow, drain, drained)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &spreadInst{s: s, cancel: cancel, done: make(chan error, 1)}
	go func() { a.done <- s.Run(ctx) }()
	t.Cleanup(a.stop)
	k.waitLoads(t, 10*time.Second, []int{1}, "a")
	e := startElect(t, client, k, name, "e", "job00")
	deadline := time.Now().Add(10 * time.Second)
	for e.logs.FilterMessageSnippet("a spread group of the same name runs its jobs").Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the elect-mode instance never said why it does not campaign")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if hook != nil {
		hook.on.Store(true)
	}
	a.stop() // job00 drains, ignoring cancellation
	if who := <-drained; who == "" {
		t.Fatal("no drain")
	}
	if hook != nil && hook.failed.Load() != 1 {
		t.Fatalf("the leave call failed %d times, want once", hook.failed.Load())
	}
	k.waitLoads(t, 10*time.Second, []int{1}, "e")
}

// TestSpread_ModesStartTogether: an elect-mode instance and spread members
// of one name started at the same instant: one mode wins, the other runs
// nothing (the witness fails on any overlap), and every job runs.
func TestSpread_ModesStartTogether(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	for round := range 3 {
		k := newTracker(t)
		name := fmt.Sprintf("together%d", round)
		e := startElect(t, client, k, name, "e", "job00", "job01")
		a := startInstance(t, client, k, name, "a", 2)
		b := startInstance(t, client, k, name, "b", 2)
		k.waitRunning(t, 10*time.Second, "job00", "job01")
		time.Sleep(500 * time.Millisecond)
		l := k.loads("e", "a", "b")
		if l[0] != 0 && l[1]+l[2] != 0 {
			t.Errorf("round %d: loads %v: both modes run jobs", round, l)
		}
		e.stop()
		a.stop()
		b.stop()
	}
}
