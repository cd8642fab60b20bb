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
// job's stdout and stderr is prefixed "[NAME] " (issue 14, point 11); one
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
