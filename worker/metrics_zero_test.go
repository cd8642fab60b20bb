package worker_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/solo-run/solo/leader/leadertest"
)

// Every series an operator alerts on exists from the start with its zero
// value: a follower that never led exports
// solo_election_leader 0, counters exist at 0, and solo_job_running
// counts the runs in progress.
func TestMetrics_ZeroValuesFromStartAndRunningGauge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		in := newInstance(t, leadertest.New(), "a")
		release := make(chan struct{})
		if err := in.w.Pull("job", func(ctx context.Context) error {
			select {
			case <-ctx.Done():
			case <-release:
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		want := map[string]float64{
			"solo_election_leader":                    0,
			"solo_election_redis_up":                  0,
			"solo_election_protocol_refused":          0,
			"solo_election_redis_config_errors_total": 0,
			"solo_election_overruns_total":            0,
			"solo_election_transitions_total":         0,
			"solo_worker_gave_up":                     0,
			"solo_worker_failed_terms":                0,
			"solo_fence_claim_failures_total":         0,
			"solo_job_runs_total":                     0,
			"solo_job_failures_total":                 0,
			"solo_job_restarts_total":                 0,
			"solo_job_overruns_total":                 0,
			"solo_job_skipped_ticks_total":            0,
			"solo_job_running":                        0,
		}
		for name, v := range want {
			n, err := testutil.GatherAndCount(in.reg, name)
			if err != nil || n == 0 {
				t.Errorf("before Run: %s has %d series (%v), want it at %v", name, n, err, v)
				continue
			}
			if got := sum(t, in, name); got != v {
				t.Errorf("before Run: %s = %v, want %v", name, got, v)
			}
		}
		in.start()
		time.Sleep(100 * time.Millisecond) // elected, the job runs
		if got := sum(t, in, "solo_job_running"); got != 1 {
			t.Errorf("while the job runs: solo_job_running = %v, want 1", got)
		}
		if got := sum(t, in, "solo_election_redis_up"); got != 1 {
			t.Errorf("leading: solo_election_redis_up = %v, want 1", got)
		}
		close(release)
		_ = in.stop()
		if got := sum(t, in, "solo_job_running"); got != 0 {
			t.Errorf("after stop: solo_job_running = %v, want 0", got)
		}
	})
}

// sum adds up every sample of the counter or gauge name.
func sum(t *testing.T, in *instance, name string) float64 {
	t.Helper()
	mfs, err := in.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.Counter != nil {
				total += m.Counter.GetValue()
			}
			if m.Gauge != nil {
				total += m.Gauge.GetValue()
			}
		}
	}
	return total
}
