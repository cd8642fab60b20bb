package check

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/solo-run/solo/deploy/check/internal/dashpic"
)

// TestAlert_NoLeaderEndToEnd runs a real Prometheus with the shipped rules
// (deploy/prometheus/solo-alerts.yml, unmodified) scraping two `solo run`
// instances of one election. The leader is SIGSTOPped and Redis frozen, so
// nobody can take over: SoloElectionNoLeader must fire for the election
// once its `for` (30s) has passed, and resolve after both are continued and
// a leader is back. The thawed leader finds its lease gone, a loss no
// scrape saw happen (it answered none while frozen): SoloLeaseLost must
// fire for it, and the dashboard's lease-loss panel must draw it. A third
// instance runs another election in mode always: no leader, by design,
// and SoloElectionNoLeader must never fire for it. A fourth, killed and
// restarted twice, must raise SoloInstanceCrashLooping.
func TestAlert_NoLeaderEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("takes about a minute")
	}
	redis, redisAddr := startRedis(t)
	solo := buildSolo(t)
	root := repoRoot(t)

	const election = "e2e-orders"
	type instance struct {
		name, metrics string
		p             *proc
	}
	var instances []*instance
	var targets []promTarget
	for _, name := range []string{"a", "b"} {
		port := freePort(t)
		env := []string{"SOLO_CONFIG=/dev/null", "SOLO_REDIS_URL=redis://" + redisAddr + "/0",
			"SOLO_ELECTION_NAME=" + election, "SOLO_ELECTION_TTL=2s", "SOLO_ELECTION_ID=" + name,
			fmt.Sprintf("SOLO_HTTP_ADDR=127.0.0.1:%d", port)}
		p := startProc(t, "solo-"+name, env, solo, "run", "--", "sleep", "1000")
		instances = append(instances, &instance{name: name, metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", port), p: p})
		targets = append(targets, promTarget{instance: "solo-" + name, addr: fmt.Sprintf("127.0.0.1:%d", port)})
	}
	// An election run in mode always: no leader by design, its program
	// runs. SoloElectionNoLeader must never fire for it.
	const always = "e2e-always"
	alwaysPort := freePort(t)
	startProc(t, "solo-always", []string{"SOLO_CONFIG=/dev/null", "SOLO_REDIS_URL=redis://" + redisAddr + "/0",
		"SOLO_ELECTION_NAME=" + always, "SOLO_ELECTION_MODE=always", "SOLO_ELECTION_ID=c",
		fmt.Sprintf("SOLO_HTTP_ADDR=127.0.0.1:%d", alwaysPort)}, solo, "run", "--", "sleep", "1000")
	targets = append(targets, promTarget{instance: "solo-always", addr: fmt.Sprintf("127.0.0.1:%d", alwaysPort)})
	// An instance that crash-loops (killed, restarted) while another
	// election's leader leads: SoloInstanceCrashLooping must fire once
	// two restarts were scraped.
	crashPort := freePort(t)
	crashEnv := []string{"SOLO_CONFIG=/dev/null", "SOLO_REDIS_URL=redis://" + redisAddr + "/0",
		"SOLO_ELECTION_NAME=e2e-crash", "SOLO_ELECTION_TTL=2s", fmt.Sprintf("SOLO_HTTP_ADDR=127.0.0.1:%d", crashPort)}
	crash := startProc(t, "solo-crash", crashEnv, solo, "run", "--", "sleep", "1000")
	targets = append(targets, promTarget{instance: "solo-crash", addr: fmt.Sprintf("127.0.0.1:%d", crashPort)})
	// The leader is the instance whose /metrics says so.
	var leader *instance
	waitFor(t, 30*time.Second, "a leader", func() error {
		for _, in := range instances {
			body, err := httpGet(context.Background(), in.metrics)
			if err == nil && strings.Contains(body, `solo_election_leader{election="`+election+`"} 1`) {
				leader = in
				return nil
			}
		}
		return fmt.Errorf("no instance reports leading")
	})

	api := startPrometheus(t, filepath.Join(root, "deploy/prometheus/solo-alerts.yml"), targets)

	// Prometheus has seen the leader lead before anything is frozen.
	var seen time.Time
	waitFor(t, 60*time.Second, "Prometheus to scrape the leader", func() error {
		v, err := promQuery(api, `solo_election_leader{election="`+election+`"} == 1`)
		if err != nil {
			return err
		}
		if v == 0 {
			return fmt.Errorf("no leading series yet")
		}
		if v, err = promQuery(api, `solo_worker_mode{election="`+always+`",mode="always"} == 1`); err != nil || v == 0 {
			return fmt.Errorf("no mode always series yet (%v)", err)
		}
		seen = time.Now()
		return nil
	})
	for restarts := 1; restarts <= 2; restarts++ {
		waitFor(t, 30*time.Second, "Prometheus to scrape solo-crash's life", func() error {
			if n, err := promQuery(api, fmt.Sprintf(`changes(process_start_time_seconds{instance="solo-crash"}[15m]) >= %d`, restarts-1)); err != nil || n == 0 {
				return fmt.Errorf("not yet (%v)", err)
			}
			return nil
		})
		crash.signal(t, syscall.SIGKILL)
		<-crash.done
		crash = startProc(t, fmt.Sprintf("solo-crash-%d", restarts), crashEnv, solo, "run", "--", "sleep", "1000")
	}
	waitFor(t, 30*time.Second, "SoloInstanceCrashLooping to fire for solo-crash", func() error {
		if state := alertStateOf(t, api, "SoloInstanceCrashLooping", "instance", "solo-crash"); state != "firing" {
			return fmt.Errorf("alert state %q", state)
		}
		return nil
	})

	// Inactive once the leader is seen. A follower exports
	// solo_election_leader 0 from start-up, so an evaluation that saw the
	// follower's first scrape before the leader's may have left the alert
	// pending (never firing: its for: is 30s) until the next evaluation.
	waitFor(t, 30*time.Second, "SoloElectionNoLeader inactive while a leader leads", func() error {
		if state := alertState(t, api, "SoloElectionNoLeader", election); state != "" {
			return fmt.Errorf("SoloElectionNoLeader is %s before anything was frozen", state)
		}
		return nil
	})

	// Freeze the leader and Redis: no renewal, no takeover.
	leader.p.signal(t, syscall.SIGSTOP)
	redis.signal(t, syscall.SIGSTOP)
	frozen := time.Now()
	waitFor(t, 120*time.Second, "SoloElectionNoLeader to fire", func() error {
		if state := alertState(t, api, "SoloElectionNoLeader", election); state != "firing" {
			return fmt.Errorf("alert state %q", state)
		}
		return nil
	})
	if took := time.Since(frozen); took < 30*time.Second {
		t.Fatalf("SoloElectionNoLeader fired %s after the freeze, before its for: 30s", took)
	}
	t.Logf("fired %s after the freeze", time.Since(frozen).Round(time.Second))
	// More than its for: (30s) since the mode always instance was first
	// scraped, with no leader all along.
	if state := alertState(t, api, "SoloElectionNoLeader", always); state != "" {
		t.Errorf("SoloElectionNoLeader is %s for %s, run in mode always", state, always)
	}

	redis.signal(t, syscall.SIGCONT)
	leader.p.signal(t, syscall.SIGCONT)
	thawed := time.Now()
	waitFor(t, 120*time.Second, "SoloElectionNoLeader to resolve", func() error {
		if state := alertState(t, api, "SoloElectionNoLeader", election); state != "" {
			return fmt.Errorf("alert state %q", state)
		}
		return nil
	})
	t.Logf("resolved %s after the thaw", time.Since(thawed).Round(time.Second))
	waitFor(t, 60*time.Second, "SoloLeaseLost to fire for the thawed leader", func() error {
		if state := alertState(t, api, "SoloLeaseLost", election); state != "firing" {
			return fmt.Errorf("alert state %q", state)
		}
		return nil
	})

	// The dashboard's main panels draw this run from Prometheus's data
	// (every query a finite sample), as TestDashboardPicture draws
	// docs/img/dashboard-failover.svg; the SVG goes to a temporary
	// directory. Renew latency needs renewals in a rate window after the
	// thaw (before the freeze there were hardly two scrapes): a rate of
	// renewals a second ago is one at the last step of the range too.
	waitFor(t, 60*time.Second, "Prometheus to see renewals after the thaw", func() error {
		n, err := promQuery(api, `rate(solo_election_renew_duration_seconds_count{election="`+election+`"}[4s] offset 1s) > 0`)
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("no renewal in the last 4s")
		}
		return nil
	})
	panels := []string{
		"Leader per election", "Leading since (term age)", "Failovers (terms won) per hour", "Transitions", "Leases lost and step-downs",
		"Renew latency against the deadline", "Renewals by result", "Job runs", "Redis up per instance", "Job running",
	}
	pic := drawDashboard(t, api, election, panels, seen.Add(-time.Second), time.Now(), nil)
	if n := drewAbove(pic, "Leases lost and step-downs", 0); n == 0 {
		t.Errorf("the panel Leases lost and step-downs drew no loss or step-down of the thawed leader")
	}
	pic.Title = "TestAlert_NoLeaderEndToEnd"
	pic.Markers = []dashpic.Marker{{T: frozen, Label: "leader and Redis frozen"}, {T: thawed, Label: "thawed"}}
	renderPicture(t, pic, filepath.Join(t.TempDir(), "dashboard.svg"))
}

// alertState returns the state (pending, firing) of the alert name for
// election in Prometheus's /api/v1/alerts, or "" when it is not active.
func alertState(t *testing.T, api, name, election string) string {
	t.Helper()
	return alertStateOf(t, api, name, "election", election)
}

// alertStateOf is alertState for the alert whose label key is value.
func alertStateOf(t *testing.T, api, name, key, value string) string {
	t.Helper()
	body, err := httpGet(context.Background(), api+"alerts")
	if err != nil {
		t.Fatalf("GET alerts: %v", err)
	}
	var resp struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatalf("alerts: %v: %s", err, body)
	}
	for _, a := range resp.Data.Alerts {
		if a.Labels["alertname"] == name && a.Labels[key] == value {
			return a.State
		}
	}
	return ""
}

// promQuery returns the number of series an instant query returns.
func promQuery(api, q string) (int, error) {
	body, err := httpGet(context.Background(), api+"query?query="+url.QueryEscape(q))
	if err != nil {
		return 0, err
	}
	var resp struct {
		Data struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		return 0, err
	}
	return len(resp.Data.Result), nil
}

// drewAbove returns how many points of the chart titled title are above v.
func drewAbove(pic dashpic.Picture, title string, v float64) int {
	n := 0
	for _, c := range pic.Charts {
		if c.Title != title {
			continue
		}
		for _, s := range c.Series {
			for _, p := range s.Points {
				if p.V > v {
					n++
				}
			}
		}
	}
	return n
}
