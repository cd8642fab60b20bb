package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
)

// The exit codes of solo run, status and resign.

// soloRun runs solo to its end and returns its exit code and output.
func soloRun(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, soloBin, args...)
	cmd.Env = env
	b, _ := cmd.CombinedOutput()
	return cmd.ProcessState.ExitCode(), string(b)
}

// Old code: with --restart never (or on-failure after
// exit 0) solo kept the lease, renewing it with nothing running, until
// killed; now it releases the lease and exits with the program's code.
func TestRun_ProgramEndedForGoodReleasesAndPassesItsExitCode(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	direct := srv.Client(t)
	for _, tt := range []struct {
		name string
		args []string
		code int
	}{
		{"never exit 7", []string{"--restart", "never", "--", "sh", "-c", "exit 7"}, 7},
		{"never exit 0", []string{"--restart", "never", "--", "true"}, 0},
		{"never killed by a signal", []string{"--restart", "never", "--", "sh", "-c", "kill -9 $$"}, 128 + 9},
		{"on-failure exit 0", []string{"--restart", "on-failure", "--", "true"}, 0},
		{"never, child-exit-code false", []string{"--restart", "never", "--child-exit-code=false", "--", "false"}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			name := electionName(t)
			code, out := soloRun(t, testEnv(url, name, "a"), append([]string{"run"}, tt.args...)...)
			if code != tt.code || !strings.Contains(out, "program ended and is not restarted: lease released, exiting") {
				t.Fatalf("exit %d, want %d:\n%s", code, tt.code, out)
			}
			if n, err := direct.Exists(context.Background(), leader.Config{Name: name}.LeaseKey()).Result(); err != nil || n != 0 {
				t.Fatalf("lease key exists = %d %v after solo exited, want released", n, err)
			}
		})
	}
}

// Old code: each of these retried for the whole wait,
// then said "redis … unreachable after 5s: WRONGPASS …" with exit 1.
// (solo run without --once stays up, not ready: refusal_test.go.)
func TestRedisConfigurationErrorsExitAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	locked := redistest.Start(t)
	if err := locked.Client(t).ConfigSet(context.Background(), "requirepass", "secret").Err(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, url, want string
	}{
		{"wrong password", "redis://:wrong@" + locked.Addr() + "/0",
			"solo: redis redis://:xxxxx@" + locked.Addr() + "/0: WRONGPASS invalid username-password pair or user is disabled.: wrong username or password in redis.url (redis://USER:PASSWORD@HOST:PORT/DB)\n"},
		{"no password", "redis://" + locked.Addr() + "/0",
			"solo: redis redis://" + locked.Addr() + "/0: NOAUTH Authentication required.: the server requires a password: put it in redis.url (redis://USER:PASSWORD@HOST:PORT/DB)\n"},
		{"bad db index", "redis://" + srv.Addr() + "/99",
			"solo: redis redis://" + srv.Addr() + "/99: ERR DB index is out of range: the database number in redis.url (the /DB path) does not exist on this server\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, args := range [][]string{{"run", "--once", "--", "true"}, {"status"}, {"resign"}} {
				start := time.Now()
				env := append(testEnv(tt.url, electionName(t), "a"), "SOLO_LOG_LEVEL=error")
				code, out := soloRun(t, env, args...)
				if code != 2 || out != tt.want {
					t.Fatalf("solo %v: exit %d, output:\n%q\nwant exit 2:\n%q", args, code, out, tt.want)
				}
				// Not a timing assertion: "at once" means before the
				// 3s (status, resign) or 5s (run) reachability wait.
				if d := time.Since(start); d > 2500*time.Millisecond {
					t.Logf("solo %v took %s", args, d)
				}
			}
		})
	}
}

// Old code: "a-… leads now (term N)", exit 0, when the
// only instance came back after its cooldown.
func TestResign_OnlyTheResignerComesBack(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	out := filepath.Join(t.TempDir(), "out.log")
	name := electionName(t)
	startSolo(t, append(testEnv(url, name, "a"), "OUT="+out), append([]string{"run", "--"}, script(t, out, false)...)...)
	waitLine(t, out, 10*time.Second, func(l line) bool { return l.event == "start" })
	// a sits out its cooldown (2s) and, alone, wins again.
	code, text := soloRun(t, testEnv(url, name, "cli"), "resign", name, "--wait", "20s")
	if code != 4 || !regexp.MustCompile(`solo: \S+: a-\w+ leads again \(term \d+\) after its cooldown: no other instance took over`).MatchString(text) {
		t.Fatalf("resign = %d, want 4:\n%s", code, text)
	}
}

// --name (and every other configuration flag of run)
// works on status and resign too.
func TestStatusAndResignTakeTheNameFlag(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	out := filepath.Join(t.TempDir(), "out.log")
	name := electionName(t)
	startSolo(t, append(testEnv(url, name, "a"), "OUT="+out), append([]string{"run", "--name", name, "--"}, script(t, out, false)...)...)
	waitLine(t, out, 10*time.Second, func(l line) bool { return l.event == "start" })
	env := testEnv(url, "", "cli") // no election name but the flag's
	if code, text := soloRun(t, env, "status", "--name", name, "--ttl", "2s", "--log-format", "json"); code != 0 || !strings.Contains(text, name) {
		t.Fatalf("status --name = %d:\n%s", code, text)
	}
	if code, text := soloRun(t, env, "resign", "--name", "nobody-runs-this", "--wait", "1s"); code != 3 || !strings.Contains(text, "nobody-runs-this: no leader") {
		t.Fatalf("resign --name = %d:\n%s", code, text)
	}
}

// solo run --once and --try, as consul lock has them.
func TestRun_OnceAndTry(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	direct := srv.Client(t)
	name := electionName(t)

	// Free lease: the program runs once and its code is solo's.
	code, text := soloRun(t, testEnv(url, name, "a"), "run", "--once", "--", "sh", "-c", "exit 3")
	if code != 3 {
		t.Fatalf("run --once on a free lease = %d, want 3:\n%s", code, text)
	}
	if n, _ := direct.Exists(context.Background(), leader.Config{Name: name}.LeaseKey()).Result(); n != 0 {
		t.Fatal("lease not released after run --once")
	}

	// Held lease: --once exits 0 without running; --try gives up with 1.
	out := filepath.Join(t.TempDir(), "out.log")
	startSolo(t, append(testEnv(url, name, "a"), "OUT="+out), append([]string{"run", "--"}, script(t, out, false)...)...)
	waitLine(t, out, 10*time.Second, func(l line) bool { return l.event == "start" })
	marker := filepath.Join(t.TempDir(), "ran")
	code, text = soloRun(t, testEnv(url, name, "b"), "run", "--once", "--", "touch", marker)
	if code != 0 || !regexp.MustCompile(`(?m)^solo: election "[^"]+" is held by a-\w+ \(term \d+\): --once, not run$`).MatchString(text) {
		t.Fatalf("run --once on a held lease = %d, want 0:\n%s", code, text)
	}
	code, text = soloRun(t, testEnv(url, name, "b"), "run", "--try", "1s", "--", "touch", marker)
	if code != 1 || !regexp.MustCompile(`(?m)^solo: election "[^"]+": lease not acquired within --try 1s \(held by a-\w+, term \d+\)$`).MatchString(text) {
		t.Fatalf("run --try on a held lease = %d, want 1:\n%s", code, text)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the program ran while another instance held the lease")
	}
	if code, text = soloRun(t, testEnv(url, name, "b"), "run", "--once", "--restart", "always", "--", "true"); code != 2 {
		t.Fatalf("run --once --restart always = %d, want 2:\n%s", code, text)
	}
}
