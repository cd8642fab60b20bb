package config

import (
	"testing"
	"time"
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
			if warns := lc.MinReplicas == 0 && IsSentinelURL(cfg.Redis.URL); warns != tt.warnings {
				t.Errorf("min_replicas %d under %s: warned %v, want %v", lc.MinReplicas, cfg.Redis.URL, warns, tt.warnings)
			}
		})
	}
}
