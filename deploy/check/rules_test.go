package check

import (
	"os/exec"
	"testing"
)

// TestAlertRules checks deploy/prometheus/solo-alerts.yml with promtool and
// runs its unit tests (solo-alerts.test.yml): each alert fires on series
// shaped like solo's and stays quiet on the near misses.
func TestAlertRules(t *testing.T) {
	promtool := tool(t, "promtool", "prometheus")
	dir := repoRoot(t) + "/deploy/prometheus"
	for _, args := range [][]string{
		{"check", "rules", "solo-alerts.yml"},
		{"test", "rules", "solo-alerts.test.yml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %v: %v\n%s", args, err, out)
		}
	}
}
