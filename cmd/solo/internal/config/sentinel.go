package config

import (
	"strings"
	"time"

	"github.com/solo-run/solo/leader/redisurl"
)

// SentinelReconfiguration is how long, after Sentinel promotes a replica,
// the old master may keep a replica that acknowledges its writes (WAIT):
// the leading sentinel sees the promotion at its next INFO (every second
// during a failover) and only then points the other replicas at the new
// master (parallel-syncs at a time). Measured on loopback with two
// replicas: 1.0–1.1s. It holds for every replica when parallel-syncs is
// at least the number of replicas minus one; each further batch adds its
// replicas' resync (docs/operations.md, "Redis failed over (Sentinel)").
const SentinelReconfiguration = 2 * time.Second

// Defaults of the election under a Sentinel URL, for the keys left unset:
// every renewal acknowledged by a replica, renewals every ttl/10 and a
// deadline of ttl/2, which leave ttl×(1−drift) − renew_deadline −
// renew_interval − SentinelReconfiguration (1.9s at ttl 10s) for the
// program to stop in a planned failover.
const (
	sentinelMinReplicas     = 1
	sentinelRenewDivisor    = 10 // renew_interval = ttl / 10
	sentinelDeadlineDivisor = 2  // renew_deadline = ttl / 2
	minReplicasKey          = "election.min_replicas"
	minReplicasEnv          = EnvPrefix + "ELECTION_MIN_REPLICAS"
)

// IsSentinelURL reports whether url is a redis+sentinel:// or
// rediss+sentinel:// URL that parses.
func IsSentinelURL(url string) bool {
	opts, err := redisurl.Parse(url)
	return err == nil && opts.MasterName != ""
}

// applySentinelDefaults fills, when c's Redis URL is a Sentinel URL, the
// election keys left unset with the Sentinel defaults above. minGiven says
// whether election.min_replicas was given a value (0 included) in the file
// or the environment. Durations need no such flag: an explicit zero
// duration is refused, so zero means unset.
func applySentinelDefaults(c *Config, minGiven bool) {
	if !IsSentinelURL(c.Redis.URL) {
		return
	}
	e := &c.Election.Config
	ttl := e.TTL
	if ttl == 0 {
		return // leader.Config's default TTL is set by DefaultConfig; zero only in hand-built configs
	}
	if !minGiven {
		e.MinReplicas = sentinelMinReplicas
	}
	if e.RenewInterval == 0 {
		e.RenewInterval = ttl / sentinelRenewDivisor
	}
	if e.RenewDeadline == 0 {
		e.RenewDeadline = ttl / sentinelDeadlineDivisor
	}
}

// envGiven reports whether the last KEY=VALUE of name in env has a value.
func envGiven(env []string, name string) (given, present bool) {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			given, present = v != "", true
		}
	}
	return given, present
}

// FailoverAllowance is the part of the stop margin a planned Sentinel
// failover can take from a leader: its last renewal acknowledged on the
// old master may come up to SentinelReconfiguration after the promotion,
// and the promoted copy of the lease dates from the renewal before it,
// one renew_interval earlier. Zero when url is not a Sentinel URL, or when
// min_replicas is 0: then nothing bounds how long the old master takes
// renewals the new one never sees (leader.SentinelWarning).
func FailoverAllowance(url string, renewInterval time.Duration, minReplicas int) time.Duration {
	if minReplicas == 0 || !IsSentinelURL(url) {
		return 0
	}
	return renewInterval + SentinelReconfiguration
}
