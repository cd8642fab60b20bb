package sim_test

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/solo-run/solo/internal/sim"
)

// TestSim_Spread runs spread schedules (sim.RunSpread): real
// worker.Spread members, and for a mode switch real elect-mode
// worker.Workers, over the simulated Redis running the shipped scripts.
// CI profile: 120 schedules, 40 under -race (SOLO_SIM=long: 5,000;
// SOLO_SIM_SPREAD_SCHEDULES=N overrides), seeds from SOLO_SIM_BASE on
// (random when unset, printed), within a budget of 90 s, 45 s under -race
// (SOLO_SIM_BUDGET overrides; 0: none; see TestSim_CI). SOLO_SIM_SEED=N replays one schedule.
func TestSim_Spread(t *testing.T) {
	if s := os.Getenv("SOLO_SIM_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SOLO_SIM_SEED=%q: %v", s, err)
		}
		var res *sim.Result
		synctest.Test(t, func(t *testing.T) { res = sim.RunSpread(seed, sim.Options{}) })
		max := 400
		if os.Getenv("SOLO_SIM_LOG") == "all" {
			max = 0
		}
		if res.Failed() {
			t.Errorf("%s\nfindings: %v", res.Report(max), spreadFindings(res))
			return
		}
		t.Logf("seed %d: no violation; %s fake time, %d runs, met %v\n%s", seed, res.Stats.FakeTime, res.Spread.Runs, res.Spread.Met, res.Spread.Plan)
		if os.Getenv("SOLO_SIM_LOG") == "all" {
			t.Log(res.Log(0))
		}
		return
	}
	n, budget := 120, 90*time.Second
	if raceOn {
		n, budget = 40, 45*time.Second
	}
	if os.Getenv("SOLO_SIM") == "long" {
		n, budget = 5000, 0
	}
	n = schedulesFromEnv(t, "SOLO_SIM_SPREAD_SCHEDULES", n)
	budget = budgetFromEnv(t, budget)
	base := baseSeed(t)
	start := time.Now()
	var (
		mu       sync.Mutex
		next     atomic.Int64
		failed   []*sim.Result
		met      = map[string]int{}
		findings = map[string][]uint64{}
		fake     time.Duration
		oom      = map[string]int{}
		ran      int
		cut      bool
	)
	t.Run("schedules", func(t *testing.T) {
		for i := range runtime.GOMAXPROCS(0) {
			t.Run(fmt.Sprintf("w%d", i), func(t *testing.T) {
				t.Parallel()
				for {
					k := next.Add(1) - 1
					if k >= int64(n) {
						return
					}
					if spent(start, budget) {
						mu.Lock()
						cut = true
						mu.Unlock()
						return
					}
					seed := base + uint64(k)
					var res *sim.Result
					synctest.Test(t, func(t *testing.T) { res = sim.RunSpread(seed, sim.Options{}) })
					mu.Lock()
					ran++
					fake += res.Stats.FakeTime
					for m, ok := range res.Spread.Met {
						if ok {
							met[m]++
						}
					}
					for r, c := range res.Stats.OutOfModel {
						oom[r] += c
					}
					if res.Failed() {
						failed = append(failed, res)
						for _, f := range spreadFindings(res) {
							findings[f] = append(findings[f], seed)
						}
					}
					mu.Unlock()
				}
			})
		}
	})
	var b strings.Builder
	fmt.Fprintf(&b, "spread profile: %d schedules from seed %d in %s (%s fake time); %d failed\n", ran, base, time.Since(start).Round(time.Millisecond), fake.Round(time.Second), len(failed))
	if cut {
		fmt.Fprintf(&b, "  the %s budget was spent: %d of %d schedules ran\n", budget, ran, n)
	}
	for _, m := range []string{sim.MetShedDrain, sim.MetSwitch, sim.MetBack, sim.MetMixed} {
		fmt.Fprintf(&b, "  precondition met in %d schedules: %s\n", met[m], m)
	}
	keys := make([]string, 0, len(findings))
	for f := range findings {
		keys = append(keys, f)
	}
	sort.Strings(keys)
	for _, f := range keys {
		s := findings[f]
		slices.Sort(s)
		fmt.Fprintf(&b, "  %s: %d schedules, first seed %d\n", f, len(s), s[0])
	}
	for r, c := range oom {
		fmt.Fprintf(&b, "  out of model: %s: %d\n", r, c)
	}
	t.Log(b.String())
	if len(failed) > 0 {
		sort.Slice(failed, func(i, j int) bool { return failed[i].Seed < failed[j].Seed })
		t.Errorf("%d of %d spread schedules failed:\n%s\nthe first:\n%s", len(failed), ran, b.String(), failed[0].Report(300))
	}
}

// spreadFindings names what a failed spread schedule found, by its
// violations' invariants and tags: a shed job that drains slowly runs
// twice; elect and spread on one name run every job twice; a member that
// registers none of the jobs counts toward the share; an elect-mode
// instance runs a job a stopped spread member still drains; one process
// runs a job twice (a Run after ErrStopTimeout); a lease evicted; or
// another violation.
func spreadFindings(res *sim.Result) []string {
	var out []string
	for inv, tags := range res.Spread.Tags {
		same := inv == sim.InvSpreadOne && tags[sim.TagSameProc]
		if same {
			// Whatever else that violation met: one process ran the job
			// twice.
			out = append(out, "rerun: a Run after ErrStopTimeout runs a job twice in one process")
		}
		for tag := range tags {
			f := "other: " + inv + " [" + tag + "]"
			switch {
			case same && tag != sim.TagToElect:
				continue
			case tag == sim.TagEvicted:
				f = "evicted: a lease evicted under maxmemory (job twice)"
			case (inv == sim.InvSpreadOne || inv == sim.InvSpreadTick) && tag == sim.TagToElect:
				f = "drain to elect: an elect-mode instance runs a job a stopped member still drains"
			case (inv == sim.InvSpreadOne || inv == sim.InvSpreadTick) && tag == sim.TagModeSwitch:
				if tags[sim.TagToElect] {
					continue
				}
				f = "mode switch: elect and spread on one name run a job twice"
			case inv == sim.InvSpreadOne && tag == sim.TagShedDrain:
				f = "shed drain: a shed job that drains slowly runs twice"
			case inv == sim.InvSpreadCover && tag == sim.TagEmpty:
				f = "empty member: a member with no jobs counts (job runs nowhere)"
			case inv == sim.InvSpreadCover && tag == sim.TagMixedJobs:
				continue // with TagEmpty or alone: counted below
			}
			if !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
		if inv == sim.InvSpreadCover && tags[sim.TagMixedJobs] && !tags[sim.TagEmpty] {
			out = append(out, "other: "+inv+" [mixed job sets]")
		}
	}
	for _, v := range res.Violations {
		if v.Invariant != sim.InvSpreadOne && v.Invariant != sim.InvSpreadCover && v.Invariant != sim.InvSpreadTick {
			out = append(out, "other: "+v.Invariant)
		}
	}
	sort.Strings(out)
	return out
}
