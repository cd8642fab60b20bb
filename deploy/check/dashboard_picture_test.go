package check

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/solo-run/solo/deploy/check/internal/dashpic"
)

// picturePanels are the dashboard's main panels, drawn by
// TestDashboardPicture into docs/img/dashboard-failover.svg.
var picturePanels = []string{
	"Leader per election",
	"Leading since (term age)", "Failovers (terms won) per hour",
	"Transitions", "Time since last success",
	"Renew latency against the deadline",
	"Renewals by result", "Job runs",
}

// promTarget is one instance Prometheus scrapes: its instance label and
// its address.
type promTarget struct{ instance, addr string }

// startPrometheus starts a Prometheus scraping targets every second and
// evaluating ruleFile (none when "") every second, and returns its API
// root (http://127.0.0.1:PORT/api/v1/). Each target's instance label is
// its name, so that legends read solo-a, not 127.0.0.1:PORT.
func startPrometheus(t *testing.T, ruleFile string, targets []promTarget) string {
	t.Helper()
	promBin := tool(t, "prometheus", "prometheus")
	dir := t.TempDir()
	var config strings.Builder
	config.WriteString("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\n")
	if ruleFile != "" {
		fmt.Fprintf(&config, "rule_files:\n  - %s\n", ruleFile)
	}
	config.WriteString("scrape_configs:\n  - job_name: solo\n    static_configs:\n")
	for _, tg := range targets {
		fmt.Fprintf(&config, "      - targets: ['%s']\n        labels: {instance: '%s'}\n", tg.addr, tg.instance)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	promPort := freePort(t)
	startProc(t, "prometheus", nil, promBin,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", promPort))
	return fmt.Sprintf("http://127.0.0.1:%d/api/v1/", promPort)
}

// drawDashboard draws the panels titled panels for election over
// [start, end] from
// Prometheus at api, with the dashboard's own queries: its constants
// overridden by consts (the timings of the instances scraped). It fails
// the test unless every query of every panel drew at least one finite
// sample: a renamed series or a broken query shows as an empty chart.
func drawDashboard(t *testing.T, api, election string, panels []string, start, end time.Time, consts map[string]string) dashpic.Picture {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy/grafana/solo-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	dash, err := dashpic.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"election": election, "group": election}
	for k, v := range dash.Constants {
		vars[k] = v
	}
	for k, v := range consts {
		if _, ok := dash.Constants[k]; !ok {
			t.Fatalf("the dashboard has no constant %s", k)
		}
		vars[k] = v
	}
	began := time.Now()
	defer func() { t.Logf("drew %d panels in %s", len(panels), time.Since(began).Round(time.Millisecond)) }()
	r := dashpic.Range{API: api, Start: start, End: end, Step: time.Second, Scrape: time.Second, Vars: vars}
	pic := dashpic.Picture{Start: start, End: end, Step: r.Step}
	for _, title := range panels {
		p, err := dash.Panel(title)
		if err != nil {
			t.Fatal(err)
		}
		c, err := r.Chart(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		for _, tg := range p.Targets {
			if !drewSample(c, tg.RefID) {
				t.Errorf("panel %q, query %s (%s): no finite sample between %s and %s", title, tg.RefID, tg.Expr,
					start.Format(time.TimeOnly), end.Format(time.TimeOnly))
			}
		}
		pic.Charts = append(pic.Charts, c)
	}
	return pic
}

// drewSample reports whether a series of c returned by query ref has a
// finite sample.
func drewSample(c dashpic.Chart, ref string) bool {
	for _, s := range c.Series {
		if s.Ref != ref {
			continue
		}
		for _, p := range s.Points {
			if !math.IsNaN(p.V) && !math.IsInf(p.V, 0) {
				return true
			}
		}
	}
	return false
}

// renderPicture renders pic into path.
func renderPicture(t *testing.T, pic dashpic.Picture, path string) {
	t.Helper()
	var buf bytes.Buffer
	if err := dashpic.Render(&buf, pic); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", path, buf.Len())
}

// TestDashboardPicture makes docs/img/dashboard-failover.svg: three `solo
// run` instances of one election on a real redis-server, scraped every
// second by a real Prometheus; Redis is paused for 600ms (a renewal
// waits), the leader is killed with SIGKILL (a follower takes over once
// the lease expires), restarted, and the next leader is stopped with
// SIGTERM (it resigns: the third takes over at once). The dashboard's main
// panels are then drawn from Prometheus's data with their own queries.
// It takes about 100s, so it runs only when asked:
//
//	cd deploy/check
//	DASHBOARD_PICTURE=../../docs/img/dashboard-failover.svg go test -run TestDashboardPicture -count=1 .
//
// TestAlert_NoLeaderEndToEnd draws the same panels on every run. (The
// variable has no SOLO_ prefix: solo run refuses SOLO_* variables that
// name no configuration key, and the instances inherit the environment.)
func TestDashboardPicture(t *testing.T) {
	out := os.Getenv("DASHBOARD_PICTURE")
	if out == "" {
		t.Skip("set DASHBOARD_PICTURE=FILE to draw the dashboard over a failover (docs/img/dashboard-failover.svg)")
	}
	out, err := filepath.Abs(out)
	if err != nil {
		t.Fatal(err)
	}
	redis, redisAddr := startRedis(t)
	solo := buildSolo(t)

	const (
		election = "orders"
		// renew_deadline − renew_interval, the dashboard's renew_margin.
		renewMargin = "1.5"
	)
	type instance struct {
		name, metrics string
		env           []string
		p             *proc
	}
	var instances []*instance
	var targets []promTarget
	for _, name := range []string{"solo-a", "solo-b", "solo-c"} {
		port := freePort(t)
		config := fmt.Sprintf(`redis:
  url: redis://%s/0
http:
  addr: 127.0.0.1:%d
election:
  name: %s
  id: %s
  ttl: 4s
  renew_interval: 1s
  renew_deadline: 2.5s
jobs:
  - name: report
    command: ["sleep", "0.5"]
    schedule: "@every 2s"
`, redisAddr, port, election, name)
		file := filepath.Join(t.TempDir(), name+".yaml")
		if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
		in := &instance{name: name, metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", port), env: []string{"SOLO_CONFIG=" + file}}
		in.p = startProc(t, name, in.env, solo, "run")
		instances = append(instances, in)
		targets = append(targets, promTarget{instance: name, addr: fmt.Sprintf("127.0.0.1:%d", port)})
	}
	// leaderOf waits for an instance other than not whose /metrics says
	// it leads.
	leaderOf := func(not *instance) *instance {
		var leader *instance
		waitFor(t, 30*time.Second, "a leader", func() error {
			for _, in := range instances {
				if in == not {
					continue
				}
				body, err := httpGet(context.Background(), in.metrics)
				if err == nil && strings.Contains(body, `solo_election_leader{election="`+election+`"} 1`) {
					leader = in
					return nil
				}
			}
			return fmt.Errorf("no instance reports leading")
		})
		return leader
	}
	first := leaderOf(nil)

	api := startPrometheus(t, "", targets)
	waitFor(t, 60*time.Second, "Prometheus to scrape all three", func() error {
		n, err := promQuery(api, `solo_election_leader{election="`+election+`"}`)
		if err != nil {
			return err
		}
		if n != 3 {
			return fmt.Errorf("%d series", n)
		}
		return nil
	})
	start := time.Now()
	var markers []dashpic.Marker
	// mark records an event now and returns its index in markers.
	mark := func(label string) int {
		markers = append(markers, dashpic.Marker{T: time.Now(), Label: label})
		return len(markers) - 1
	}
	since := func(i int) string { return time.Since(markers[i].T).Round(100 * time.Millisecond).String() }

	// A pause of Redis shorter than the read timeout (1s): the leader's
	// renewal waits it out. Repeated (at most 3 times, each a marker)
	// until a renewal took longer than 100ms: a renewal is due once a
	// second, so a pause may end just before one.
	time.Sleep(15 * time.Second)
	for i := 1; ; i++ {
		before := slowRenewals(t, first.metrics, election)
		m := mark("redis-server paused (SIGSTOP) for 800ms: the leader's renewal waits")
		redis.signal(t, syscall.SIGSTOP)
		time.Sleep(800 * time.Millisecond)
		redis.signal(t, syscall.SIGCONT)
		time.Sleep(1500 * time.Millisecond) // the waiting renewal ends and is counted
		if slowRenewals(t, first.metrics, election) > before {
			break
		}
		markers[m].Label = "redis-server paused (SIGSTOP) for 800ms: no renewal fell in it"
		if i == 3 {
			t.Fatalf("3 pauses of Redis, no renewal slower than 100ms on %s", first.name)
		}
		time.Sleep(2 * time.Second)
	}

	time.Sleep(14 * time.Second)
	m := mark(fmt.Sprintf("kill -9 %s, the leader", first.name))
	first.p.signal(t, syscall.SIGKILL)
	second := leaderOf(first)
	markers[m].Label += fmt.Sprintf(": %s leads %s later, once the lease expired", second.name, since(m))

	time.Sleep(8 * time.Second)
	mark(fmt.Sprintf("%s restarted: it follows", first.name))
	first.p = startProc(t, first.name+"-restarted", first.env, solo, "run")

	time.Sleep(12 * time.Second)
	m = mark(fmt.Sprintf("SIGTERM to %s, the leader: it resigns and exits", second.name))
	// To solo run alone, as Kubernetes signals PID 1: its job ends
	// through solo's own shutdown.
	if err := syscall.Kill(second.p.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	third := leaderOf(second)
	markers[m].Label += fmt.Sprintf("; %s leads %s later", third.name, since(m))
	for _, m := range markers {
		t.Logf("%s %s", m.T.UTC().Format(time.TimeOnly), m.Label)
	}

	time.Sleep(15 * time.Second)
	end := time.Now()
	time.Sleep(2 * time.Second) // the last scrape lands

	pic := drawDashboard(t, api, election, picturePanels, start, end, map[string]string{"renew_margin": renewMargin})
	pic.Markers = markers
	pic.Title = "solo dashboard over a failover (deploy/grafana/solo-dashboard.json, main panels)"
	pic.Notes = []string{
		fmt.Sprintf("3 × solo run (election %s: ttl 4s, renew_interval 1s, renew_deadline 2.5s; cron job report, sleep 0.5 @every 2s) on one redis-server %s,", election, redisVersion(t)),
		fmt.Sprintf("scraped every 1s by Prometheus %s. Each panel's own queries, run with query_range (step 1s, $__rate_interval 4s, renew_margin %s), drawn by deploy/check's", promVersion(t, api), renewMargin),
		fmt.Sprintf("TestDashboardPicture on %s (UTC; Grafana's colours and layout approximated: state 1 green, 0 grey). Events:", start.UTC().Format("2006-01-02")),
	}
	renderPicture(t, pic, out)
}

// slowRenewals returns how many renewals of election took longer than
// 100ms, from the instance's /metrics.
func slowRenewals(t *testing.T, metrics, election string) int {
	t.Helper()
	body, err := httpGet(context.Background(), metrics)
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for line := range strings.SplitSeq(body, "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok || !strings.Contains(name, `election="`+election+`"`) {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(name, "solo_election_renew_duration_seconds_count{"):
			n += v
		case strings.HasPrefix(name, "solo_election_renew_duration_seconds_bucket{") && strings.Contains(name, `le="0.1"`):
			n -= v
		}
	}
	return int(n)
}

// promVersion is Prometheus's version, from its build info.
func promVersion(t *testing.T, api string) string {
	t.Helper()
	body, err := httpGet(context.Background(), api+"status/buildinfo")
	if err != nil {
		t.Fatal(err)
	}
	var resp struct {
		Data struct {
			Version string `json:"version"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatal(err)
	}
	return resp.Data.Version
}

// redisVersion is redis-server's version, from redis-server --version.
func redisVersion(t *testing.T) string {
	t.Helper()
	bin := tool(t, "redis-server", "redis-server")
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	for f := range strings.FieldsSeq(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return v
		}
	}
	return strings.TrimSpace(string(out))
}
