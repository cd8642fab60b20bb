package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/solo-run/solo/internal/redistest"
)

// The program solo runs is of the same user as solo: it must not read
// solo's secrets from /proc. The program walks up its ancestors (its
// keeper, then solo) and tries each one's /proc/PID/environ, then looks
// for the password in its own environment. Run as root, the test runs
// solo as nobody: root reads any /proc/PID/environ whatever solo does.
//
// Old code (solo dumpable): "the program read an ancestor's environment:
// read keeper 30428 / read solo 30420 / SECRET solo 30420": solo's
// /proc/PID/environ held SOLO_REDIS_URL with its password.
func TestRun_ProgramCannotReadSolosEnvironment(t *testing.T) {
	const password = "s3cret-pw-1d8f"
	srv := redistest.Start(t)
	if err := srv.Client(t).Do(context.Background(), "ACL", "SETUSER", "peek", "on", ">"+password, "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	dir := sharedTempDir(t)
	bin := filepath.Join(dir, "solo")
	copyFile(t, soloBin, bin)
	out := filepath.Join(dir, "out")
	prog := filepath.Join(dir, "peek.sh")
	if err := os.WriteFile(prog, []byte(`p=$PPID
for who in keeper solo; do
  if cat /proc/$p/environ > /dev/null 2>&1; then
    echo "read $who $p" >> "$OUT"
    tr '\0' '\n' < /proc/$p/environ | grep -q "$SECRET_HEAD$SECRET_TAIL" && echo "SECRET $who $p" >> "$OUT"
  else
    echo "denied $who $p" >> "$OUT"
  fi
  p=$(awk '/^PPid:/ {print $2}' /proc/$p/status)
done
env | grep -q "$SECRET_HEAD$SECRET_TAIL" && echo "SECRET self" >> "$OUT"
env | grep '^SOLO_' | sed 's/^/env /' >> "$OUT"
echo done >> "$OUT"
`), 0o755); err != nil {
		t.Fatal(err)
	}
	url := "redis://peek:" + password + "@" + srv.Addr() + "/0"
	// The program learns what to look for in two halves, so that its own
	// environment holds the password only if solo passed it on.
	env := append(testEnv(url, electionName(t), "a"), "OUT="+out,
		"SECRET_HEAD="+password[:6], "SECRET_TAIL="+password[6:])
	cmd := exec.Command(bin, "run", "--restart", "never", "--", "sh", prog)
	cmd.Env = env
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if os.Geteuid() == 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: 65534, Gid: 65534}
	}
	log := runToEnd(t, cmd, 20*time.Second)
	got := mustRead(out)
	if !strings.Contains(got, "done") {
		t.Fatalf("the program did not finish: %q\n%s", got, log)
	}
	if strings.Contains(got, "SECRET") || strings.Contains(got, "read ") {
		t.Errorf("the program read an ancestor's environment:\n%s", got)
	}
	for _, who := range []string{"denied keeper", "denied solo"} {
		if !strings.Contains(got, who) {
			t.Errorf("no %q line:\n%s", who, got)
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if v, ok := strings.CutPrefix(l, "env "); ok {
			name, _, _ := strings.Cut(v, "=")
			switch name {
			case "SOLO_TERM", "SOLO_ELECTION", "SOLO_ID", "SOLO_JOB":
			default:
				t.Errorf("the program got solo's variable %s", name)
			}
		}
	}
	if strings.Contains(log, password) {
		t.Errorf("solo's output shows the password:\n%s", log)
	}
}

// runToEnd runs cmd (its SysProcAttr set or nil) with its output in a
// buffer, killed with the test, and returns the output once it exited 0;
// the test fails if it did not within timeout.
func runToEnd(t *testing.T, cmd *exec.Cmd, timeout time.Duration) string {
	t.Helper()
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v\n%s", cmd.Args, err, log.String())
		}
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%s did not end within %s:\n%s", cmd.Args, timeout, log.String())
	}
	return log.String()
}

// sharedTempDir is a temporary directory every user can enter and write
// (t.TempDir is its owner's only), removed at the end of the test.
func sharedTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "solo-shared-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}
