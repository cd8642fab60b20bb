package worker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/fence"
	"github.com/solo-run/solo/leader/leadertest"
	"github.com/solo-run/solo/worker"
)

// journal is an ordered log of events, shared by fences and jobs.
type journal struct {
	mu     sync.Mutex
	events []string
}

func (j *journal) add(format string, a ...any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.events = append(j.events, fmt.Sprintf(format, a...))
}

func (j *journal) list() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.events)
}

// fakeFence records its claims in a journal and fails the first `fail`
// (all when fail < 0).
type fakeFence struct {
	j    *journal
	mu   sync.Mutex
	fail int
}

var _ worker.Fence = (*fence.Guard)(nil)

func (f *fakeFence) Claim(_ context.Context, election string, term uint64, holder string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != 0 {
		f.fail--
		f.j.add("claim failed %s %d %s", election, term, holder)
		return errors.New("database is locked")
	}
	f.j.add("claim %s %d %s", election, term, holder)
	return nil
}

// electionCounter returns the value of a counter labelled by election only.
func electionCounter(t *testing.T, in *instance, name string) float64 {
	t.Helper()
	mfs, err := in.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestWorker_ClaimsTheFenceBeforeAnyJob: with WithFence, every term this
// worker wins is claimed in the fence — election name, term, the elector's
// ID as holder — before any of its pull or cron jobs runs, on every
// instance and after a failover.
//
// Before, the worker never claimed: each job had to claim the term itself,
// and a job that did not wrote into fence.ErrNotClaimed (see
// TestWorker_FencedWriteAtTermStart).
func TestWorker_ClaimsTheFenceBeforeAnyJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := leadertest.New()
		j := &journal{}
		var ins []*instance
		for _, id := range []string{"a", "b"} {
			in := newInstance(t, lock, id, worker.WithFence(&fakeFence{j: j}))
			job := func(kind string) func(ctx context.Context) error {
				return func(ctx context.Context) error {
					term, _ := leader.TermFrom(ctx)
					j.add("%s %d %s", kind, term, in.e.ID())
					if kind == "pull" {
						<-ctx.Done()
					}
					return nil
				}
			}
			if err := in.w.Pull("consume", job("pull")); err != nil {
				t.Fatal(err)
			}
			if err := in.w.Cron("report", "@every 1s", job("cron")); err != nil {
				t.Fatal(err)
			}
			ins = append(ins, in)
		}
		ins[0].start()
		synctest.Wait()
		ins[1].start()
		time.Sleep(2500 * time.Millisecond)
		_ = ins[0].stop() // graceful: b takes over
		time.Sleep(2500 * time.Millisecond)
		_ = ins[1].stop()

		events := j.list()
		claimed := map[string]bool{}
		claims, runs := 0, 0
		for _, ev := range events {
			f := strings.Fields(ev)
			switch f[0] {
			case "claim":
				claims++
				if f[1] != "jobs" {
					t.Errorf("claim of election %q, want jobs", f[1])
				}
				claimed[f[2]+" "+f[3]] = true
			default:
				runs++
				if !claimed[f[1]+" "+f[2]] {
					t.Fatalf("%q ran before its term was claimed by its holder:\n%s", ev, strings.Join(events, "\n"))
				}
			}
		}
		if claims != 2 || runs < 4 {
			t.Fatalf("%d claims and %d runs, want 2 claims (one per term) and runs on both:\n%s", claims, runs, strings.Join(events, "\n"))
		}
		for _, in := range ins {
			if got := electionCounter(t, in, "solo_fence_claim_failures_total"); got != 0 {
				t.Errorf("claim failures %v, want 0", got)
			}
		}
	})
}

// TestWorker_FenceClaimFailures: a failed Claim is retried with the pull
// jobs' back-off (1s, 2s, …) and counted; no job runs until it succeeds.
// After MaxFailures (5) failures in a row the instance resigns and another
// one, whose Claim succeeds, takes over.
func TestWorker_FenceClaimFailures(t *testing.T) {
	t.Run("retried", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			j := &journal{}
			in := newInstance(t, leadertest.New(), "a", worker.WithFence(&fakeFence{j: j, fail: 2}))
			base := time.Now()
			started := make(chan time.Duration, 1)
			_ = in.w.Pull("consume", func(ctx context.Context) error {
				started <- time.Since(base)
				<-ctx.Done()
				return nil
			})
			in.start()
			defer func() { _ = in.stop() }()
			if d := <-started; d != 3*time.Second {
				t.Errorf("the job started %v after the term, want 3s (two failed claims, back-off 1s then 2s)", d)
			}
			if got := electionCounter(t, in, "solo_fence_claim_failures_total"); got != 2 {
				t.Errorf("claim failures %v, want 2", got)
			}
			if n := len(in.logs.FilterMessage("fence claim failed; no job runs until it succeeds").All()); n != 2 {
				t.Errorf("%d warnings, want 2", n)
			}
		})
	})
	t.Run("resign", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			lock := leadertest.New()
			j := &journal{}
			a := newInstance(t, lock, "a", worker.WithFence(&fakeFence{j: j, fail: -1}))
			b := newInstance(t, lock, "b", worker.WithFence(&fakeFence{j: j}))
			base := time.Now()
			ran := make(chan string, 4)
			for _, in := range []*instance{a, b} {
				_ = in.w.Pull("consume", func(ctx context.Context) error {
					ran <- configuredID(in.e.ID())
					<-ctx.Done()
					return nil
				})
			}
			a.start()
			synctest.Wait()
			b.start()
			defer func() { _ = a.stop(); _ = b.stop() }()
			who := <-ran
			if who != "b" {
				t.Fatalf("the job ran on %s, whose claims all fail", who)
			}
			if d := time.Since(base); d < 15*time.Second || d > 17*time.Second {
				t.Errorf("b took over %v after a was elected, want about 15s (5 claims, back-off 1+2+4+8s)", d)
			}
			if got := electionCounter(t, a, "solo_fence_claim_failures_total"); got != 5 {
				t.Errorf("a's claim failures %v, want 5", got)
			}
			if n := len(a.logs.FilterMessage("fence claim failed repeatedly; resigning so another instance tries").All()); n != 1 {
				t.Errorf("a logged the resignation %d times, want 1", n)
			}
		})
	})
}

// TestWorker_JobContextCarriesTheToken: every job's context carries its
// elector (ElectorFrom) and, when there is a term, the fencing token that
// fence.Guard.Do writes with — the election's name, the term, the
// elector's ID — for pull and cron jobs alike. Mode always has no term:
// no token, so a fenced write is refused with fence.ErrNoToken rather
// than made with a made-up term.
//
// Before, only a spread job's context carried its elector, and none a
// token: a job needed the elector injected (a cycle in fx) to call
// Guard.Do with the election, term and holder by hand.
func TestWorker_JobContextCarriesTheToken(t *testing.T) {
	type seen struct {
		kind    string
		tok     fence.Token
		hasTok  bool
		elector *leader.Elector
		term    uint64
	}
	for _, mode := range []worker.Mode{worker.ModeElect, worker.ModeAlways} {
		t.Run(string(mode), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				in := newInstance(t, leadertest.New(), "a", worker.WithMode(mode))
				got := make(chan seen, 4)
				job := func(kind string) func(ctx context.Context) error {
					return func(ctx context.Context) error {
						tok, ok := fence.TokenFrom(ctx)
						e, _ := worker.ElectorFrom(ctx)
						term, _ := leader.TermFrom(ctx)
						select {
						case got <- seen{kind, tok, ok, e, term}:
						default:
						}
						if kind == "pull" {
							<-ctx.Done()
						}
						return nil
					}
				}
				_ = in.w.Pull("consume", job("pull"))
				_ = in.w.Cron("report", "@every 1s", job("cron"))
				in.start()
				time.Sleep(1500 * time.Millisecond)
				_ = in.stop()
				close(got)
				kinds := map[string]bool{}
				for s := range got {
					kinds[s.kind] = true
					if s.elector != in.e {
						t.Errorf("%s job: ElectorFrom = %p, want the worker's elector %p", s.kind, s.elector, in.e)
					}
					want := fence.Token{Election: "jobs", Term: s.term, Holder: in.e.ID()}
					switch {
					case mode == worker.ModeAlways && s.hasTok:
						t.Errorf("%s job in mode always: token %v, want none (no term)", s.kind, s.tok)
					case mode == worker.ModeElect && (!s.hasTok || s.tok != want || s.term == 0):
						t.Errorf("%s job: token %v (%v), want %v", s.kind, s.tok, s.hasTok, want)
					}
				}
				if !kinds["pull"] || !kinds["cron"] {
					t.Fatalf("jobs seen: %v, want pull and cron", kinds)
				}
			})
		})
	}
}
