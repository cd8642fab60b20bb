package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
)

// solo run on a Redis that may evict its keys (maxmemory with a
// volatile-* policy) does not start: exit 2, the policy and the fix named,
// the program never run; in both modes. Old code: it ran the program.
func TestRun_EvictionPolicyAtStartExits2(t *testing.T) {
	for _, mode := range []string{"elect", "spread"} {
		t.Run(mode, func(t *testing.T) {
			srv := redistest.Start(t, "--maxmemory", "100mb", "--maxmemory-policy", "volatile-lru")
			dir := t.TempDir()
			out := filepath.Join(dir, "out.log")
			env := append(testEnv("redis://"+srv.Addr(), electionName(t), "a"), "OUT="+out)
			argv := append([]string{"run", "--"}, script(t, out, false)...)
			if mode == "spread" {
				cfgPath := filepath.Join(dir, "config.yaml")
				yaml := "election:\n  mode: spread\njobs:\n  - name: a\n    command: [\"sh\", \"-c\", \"echo start >> \\\"$OUT\\\"; exec sleep 600\"]\n"
				if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
					t.Fatal(err)
				}
				env = append(slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "SOLO_CONFIG=") }), "SOLO_CONFIG="+cfgPath)
				argv = []string{"run"}
			}
			p := startSolo(t, env, argv...)
			code := p.wait(30 * time.Second)
			text := p.output()
			if code != exitUsage || !strings.Contains(text, "solo: redis redis://"+srv.Addr()+": redis maxmemory 104857600 with maxmemory-policy volatile-lru") ||
				!strings.Contains(text, "CONFIG SET maxmemory-policy noeviction") {
				t.Fatalf("exit %d, want 2 naming the policy and the fix:\n%s", code, text)
			}
			if b, err := os.ReadFile(out); err == nil && len(b) > 0 {
				t.Fatalf("the program ran:\n%s", b)
			}
		})
	}
}

// After the start, an eviction policy (a server-side change that reaches
// every instance at once) does not stop solo run: the instance stays up,
// not ready, and recovers once it is fixed. Any other configuration error
// stops it (exit 2): the watch runs under --once only.
func TestWatchConfig_EvictionPolicyKeepsRunning(t *testing.T) {
	_, evict := leader.ParseEviction("maxmemory:1\r\nmaxmemory_policy:allkeys-lru\r\n")
	acl := leader.RedisConfig(errors.New("NOPERM User solo has no permissions to run the 'evalsha' command"))
	var calls atomic.Int64
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	cw := watchConfig(ctx, cancel, func() error {
		if calls.Add(1) <= 5 {
			return evict
		}
		return acl
	}, time.Tick(time.Millisecond))
	<-ctx.Done()
	if err := cw.stop(); err != acl || calls.Load() != 6 {
		t.Fatalf("watch stopped on %v after %d reads, want the ACL error after 6 (the eviction policy read 5 times and passed over)", err, calls.Load())
	}
}
