package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/solo-run/solo/internal/redistest"
)

// Config jobs get SOLO_JOB, and with more than one job every line of each
// job's stdout and stderr is prefixed "[NAME] "; one
// job's output passes untouched. Mutation: with the prefix never set this
// fails with "timed out after 10s waiting for the jobs' output".
func TestRun_ConfigJobsPrefixTheirOutputAndGetSOLO_JOB(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	job := func(name string) string {
		return `  - name: ` + name + `
    restart: never
    command: ["sh", "-c", "echo out $SOLO_JOB; echo err $SOLO_JOB >&2; printf 'no newline'"]
`
	}
	for _, tt := range []struct {
		name, jobs string
		want       []string
		not        string
	}{
		{"two jobs", job("one") + job("two"),
			[]string{"[one] out one\n", "[one] err one\n", "[one] no newline\n", "[two] out two\n", "[two] err two\n"}, ""},
		{"one job", job("solo-job"), []string{"\nout solo-job\n", "\nerr solo-job\n"}, "[solo-job]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "solo.yaml")
			if err := os.WriteFile(cfg, []byte("jobs:\n"+tt.jobs), 0o644); err != nil {
				t.Fatal(err)
			}
			env := append(testEnv(url, electionName(t), "a"), "SOLO_LOG_LEVEL=error")
			p := startSolo(t, env, "run", "-c", cfg)
			waitFor(t, 10*time.Second, "the jobs' output", func() bool {
				out := p.output()
				return strings.Contains(out, tt.want[len(tt.want)-1])
			})
			time.Sleep(100 * time.Millisecond)
			p.signal(syscall.SIGTERM)
			if code := p.wait(10 * time.Second); code != 0 {
				t.Fatalf("exit %d", code)
			}
			out := "\n" + p.output()
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if tt.not != "" && strings.Contains(out, tt.not) {
				t.Errorf("output has %q:\n%s", tt.not, out)
			}
		})
	}
}

// A program that always fails stops both instances after
// worker.max_failed_terms failed terms in a row, and with
// --exit-on-give-up solo exits 5. Mutation: with
// exitGaveUp's return replaced by the plain error, this fails with "exit
// 1, want 5".
func TestRun_ExitOnGiveUpAfterMaxFailedTerms(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	name := electionName(t)
	env := func(id string) []string {
		return append(testEnv(url, name, id), "SOLO_WORKER_MAX_FAILURES=1", "SOLO_WORKER_RESTART_BACKOFF=10ms",
			"SOLO_WORKER_RESTART_BACKOFF_MAX=10s", "SOLO_WORKER_MAX_FAILED_TERMS=2", "SOLO_ELECTION_RESIGN_COOLDOWN=200ms")
	}
	a := startSolo(t, env("a"), "run", "--exit-on-give-up", "--", "sh", "-c", "exit 3")
	b := startSolo(t, env("b"), "run", "--exit-on-give-up", "--", "sh", "-c", "exit 3")
	for _, p := range []*proc{a, b} {
		if code := p.wait(30 * time.Second); code != exitGaveUp {
			t.Fatalf("exit %d, want %d", code, exitGaveUp)
		}
		if out := p.output(); !strings.Contains(out, "failed terms in a row across the election (worker.max_failed_terms 2); this instance stops campaigning") {
			t.Fatalf("no give-up line:\n%s", out)
		}
	}
}
