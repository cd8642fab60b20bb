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

// TestSim_Lock runs the lock schedules (sim.RunLock) on the connection
// model (lockOptions): 800, 400 under -race (raceOn); without it
// (SOLO_SIM_LOCK_CONNS=0) 1,000, 600 under -race (SOLO_SIM=long: 30,000;
// SOLO_SIM_LOCK_SCHEDULES=N overrides), seeds from
// SOLO_SIM_BASE on (random when unset, printed). With SOLO_SIM_SEED it
// replays that one lock schedule (SOLO_SIM_LOG=all prints every event).
// The summary lists, per label a violation carried (LabelStaleRelease …,
// and per shape: G1–G4 a fair grant, R1–R2 a request run twice),
// how many schedules showed it and the first seed; each violation's
// message ends with its label.
func TestSim_Lock(t *testing.T) {
	if s := os.Getenv("SOLO_SIM_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SOLO_SIM_SEED=%q: %v", s, err)
		}
		var res *sim.Result
		synctest.Test(t, func(t *testing.T) { res = sim.RunLock(seed, lockOptions()) })
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
	if lockOptions().LockConns {
		// The connection model costs about 1.6 times as much per schedule
		// (Redlock's fan-outs, the fair queue's retries): 800, and 400
		// under -race, keep the profile near its old time (and the whole
		// `go test -race ./internal/sim` within its budget).
		profile += "+conns"
		switch n {
		case 1000:
			n = 800
		case 600:
			n = 400
		}
	}
	n = schedulesFromEnv(t, "SOLO_SIM_LOCK_SCHEDULES", n)
	agg := newAggregate(profile, baseSeed(t))
	lagg := &lockAggregate{lost: map[string]int{}, modes: map[string]int{}, findings: map[string]*invStat{}, judged: map[string]int{}}
	start := time.Now()
	run := func(seed uint64, o sim.Options) *sim.Result {
		lo := lockOptions()
		o.LockConns, o.LockMode = lo.LockConns, lo.LockMode
		return sim.RunLock(seed, o)
	}
	runSchedules(t, n, agg, run, func(res *sim.Result) { lagg.add(int64(res.Seed-agg.base), res) })
	t.Log(agg.summary(n, time.Since(start)))
	t.Log(lagg.summary())
	if agg.failed > 0 {
		t.Errorf("%s", agg.failures())
	}
}

// lockOptions are the lock schedules' options: they run on the connection
// model (sim.Options.LockConns: connections with their own fates, fair
// and Redlock schedules, invariants L6–L8) unless SOLO_SIM_LOCK_CONNS=0,
// and SOLO_SIM_LOCK_MODE=plain|fair|redlock runs every schedule in that
// mode.
func lockOptions() sim.Options {
	return sim.Options{LockConns: os.Getenv("SOLO_SIM_LOCK_CONNS") != "0", LockMode: os.Getenv("SOLO_SIM_LOCK_MODE")}
}

// lockAggregate sums the lock schedules' counters.
type lockAggregate struct {
	mu       sync.Mutex
	s        sim.LockStats
	lost     map[string]int
	modes    map[string]int
	findings map[string]*invStat // by finding: schedules, and the first
	judged   map[string]int      // by invariant: schedules that could have broken it
}

func (a *lockAggregate) add(k int64, res *sim.Result) {
	s := res.Lock
	a.mu.Lock()
	defer a.mu.Unlock()
	a.modes[s.Mode]++
	for inv := range s.Judged {
		a.judged[inv]++
	}
	for f := range s.Findings {
		st := a.findings[f]
		if st == nil {
			st = &invStat{first: k, seed: res.Seed}
			a.findings[f] = st
		}
		st.count++
		if k < st.first {
			st.first, st.seed = k, res.Seed
		}
	}
	a.s.Holds += s.Holds
	a.s.Reentries += s.Reentries
	a.s.Writes += s.Writes
	a.s.StaleRefused += s.StaleRefused
	a.s.NotObtained += s.NotObtained
	a.s.LockErrors += s.LockErrors
	a.s.UnlockErrors += s.UnlockErrors
	a.s.LateConfirms += s.LateConfirms
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
	var modes, finds []string
	for k, v := range a.modes {
		modes = append(modes, fmt.Sprintf("%s: %d", k, v))
	}
	sort.Strings(modes)
	for k, v := range a.findings {
		finds = append(finds, fmt.Sprintf("\n  %s: %d schedules, first at schedule #%d (seed %d)", k, v.count, v.first, v.seed))
	}
	sort.Strings(finds)
	var judged []string
	for k, v := range a.judged {
		judged = append(judged, fmt.Sprintf("%s: %d", k, v))
	}
	sort.Strings(judged)
	return fmt.Sprintf("lock modes {%s}; schedules that could have broken {%s}; findings shown:%s\n",
		strings.Join(modes, "; "), strings.Join(judged, "; "), strings.Join(finds, "")) + fmt.Sprintf("lock: %d terms held, %d re-entries, %d fenced writes (%d stale refused), %d TryLock not obtained, %d lock errors, %d unlock errors, %d acquires confirmed after RenewDeadline; holds lost {%s}",
		a.s.Holds, a.s.Reentries, a.s.Writes, a.s.StaleRefused, a.s.NotObtained, a.s.LockErrors, a.s.UnlockErrors, a.s.LateConfirms, strings.Join(lost, "; "))
}

// TestSim_LockPinned replays lock schedules that once failed, each with
// the shape that broke it still drawn:
//
//   - 25777 (fair): an attempt's reply is lost and go-redis re-sends its
//     request, which is still on its way when the next attempt adopts the
//     hold; the copy lands after the Unlock and queued the finished call
//     (L6) until the hold's lease abandoned the adopted owner.
//   - 208364: an adoption confirmed after its renew deadline is handed
//     back; the owner stays out of the call's adoptable attempts (its
//     release is on its way: adopting it again let that release delete
//     the next hold, L1 and L4) but is abandoned when the call ends.
//   - 74490837391764 (fair): a call holds a grant ("CALL.0") while one of
//     its attempts is still on its way; the attempt lands after the
//     Unlock, queues the finished call, and a release grants it the lock
//     again (L6, G4), until the hold's lease abandons the grant owner and
//     those attempts.
func TestSim_LockPinned(t *testing.T) {
	for _, tc := range []struct {
		seed  uint64
		shape []string // substrings of the schedule's log that show its shape
	}{
		{25777, []string{"go-redis retries the request", "adopted term", "fair"}},
		{208364, []string{"acquire confirmed after its renew deadline; not holding it", "adopted term"}},
		{74490837391764, []string{"mode fair", "granted"}},
	} {
		var res *sim.Result
		synctest.Test(t, func(t *testing.T) { res = sim.RunLock(tc.seed, lockOptions()) })
		if res.Failed() {
			t.Errorf("%s", res.Report(200))
			continue
		}
		log := res.Log(0) + res.Plan.String()
		for _, s := range tc.shape {
			if !strings.Contains(log, s) {
				t.Errorf("seed %d no longer draws its shape (%q missing: the plan's drawing changed): pin another", tc.seed, s)
			}
		}
	}
}
