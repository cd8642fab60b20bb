package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/solo-run/solo/internal/faultproxy"
	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
)

// These tests build the solo binary and run it as real processes against a
// real redis-server on loopback. Bounds are the ones the design promises
// (TTL, stop budget); waits poll observed output with generous timeouts.

var soloBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "solo-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	soloBin = filepath.Join(dir, "solo")
	out, err := exec.Command("go", "build", "-o", soloBin, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build solo: %v\n%s", err, out)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		_ = os.RemoveAll(dir)
		os.Exit(code)
	}))
}

// Test timings: TTL 2s, renew 600ms, deadline 1.4s; stop budget 600ms, so
// solo SIGKILLs an unwilling program 450ms after SIGTERM.
func testEnv(redisURL, name, id string) []string {
	return append(os.Environ(),
		"SOLO_CONFIG=/dev/null",
		"SOLO_REDIS_URL="+redisURL,
		"SOLO_ELECTION_NAME="+name,
		"SOLO_ELECTION_ID="+id,
		"SOLO_ELECTION_TTL=2s",
		"SOLO_ELECTION_RENEW_INTERVAL=600ms",
		"SOLO_ELECTION_RENEW_DEADLINE=1400ms",
		"SOLO_ELECTION_RETRY_INTERVAL=200ms",
		"SOLO_ELECTION_RESIGN_COOLDOWN=2s",
		"SOLO_LOG_LEVEL=debug",
	)
}

// proc is a running solo process. Its output goes to a file, not a pipe:
// a program that outlived solo (the bug these tests look for) would hold a
// pipe open and hang the wait.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	log    string // stdout + stderr
	exited chan struct{}
	code   int
}

func startSolo(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return startBin(t, soloBin, env, args...)
}

// startBin is startSolo with another solo binary (skew_test.go).
func startBin(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, exited: make(chan struct{})}
	f, err := os.CreateTemp(t.TempDir(), "solo-*.log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p.log = f.Name()
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		_ = err
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("solo %v output:\n%s", args, p.output())
		}
	})
	return p
}

func (p *proc) output() string { return mustRead(p.log) }

func (p *proc) signal(sig syscall.Signal) {
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.exited:
		return p.code
	case <-time.After(timeout):
		p.t.Fatalf("solo did not exit within %s", timeout)
		return -1
	}
}

// script writes "ID EVENT TERM UNIX_NANOS" lines to out: start, tick every
// 50ms, and (unless it ignores SIGTERM) sigterm.
func script(t *testing.T, out string, ignoreTerm bool) []string {
	trap := `trap 'echo "$SOLO_ID sigterm $SOLO_TERM $(date +%s%N)" >> "$OUT"; exit 0' TERM`
	if ignoreTerm {
		trap = `trap '' TERM`
	}
	body := startLine(trap, "") + `while :; do echo "$SOLO_ID tick $SOLO_TERM $(date +%s%N)" >> "$OUT"; sleep 0.05; done
`
	t.Cleanup(func() { killScripts(out) })
	path := filepath.Join(t.TempDir(), "job.sh")
	if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return []string{"sh", path}
}

// startLine is the witness programs' start: setup (a child started, the
// environment written), the start line, then trap, the program's own
// handling of SIGTERM. A SIGTERM that came while the start line's time
// was read (solo signals the whole tree: date too) left the line without
// its time, or, trapped at once, left no line; so until the line is
// written a SIGTERM is only noted (unless trap ignores it: then date
// ignores it too), an empty time is read again, and a noted SIGTERM is
// sent again once trap is in force.
func startLine(trap, setup string) string {
	early := `trap 'term=1' TERM` + "\n"
	if trap == `trap '' TERM` {
		early = trap + "\n"
	}
	return early + setup + `now() { t=$(date +%s%N); while [ -z "$t" ]; do t=$(date +%s%N); done; }
now; echo "$SOLO_ID start $SOLO_TERM $t $$ $SOLO_ELECTION" >> "$OUT"
` + trap + `
[ -z "$term" ] || kill -TERM $$
`
}

type line struct {
	id, event string
	term      uint64
	at        time.Time
	pid       int
	election  string
}

func readLines(t *testing.T, path string) []line {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []line
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 4 {
			continue // a line cut by SIGKILL
		}
		term, _ := strconv.ParseUint(fs[2], 10, 64)
		ns, _ := strconv.ParseInt(fs[3], 10, 64)
		// SOLO_ID is the configured ID plus "-RANDOM" (the elector makes
		// every ID unique); the tests configure "a" and "b".
		id, _, _ := strings.Cut(fs[0], "-")
		l := line{id: id, event: fs[1], term: term, at: time.Unix(0, ns)}
		if len(fs) >= 6 {
			l.pid, _ = strconv.Atoi(fs[4])
			l.election = fs[5]
		}
		out = append(out, l)
	}
	return out
}

func waitLine(t *testing.T, path string, timeout time.Duration, match func(line) bool) line {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, l := range readLines(t, path) {
			if match(l) {
				return l
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no matching line in %s within %s:\n%s", path, timeout, mustRead(path))
	return line{}
}

func mustRead(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// killScripts kills the process groups of every script that wrote to out,
// in case one outlived its solo (a failing test must not leak them).
func killScripts(out string) {
	b, _ := os.ReadFile(out)
	for _, l := range strings.Split(string(b), "\n") {
		if fs := strings.Fields(l); len(fs) >= 6 && fs[1] == "start" {
			if pid, err := strconv.Atoi(fs[4]); err == nil && pid > 1 {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
			}
		}
	}
}

func electionName(t *testing.T) string {
	return strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
}

// pair starts a then b wrapping the script, and returns them once a's
// script runs.
func pair(t *testing.T, redisURL string, ignoreTerm bool) (a, b *proc, out string, first line) {
	out = filepath.Join(t.TempDir(), "out.log")
	name := electionName(t)
	argv := script(t, out, ignoreTerm)
	a = startSolo(t, append(testEnv(redisURL, name, "a"), "OUT="+out), append([]string{"run", "--"}, argv...)...)
	first = waitLine(t, out, 10*time.Second, func(l line) bool { return l.event == "start" })
	b = startSolo(t, append(testEnv(redisURL, name, "b"), "OUT="+out), append([]string{"run", "--"}, argv...)...)
	waitFor(t, 5*time.Second, "b to follow", func() bool { return strings.Contains(b.output(), `"leader observed"`) })
	return a, b, out, first
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRun_OneInstanceRunsAndKilledLeaderIsReplacedAfterExpiry(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	a, _, out, first := pair(t, url, false)
	if first.id != "a" || first.term == 0 || first.election != electionName(t) {
		t.Fatalf("first start = %+v, want a with a term and SOLO_ELECTION", first)
	}
	time.Sleep(time.Second)
	for _, l := range readLines(t, out) {
		if l.id != "a" {
			t.Fatalf("%s ran the script while a leads: %+v", l.id, l)
		}
	}

	direct := srv.Client(t)
	cfg := leader.Config{Name: electionName(t)}
	a.signal(syscall.SIGKILL)
	killedAt := time.Now()
	pttl, err := direct.PTTL(context.Background(), cfg.LeaseKey()).Result()
	if err != nil || pttl <= 0 {
		t.Fatalf("PTTL after kill = %v %v", pttl, err)
	}
	expiry := killedAt.Add(pttl - 2*time.Millisecond)

	next := waitLine(t, out, 10*time.Second, func(l line) bool { return l.event == "start" && l.id == "b" })
	if next.at.Before(expiry) {
		t.Fatalf("b started %s before the lease expired", expiry.Sub(next.at))
	}
	if next.term <= first.term {
		t.Fatalf("b's term %d not above a's %d", next.term, first.term)
	}
	// The killed solo's script died with it: no tick after the kill (one
	// in-flight line allowed), and its shell is gone.
	waitFor(t, 2*time.Second, "a's script to die", func() bool { return !alive(first.pid) })
	for _, l := range readLines(t, out) {
		if l.id == "a" && l.at.After(killedAt.Add(200*time.Millisecond)) {
			t.Fatalf("a's script still ran after solo was killed: %+v", l)
		}
	}
}

func TestRun_SIGTERMStopsScriptReleasesAndHandsOver(t *testing.T) {
	srv := redistest.Start(t)
	a, _, out, _ := pair(t, "redis://"+srv.Addr(), false)
	termAt := time.Now()
	a.signal(syscall.SIGTERM)
	if code := a.wait(10 * time.Second); code != 0 {
		t.Fatalf("solo exited %d after SIGTERM, want 0", code)
	}
	stopped := waitLine(t, out, 5*time.Second, func(l line) bool { return l.id == "a" && l.event == "sigterm" })
	next := waitLine(t, out, 5*time.Second, func(l line) bool { return l.id == "b" && l.event == "start" })
	if next.at.Before(stopped.at) {
		t.Fatalf("b started %s before a's script stopped: released too early", stopped.at.Sub(next.at))
	}
	if d := next.at.Sub(termAt); d > time.Second {
		t.Fatalf("b started %s after the SIGTERM, want within a second", d)
	}
	if !strings.Contains(a.output(), `"released"`) {
		t.Fatal("a did not log the release")
	}
}

func TestRun_ScriptIgnoringSIGTERMIsKilledBeforeTheLeasePasses(t *testing.T) {
	srv := redistest.Start(t)
	proxy, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	out := filepath.Join(t.TempDir(), "out.log")
	name := electionName(t)
	argv := script(t, out, true)
	// a reaches Redis through the proxy; cutting it makes a miss its renew
	// deadline: the term ends while the lease still lives on the server.
	a := startSolo(t, append(testEnv("redis://"+proxy.Addr(), name, "a"), "OUT="+out), append([]string{"run", "--"}, argv...)...)
	first := waitLine(t, out, 10*time.Second, func(l line) bool { return l.event == "start" })
	b := startSolo(t, append(testEnv("redis://"+srv.Addr(), name, "b"), "OUT="+out), append([]string{"run", "--"}, argv...)...)
	waitFor(t, 5*time.Second, "b to follow", func() bool { return strings.Contains(b.output(), `"leader observed"`) })
	proxy.Blackhole(true)

	next := waitLine(t, out, 10*time.Second, func(l line) bool { return l.id == "b" && l.event == "start" })
	var lastA time.Time
	for _, l := range readLines(t, out) {
		if l.id == "a" && l.at.After(lastA) {
			lastA = l.at
		}
	}
	if !lastA.Before(next.at) {
		t.Fatalf("a's script ran until %v, after b started at %v", lastA, next.at)
	}
	if alive(first.pid) {
		t.Fatal("a's script survived its term")
	}
	if !strings.Contains(a.output(), "program ignored SIGTERM: SIGKILL before the lease can pass on") {
		t.Fatalf("a did not report the SIGKILL:\n%s", a.output())
	}
	t.Logf("a's script stopped %s before b's started", next.at.Sub(lastA))
}

func TestStatusAndResign(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	_, _, out, first := pair(t, url, false)
	name := electionName(t)
	env := testEnv(url, name, "cli")

	run := func(args ...string) (int, string) {
		cmd := exec.Command(soloBin, args...)
		cmd.Env = env
		b, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(b)
	}
	// A watcher follows the leadership live: one line per change.
	watcher := startSolo(t, env, "status", "--watch")
	watched := func(kind, prefix string) {
		t.Helper()
		re := regexp.MustCompile(`(?m)^\S+  ` + regexp.QuoteMeta(name) + `  ` + kind + ` +` + prefix + `\S+  term \d+  \((term start|seen|lease expiry)\)$`)
		waitFor(t, 10*time.Second, "status --watch: "+kind+" "+prefix, func() bool { return re.MatchString(watcher.output()) })
	}
	watched("elected", "a-")

	code, text := run("status")
	if code != 0 || !strings.Contains(text, "ELECTION") || !strings.Contains(text, name) || !strings.Contains(text, strconv.FormatUint(first.term, 10)) {
		t.Fatalf("status = %d:\n%s", code, text)
	}
	code, text = run("status", name, "--json")
	var rows []struct {
		Election string `json:"election"`
		Holder   *struct {
			ID      string `json:"id"`
			Term    uint64 `json:"term"`
			TTLLeft int64  `json:"ttl_left_ms"`
		} `json:"holder"`
	}
	if err := json.Unmarshal([]byte(text), &rows); err != nil || code != 0 || len(rows) != 1 || rows[0].Holder == nil ||
		!strings.HasPrefix(rows[0].Holder.ID, "a-") || rows[0].Holder.Term != first.term || rows[0].Holder.TTLLeft <= 0 {
		t.Fatalf("status --json = %d %v:\n%s", code, err, text)
	}
	if code, text = run("status", "nobody-runs-this"); code != 3 || !strings.Contains(text, "(none)") {
		t.Fatalf("status of an empty election = %d:\n%s", code, text)
	}
	if code, text = run("status", "--json", name, "nobody-runs-this"); code != 3 {
		t.Fatalf("status with one empty election = %d, want 3:\n%s", code, text)
	}

	// The watcher reads the lease at once but subscribes to the election's
	// notices beside that: before the resign, wait until a, b and the
	// watcher are all subscribed, or the watcher could only see the lease
	// gone (expired) rather than resigned.
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rc.Close()
	channel := "solo:{" + name + "}:events"
	waitFor(t, 10*time.Second, "3 subscribers on "+channel, func() bool {
		m, err := rc.PubSubNumSub(context.Background(), channel).Result()
		return err == nil && m[channel] >= 3
	})

	// Flags before and after the name, as docs/cli.md shows.
	code, text = run("resign", "--redis", url, name, "--wait", "10s")
	if code != 0 || !regexp.MustCompile(`\bb-\w+ leads now`).MatchString(text) {
		t.Fatalf("resign = %d:\n%s", code, text)
	}
	waitLine(t, out, 5*time.Second, func(l line) bool { return l.id == "b" && l.event == "start" })
	watched("resigned", "a-")
	watched("elected", "b-")
	watcher.signal(syscall.SIGINT)
	if code := watcher.wait(5 * time.Second); code != 0 {
		t.Fatalf("status --watch exited %d on SIGINT, want 0:\n%s", code, watcher.output())
	}
	if code, text = run("status", "--json"); code != 0 || !strings.Contains(text, `"id": "b-`) {
		t.Fatalf("status after resign = %d:\n%s", code, text)
	}
	if code, text = run("resign", "nobody-runs-this"); code != 3 {
		t.Fatalf("resign without leader = %d:\n%s", code, text)
	}
}

func TestResign_NobodyTakesOver(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	out := filepath.Join(t.TempDir(), "out.log")
	name := electionName(t)
	startSolo(t, append(testEnv(url, name, "a"), "OUT="+out), append([]string{"run", "--"}, script(t, out, false)...)...)
	waitLine(t, out, 10*time.Second, func(l line) bool { return l.event == "start" })
	cmd := exec.Command(soloBin, "resign", name, "--wait", "1s")
	cmd.Env = testEnv(url, name, "cli")
	text, _ := cmd.CombinedOutput()
	// Alone, a sits out its cool-down (2s): nobody leads within 1s.
	if cmd.ProcessState.ExitCode() != 1 || !strings.Contains(string(text), "nobody took over within 1s") {
		t.Fatalf("resign = %d:\n%s", cmd.ProcessState.ExitCode(), text)
	}
}

func TestDemo(t *testing.T) {
	for _, kind := range []string{"redis-server", "miniredis"} {
		t.Run(kind, func(t *testing.T) {
			if kind == "redis-server" {
				if _, err := exec.LookPath("redis-server"); err != nil && !redistest.Required() {
					t.Skip("no redis-server")
				}
			}
			start := time.Now()
			cmd := exec.Command(soloBin, "demo", "--embedded", kind)
			text, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("demo: %v\n%s", err, text)
			}
			for _, want := range []string{"CRASH", "→ failover", "REFUSED by the guard: fence: stale term", "→ handoff", "Stale writes refused by the guard: 1", "OK"} {
				if !strings.Contains(string(text), want) {
					t.Fatalf("demo output lacks %q:\n%s", want, text)
				}
			}
			if d := time.Since(start); d > 30*time.Second {
				t.Fatalf("demo took %s, want under 30s", d)
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	file := func(body string) string {
		f, err := os.CreateTemp(dir, "config-*.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(body); err != nil {
			t.Fatal(err)
		}
		f.Close()
		return f.Name()
	}
	base := "redis:\n  url: redis://127.0.0.1:1\nelection:\n  name: x\n"
	tests := []struct {
		name string
		args []string
		env  []string
		code int
		want string // the whole stderr line, after "solo: "; %s = config path
		cfg  string
	}{
		{name: "unknown key", cfg: base + "  tll: 1s\n", args: []string{"run", "--", "true"}, code: 2, want: "%s:5: unknown key election.tll (did you mean election.ttl?)"},
		{name: "negative ttl", cfg: base + "  ttl: -1s\n", args: []string{"run", "--", "true"}, code: 2, want: "%s:5: election.ttl -1s: must be positive"},
		{name: "renew_deadline above ttl", cfg: base + "  ttl: 2s\n  renew_deadline: 3s\n", args: []string{"run", "--", "true"}, code: 2,
			want: "%s:6: election.renew_deadline 3s: must be less than ttl×(1−drift) = 1.98s (ttl 2s, drift 0.01)"},
		{name: "bad cron spec", cfg: base + "jobs:\n  - name: report\n    command: [\"true\"]\n    schedule: \"61 * * * *\"\n", args: []string{"run"}, code: 2,
			want: `%s:8: jobs[0].schedule "61 * * * *": end of range (61) above maximum (59): 61`},
		{name: "missing command after --", cfg: base, args: []string{"run", "--"}, code: 2, want: "missing command after --"},
		{name: "ttl flag", cfg: base, args: []string{"run", "--ttl", "-1s", "--", "true"}, code: 2, want: `--ttl="-1s": must be positive`},
		// Old code: --ttl 1ms passed the loader (solo
		// status and resign ran with it; 2,035 elections in 5s).
		{name: "ttl below the floor", cfg: base, args: []string{"run", "--ttl", "1ms", "--", "true"}, code: 2,
			want: `--ttl="1ms": must be at least 100ms: each renewal needs a Redis round trip plus scheduling slack within renew_deadline`},
		{name: "ttl below the floor in the file", cfg: base + "  ttl: 50ms\n", args: []string{"status"}, code: 2,
			want: `%s:5: election.ttl 50ms: must be at least 100ms: each renewal needs a Redis round trip plus scheduling slack within renew_deadline`},
		{name: "budget below the floor", cfg: base, env: []string{"SOLO_ELECTION_RETRY_INTERVAL=5ms"}, args: []string{"status"}, code: 2,
			want: `SOLO_ELECTION_RETRY_INTERVAL="5ms": must be at least 10ms (scheduling slack of a busy host)`},
		// Old code: status rejected --name ("flag
		// provided but not defined"), and the message had no remedy.
		{name: "empty name, run", cfg: "redis:\n  url: redis://127.0.0.1:1\n", args: []string{"run", "--", "true"}, code: 2,
			want: `election.name "": must not be empty: set election.name in config.yaml, SOLO_ELECTION_NAME or --name`},
		{name: "empty name, status", cfg: "redis:\n  url: redis://127.0.0.1:1\n", args: []string{"status"}, code: 2,
			want: `election.name "": must not be empty: set election.name in config.yaml, SOLO_ELECTION_NAME or --name, or name it: solo status NAME`},
		{name: "empty name, resign", cfg: "redis:\n  url: redis://127.0.0.1:1\n", args: []string{"resign"}, code: 2,
			want: `election.name "": must not be empty: set election.name in config.yaml, SOLO_ELECTION_NAME or --name, or name it: solo resign NAME`},
		{name: "resign takes run's flags", cfg: base, args: []string{"resign", "--name", "y", "--ttl", "1ms"}, code: 2,
			want: `--ttl="1ms": must be at least 100ms: each renewal needs a Redis round trip plus scheduling slack within renew_deadline`},
		{name: "unknown SOLO_ variable", cfg: base, env: []string{"SOLO_ELECTION_TLL=1s", "SOLO_TERM=3", "SOLO_REQUIRE_REDIS=1"}, args: []string{"status"}, code: 2,
			want: `unknown environment variable SOLO_ELECTION_TLL (did you mean SOLO_ELECTION_TTL?); SOLO_* variables name configuration keys (config.yaml)`},
		{name: "env override", cfg: base, env: []string{"SOLO_ELECTION_MODE=sometimes"}, args: []string{"run", "--", "true"}, code: 2,
			want: `SOLO_ELECTION_MODE="sometimes": must be one of elect, standby, always, spread`},
		// Old code: "exit 1, stderr: solo: redis
		// redis://127.0.0.1:1 unreachable after 5s: …" — both configurations
		// were accepted (and, against a real Redis, left the program running
		// beside the next leader's).
		{name: "shutdown_timeout below the stop margin", cfg: base + "  ttl: 2s\n  renew_deadline: 1400ms\n  shutdown_timeout: 300ms\n", args: []string{"run", "--", "true"}, code: 2,
			want: "election.shutdown_timeout 300ms: must be at least 580ms for solo run (SIGKILL comes 435ms after SIGTERM, and must land before solo gives up the drain)"},
		{name: "stop margin too small", cfg: base + "  ttl: 10s\n  renew_deadline: 9800ms\n", args: []string{"run", "--", "true"}, code: 2,
			want: "election.renew_deadline 9.8s: leaves 100ms before the lease can pass (ttl×(1−drift) = 9.9s, ttl 10s, drift 0.01); solo run needs at least 200ms to stop the program (SIGTERM, then SIGKILL)"},
		// A program that cannot run is reported before campaigning, with
		// env's exit codes. Old code: exit 1 only after it led, failed and
		// backed off ("exec: no such file or directory" per term).
		{name: "missing program", cfg: base, args: []string{"run", "--", "/nonexistent/prog"}, code: 127,
			want: "/nonexistent/prog: no such file or directory"},
		{name: "program not on PATH", cfg: base, args: []string{"run", "--", "solo-no-such-program"}, code: 127,
			want: "solo-no-such-program: not found in $PATH"},
		{name: "program not executable", cfg: base, args: []string{"run", "--", "%s"}, code: 126,
			want: "%s: not executable"},
		{name: "bad log format", cfg: base, args: []string{"run", "--log-format", "xml", "--", "true"}, code: 2,
			want: `--log-format "xml": want auto, console or json`},
		// A grace period shorter than solo run's exit bound: as
		// Kubernetes manifests pass it, from the file, and as a flag.
		{name: "grace period shorter than the exit bound", cfg: base + "  shutdown_timeout: 20s\nhttp:\n  addr: 127.0.0.1:0\n",
			env: []string{"SOLO_ELECTION_GRACE_PERIOD=15s"}, args: []string{"run", "--", "true"}, code: 2,
			want: `SOLO_ELECTION_GRACE_PERIOD="15s": shorter than solo run's exit bound 24s (election.shutdown_timeout 20s + 1 Redis round trip of 1s (the release) + 2s http shutdown + 1s log flush): ` + graceRemedy},
		{name: "grace period in the file", cfg: base + "  grace_period: 10s\n", args: []string{"run", "--", "true"}, code: 2,
			want: `%s:5: election.grace_period 10s: shorter than solo run's exit bound 12s (election.shutdown_timeout 10s + 1 Redis round trip of 1s (the release) + 1s log flush): ` + graceRemedy},
		{name: "grace period flag", cfg: base, args: []string{"run", "--grace-period", "11s", "--", "true"}, code: 2,
			want: `--grace-period="11s": shorter than solo run's exit bound 12s (election.shutdown_timeout 10s + 1 Redis round trip of 1s (the release) + 1s log flush): ` + graceRemedy},
		{name: "negative grace period flag", cfg: base, args: []string{"run", "--grace-period", "-1s", "--", "true"}, code: 2,
			want: `--grace-period="-1s": must be positive`},
		{name: "grace period in seconds", cfg: base, env: []string{"SOLO_ELECTION_GRACE_PERIOD=15"}, args: []string{"run", "--", "true"}, code: 2,
			want: `SOLO_ELECTION_GRACE_PERIOD="15": want a duration such as "10s"`},
		// An unreachable Redis no longer fails solo run: see
		// TestRun_KeepsTryingWhileRedisIsDownAtStart.
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := file(tt.cfg)
			args := append([]string{}, tt.args...)
			for i := range args {
				args[i] = strings.ReplaceAll(args[i], "%s", path) // the config file: not executable
			}
			// Bounded: a bad input that is accepted leaves solo run
			// campaigning for ever against the unreachable Redis.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, soloBin, append(append([]string{}, args[0], "-c", path), args[1:]...)...)
			cmd.Env = append(append(os.Environ(), "SOLO_CONFIG="), tt.env...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			_ = cmd.Run()
			want := "solo: " + strings.ReplaceAll(tt.want, "%s", path) + "\n"
			if code := cmd.ProcessState.ExitCode(); code != tt.code || stderr.String() != want {
				t.Fatalf("exit %d, stderr:\n%q\nwant exit %d, stderr:\n%q", code, stderr.String(), tt.code, want)
			}
		})
	}
}
