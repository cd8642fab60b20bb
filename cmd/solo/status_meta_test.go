package main

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/solo-run/solo/internal/jsonshape"
	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
)

// Old code: with a leader at --ttl 4s,
// status (default 10s) printed the last renewal as "7.16s ago", before the
// term began: it used its own TTL. It now uses the TTL the holder stored
// beside the lease, shows the proclaimed value and the waiting candidates,
// and its JSON uses the words of /leader (holder, candidates).
func TestStatus_HolderTimingsValueAndCandidates(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	out := filepath.Join(t.TempDir(), "out.log")
	name := electionName(t)
	startSolo(t, append(testEnv(url, name, "a"), "OUT="+out), append([]string{"run", "--ttl", "4s", "--value", "10.0.0.7:8080", "--"}, script(t, out, false)...)...)
	waitLine(t, out, 10*time.Second, func(l line) bool { return l.id == "a" && l.event == "start" })
	b := startSolo(t, append(testEnv(url, name, "b"), "OUT="+out), append([]string{"run", "--ttl", "4s", "--"}, script(t, out, false)...)...)

	// The reader has the default TTL (10s) and knows nothing of the holder's.
	reader := append(os.Environ(), "SOLO_CONFIG=/dev/null", "SOLO_REDIS_URL="+url)
	type holder = leader.Holder // its JSON form
	var rows []struct {
		Election   string   `json:"election"`
		Holder     *holder  `json:"holder"`
		Candidates []string `json:"candidates"`
	}
	var text string
	waitFor(t, 10*time.Second, "b listed as a candidate", func() bool {
		var code int
		code, text = soloRun(t, reader, "status", "--json", name)
		rows = nil
		return code == 0 && json.Unmarshal([]byte(text), &rows) == nil && len(rows) == 1 &&
			len(rows[0].Candidates) == 1 && strings.HasPrefix(rows[0].Candidates[0], "b-")
	})
	h := rows[0].Holder
	if h == nil || !strings.HasPrefix(h.ID, "a-") || h.LeaseTTL != 4*time.Second || h.RenewInterval != 600*time.Millisecond || h.Value != "10.0.0.7:8080" ||
		h.TTLLeft <= 0 || h.TTLLeft > 4*time.Second || h.LastRenew.Before(h.Since) || time.Since(h.LastRenew) > 4*time.Second {
		t.Fatalf("status --json: want a- holding with its TTL 4s, renew 600ms, its value, and a last renewal within the term:\n%s", text)
	}
	checkMsTimes(t, text)
	// Exact keys: one vocabulary with /leader (worker TestHandler).
	var raw []map[string]json.RawMessage
	_ = json.Unmarshal([]byte(text), &raw)
	if got := strings.Join(slices.Sorted(maps.Keys(raw[0])), ","); got != "candidates,election,holder" {
		t.Fatalf("status --json keys = %s", got)
	}
	if err := jsonshape.Holder(raw[0]["holder"]); err != nil {
		t.Fatalf("status --json: %v:\n%s", err, text)
	}

	code, text := soloRun(t, reader, "status", name)
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s+a-\S+\s+\d+\s+1\s+\S+ of 4s\s+.+\(\d+s ago\)\s+(\S+) ago\s+"10\.0\.0\.7:8080"\s+(b-\S+)\s*$`)
	m := re.FindStringSubmatch(text)
	if code != 0 || m == nil {
		t.Fatalf("status = %d, want a row with the holder's TTL, last renewal, value and candidate:\n%s", code, text)
	}
	if d, err := time.ParseDuration(m[1]); err != nil || d > 4*time.Second {
		t.Fatalf("status printed the last renewal %s ago: more than the holder's TTL (4s) ago, so before its last renewal could have been:\n%s", m[1], text)
	}

	// A follower that stops takes itself off the candidates.
	b.signal(syscall.SIGTERM)
	if code := b.wait(10 * time.Second); code != 0 {
		t.Fatalf("b exited %d", code)
	}
	code, text = soloRun(t, reader, "status", "--json", name)
	if code != 0 || !strings.Contains(text, `"candidates": []`) {
		t.Fatalf("status --json after b stopped = %d, want no candidates:\n%s", code, text)
	}
}

// A bad value is a configuration error naming the key.
func TestRun_ValueTooLongIsAConfigError(t *testing.T) {
	env := append(testEnv("redis://127.0.0.1:1", "x", "a"), "SOLO_ELECTION_VALUE="+strings.Repeat("v", 5000))
	code, text := soloRun(t, env, "run", "--", "true")
	if code != 2 || !strings.Contains(text, "SOLO_ELECTION_VALUE") || !strings.Contains(text, "at most 4096 bytes") || strings.Count(strings.TrimSpace(text), "\n") != 0 {
		t.Fatalf("run with a 5000-byte value = %d, want one line naming the key, exit 2:\n%s", code, text)
	}
}

// spreadEnv is testEnv for a member of spread group grp running jobs a and
// b (sleeping programs).
func spreadEnv(t *testing.T, url, id string) []string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	yaml := "election:\n  mode: spread\njobs:\n  - name: a\n    command: [sleep, \"600\"]\n  - name: b\n    command: [sleep, \"600\"]\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return append(slices.DeleteFunc(testEnv(url, "grp", id), func(kv string) bool {
		return strings.HasPrefix(kv, "SOLO_CONFIG=")
	}), "SOLO_CONFIG="+cfg)
}

// In election.mode spread,
// status shows each job's election in the words of elect mode, a NAME is a
// job or its election, and --watch follows the group's jobs. Old code:
// "spread job a: ttl_ms 1923, ttl_left_ms 0, renew_ms 0, want the holder's
// TTL 2000, time left in ttl_left_ms, renew 600"; "status --json grp.a = 3,
// want the one election grp.a, held" (it reported a group "grp.a" with
// elections grp.a.a and grp.a.b); "status --json last_renew
// "2026-11-25T19:06:28.548393648Z": want milliseconds, three digits, UTC";
// and "timed out after 10s waiting for the watch to show both jobs'
// holders" (it watched the election grp, which does not exist).
func TestStatus_SpreadGroupInTheWordsOfElectMode(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	startSolo(t, spreadEnv(t, url, "ia"), "run")
	reader := spreadEnv(t, url, "reader")
	type holder = leader.Holder
	type job struct {
		Job        string   `json:"job"`
		Election   string   `json:"election"`
		Instance   string   `json:"instance"`
		Holder     *holder  `json:"holder"`
		Candidates []string `json:"candidates"`
	}
	var group struct {
		Group string `json:"group"`
		Jobs  []job  `json:"jobs"`
	}
	var text string
	waitFor(t, 15*time.Second, "both jobs held", func() bool {
		var code int
		code, text = soloRun(t, reader, "status", "--json")
		return code == 0 && json.Unmarshal([]byte(text), &group) == nil && len(group.Jobs) == 2 &&
			group.Jobs[0].Holder != nil && group.Jobs[1].Holder != nil
	})
	for i, want := range []string{"a", "b"} {
		j := group.Jobs[i]
		if j.Job != want || j.Election != "grp."+want || !strings.HasPrefix(j.Instance, "ia-") || j.Candidates == nil {
			t.Errorf("spread job %d = %+v, want job %s, election grp.%s, instance ia-…, candidates", i, j, want, want)
		}
		if h := j.Holder; h.LeaseTTL != 2*time.Second || h.TTLLeft <= 0 || h.TTLLeft > 2*time.Second || h.RenewInterval != 600*time.Millisecond {
			t.Errorf("spread job %s: lease_ttl_ms %s, ttl_left_ms %s, renew_interval_ms %s, want the holder's TTL 2s, time left in ttl_left_ms, renew 600ms:\n%s",
				want, h.LeaseTTL, h.TTLLeft, h.RenewInterval, text)
		}
	}
	checkMsTimes(t, text)

	// A NAME is a job's election, or the job.
	for _, name := range []string{"grp.a", "a"} {
		code, text := soloRun(t, reader, "status", "--json", name)
		var rows []struct {
			Election string  `json:"election"`
			Holder   *holder `json:"holder"`
		}
		if code != 0 || json.Unmarshal([]byte(text), &rows) != nil || len(rows) != 1 || rows[0].Election != "grp.a" || rows[0].Holder == nil {
			t.Errorf("status --json %s = %d, want the one election grp.a, held:\n%s", name, code, text)
		}
	}
	code, text := soloRun(t, reader, "status")
	if code != 0 || !strings.Contains(text, "group grp (election.mode spread)") ||
		!regexp.MustCompile(`(?m)^a\s+ia-\S+\s+\d+\s+1\s+\S+ of 2s\s+`).MatchString(text) {
		t.Errorf("status = %d, want the group and job a's row with its holder and TTL:\n%s", code, text)
	}

	w := startSolo(t, reader, "status", "--watch")
	waitFor(t, 10*time.Second, "the watch to show both jobs' holders", func() bool {
		o := w.output()
		return regexp.MustCompile(`(?m)  grp\.a  elected   ia-`).MatchString(o) && regexp.MustCompile(`(?m)  grp\.b  elected   ia-`).MatchString(o)
	})
	if !strings.Contains(w.output(), "watching group grp (election.mode spread): 2 jobs, elections grp.a, grp.b") {
		t.Errorf("the watch does not say what it watches:\n%s", w.output())
	}
	// An instance that starts is seen joining (and takes a job over).
	waitFor(t, 10*time.Second, "the watch to list ia as a member", func() bool {
		return regexp.MustCompile(`(?m)  grp  member    ia-\S+  \(seen\)$`).MatchString(w.output())
	})
	startSolo(t, spreadEnv(t, url, "ib"), "run")
	waitFor(t, 15*time.Second, "the watch to see ib join and take a job", func() bool {
		o := w.output()
		return regexp.MustCompile(`(?m)  grp  joined    ib-\S+  \(seen\)$`).MatchString(o) &&
			regexp.MustCompile(`(?m)  grp\.[ab]  elected   ib-`).MatchString(o)
	})
	w.signal(syscall.SIGTERM)
	if code := w.wait(10 * time.Second); code != 0 {
		t.Errorf("watch exited %d", code)
	}
}

// checkMsTimes fails unless every time in a status JSON text has
// millisecond precision (since had milliseconds,
// last_renew nanoseconds).
func checkMsTimes(t *testing.T, text string) {
	t.Helper()
	if err := jsonshape.Times([]byte(text)); err != nil {
		t.Errorf("status --json: %v", err)
	}
}

// watchLine is a line of status --watch.
type watchLine struct {
	at         time.Time
	what, kind string
	rest       string
}

func watchLines(t *testing.T, text string) []watchLine {
	var out []watchLine
	for _, l := range strings.Split(text, "\n") {
		f := strings.Fields(l)
		if len(f) < 3 {
			continue
		}
		at, err := time.Parse("2006-01-02T15:04:05.000Z07:00", f[0])
		if err != nil {
			continue
		}
		wl := watchLine{at: at, what: f[1], kind: f[2]}
		if f[1] == "redis" && len(f) > 3 {
			wl.kind = f[3]
		}
		_, wl.rest, _ = strings.Cut(l, wl.kind)
		out = append(out, wl)
	}
	return out
}

// status --watch says when Redis stops answering and when
// it answers again, and stamps each line with when the event happened as
// far as Redis tells: the term's start, the lease's expiry. Old code:
// "watch's first line stamped 19:06:39.185, after the term began (its
// program started 19:06:39.071)" (the watch's start), and "timed out after
// 10s waiting for the watch to say Redis is unreachable" (silent through
// the freeze).
func TestStatus_WatchThroughARedisFreeze(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	out := filepath.Join(t.TempDir(), "out.log")
	name := electionName(t)
	startSolo(t, append(testEnv(url, name, "a"), "OUT="+out), append([]string{"run", "--"}, script(t, out, false)...)...)
	first := waitLine(t, out, 10*time.Second, func(l line) bool { return l.id == "a" && l.event == "start" })
	w := startSolo(t, testEnv(url, name, "w"), "status", "--watch")
	find := func(what, kind string) (watchLine, bool) {
		for _, l := range watchLines(t, w.output()) {
			if l.what == what && l.kind == kind {
				return l, true
			}
		}
		return watchLine{}, false
	}
	waitFor(t, 10*time.Second, "the watch's first line", func() bool { _, ok := find(name, "elected"); return ok })
	if l, _ := find(name, "elected"); l.at.After(first.at) || !strings.HasSuffix(l.rest, "(term start)") {
		t.Errorf("watch's first line stamped %s, after the term began (its program started %s), or not as the term start:\n%s",
			l.at.Format("15:04:05.000"), first.at.Format("15:04:05.000"), w.output())
	}

	srv.Stop(t)
	frozen := time.Now()
	waitFor(t, 10*time.Second, "the watch to say Redis is unreachable", func() bool { _, ok := find("redis", "unreachable"); return ok })
	// The lease (TTL 2s) runs out on Redis's clock while it is stopped.
	waitFor(t, 10*time.Second, "a's program to stop, and the lease's TTL to pass", func() bool {
		return !alive(first.pid) && time.Since(frozen) > 3*time.Second
	})
	srv.Cont(t)
	resumed := time.Now()
	waitFor(t, 10*time.Second, "the watch to say Redis is back, and the lease expired", func() bool {
		_, back := find("redis", "reachable")
		_, expired := find(name, "expired")
		return back && expired
	})
	l, _ := find(name, "expired")
	if !l.at.Before(frozen.Add(3*time.Second)) || !strings.Contains(l.rest, "(lease expiry as last read at") {
		t.Errorf("expired stamped %s (Redis stopped at %s, continued at %s), want the lease's expiry as last read, and saying so:\n%s",
			l.at.Format("15:04:05.000"), frozen.Format("15:04:05.000"), resumed.Format("15:04:05.000"), w.output())
	}
	if l, _ := find("redis", "unreachable"); !strings.Contains(l.rest, "(seen; last answer") {
		t.Errorf("unreachable line does not say it is an observation:\n%s", w.output())
	}
	w.signal(syscall.SIGTERM)
	if code := w.wait(10 * time.Second); code != 0 {
		t.Errorf("watch exited %d", code)
	}
}
