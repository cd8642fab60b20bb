package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/solo-run/solo/cmd/solo/internal/config"
	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
)

// TestStopTiming_SentinelFailover: under a Sentinel URL with min_replicas,
// a planned failover takes renew_interval + config.SentinelReconfiguration from
// the stop margin; solo run kills at 3/4 of what is left and refuses
// timings that leave less than minStopMargin, naming renew_interval and
// renew_deadline. leader.Config's defaults (ttl/3 and 2/3 ttl) leave none.
func TestStopTiming_SentinelFailover(t *testing.T) {
	const sentinelURL, plainURL = "redis+sentinel://s1/m/0", "redis://r:6379/0"
	lc := func(ri, rd time.Duration) leader.Config {
		return leader.Config{TTL: 10 * time.Second, RenewInterval: ri, RenewDeadline: rd, Drift: 0.01, ShutdownTimeout: 10 * time.Second}
	}
	for _, tt := range []struct {
		name      string
		url       string
		min       int
		lc        leader.Config
		killAfter time.Duration
		err       string
	}{
		// (9.9s − 5s − 1s − 2s) × 3/4
		{name: "sentinel defaults", url: sentinelURL, min: 1, lc: lc(time.Second, 5*time.Second), killAfter: 1425 * time.Millisecond},
		{name: "leader defaults under sentinel", url: sentinelURL, min: 1, lc: lc(3333333333, 6666666666),
			err: "election.renew_interval 3.333333333s + election.renew_deadline 6.666666666s: leave -2.099999999s before the lease can pass in a Sentinel failover"},
		{name: "no room for the reconfiguration", url: sentinelURL, min: 1, lc: lc(time.Second, 6800*time.Millisecond),
			err: "election.renew_interval 1s + election.renew_deadline 6.8s: leave 100ms"},
		// No allowance: nothing bounds the window (a warning instead).
		{name: "sentinel without min_replicas", url: sentinelURL, lc: lc(3333333333, 6666666666), killAfter: 2425000000},
		{name: "single node", url: plainURL, min: 1, lc: lc(3333333333, 6666666666), killAfter: 2425000000},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := stopTiming(tt.lc, config.FailoverAllowance(tt.url, tt.lc.RenewInterval, tt.min))
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("stopTiming: %v", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("stopTiming = %v, want an error containing %q", err, tt.err)
			case tt.err == "" && (got < tt.killAfter-time.Millisecond || got > tt.killAfter+time.Millisecond):
				t.Fatalf("killAfter = %s, want %s", got, tt.killAfter)
			}
		})
	}
}

// solo run with a Sentinel URL and an explicit min_replicas 0 logs the
// "unsafe election settings for Sentinel" error once, in elect and in
// spread mode, naming the fix. Old code: spread mode returned before the
// warning, and never logged it.
func TestRun_SentinelMinReplicasZeroWarnsOnce(t *testing.T) {
	s := redistest.StartSentinel(t, "solo-warnonce")
	url := "redis+sentinel://" + strings.Join(s.SentinelAddrs(), ",") + "/" + s.MasterName() + "/0"
	dir := t.TempDir()
	for _, mode := range []string{"elect", "spread"} {
		t.Run(mode, func(t *testing.T) {
			out := filepath.Join(dir, mode+".out")
			env := append(testEnv(url, "warn-"+mode, "a"), "SOLO_ELECTION_MIN_REPLICAS=0", "SOLO_HTTP_ADDR=", "OUT="+out)
			run := []string{"sh", "-c", "echo started >> \"$OUT\"; exec sleep 600"}
			args := append([]string{"run", "--"}, run...)
			if mode == "spread" {
				cfgPath := filepath.Join(dir, "spread.yaml")
				yaml := "election:\n  mode: spread\njobs:\n  - name: a\n    command: [\"sh\", \"-c\", \"echo started >> \\\"$OUT\\\"; exec sleep 600\"]\n"
				if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
					t.Fatal(err)
				}
				env, args = append(env, "SOLO_CONFIG="+cfgPath), []string{"run"}
			}
			p := startSolo(t, env, args...)
			waitFor(t, 30*time.Second, "the program to start", func() bool {
				data, _ := os.ReadFile(out)
				return strings.Contains(string(data), "started")
			})
			o := p.output()
			if n := strings.Count(o, "unsafe election settings for Sentinel"); n != 1 || !strings.Contains(o, "min_replicas 1") {
				t.Fatalf("%d warnings, want one naming min_replicas 1:\n%s", n, o)
			}
		})
	}
}
