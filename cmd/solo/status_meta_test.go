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

	"github.com/solo-run/solo/internal/redistest"
)

// Issue 14, points 1, 9, 15 and 17. Old code: with a leader at --ttl 4s,
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
	type holder struct {
		ID        string    `json:"id"`
		Term      uint64    `json:"term"`
		Since     time.Time `json:"since"`
		TTL       int64     `json:"ttl_ms"`
		TTLLeft   int64     `json:"ttl_left_ms"`
		Renew     int64     `json:"renew_ms"`
		LastRenew time.Time `json:"last_renew"`
		Value     string    `json:"value"`
	}
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
	if h == nil || !strings.HasPrefix(h.ID, "a-") || h.TTL != 4000 || h.Renew != 600 || h.Value != "10.0.0.7:8080" ||
		h.TTLLeft <= 0 || h.TTLLeft > 4000 || h.LastRenew.Before(h.Since) || time.Since(h.LastRenew) > 4*time.Second {
		t.Fatalf("status --json: want a- holding with its TTL 4s, renew 600ms, its value, and a last renewal within the term:\n%s", text)
	}
	// Exact keys: one vocabulary with /leader (worker TestHandler).
	var raw []map[string]json.RawMessage
	_ = json.Unmarshal([]byte(text), &raw)
	var hk map[string]json.RawMessage
	_ = json.Unmarshal(raw[0]["holder"], &hk)
	if got := strings.Join(slices.Sorted(maps.Keys(raw[0])), ","); got != "candidates,election,holder" {
		t.Fatalf("status --json keys = %s", got)
	}
	if got := strings.Join(slices.Sorted(maps.Keys(hk)), ","); got != "id,last_renew,renew_ms,since,term,ttl_left_ms,ttl_ms,value" {
		t.Fatalf("status --json holder keys = %s", got)
	}

	code, text := soloRun(t, reader, "status", name)
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s+a-\S+\s+\d+\s+\S+ of 4s\s+.+\(\d+s ago\)\s+(\S+) ago\s+"10\.0\.0\.7:8080"\s+(b-\S+)\s*$`)
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

// Issue 14.15: a bad value is a configuration error naming the key.
func TestRun_ValueTooLongIsAConfigError(t *testing.T) {
	env := append(testEnv("redis://127.0.0.1:1", "x", "a"), "SOLO_ELECTION_VALUE="+strings.Repeat("v", 5000))
	code, text := soloRun(t, env, "run", "--", "true")
	if code != 2 || !strings.Contains(text, "SOLO_ELECTION_VALUE") || !strings.Contains(text, "at most 4096 bytes") || strings.Count(strings.TrimSpace(text), "\n") != 0 {
		t.Fatalf("run with a 5000-byte value = %d, want one line naming the key, exit 2:\n%s", code, text)
	}
}
