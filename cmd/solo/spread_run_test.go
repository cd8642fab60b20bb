package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/solo-run/solo/internal/redistest"
)

// TestRun_SpreadModeSpreadsConfiguredJobs: two `solo run` processes in
// election.mode spread share four configured jobs 2/2, each job's program
// gets its own election (NAME.JOB) and term, `solo status` shows the
// assignment, and SIGTERM stops both cleanly.
func TestRun_SpreadModeSpreadsConfiguredJobs(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "out.log")
	cfgPath := filepath.Join(dir, "config.yaml")
	yaml := "election:\n  mode: spread\njobs:\n"
	for _, j := range []string{"a", "b", "c", "d"} {
		yaml += "  - name: " + j + "\n    command: [\"sh\", \"-c\", \"echo \\\"$SOLO_ELECTION $SOLO_TERM $SOLO_ID\\\" >> \\\"$OUT\\\"; exec sleep 600\"]\n"
	}
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(id string) []string {
		e := slices.DeleteFunc(testEnv("redis://"+srv.Addr(), "grp", id), func(kv string) bool {
			return strings.HasPrefix(kv, "SOLO_CONFIG=")
		})
		return append(e, "SOLO_CONFIG="+cfgPath, "OUT="+out)
	}
	a := startSolo(t, env("ia"), "run")
	b := startSolo(t, env("ib"), "run")
	var lines []string
	waitFor(t, 15*time.Second, "every job to start", func() bool {
		data, _ := os.ReadFile(out)
		lines = strings.Split(strings.TrimSpace(string(data)), "\n")
		return len(lines) >= 4 && spreadElections(lines) == 4
	})
	statusOut := ""
	waitFor(t, 15*time.Second, "status to show 2/2", func() bool {
		cmd := exec.Command(soloBin, "status")
		cmd.Env = env("status")
		o, _ := cmd.CombinedOutput()
		statusOut = string(o)
		return strings.Count(statusOut, " ia-") == 2 && strings.Count(statusOut, " ib-") == 2
	})
	for _, job := range []string{"a", "b", "c", "d"} {
		if !strings.Contains(statusOut, "\n"+job+" ") {
			t.Errorf("solo status lacks job %s:\n%s", job, statusOut)
		}
	}
	a.signal(syscall.SIGTERM)
	b.signal(syscall.SIGTERM)
	if code := a.wait(15 * time.Second); code != 0 {
		t.Errorf("a exited %d", code)
	}
	if code := b.wait(15 * time.Second); code != 0 {
		t.Errorf("b exited %d", code)
	}
}

// spreadElections counts the distinct grp.JOB elections in lines of
// "ELECTION TERM ID".
func spreadElections(lines []string) int {
	seen := map[string]bool{}
	for _, l := range lines {
		if f := strings.Fields(l); len(f) == 3 && strings.HasPrefix(f[0], "grp.") && f[1] != "" {
			seen[f[0]] = true
		}
	}
	return len(seen)
}

// TestRun_SpreadRefusesExitOnGiveUp: spread mode never gives up, so
// --exit-on-give-up is a usage error naming the flag, not a flag accepted
// and ignored. Old code: it started and ran.
func TestRun_SpreadRefusesExitOnGiveUp(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.yaml")
	yaml := "election:\n  name: grp\n  mode: spread\njobs:\n  - name: a\n    command: [\"true\"]\n"
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run([]string{"run", "--exit-on-give-up"}, &out, &errb, []string{"SOLO_CONFIG=" + cfgPath, "SOLO_REDIS_URL=redis://127.0.0.1:1"})
	if code != exitUsage || !strings.Contains(errb.String(), "--exit-on-give-up: election.mode spread never gives up") {
		t.Fatalf("run --exit-on-give-up in spread mode = %d %q, want %d naming the flag", code, errb.String(), exitUsage)
	}
}

// TestStatus_SpreadShowsElectConflict: solo status in spread mode names the
// elect-mode holder of the group's name, which keeps the group from
// running anything.
func TestStatus_SpreadShowsElectConflict(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.yaml")
	yaml := "election:\n  name: grp\n  mode: spread\njobs:\n  - name: a\n    command: [\"true\"]\n"
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := srv.Client(t).Set(t.Context(), "solo:{grp}:lease", "1795316457433330 e-01725607074c", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	run([]string{"status"}, &out, &errb, []string{"SOLO_CONFIG=" + cfgPath, "SOLO_REDIS_URL=redis://" + srv.Addr()})
	if want := "election grp is held in mode elect by e-01725607074c (term 1795316457433330)"; !strings.Contains(out.String(), want) {
		t.Fatalf("status = %q %q, want it to contain %q", out.String(), errb.String(), want)
	}
}
