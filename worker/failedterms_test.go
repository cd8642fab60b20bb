package worker_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/leadertest"
	"github.com/solo-run/solo/worker"
	"github.com/solo-run/solo/worker/workerprom"
)

// A job that fails on every instance no longer moves between them for
// ever: after max_failed_terms failed terms in a row,
// counted in Redis across both instances, both stop campaigning, say so
// once in the log, in solo_worker_gave_up and in /readyz.
//
// Mutation: with the count read at term start but never written (the
// Checkpoint after a failed term removed) this fails with "b: Run did not
// return within 30s" (the job ping-pongs for ever, as before).
func TestWorker_GivesUpAfterMaxFailedTermsAcrossInstances(t *testing.T) {
	srv := redistest.Start(t)
	cfg := leader.Config{Name: strings.ReplaceAll(t.Name(), "/", "."), TTL: 2 * time.Second,
		RetryInterval: 100 * time.Millisecond, ResignCooldown: 100 * time.Millisecond}
	policy := worker.Policy{MaxFailures: 2, RestartBackoff: 10 * time.Millisecond,
		RestartBackoffMax: 100 * time.Millisecond, MaxFailedTerms: 3}
	var terms sync.Map // term → instance
	var runs atomic.Int64
	type inst struct {
		w    *worker.Worker
		reg  *prometheus.Registry
		logs *observer.ObservedLogs
		done chan error
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var insts []*inst
	for _, id := range []string{"a", "b"} {
		c := cfg
		c.ID = id
		e, err := leader.New(srv.Client(t), c)
		if err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		m, err := workerprom.New(reg)
		if err != nil {
			t.Fatal(err)
		}
		core, logs := observer.New(zapcore.InfoLevel)
		w, err := worker.New(e, worker.WithLogger(zap.New(core)), worker.WithMetrics(m), worker.WithPolicy(policy))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Pull("broken", func(ctx context.Context) error {
			term, _ := leader.TermFrom(ctx)
			terms.Store(term, id)
			runs.Add(1)
			return errors.New("always fails")
		}); err != nil {
			t.Fatal(err)
		}
		in := &inst{w: w, reg: reg, logs: logs, done: make(chan error, 1)}
		go func() { in.done <- w.Run(ctx) }()
		insts = append(insts, in)
	}
	for i, in := range insts {
		select {
		case err := <-in.done:
			if !errors.Is(err, worker.ErrGaveUp) {
				t.Fatalf("%c: Run = %v, want ErrGaveUp", 'a'+i, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%c: Run did not return within 30s", 'a'+i)
		}
		if in.w.GaveUp() == nil {
			t.Fatalf("%c: GaveUp() = nil after Run returned ErrGaveUp", 'a'+i)
		}
		if n := in.logs.FilterMessage("giving up: the election's jobs keep failing on every instance").Len(); n != 1 {
			t.Fatalf("%c: %d give-up lines, want 1", 'a'+i, n)
		}
		if g := testutil.ToFloat64(gaugeOf(t, in.reg, "solo_worker_gave_up")); g != 1 {
			t.Fatalf("%c: solo_worker_gave_up = %v, want 1", 'a'+i, g)
		}
		rec := httptest.NewRecorder()
		worker.Handler(in.w).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "3 failed terms in a row") &&
			!strings.Contains(rec.Body.String(), "4 failed terms in a row") {
			t.Fatalf("%c: /readyz = %d %q, want 503 naming the count", 'a'+i, rec.Code, rec.Body.String())
		}
	}
	n := 0
	terms.Range(func(_, _ any) bool { n++; return true })
	// 3 failed terms reach the limit; the other instance, if it had none
	// of its own yet, gets one try: at most 4.
	if n < 3 || n > 4 || runs.Load() != int64(n*policy.MaxFailures) {
		t.Fatalf("%d failed terms, %d runs; want 3 or 4 terms of %d runs each", n, runs.Load(), policy.MaxFailures)
	}
	v, err := srv.Client(t).Get(context.Background(), "solo:{"+cfg.Name+"}:cp:failed-terms").Int64()
	if err != nil {
		t.Fatalf("cp:failed-terms: %v", err)
	}
	if v%1000 != int64(n) {
		t.Fatalf("cp:failed-terms = %d, want %d failed terms in its last three digits", v, n)
	}
}

// gaugeOf returns the single-labelled collector of name from reg.
func gaugeOf(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name})
			g.Set(mf.GetMetric()[0].GetGauge().GetValue())
			return g
		}
	}
	t.Fatalf("no metric %s", name)
	return nil
}

// A success resets the count: failed terms that are not in a row never
// add up to max_failed_terms. Mutations: without the reset (the healthy
// signal of a long run removed) this fails with "Run = worker: gave up:
// 3 failed terms in a row ..., want to lead on"; with a failure after a
// reset in the same term counted from the value read at the term's start
// (refused: not above the reset), with "cp:failed-terms = 3001, want 2
// failed terms in a row after the healthy one".
func TestWorker_SuccessResetsFailedTerms(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := leadertest.New()
		policy := worker.Policy{MaxFailures: 1, RestartBackoff: time.Second, RestartBackoffMax: 10 * time.Second, MaxFailedTerms: 3}
		in := newInstance(t, lock, "a", worker.WithPolicy(policy))
		var run atomic.Int64
		// Terms 1, 2 fail; term 3 runs healthily for a minute (the count
		// resets), then fails; term 4 fails: two in a row, never three;
		// term 5 runs on.
		_ = in.w.Pull("flaky", func(ctx context.Context) error {
			switch run.Add(1) {
			case 5: // term 5 runs on; the test reads the count meanwhile
				<-ctx.Done()
				return nil
			case 3:
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(time.Minute):
				}
			}
			return errors.New("fails")
		})
		in.start()
		for run.Load() < 5 && in.w.GaveUp() == nil {
			time.Sleep(time.Second)
		}
		synctest.Wait()
		if err := in.w.GaveUp(); err != nil {
			t.Fatalf("Run = %v, want to lead on", err)
		}
		v, _, _ := lock.LoadCheckpoint(context.Background(), "failed-terms")
		if err := in.stop(); err != nil {
			t.Fatal(err)
		}
		if v%1000 != 2 {
			t.Fatalf("cp:failed-terms = %d, want 2 failed terms in a row after the healthy one", v)
		}
	})
}

// The count keeps counting after a reset, at real terms (server µs, so
// the value is about 1.8e18, far above 2^53) on a real Redis: a failed
// term, a term that is healthy first and then fails (reset, then +1), and
// two more failed terms reach max_failed_terms 3.
//
// Mutation: with checkpoint.lua comparing values as Lua doubles (the old
// tonumber), term×1000 + 1 equals term×1000, the failed term after the
// reset is refused and the count stays at 0: "Run did not return within
// 30s" (it never gives up).
func TestWorker_FailedTermsCountAfterResetOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	cfg := leader.Config{Name: strings.ReplaceAll(t.Name(), "/", "."), ID: "a", TTL: 2 * time.Second,
		RetryInterval: 100 * time.Millisecond, ResignCooldown: 50 * time.Millisecond}
	policy := worker.Policy{MaxFailures: 1, RestartBackoff: 300 * time.Millisecond,
		RestartBackoffMax: time.Second, MaxFailedTerms: 3}
	e, err := leader.New(srv.Client(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(e, worker.WithPolicy(policy))
	if err != nil {
		t.Fatal(err)
	}
	var run atomic.Int64
	if err := w.Pull("flaky", func(ctx context.Context) error {
		if run.Add(1) == 2 {
			return nil // healthy: the count resets
		}
		return errors.New("fails")
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case err := <-done:
		if !errors.Is(err, worker.ErrGaveUp) {
			t.Fatalf("Run = %v, want ErrGaveUp", err)
		}
	case <-time.After(30 * time.Second):
		cancel()
		<-done
		t.Fatalf("Run did not return within 30s (%d runs)", run.Load())
	}
	v, err := srv.Client(t).Get(context.Background(), "solo:{"+cfg.Name+"}:cp:failed-terms").Int64()
	if err != nil {
		t.Fatal(err)
	}
	if v%1000 != 3 || v/1000 < 1<<50 {
		t.Fatalf("cp:failed-terms = %d, want a real term ×1000 + 3", v)
	}
}
