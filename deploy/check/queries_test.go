package check

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// grafanaVars are the dashboard's variables and Grafana's macros, replaced
// by values of the right kind before parsing.
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "1m", "$__interval", "1m", "$__range", "1h",
	"$election", ".*", "$group", "g", "$renew_margin", "3.33", "$read_timeout", "1",
	"${datasource}", "prom",
)

// query is one PromQL expression and where it comes from.
type query struct{ where, expr string }

// TestQueries_NameExportedSeries parses every expression of the alert rules
// and of the dashboard as PromQL and checks that every series it names is
// one a live `solo run` exports on /metrics.
func TestQueries_NameExportedSeries(t *testing.T) {
	root := repoRoot(t)
	queries := ruleQueries(t, filepath.Join(root, "deploy/prometheus/solo-alerts.yml"))
	queries = append(queries, dashboardQueries(t, filepath.Join(root, "deploy/grafana/solo-dashboard.json"))...)
	if len(queries) < 20 {
		t.Fatalf("found %d queries in the rules and the dashboard; the walk over them is broken", len(queries))
	}
	p := parser.NewParser(parser.Options{})
	used := map[string][]string{} // series name → where
	for _, q := range queries {
		expr, err := p.ParseExpr(grafanaVars.Replace(q.expr))
		if err != nil {
			t.Errorf("%s: %q does not parse as PromQL: %v", q.where, q.expr, err)
			continue
		}
		names := seriesNames(expr)
		if len(names) == 0 && !strings.HasPrefix(q.expr, "vector(") {
			t.Errorf("%s: %q names no series", q.where, q.expr)
		}
		for _, n := range names {
			used[n] = append(used[n], q.where)
		}
	}

	// Every series exists from start-up, so no rare series needs an
	// exemption: a live scrape shows them all, but for these.
	exported := scrapeSolo(t)
	for name, why := range notScraped {
		t.Logf("%s: not in the scrape (%s)", name, why)
		exported[name] = true
	}
	var names []string
	for n := range used {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if !exported[n] {
			t.Errorf("series %s (used by %s) is not exported by solo run", n, strings.Join(used[n], ", "))
		}
	}
	t.Logf("%d queries, %d series names checked", len(queries), len(names))
}

// notScraped are the series the rules and the dashboard name that the
// scrape of scrapeSolo cannot show, and why.
var notScraped = map[string]string{
	"up":                           "Prometheus's own, per target",
	"solo_tls_cert_expiry_seconds": "only over TLS (rediss://); cmd/solo's TestRun_TLSMetrics checks it on a live solo run",
}

// seriesNames returns the metric names of the vector selectors in expr.
func seriesNames(expr parser.Expr) []string {
	var names []string
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		names = append(names, name)
		return nil
	})
	return names
}

// ruleQueries returns the expression of every rule, after promtool's own
// validation of the file (rulefmt).
func ruleQueries(t *testing.T, file string) []query {
	t.Helper()
	groups, errs := rulefmt.ParseFile(file, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Error(err)
	}
	if groups == nil {
		t.FailNow()
	}
	var qs []query
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			qs = append(qs, query{where: "rule " + r.Alert + r.Record, expr: r.Expr})
		}
	}
	return qs
}

// labelValues matches a Grafana variable query label_values(METRIC, LABEL).
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*\w+\)$`)

// dashboardQueries returns every "expr" of the dashboard's panels and the
// series selector of every label_values variable.
func dashboardQueries(t *testing.T, file string) []query {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var qs []query
	var walk func(v any, where string)
	walk = func(v any, where string) {
		switch v := v.(type) {
		case map[string]any:
			if title, ok := v["title"].(string); ok {
				where = "panel " + strconv.Quote(title)
			}
			if name, ok := v["name"].(string); ok {
				where = "variable " + name
			}
			for k, x := range v {
				if s, ok := x.(string); ok && k == "expr" {
					qs = append(qs, query{where: where, expr: s})
				}
				if s, ok := x.(string); ok && (k == "query" || k == "definition") && strings.HasPrefix(s, "label_values(") {
					m := labelValues.FindStringSubmatch(s)
					if m == nil {
						t.Errorf("%s: unexpected variable query %q", where, s)
						continue
					}
					qs = append(qs, query{where: where, expr: m[1]})
				}
				walk(x, where)
			}
		case []any:
			for _, x := range v {
				walk(x, where)
			}
		}
	}
	walk(dash, "dashboard")
	return qs
}

// scrapeSolo runs two `solo run` instances against a redis-server and
// returns the names of the series their /metrics expose: one leads with a
// cron job that succeeds and a pull job that keeps failing (runs,
// failures, restarts, renewals, transitions), the other gives up after a
// failed term (failed terms, gave up).
func scrapeSolo(t *testing.T) map[string]bool {
	t.Helper()
	_, redisAddr := startRedis(t)
	solo := buildSolo(t)
	configs := map[string]string{
		"busy": `
election:
  name: check-busy
  ttl: 2s
jobs:
  - name: tick
    command: ["true"]
    schedule: "@every 1s"
  - name: flaky
    command: ["sh", "-c", "sleep 0.1; exit 1"]
    restart: always
worker:
  restart_backoff: 100ms
  restart_backoff_max: 200ms
`,
		"quitter": `
election:
  name: check-quitter
  ttl: 2s
jobs:
  - name: fail
    command: ["false"]
    restart: on-failure
worker:
  max_failures: 1
  max_failed_terms: 1
`,
	}
	// Series each instance must show before the scrape counts.
	want := map[string][]string{
		"busy":    {"solo_job_runs_total", "solo_job_failures_total", "solo_job_restarts_total", "solo_job_last_success_timestamp_seconds", "solo_election_renew_duration_seconds_bucket", "solo_election_transitions_total"},
		"quitter": {"solo_worker_gave_up", "solo_worker_failed_terms"},
	}
	exported := map[string]bool{}
	for name, config := range configs {
		port := freePort(t)
		file := filepath.Join(t.TempDir(), name+".yaml")
		config = fmt.Sprintf("redis:\n  url: redis://%s/0\nhttp:\n  addr: 127.0.0.1:%d\n", redisAddr, port) + config
		if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
		startProc(t, "solo-"+name, []string{"SOLO_CONFIG=" + file}, solo, "run")
		url := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
		var body string
		waitFor(t, 60*time.Second, "the series of solo run "+name, func() error {
			var err error
			if body, err = httpGet(context.Background(), url); err != nil {
				return err
			}
			got := expositionNames(body)
			for _, n := range want[name] {
				if !got[n] {
					return fmt.Errorf("no %s yet", n)
				}
			}
			return nil
		})
		for n := range expositionNames(body) {
			exported[n] = true
		}
		checkMetrics(t, name, body)
	}
	return exported
}

// checkMetrics runs `promtool check metrics` on a live scrape of solo run
// (it must pass clean), and checks that the series an operator alerts on
// exist from start-up at zero: no counter needs its first event.
func checkMetrics(t *testing.T, name, body string) {
	t.Helper()
	promtool := tool(t, "promtool", "prometheus")
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics on solo run %s's /metrics: %v\n%s", name, err, out)
	}
	got := expositionNames(body)
	for _, n := range []string{
		"solo_election_leader", "solo_election_redis_up", "solo_election_overruns_total",
		"solo_fence_claim_failures_total", "solo_job_overruns_total", "solo_job_skipped_ticks_total",
		"solo_job_running", "solo_worker_gave_up", "solo_election_redis_config_errors_total",
		"solo_worker_mode", "process_start_time_seconds",
	} {
		if !got[n] {
			t.Errorf("solo run %s exports no %s", name, n)
		}
	}
}

// expositionNames returns the series names of a text exposition.
func expositionNames(body string) map[string]bool {
	names := map[string]bool{}
	for line := range strings.SplitSeq(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names
}
