package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/solo-run/solo/cmd/solo/internal/config"
	"github.com/solo-run/solo/internal/redistest"
)

// TestExitBound pins the formula of solo run's exit bound (config.Config.ExitBound):
// election.shutdown_timeout + n Redis round trips (1, spread 3) of the
// client's read timeout capped at renew_deadline + 2s with http.addr + 1s.
// Mutation: dropping the round trips from the sum fails every row with
// e.g. `ExitBound() = 11s, want 12s`.
func TestExitBound(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want time.Duration
		sum  string
	}{
		{name: "defaults", yaml: minimal, want: 12 * time.Second,
			sum: "election.shutdown_timeout 10s + 1 Redis round trip of 1s (the release) + 1s log flush"},
		{name: "http", yaml: minimal + "http:\n  addr: :8080\n", want: 14 * time.Second,
			sum: "election.shutdown_timeout 10s + 1 Redis round trip of 1s (the release) + 2s http shutdown + 1s log flush"},
		{name: "shutdown_timeout from ttl", yaml: minimal + "  ttl: 30s\n", want: 32 * time.Second,
			sum: "election.shutdown_timeout 30s + 1 Redis round trip of 1s (the release) + 1s log flush"},
		{name: "shutdown_timeout set", yaml: minimal + "  shutdown_timeout: 25s\n", want: 27 * time.Second,
			sum: "election.shutdown_timeout 25s + 1 Redis round trip of 1s (the release) + 1s log flush"},
		{name: "spread", yaml: minimal + "  mode: spread\n", want: 14 * time.Second,
			sum: "election.shutdown_timeout 10s + 3 Redis round trips of 1s (leave, releases, entry removal) + 1s log flush"},
		{name: "read_timeout of the url", yaml: minimal + "redis:\n  url: redis://r:6379/0?read_timeout=3s\n", want: 14 * time.Second,
			sum: "election.shutdown_timeout 10s + 1 Redis round trip of 3s (the release) + 1s log flush"},
		// Every call after the drain is bounded by renew_deadline (5s at
		// ttl 10s with a Sentinel url), whatever the client's timeouts.
		{name: "read_timeout above renew_deadline", yaml: minimal + "redis:\n  url: redis+sentinel://s1:26379/m/0?read_timeout=30s\n",
			want: 10*time.Second + 5*time.Second + time.Second,
			sum:  "election.shutdown_timeout 10s + 1 Redis round trip of 5s (the release) + 1s log flush"},
		// The sum saturates instead of wrapping to a negative bound.
		// Old code: ExitBound() = -2562047h47m14.854775809s.
		{name: "largest shutdown_timeout", yaml: minimal + "  shutdown_timeout: 2562047h47m16.854775807s\n", want: math.MaxInt64,
			sum: "election.shutdown_timeout 2562047h47m16.854775807s + 1 Redis round trip of 1s (the release) + 1s log flush"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(tt.yaml), nil)
			if err != nil {
				t.Fatal(err)
			}
			got, sum := cfg.ExitBound()
			if got != tt.want || sum != tt.sum {
				t.Fatalf("ExitBound() = %s, %q\nwant %s, %q", got, sum, tt.want, tt.sum)
			}
		})
	}
}

// TestValidate_GracePeriodAgainstTheExitBound: a grace period equal to
// the exit bound passes, one a millisecond shorter is refused, and none
// set is never checked. Mutation: `g <= bound` in Validate fails with
// `grace period = exit bound 14s: election.grace_period 14s: shorter than
// solo run's exit bound 14s …`.
func TestValidate_GracePeriodAgainstTheExitBound(t *testing.T) {
	for _, yml := range []string{
		minimal,
		minimal + "http:\n  addr: :8080\n",
		minimal + "  ttl: 3s\n  mode: spread\nredis:\n  url: redis://r:6379/0?read_timeout=250ms\n",
	} {
		cfg, err := config.Parse([]byte(yml), nil) // no grace period: not checked
		if err != nil {
			t.Fatal(err)
		}
		bound, _ := cfg.ExitBound()
		cfg.Election.GracePeriod = bound
		if err := cfg.Validate(); err != nil {
			t.Errorf("grace period = exit bound %s: %v", bound, err)
		}
		cfg.Election.GracePeriod = bound - time.Millisecond
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "shorter than solo run's exit bound "+bound.String()) {
			t.Errorf("grace period %s under the exit bound %s: %v", cfg.Election.GracePeriod, bound, err)
		}
		cfg.Election.GracePeriod = -time.Second // a Config built in code
		if err := cfg.Validate(); err == nil || err.Error() != "election.grace_period -1s: must be positive" {
			t.Errorf("negative grace period: %v", err)
		}
	}
}

// TestKubernetesManifest_GracePeriodPassesSolo loads the configuration
// deploy/kubernetes/solo-run.yaml gives solo run (the ConfigMap's
// config.yaml and the container's env) with solo's own loader: it must
// pass, and SOLO_ELECTION_GRACE_PERIOD must be terminationGracePeriodSeconds.
// (deploy/check decodes the same file into the Kubernetes types.)
// Mutation: terminationGracePeriodSeconds 13 and the variable "13s" fail
// with `SOLO_ELECTION_GRACE_PERIOD="13s": shorter than solo run's exit
// bound 14s …`.
func TestKubernetesManifest_GracePeriodPassesSolo(t *testing.T) {
	configYAML, grace, env := readManifest(t)
	env = append(env, "SOLO_REDIS_URL=rediss://solo:x@redis.redis.svc.cluster.local:6379/0") // from the Secret
	if got, want := lookupEnv(env, "SOLO_ELECTION_GRACE_PERIOD"), strconv.Itoa(*grace)+"s"; got != want {
		t.Fatalf("SOLO_ELECTION_GRACE_PERIOD %q, want terminationGracePeriodSeconds %s", got, want)
	}
	cfg, err := config.Parse([]byte(configYAML), env)
	if err != nil {
		t.Fatal(err)
	}
	bound, sum := cfg.ExitBound()
	t.Logf("terminationGracePeriodSeconds %d; exit bound %s = %s", *grace, bound, sum)
}

// manifestPath is deploy/kubernetes's manifest of solo run.
var manifestPath = filepath.Join("..", "..", "deploy", "kubernetes", "solo-run.yaml")

// readManifest reads manifestPath: its ConfigMap's config.yaml, its
// Deployment's terminationGracePeriodSeconds and the NAME=VALUE of each
// environment variable of its container with a literal value (the
// Secret's are left to the caller).
func readManifest(t *testing.T) (configYAML string, grace *int, env []string) {
	t.Helper()
	b, err := os.ReadFile(manifestPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		var m struct {
			Kind string            `yaml:"kind"`
			Data map[string]string `yaml:"data"`
			Spec struct {
				Template struct {
					Spec struct {
						Grace      *int `yaml:"terminationGracePeriodSeconds"`
						Containers []struct {
							Env []struct {
								Name  string  `yaml:"name"`
								Value *string `yaml:"value"`
							} `yaml:"env"`
						} `yaml:"containers"`
					} `yaml:"spec"`
				} `yaml:"template"`
			} `yaml:"spec"`
		}
		if err := yaml.NewDecoder(bytes.NewReader([]byte(doc))).Decode(&m); err != nil {
			t.Fatal(err)
		}
		switch m.Kind {
		case "ConfigMap":
			configYAML = m.Data["config.yaml"]
		case "Deployment":
			spec := m.Spec.Template.Spec
			grace = spec.Grace
			for _, e := range spec.Containers[0].Env {
				if e.Value != nil {
					env = append(env, e.Name+"="+*e.Value)
				}
			}
		}
	}
	if configYAML == "" || grace == nil {
		t.Fatalf("%s: no ConfigMap config.yaml, or no Deployment with terminationGracePeriodSeconds", manifestPath)
	}
	return configYAML, grace, env
}

// TestRun_ExitsWithinItsExitBound runs solo run, told a grace period equal
// to its exit bound (accepted), on a real Redis in front of a program that
// ignores SIGTERM (the longest drain: the keeper's SIGKILL), with an HTTP
// server; after SIGTERM it must have released the lease and exited 0
// within the bound. The bound is seconds; the exit takes about the
// keeper's kill_after (435ms here), so the check is not a tight timing.
func TestRun_ExitsWithinItsExitBound(t *testing.T) {
	srv := redistest.Start(t)
	out := filepath.Join(t.TempDir(), "out.log")
	env := append(testEnv("redis://"+srv.Addr(), electionName(t), "a"), "OUT="+out, "SOLO_HTTP_ADDR=127.0.0.1:0")
	cfg, err := config.Load("", env)
	if err != nil {
		t.Fatal(err)
	}
	bound, sum := cfg.ExitBound()
	env = append(env, "SOLO_ELECTION_GRACE_PERIOD="+bound.String())
	a := startSolo(t, env, append([]string{"run", "--"}, script(t, out, true)...)...)
	first := waitLine(t, out, 10*time.Second, func(l line) bool { return l.event == "start" })
	termAt := time.Now()
	a.signal(syscall.SIGTERM)
	if code := a.wait(bound); code != 0 {
		t.Fatalf("solo exited %d after SIGTERM, want 0", code)
	}
	took := time.Since(termAt)
	if alive(first.pid) {
		t.Fatal("the program survived solo")
	}
	if !strings.Contains(a.output(), `"released"`) {
		t.Fatalf("solo did not release the lease:\n%s", a.output())
	}
	t.Logf("exit %s after SIGTERM; exit bound %s = %s", took.Round(time.Millisecond), bound, sum)
}

// minimal is the smallest valid configuration file; cases append to it.
const minimal = "election:\n  name: orders-sync\n"

// graceRemedy ends the message of a grace period shorter than the exit
// bound.
const graceRemedy = "the SIGKILL at the end of the grace period could come before solo released the lease; raise the grace period (terminationGracePeriodSeconds) and this value together, or lower election.shutdown_timeout"
