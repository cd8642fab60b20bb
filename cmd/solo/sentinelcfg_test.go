package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
)

// TestSentinelDefaults: a Sentinel URL makes the unset min_replicas 1 and
// the unset renew_interval and renew_deadline ttl/10 and ttl/2; a value
// given in the file or the environment (min_replicas 0 included) is kept,
// an empty variable means the default, and other URLs keep leader.Config's
// defaults. Old code: min_replicas 0, renew_interval and renew_deadline
// unset (ttl/3, 2/3 ttl) under a Sentinel URL.
func TestSentinelDefaults(t *testing.T) {
	const sentinel = "redis:\n  url: redis+sentinel://s1:26379,s2:26379/mymaster/0\n"
	const plain = "redis:\n  url: redis://r:6379/0\n"
	for _, tt := range []struct {
		name     string
		yaml     string
		env      []string
		min      int
		ri, rd   time.Duration
		warnings bool
	}{
		{name: "sentinel", yaml: sentinel + minimal, min: 1, ri: time.Second, rd: 5 * time.Second},
		{name: "rediss+sentinel", yaml: "redis:\n  url: rediss+sentinel://s1/m/0\n" + minimal, min: 1, ri: time.Second, rd: 5 * time.Second},
		{name: "sentinel ttl 30s", yaml: sentinel + minimal + "  ttl: 30s\n", min: 1, ri: 3 * time.Second, rd: 15 * time.Second},
		{name: "sentinel timings given", yaml: sentinel + minimal + "  renew_interval: 2s\n  renew_deadline: 4s\n  min_replicas: 2\n",
			min: 2, ri: 2 * time.Second, rd: 4 * time.Second},
		{name: "sentinel min_replicas 0 in the file", yaml: sentinel + minimal + "  min_replicas: 0\n",
			ri: time.Second, rd: 5 * time.Second, warnings: true},
		{name: "sentinel min_replicas empty in the file", yaml: sentinel + minimal + "  min_replicas:\n", min: 1, ri: time.Second, rd: 5 * time.Second},
		{name: "sentinel min_replicas 0 from the environment", yaml: sentinel + minimal, env: []string{"SOLO_ELECTION_MIN_REPLICAS=0"},
			ri: time.Second, rd: 5 * time.Second, warnings: true},
		{name: "sentinel min_replicas empty variable", yaml: sentinel + minimal + "  min_replicas: 0\n", env: []string{"SOLO_ELECTION_MIN_REPLICAS="},
			min: 1, ri: time.Second, rd: 5 * time.Second},
		{name: "sentinel url from the environment", yaml: plain + minimal, env: []string{"SOLO_REDIS_URL=redis+sentinel://s1/m"},
			min: 1, ri: time.Second, rd: 5 * time.Second},
		{name: "single node", yaml: plain + minimal},
		{name: "cluster", yaml: "redis:\n  url: redis+cluster://c1:7000\n" + minimal},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tt.yaml), tt.env)
			if err != nil {
				t.Fatal(err)
			}
			lc := cfg.LeaderConfig()
			if lc.MinReplicas != tt.min || lc.RenewInterval != tt.ri || lc.RenewDeadline != tt.rd {
				t.Errorf("min_replicas %d, renew_interval %s, renew_deadline %s; want %d, %s, %s",
					lc.MinReplicas, lc.RenewInterval, lc.RenewDeadline, tt.min, tt.ri, tt.rd)
			}
			// leader.New warns of min_replicas 0 on a Sentinel client
			// (TestRun_SentinelMinReplicasZeroWarnsOnce).
			if warns := lc.MinReplicas == 0 && isSentinelURL(cfg.Redis.URL); warns != tt.warnings {
				t.Errorf("min_replicas %d under %s: warned %v, want %v", lc.MinReplicas, cfg.Redis.URL, warns, tt.warnings)
			}
		})
	}
}

// TestStopTiming_SentinelFailover: under a Sentinel URL with min_replicas,
// a planned failover takes renew_interval + sentinelReconfiguration from
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
			got, err := stopTiming(tt.lc, failoverAllowance(tt.url, tt.lc.RenewInterval, tt.min))
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
