package sim_test

import (
	"strings"
	"testing"
	"testing/synctest"

	"github.com/solo-run/solo/internal/sim"
)

// TestSim_CatchesBrokenScripts puts bugs back into the shipped scripts,
// one at a time (sim.Options.Mutate: the server runs the broken script
// whenever a client sends the shipped one), and checks that schedules from
// seed 1 on catch each within a bound. A script whose text no longer
// matches a mutation fails the test: update the mutation with the script.
// (A checkpoint without its WAIT is a bug of leader/checkpoint.go, not of
// a script: internal/faults/notes.md, "The shipped scripts, and a broken
// one", says how the CI profile catches it.)
func TestSim_CatchesBrokenScripts(t *testing.T) {
	cases := []struct {
		name, script, old, new string
		lock                   bool
		bound                  uint64
		mode                   string // lock: on the connection model, in this mode
		// want, when set, is the label (sim.LockStats.Findings) a
		// violation must carry: a schedule failing for another reason
		// does not count.
		want string
	}{
		{"release without the owner check", "leader/release.lua",
			"if redis.call('GET', KEYS[1]) == ARGV[1] then", "if true then", false, 200, "", ""},
		{"acquire minting the stored term", "leader/acquire.lua",
			"local term = (tonumber(redis.call('GET', KEYS[2]) or '0') or 0) + 1\nif floor > term then term = floor end",
			"local term = (tonumber(redis.call('GET', KEYS[2]) or '0') or 0)", false, 50, "", ""},
		{"acquire without the clock floor", "leader/acquire.lua",
			"if floor > term then term = floor end\n", "", false, 200, "", ""},
		{"lock renew without the owner check", "leader/lock/renew.lua",
			"if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then\n  return redis.call('PEXPIRE', KEYS[1], ARGV[2])\nend\nreturn 0",
			"return redis.call('PEXPIRE', KEYS[1], ARGV[2])", true, 400, "", ""},
		// The connection model's L6: an attempt still on its way when its
		// call ended takes the lock, or the call stays queued.
		{"abandon without the tombstones", "leader/lock/abandon.lua",
			"  redis.call('ZADD', KEYS[2], now + life, ARGV[i])\n", "", true, 800, "plain", ""}, // caught at seed 365
		{"fair abandon leaving the queue", "leader/lock/fair_abandon.lua",
			"redis.call('LREM', KEYS[3], 0, ARGV[3])\n", "", true, 400, "fair", ""},
		{"Redlock undo without the tombstone", "leader/lock/redlock_undo.lua",
			"redis.call('ZADD', KEYS[2], now + life, ARGV[2])\n", "", true, 400, "redlock", ""},
		// A stale last release hands the lock to the queue's head while
		// another owner holds it (fair schedules take grants).
		{"fair release without the owner check", "leader/lock/fair_release.lua",
			"if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then\n  if redis.call('ZSCORE', KEYS[5], ARGV[1]) then\n    return {0}\n  end\n  return {-1}\nend\n",
			"redis.call('HDEL', KEYS[1], ARGV[1])\n",
			true, 400, "fair", sim.ShapeGrantOver},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			src, err := sim.ShippedScript(tc.script)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(src, tc.old) {
				t.Fatalf("%s no longer contains %q: update the mutation", tc.script, tc.old)
			}
			o := sim.Options{Mutate: map[string]string{tc.script: strings.Replace(src, tc.old, tc.new, 1)}}
			if tc.mode != "" {
				o.LockConns, o.LockMode = true, tc.mode
			}
			run := sim.Run
			if tc.lock {
				run = sim.RunLock
			}
			for seed := uint64(1); seed <= tc.bound; seed++ {
				var res *sim.Result
				synctest.Test(t, func(t *testing.T) { res = run(seed, o) })
				if res.Failed() && tc.want == "" {
					t.Logf("caught at seed %d: %s", seed, res.Violations[0])
					return
				}
				if res.Failed() && res.Lock.Findings[tc.want] > 0 {
					t.Logf("caught at seed %d (%d violations labelled %q; the first of each invariant: %v)", seed, res.Lock.Findings[tc.want], tc.want, res.Violations)
					return
				}
			}
			t.Errorf("%s: no schedule of seeds 1..%d broke an invariant", tc.name, tc.bound)
		})
	}
}
