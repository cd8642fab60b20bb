package worker_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap/zapcore"
	_ "modernc.org/sqlite" // database/sql driver "sqlite"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/fence"
	"github.com/solo-run/solo/leader/leadertest"
	"github.com/solo-run/solo/worker"
)

// sqliteGuard returns a fence guard on an in-memory SQLite database.
func sqliteGuard(t *testing.T) *fence.Guard {
	t.Helper()
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	g, err := fence.New(db)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestWorker_AlwaysRefusesAFence: mode always has no term, so a fence
// could only refuse its jobs' every write; New refuses the combination,
// in either order of the options, naming the mode, the option and the
// way off fetch=true that works with the fence. Before, New accepted it
// and every fenced write failed for ever with fence.ErrNoToken while
// /readyz said ok.
func TestWorker_AlwaysRefusesAFence(t *testing.T) {
	g := sqliteGuard(t)
	for name, opts := range map[string][]worker.Option{
		"mode first":  {worker.WithMode(worker.ModeAlways), worker.WithFence(g)},
		"fence first": {worker.WithFence(g), worker.WithMode(worker.ModeAlways)},
	} {
		e, err := leader.NewWithStore(leadertest.New(), cfg("a"))
		if err != nil {
			t.Fatal(err)
		}
		w, err := worker.New(e, opts...)
		if err == nil {
			t.Fatalf("%s: New(always, WithFence) = %v, nil; want a refusal", name, w)
		}
		for _, want := range []string{`mode "always"`, "WithFence", "fence.ErrNoToken", "mode elect", "mode standby", "fetch=true"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: New(always, WithFence) = %q, want it to say %q", name, err, want)
			}
		}
	}
	// The way off fetch=true it names takes the fence: the elect-mode
	// instance claims its term and its job's fenced write carries it.
	for _, m := range []worker.Mode{worker.ModeElect, worker.ModeStandby} {
		e, err := leader.NewWithStore(leadertest.New(), cfg("a"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := worker.New(e, worker.WithMode(m), worker.WithFence(g)); err != nil {
			t.Errorf("New(%s, WithFence) = %v, want it accepted", m, err)
		}
	}
}

// TestWorker_AlwaysStopsLoudlyOnAFencedWrite: in mode always without a
// fence option (the job holds a guard of its own), the first write the
// fence refuses for want of a token is logged at error naming the job and
// the way off fetch=true, the jobs stop rather than fail for ever, and
// GaveUp, /readyz and solo_worker_gave_up report it: for a pull job and
// for a cron job of either delivery. Mode always without any fenced write
// still runs its jobs (TestWorker_Modes). Before, the pull job failed
// every restart with fence.ErrNoToken, GaveUp stayed nil and /readyz 200;
// later, the cron job still failed every tick, logged at warn only.
func TestWorker_AlwaysStopsLoudlyOnAFencedWrite(t *testing.T) {
	g := sqliteGuard(t)
	write := func(runs *atomic.Int32) func(context.Context) error {
		return func(ctx context.Context) error {
			runs.Add(1)
			return g.Do(ctx, func(*sql.Tx) error { return nil })
		}
	}
	for name, register := range map[string]func(*worker.Worker, *atomic.Int32) error{
		"pull": func(w *worker.Worker, runs *atomic.Int32) error { return w.Pull("consume", write(runs)) },
		"cron at-most-once": func(w *worker.Worker, runs *atomic.Int32) error {
			return w.Cron("consume", "* * * * *", write(runs))
		},
		"cron at-least-once": func(w *worker.Worker, runs *atomic.Int32) error {
			return w.Cron("consume", "* * * * *", write(runs), worker.WithDelivery(worker.AtLeastOnce))
		},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				in := newInstance(t, leadertest.New(), "x", worker.WithMode(worker.ModeAlways))
				var runs atomic.Int32
				if err := register(in.w, &runs); err != nil {
					t.Fatal(err)
				}
				in.start()
				time.Sleep(5 * time.Minute)
				if n := runs.Load(); n != 1 {
					t.Errorf("the job ran %d times, want once: a fenced write in mode always never succeeds", n)
				}
				if err := in.w.GaveUp(); !errors.Is(err, worker.ErrGaveUp) || !errors.Is(err, fence.ErrNoToken) {
					t.Errorf("GaveUp() = %v, want ErrGaveUp with fence.ErrNoToken", err)
				}
				if code, body := readyzOf(worker.Handler(in.w)); code != http.StatusServiceUnavailable || !strings.Contains(body, "mode always") {
					t.Errorf("/readyz = %d %q, want 503 naming mode always", code, body)
				}
				logs := in.logs.FilterLevelExact(zapcore.ErrorLevel).FilterMessageSnippet("writes through the fence").All()
				if len(logs) != 1 || logs[0].ContextMap()["job"] != "consume" || !strings.Contains(logs[0].Message, "mode standby") {
					t.Errorf("error logs about the fenced write: %v, want one naming the job and the way off fetch=true", logs)
				}
				if n := len(in.logs.FilterMessage("jobs gave up in mode always; nothing runs until restart").All()); n != 1 {
					t.Errorf("the stop was logged %d times, want once", n)
				}
				if got := electionGauge(t, in, "solo_worker_gave_up"); got != 1 {
					t.Errorf("solo_worker_gave_up = %v, want 1", got)
				}
				_ = in.stop()
			})
		})
	}
}

// electionGauge returns the value of a gauge labelled by election only.
func electionGauge(t *testing.T, in *instance, name string) float64 {
	t.Helper()
	mfs, err := in.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// TestWorker_NoJobs: a worker with no job registered says so at warn when
// it starts, naming how to register one (AsJob included), and runs on;
// with WithJobsRequired Run refuses to start, before campaigning, with
// ErrNoJobs naming the election and the fix. Before, it campaigned, was
// elected and ran nothing, saying so only at info ("jobs started" with 0
// pull and 0 cron), and no option could make it an error.
func TestWorker_NoJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := leadertest.New()
		in := newInstance(t, lock, "a")
		in.start()
		time.Sleep(2 * time.Second)
		warns := in.logs.FilterLevelExact(zapcore.WarnLevel).FilterMessageSnippet("no job registered").All()
		if len(warns) != 1 || !strings.Contains(warns[0].Message, "workerfx.AsJob(") || !strings.Contains(warns[0].Message, "WithJobsRequired") {
			t.Errorf("warnings about no job: %v, want one naming AsJob and WithJobsRequired", warns)
		}
		if !in.e.IsLeader() {
			t.Error("without WithJobsRequired the worker no longer campaigns")
		}
		_ = in.stop()

		req := newInstance(t, leadertest.New(), "b", worker.WithJobsRequired())
		if err := req.w.CheckJobs(); !errors.Is(err, worker.ErrNoJobs) {
			t.Fatalf("CheckJobs() = %v, want ErrNoJobs", err)
		}
		err := req.w.Run(context.Background())
		if !errors.Is(err, worker.ErrNoJobs) || !strings.Contains(err.Error(), `"jobs"`) || !strings.Contains(err.Error(), "workerfx.AsJob(") {
			t.Fatalf("Run() = %v, want ErrNoJobs naming the election and AsJob", err)
		}
		_ = req.w.Pull("p", func(ctx context.Context) error { <-ctx.Done(); return nil })
		if err := req.w.CheckJobs(); err != nil {
			t.Fatalf("with a job, CheckJobs() = %v", err)
		}
	})
}
