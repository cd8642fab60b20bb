package workerprom_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
	"github.com/solo-run/solo/worker/workerprom"
)

// TestWorkerMode: a Worker built with metrics exports solo_worker_mode 1
// for its mode, and only for it (the rule SoloElectionNoLeader leaves out
// an election run in mode always).
func TestWorkerMode(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := workerprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialed
	defer client.Close()
	for _, c := range []struct {
		election string
		mode     worker.Mode
	}{{"orders", worker.ModeAlways}, {"report", worker.ModeElect}, {"report", worker.ModeStandby}} {
		e, err := leader.New(client, leader.Config{Name: c.election}, leader.WithMetrics(m.Elector(c.election)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := worker.New(e, worker.WithMetrics(m), worker.WithMode(c.mode)); err != nil {
			t.Fatal(err)
		}
	}
	want := `
# HELP solo_worker_mode 1 for the mode (elect, standby, always) this instance's worker of the election runs in.
# TYPE solo_worker_mode gauge
solo_worker_mode{election="orders",mode="always"} 1
solo_worker_mode{election="report",mode="standby"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "solo_worker_mode"); err != nil {
		t.Fatal(err)
	}
}
