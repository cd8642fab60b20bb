package sim_test

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/solo-run/solo/internal/sim"
)

// TestSim_Lock runs the lock schedules (sim.RunLock): 1,000 by default,
// 600 under -race (raceOn; SOLO_SIM=long: 30,000;
// SOLO_SIM_LOCK_SCHEDULES=N overrides), seeds from
// SOLO_SIM_BASE on (random when unset, printed). With SOLO_SIM_SEED it
// replays that one lock schedule (SOLO_SIM_LOG=all prints every event).
func TestSim_Lock(t *testing.T) {
	if s := os.Getenv("SOLO_SIM_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SOLO_SIM_SEED=%q: %v", s, err)
		}
		var res *sim.Result
		synctest.Test(t, func(t *testing.T) { res = sim.RunLock(seed, sim.Options{}) })
		max := 400
		if os.Getenv("SOLO_SIM_LOG") == "all" {
			max = 0
		}
		if res.Failed() {
			t.Errorf("%s", res.Report(max))
			return
		}
		t.Logf("lock seed %d: no violation; %s fake time, %+v\n%s", seed, res.Stats.FakeTime, *res.Lock, res.Plan)
		if os.Getenv("SOLO_SIM_LOG") == "all" {
			t.Log(res.Log(0))
		}
		return
	}
	profile, n := "lock-ci", 1000
	if raceOn {
		n = 600
	}
	if os.Getenv("SOLO_SIM") == "long" {
		profile, n = "lock-long", 30_000
	}
	n = schedulesFromEnv(t, "SOLO_SIM_LOCK_SCHEDULES", n)
	agg := newAggregate(profile, baseSeed(t))
	lagg := &lockAggregate{lost: map[string]int{}}
	start := time.Now()
	runSchedules(t, n, agg, sim.RunLock, func(res *sim.Result) { lagg.add(res.Lock) })
	t.Log(agg.summary(n, time.Since(start)))
	t.Log(lagg.summary())
	if agg.failed > 0 {
		t.Errorf("%s", agg.failures())
	}
}

// lockAggregate sums the lock schedules' counters.
type lockAggregate struct {
	mu   sync.Mutex
	s    sim.LockStats
	lost map[string]int
}

func (a *lockAggregate) add(s *sim.LockStats) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.s.Holds += s.Holds
	a.s.Reentries += s.Reentries
	a.s.Writes += s.Writes
	a.s.StaleRefused += s.StaleRefused
	a.s.NotObtained += s.NotObtained
	a.s.LockErrors += s.LockErrors
	a.s.UnlockErrors += s.UnlockErrors
	for k, v := range s.Lost {
		a.lost[k] += v
	}
}

func (a *lockAggregate) summary() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var lost []string
	for k, v := range a.lost {
		lost = append(lost, fmt.Sprintf("%s: %d", k, v))
	}
	sort.Strings(lost)
	return fmt.Sprintf("lock: %d terms held, %d re-entries, %d fenced writes (%d stale refused), %d TryLock not obtained, %d lock errors, %d unlock errors; holds lost {%s}",
		a.s.Holds, a.s.Reentries, a.s.Writes, a.s.StaleRefused, a.s.NotObtained, a.s.LockErrors, a.s.UnlockErrors, strings.Join(lost, "; "))
}
