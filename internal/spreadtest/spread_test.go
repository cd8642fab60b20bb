//go:build linux

package spreadtest_test

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/solo-run/solo/internal/spreadtest"
)

// ttl is the jobs' lease TTL: short, so that failovers are quick.
const ttl = time.Second

func ms(d int64) string { return time.Duration(d).Round(time.Millisecond).String() }

func checkNoOverlap(t *testing.T, r *spreadtest.Rig) {
	t.Helper()
	if o := spreadtest.Overlaps(r.Events(), spreadtest.Mono()); len(o) > 0 {
		t.Errorf("%d overlapping runs (one job on two instances at once), e.g. %s", len(o), o[0])
	}
}

// TestSpread_ThreeInstances checks spread mode's shares with real processes:
// 3 instances, 30 jobs reach 10/10/10 within 5 s of the first start; one is
// killed (SIGKILL): 15/15 within TTL + 2 s; it comes back: 10/10/10 within a
// few seconds with at most 10 moves; and no job ever runs on two instances
// at once (outside witness: CLOCK_MONOTONIC reports of every run).
//
// Mutation checks: (a) runTerm's share check removed (every term won runs):
// the survivors race for the killed instance's jobs and the winner sheds
// the excess later: "12 moves after the kill, want the 10 jobs of the
// killed instance". (b) control.step never sheds: "not 10/10/10 within 10s:
// map[i00:5 i01:15 i02:10]".
func TestSpread_ThreeInstances(t *testing.T) {
	r := spreadtest.NewRig(t, 30, ttl)
	t0 := spreadtest.Mono()
	ids := []string{r.Spawn(), r.Spawn(), r.Spawn()}
	at, ok := r.WaitLoads(10*time.Second, 10, 10, 10)
	if !ok {
		t.Fatalf("not 10/10/10 within 10s: %v", spreadtest.Loads(r.Events()))
	}
	t.Logf("1. 10/10/10 after %s (bound 5s)", ms(at-t0))
	if at-t0 > int64(5*time.Second) {
		t.Errorf("10/10/10 after %s, want within 5s", ms(at-t0))
	}
	sent, all := measureCommands(t, r, 3*time.Second)
	t.Logf("5. idle: %.1f commands/s sent in all (%.1f executed, script internals included): %.2f per instance, %.3f per job",
		sent, all, sent/3, sent/30)

	// 2. Kill one.
	killed := r.Kill(ids[0])
	at, ok = r.WaitLoads(ttl+5*time.Second, 15, 15)
	if !ok {
		t.Fatalf("not 15/15 within %s of the kill: %v", ttl+5*time.Second, spreadtest.Loads(r.Events()))
	}
	moves := spreadtest.Moves(r.Events(), killed)
	t.Logf("2. 15/15 after %s (bound TTL+2s = %s), %d moves", ms(at-killed), ttl+2*time.Second, moves)
	if at-killed > int64(ttl+2*time.Second) {
		t.Errorf("15/15 after %s, want within TTL+2s", ms(at-killed))
	}
	if moves != 10 {
		t.Errorf("%d moves after the kill, want the 10 jobs of the killed instance", moves)
	}
	checkNoOverlap(t, r)

	// 3. Bring it back.
	time.Sleep(ttl) // let the survivors' hold time pass (MinHold = TTL)
	back := spreadtest.Mono()
	before := commandStats(t, r)
	r.Spawn()
	at, ok = r.WaitLoads(10*time.Second, 10, 10, 10)
	if !ok {
		t.Fatalf("not 10/10/10 within 10s of the restart: %v", spreadtest.Loads(r.Events()))
	}
	after := commandStats(t, r)
	reb := float64(after.sent-before.sent) / time.Duration(at-back).Seconds()
	moves = spreadtest.Moves(r.Events(), back)
	t.Logf("3. 10/10/10 after %s, %d moves (bound 10)", ms(at-back), moves)
	t.Logf("5. rebalance: %.1f commands/s sent in all (%.2f per instance) over %s", reb, reb/3, ms(at-back))
	if moves > 10 {
		t.Errorf("%d moves, want at most 10", moves)
	}
	checkNoOverlap(t, r)
}

// TestSpread_Churn checks spread mode under churn: 100 jobs, 5 instances, 20
// seeded random joins, graceful leaves and kills (SOLO_SPREADTEST_SEED replays
// a run; the seed is printed). No job ever runs twice at once; no job runs
// nowhere for longer than the TTL outside the failover windows (a kill:
// TTL + 2 s; a join or a graceful leave: TTL), and the share of that time
// each job ran is logged; moves stay within twice the minimum
// (a kill or leave must move the jobs the instance ran; a join must move
// floor(jobs/members) to the newcomer).
func TestSpread_Churn(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SOLO_SPREADTEST_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SOLO_SPREADTEST_SEED=%q: %v", s, err)
		}
		seed = v
	}
	events, jobs := 20, 100
	if os.Getenv("SOLO_SPREADTEST") == "long" {
		events = 60
	}
	t.Logf("seed %d (replay with SOLO_SPREADTEST_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 12))
	// A longer TTL than the other tests: seven race-instrumented processes
	// with a hundred elections each on two shared cores are starved for
	// hundreds of milliseconds at times, and with TTL 1s (a stop budget of
	// 333ms) a starved job overran it: the one way two runs of a job can
	// overlap, which only the fence covers (seen once, seed
	// 1795385260594353483, with a mutation that kept leavers in the group).
	const ttl = 2 * time.Second
	// otherWindow is the failover window of a join or a graceful leave: the
	// members hear of it at once (the group's notice), shed after half a
	// heartbeat of hysteresis at their next heartbeat (TTL/3), and each
	// handover takes a drain, a release and an acquire; all within a TTL.
	// (With 1s, run at load average 10 on 2 cores, handovers that began
	// ~1s after a join left gaps of 233–403ms just past the window.)
	const otherWindow = ttl
	r := spreadtest.NewRig(t, jobs, ttl)
	for range 5 {
		r.Spawn()
	}
	start, ok := r.WaitLoads(15*time.Second, 20, 20, 20, 20, 20)
	if !ok {
		t.Fatalf("not 20×5 within 15s: %v", spreadtest.Loads(r.Events()))
	}
	var windows []spreadtest.Window
	minMoves := 0
	var log []string
	for range events {
		time.Sleep(time.Duration(1500+rng.IntN(2000)) * time.Millisecond)
		live := r.Live()
		kind := []string{"join", "leave", "kill"}[rng.IntN(3)]
		switch {
		case len(live) <= 3:
			kind = "join"
		case len(live) >= 7:
			kind = []string{"leave", "kill"}[rng.IntN(2)]
		}
		loads := spreadtest.Loads(r.Events())
		at := spreadtest.Mono()
		switch kind {
		case "join":
			id := r.Spawn()
			minMoves += jobs / (len(live) + 1)
			windows = append(windows, spreadtest.Window{From: at, To: at + int64(otherWindow)})
			log = append(log, "join "+id)
		case "leave", "kill":
			id := live[rng.IntN(len(live))]
			minMoves += loads[id]
			if kind == "kill" {
				at = r.Kill(id)
				windows = append(windows, spreadtest.Window{From: at, To: at + int64(ttl+2*time.Second)})
			} else {
				at = r.Stop(id)
				windows = append(windows, spreadtest.Window{From: at, To: at + int64(otherWindow)})
			}
			log = append(log, kind+" "+id)
		}
	}
	n := len(r.Live())
	want := make([]int, n)
	for i := range want {
		want[i] = jobs / n
		if i < jobs%n {
			want[i]++
		}
	}
	settled, ok := r.WaitLoads(15*time.Second, want...)
	if !ok {
		t.Errorf("not balanced %v within 15s of the last event: %v", want, spreadtest.Loads(r.Events()))
	}
	end := spreadtest.Mono()
	evs := r.Events()
	cov, worst := spreadtest.Coverage(evs, jobs, start, end, windows)
	all, _ := spreadtest.Coverage(evs, jobs, start, end, nil)
	outside := spreadtest.Outside(start, end, windows)
	moves := spreadtest.Moves(evs, start)
	t.Logf("events: %s", strings.Join(log, ", "))
	if worst < 0 {
		t.Logf("4. every job ran all the time outside the failover windows")
	}
	t.Logf("4. worst job (%d) ran %.3f%% of the %s outside failover windows (%.3f%% of all %s); moves %d, minimum %d; settled %s after the last event",
		worst, 100*cov, ms(outside), 100*all, ms(end-start), moves, minMoves, ms(settled-windows[len(windows)-1].From))
	// A job that runs nowhere shows as an idle gap outside the windows:
	// one longer than a TTL (the holder's lease) is a failure, whatever
	// the ratio. Shorter ones are a handover slowed by a loaded machine (a
	// 652ms gap gave 96.06% once in CI, at a load average of 10 on 2
	// cores): the ratio is a speed, measured in docs/bench.md and logged
	// here, not asserted.
	worstGap, gapJob := time.Duration(0), -1
	for j := range jobs {
		for _, g := range spreadtest.Gaps(evs, j, start, end, windows) {
			if d := time.Duration(g.To - g.From); d > worstGap {
				worstGap, gapJob = d, j
			}
		}
	}
	t.Logf("4. longest gap outside the failover windows: %s (job %d; -1: none)", worstGap, gapJob)
	if worstGap > ttl {
		t.Errorf("job %d ran nowhere for %s outside failover windows, want no gap over the TTL %s", gapJob, worstGap, ttl)
		for _, g := range spreadtest.Gaps(evs, gapJob, start, end, windows) {
			t.Logf("job %d idle from +%s for %s", gapJob, ms(g.From-start), ms(g.To-g.From))
		}
		for i, w := range windows {
			t.Logf("event %d (%s) at +%s", i, log[i], ms(w.From-start))
		}
	}
	if moves > 2*minMoves {
		t.Errorf("%d moves, want at most twice the minimum %d", moves, minMoves)
	}
	checkNoOverlap(t, r)
}

// stats are the server's command counts: sent counts the commands
// clients sent (scripts count once), all includes the commands scripts ran.
type stats struct{ sent, all int64 }

// topLevel are the commands the instances send themselves; everything
// else in INFO commandstats runs inside their scripts.
var topLevel = map[string]bool{"evalsha": true, "eval": true, "ping": true, "subscribe": true,
	"unsubscribe": true, "publish": true, "hello": true, "select": true}

// commandStats reads INFO commandstats, leaving out the test's own
// commands (INFO, CONFIG).
func commandStats(t *testing.T, r *spreadtest.Rig) stats {
	t.Helper()
	if r.Admin == nil {
		r.Admin = r.Redis.Client(t)
	}
	info, err := r.Admin.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var s stats
	for line := range strings.SplitSeq(info, "\r\n") {
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, fields, _ := strings.Cut(rest, ":")
		if name == "info" || strings.HasPrefix(name, "config") || strings.HasPrefix(name, "client") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(fields, "calls="), ",")
		n, _ := strconv.ParseInt(calls, 10, 64)
		s.all += n
		if topLevel[name] {
			s.sent += n
		}
	}
	return s
}

// measureCommands returns the commands per second sent and executed over d.
func measureCommands(t *testing.T, r *spreadtest.Rig, d time.Duration) (sent, all float64) {
	a := commandStats(t, r)
	time.Sleep(d)
	b := commandStats(t, r)
	return float64(b.sent-a.sent) / d.Seconds(), float64(b.all-a.all) / d.Seconds()
}
