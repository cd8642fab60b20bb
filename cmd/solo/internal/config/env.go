package config

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// applyEnv applies the SOLO_ overrides in env to c and returns, for each
// key it set, the variable's name. An empty variable sets the default.
func applyEnv(env []string, c *Config) (map[string]string, error) {
	vars := make(map[string]string)
	for _, kv := range env {
		name, value, ok := strings.Cut(kv, "=")
		if ok && strings.HasPrefix(name, EnvPrefix) {
			vars[name] = value // the last one wins, as in exec.Cmd
		}
	}
	set := make(map[string]string)
	if len(vars) == 0 {
		return set, nil
	}
	leaves := configLeaves()
	if err := checkEnvNames(vars, leaves); err != nil {
		return nil, err
	}
	defaults := reflect.ValueOf(DefaultConfig())
	cv := reflect.ValueOf(c).Elem()
	for _, l := range leaves {
		raw, ok := vars[l.env]
		if !ok {
			continue
		}
		field := cv.FieldByIndex(l.index)
		if raw == "" {
			field.Set(defaults.FieldByIndex(l.index))
		} else {
			parsed, reason, _ := parseScalar(field.Type(), raw)
			if reason != "" {
				return nil, &Error{Key: l.key, Env: l.env, Value: strconv.Quote(raw), Reason: reason}
			}
			field.Set(parsed)
		}
		set[l.key] = l.env
	}
	return set, nil
}

// OtherEnvVars are the SOLO_* variables that are not configuration keys
// and that the loader therefore accepts: any other SOLO_* variable is an
// error, as an unknown key in the file is, so that a typo such as
// SOLO_ELECTION_TLL does not pass unnoticed. A name ending in "*" is a
// prefix.
var OtherEnvVars = []string{
	"SOLO_CONFIG", // the configuration file (read by solo)
	// Set by solo run for its program (a program may run solo status).
	"SOLO_TERM", "SOLO_ELECTION", "SOLO_ID", "SOLO_JOB",
	// The test suites' and tools' own switches.
	"SOLO_REQUIRE_*",               // SOLO_REQUIRE_REDIS, SOLO_REQUIRE_POSTGRES
	"SOLO_FAULTS", "SOLO_FAULTS_*", // internal/faults
	"SOLO_SIM", "SOLO_SIM_*", // internal/sim
	"SOLO_SPREADTEST", "SOLO_SPREADTEST_*", // internal/spreadtest
	"SOLO_SUPERVISION_TABLE",               // cmd/solo's measured table
	"SOLO_LEADER_CHILD", "SOLO_REDIS_ADDR", // leader's child candidates
	"SOLO_BENCH_CHILD", // bench
}

// checkEnvNames rejects a SOLO_* variable that is neither a configuration
// key nor in OtherEnvVars, suggesting the nearest key's variable.
func checkEnvNames(vars map[string]string, leaves []leaf) error {
	known := make(map[string]bool, len(leaves))
	for _, l := range leaves {
		known[l.env] = true
	}
	var unknown []string
	for name := range vars {
		if !known[name] && !otherEnvVar(name) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	name := unknown[0]
	reason := "unknown environment variable " + name
	envs := make([]string, len(leaves))
	for i, l := range leaves {
		envs[i] = l.env
	}
	if best := Nearest(name, envs); best != "" {
		reason += " (did you mean " + best + "?)"
	}
	return &Error{Reason: reason + "; SOLO_* variables name configuration keys (config.yaml)"}
}

func otherEnvVar(name string) bool {
	for _, o := range OtherEnvVars {
		if p, ok := strings.CutSuffix(o, "*"); ok && strings.HasPrefix(name, p) || name == o {
			return true
		}
	}
	return false
}

// Nearest returns the candidate closest to name for a "did you mean"
// (an unknown key, variable or command): within 3 edits and fewer edits
// than name has characters, the first in sorted order on a tie; "" when
// none is that close.
func Nearest(name string, candidates []string) string {
	best, bestD := "", min(4, len(name))
	for _, c := range slices.Sorted(slices.Values(candidates)) {
		if d := editDistance(name, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
