package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/lock"
)

// aclSetUser returns the arguments of the documented ACL SETUSER command
// of the instances' user solo (docs/operations.md, "ACL"), as the doc
// block has them: the test applies exactly that, so doc and test cannot
// drift.
func aclSetUser(t *testing.T) []string { return aclSetUserOf(t, "solo") }

// aclSetUserOf is aclSetUser for the documented user named user: solo (the
// instances) or solo-admin (the operators' commands).
func aclSetUserOf(t *testing.T, user string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)\n```\n(ACL SETUSER " + regexp.QuoteMeta(user) + " .*?)\n```\n").FindSubmatch(b)
	if m == nil {
		t.Fatalf("docs/operations.md has no ``` block starting with ACL SETUSER %s", user)
	}
	return strings.Fields(strings.ReplaceAll(string(m[1]), "\\\n", " "))
}

// aclRules returns the rules of the documented user one may remove: every
// command, key and channel pattern, and "on".
func aclRules(args []string) []string {
	var rules []string
	for _, a := range args[3:] {
		if a == "on" || strings.HasPrefix(a, "+") || strings.HasPrefix(a, "~") || strings.HasPrefix(a, "&") {
			rules = append(rules, a)
		}
	}
	return rules
}

// applyACL (re)creates the user of args (solo, solo-admin), minus the rule
// without, with the password pw in place of the doc's PASSWORD.
func applyACL(t *testing.T, admin *redis.Client, args []string, without string) {
	t.Helper()
	ctx := context.Background()
	if err := admin.Do(ctx, "ACL", "DELUSER", args[2]).Err(); err != nil {
		t.Fatal(err)
	}
	var cmd []any
	for _, a := range args {
		switch {
		case a == without:
			continue
		case a == ">PASSWORD":
			a = ">pw"
		}
		cmd = append(cmd, a)
	}
	if err := admin.Do(ctx, cmd...).Err(); err != nil {
		t.Fatalf("%v: %v", cmd, err)
	}
}

// aclRig is a redis-server with the ACL user solo and what exercise needs.
type aclRig struct {
	srv   *redistest.Server
	url   string // as solo: redis://solo:pw@…
	admin *redis.Client
	dir   string
}

func newACLRig(t *testing.T) *aclRig {
	srv := redistest.Start(t)
	return &aclRig{srv: srv, url: "redis://solo:pw@" + srv.Addr() + "/0", admin: srv.Client(t), dir: t.TempDir()}
}

// stepFailure is a step of exercise that failed: its output, and its exit
// code (-1 for a step in Go).
type stepFailure struct {
	step string
	code int
	out  string
}

func (f *stepFailure) Error() string {
	return fmt.Sprintf("step %s: exit %d:\n%s", f.step, f.code, f.out)
}

// exercise runs everything solo's instances do against Redis as the user
// solo, in steps, and returns the first that failed: solo run (elect:
// --once, a leader and a follower, resign, stop), solo status, solo
// resign, solo run in spread mode with a pull and a cron job and its
// status, and locks (plain and fair, contended, and Redlock). solo forget,
// an operator's command, is not among them: see forgetAs.
func (r *aclRig) exercise(t *testing.T) *stepFailure {
	t.Helper()
	name := "acl-" + strings.ReplaceAll(strings.ReplaceAll(t.Name(), "/", "."), "|", "_")
	env := func(id string) []string { return append(testEnv(r.url, name, id), "SOLO_LOG_LEVEL=info") }
	cli := func(step string, want int, id string, args ...string) *stepFailure {
		code, out := soloRun(t, env(id), args...)
		if code != want {
			return &stepFailure{step, code, out}
		}
		return nil
	}
	// --once on a free lease: runs the program, exits with its code.
	if f := cli("run --once", 0, "once", "run", "--once", "--", "true"); f != nil {
		return f
	}

	// A leader and a follower, renewing, then a resign hands over.
	out := filepath.Join(t.TempDir(), "out.log")
	argv := append([]string{"run", "--"}, script(t, out, false)...)
	a := startSolo(t, append(env("a"), "OUT="+out), argv...)
	if f := waitOrExit(t, "leader a", []*proc{a}, func() bool { return hasLine(t, out, "a", "start") }); f != nil {
		return f
	}
	b := startSolo(t, append(env("b"), "OUT="+out), argv...)
	cands := func() bool {
		ids, _ := r.admin.ZRange(context.Background(), leader.Config{Name: name}.CandidatesKey(), 0, -1).Result()
		return len(ids) == 1
	}
	if f := waitOrExit(t, "follower b listed", []*proc{a, b}, cands); f != nil {
		return f
	}
	if f := stayUp(t, "leader renewing", []*proc{a, b}, 1500*time.Millisecond); f != nil {
		return f
	}
	if f := cli("status", 0, "cli", "status"); f != nil {
		return f
	}
	if f := cli("status --json", 0, "cli", "status", "--json"); f != nil {
		return f
	}
	if f := cli("resign", 0, "cli", "resign", name, "--wait", "15s"); f != nil {
		return f
	}
	if f := waitOrExit(t, "b takes over", []*proc{a, b}, func() bool { return hasLine(t, out, "b", "start") }); f != nil {
		return f
	}
	for _, p := range []*proc{a, b} {
		p.signal(syscall.SIGTERM)
		if code := p.wait(20 * time.Second); code != 0 {
			return &stepFailure{"stop", code, p.output()}
		}
	}

	// Spread mode: a pull job and a cron job (its checkpoint), two members.
	cfgPath := filepath.Join(t.TempDir(), "spread.yaml")
	spreadOut := filepath.Join(t.TempDir(), "spread.log")
	yaml := "election:\n  mode: spread\njobs:\n" +
		"  - name: pull\n    command: [\"sh\", \"-c\", \"echo \\\"pull $SOLO_ID\\\" >> \\\"$OUT\\\"; exec sleep 600\"]\n" +
		"  - name: tick\n    schedule: \"@every 1s\"\n    command: [\"sh\", \"-c\", \"echo \\\"tick $SOLO_ID\\\" >> \\\"$OUT\\\"\"]\n"
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	senv := func(id string) []string {
		e := slices.DeleteFunc(env(id), func(kv string) bool { return strings.HasPrefix(kv, "SOLO_CONFIG=") })
		return append(e, "SOLO_CONFIG="+cfgPath, "OUT="+spreadOut)
	}
	s1 := startSolo(t, senv("s1"), "run")
	s2 := startSolo(t, senv("s2"), "run")
	ran := func() bool {
		b, _ := os.ReadFile(spreadOut)
		return strings.Contains(string(b), "pull ") && strings.Count(string(b), "tick ") >= 2
	}
	if f := waitOrExit(t, "spread jobs run", []*proc{s1, s2}, ran); f != nil {
		return f
	}
	// As in elect mode: a refusal that comes with the notices'
	// subscription (a missing +unsubscribe: when it is torn down and made
	// again) is logged a moment after the members' jobs ran.
	if f := stayUp(t, "spread renewing", []*proc{s1, s2}, 1500*time.Millisecond); f != nil {
		return f
	}
	if code, text := soloRun(t, senv("cli"), "status"); code != 0 {
		return &stepFailure{"status (spread)", code, text}
	}
	for _, p := range []*proc{s1, s2} {
		p.signal(syscall.SIGTERM)
		if code := p.wait(20 * time.Second); code != 0 {
			return &stepFailure{"stop (spread)", code, p.output()}
		}
	}

	// Locks, as a library: plain and fair, each contended, and Redlock.
	client := redis.NewClient(&redis.Options{Addr: r.srv.Addr(), Username: "solo", Password: "pw", ContextTimeoutEnabled: true})
	defer client.Close()
	if err := exerciseLocks(t, client, name); err != nil {
		return &stepFailure{"locks", -1, err.Error()}
	}
	return nil
}

// exerciseLocks locks and unlocks plain, fair and Redlock mutexes, a
// second client waiting on the first; it fails on an error returned or
// logged at error level (an abandoned wait's clean-up runs in the
// background).
func exerciseLocks(t *testing.T, client *redis.Client, name string) (err error) {
	core, logs := observer.New(zapcore.ErrorLevel)
	defer func() {
		if err == nil && logs.Len() > 0 {
			l := logs.All()[0]
			err = fmt.Errorf("logged: %s: %v", l.Message, l.ContextMap()["error"])
		}
	}()
	cfg := lock.Config{TTL: 2 * time.Second, RenewInterval: 200 * time.Millisecond, RenewDeadline: 1400 * time.Millisecond, RetryInterval: 200 * time.Millisecond}
	mk := func(redlock bool) (*lock.Client, error) {
		if redlock {
			return lock.NewRedlockClient([]redis.UniversalClient{client}, lock.WithConfig(cfg), lock.WithLogger(zap.New(core)))
		}
		return lock.NewClient(client, lock.WithConfig(cfg), lock.WithLogger(zap.New(core)))
	}
	for _, tt := range []struct {
		name    string
		redlock bool
		opts    []lock.Option
	}{{"plain", false, nil}, {"fair", false, []lock.Option{lock.WithFair()}}, {"redlock", true, nil}} {
		c1, err := mk(tt.redlock)
		if err != nil {
			return err
		}
		c2, err := mk(tt.redlock)
		if err != nil {
			_ = c1.Close()
			return err
		}
		err = lockTwice(c1, c2, name+"-"+tt.name, tt.opts)
		_ = c1.Close()
		_ = c2.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", tt.name, err)
		}
	}
	return nil
}

// lockTwice holds the lock name on c1 past a renewal, re-enters it, while
// c2 waits for it and a third waiter gives up, then hands it over.
func lockTwice(c1, c2 *lock.Client, name string, opts []lock.Option) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	m1, err := c1.Mutex(name, opts...)
	if err != nil {
		return err
	}
	m2, err := c2.Mutex(name, opts...)
	if err != nil {
		return err
	}
	h1, err := m1.Lock(ctx)
	if err != nil {
		return err
	}
	inner, err := m1.Lock(lock.WithHold(ctx, h1)) // re-entry: the hold count
	if err != nil {
		_ = h1.Unlock(ctx)
		return fmt.Errorf("re-enter: %w", err)
	}
	if err := inner.Unlock(ctx); err != nil {
		_ = h1.Unlock(ctx)
		return fmt.Errorf("unlock the re-entry: %w", err)
	}
	// A waiter that gives up: its queue slot (fair) is abandoned.
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = m2.Lock(short)
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) {
		_ = h1.Unlock(ctx)
		return fmt.Errorf("a waiter that gives up: %w", err)
	}
	got := make(chan error, 1)
	go func() {
		h2, err := m2.Lock(ctx)
		if err == nil {
			err = h2.Unlock(ctx)
		}
		got <- err
	}()
	time.Sleep(500 * time.Millisecond) // renewals while c2 waits (and the abandon lands)
	if err := context.Cause(h1.Context()); err != nil {
		_ = h1.Unlock(ctx)
		<-got
		return fmt.Errorf("hold ended: %w", err)
	}
	if err := h1.Unlock(ctx); err != nil {
		<-got
		return err
	}
	return <-got
}

// hasLine reports whether out has a line of id with event.
func hasLine(t *testing.T, out, id, event string) bool {
	for _, l := range readLines(t, out) {
		if l.id == id && l.event == event {
			return true
		}
	}
	return false
}

// waitOrExit waits up to 20s for cond, failing as soon as one of ps exits.
func waitOrExit(t *testing.T, step string, ps []*proc, cond func() bool) *stepFailure {
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if f := exited(step, ps); f != nil {
			return f
		}
		if time.Now().After(deadline) {
			var outs []string
			for _, p := range ps {
				outs = append(outs, p.output())
			}
			return &stepFailure{step + " (timed out)", -1, strings.Join(outs, "\n---\n")}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// stayUp fails when one of ps exits within d.
func stayUp(t *testing.T, step string, ps []*proc, d time.Duration) *stepFailure {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if f := exited(step, ps); f != nil {
			return f
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// exited returns the step's failure once one of ps exited, or logged a
// refusal by Redis (solo run stays up then, not ready: code -1).
func exited(step string, ps []*proc) *stepFailure {
	for _, p := range ps {
		select {
		case <-p.exited:
			return &stepFailure{step, p.code, p.output()}
		default:
		}
		if out := p.output(); strings.Contains(out, refusedMark) {
			return &stepFailure{step + " (refused; solo run stays up)", -1, out}
		}
	}
	return nil
}

// refusedMark is in the line a running solo logs, at error, when Redis
// refuses one of its calls as a configuration error.
const refusedMark = ` refused by redis: a configuration error`

// The documented minimal ACL (docs/operations.md, ACL),
// applied exactly as the doc has it to a real redis-server, lets solo do
// everything; removing any one of its rules fails, naming the rule: exit
// 2 from a one-shot command, a refusal logged by a solo run (which stays
// up, not ready), or, for a lock, an error. Old code: NOPERM was a warn
// retried for ever, `solo run --once` hung on it, and no test checked
// the ACL.
func TestACL_DocumentedUserWorksAndEachRuleIsNeeded(t *testing.T) {
	args := aclSetUser(t)
	t.Run("all", func(t *testing.T) {
		r := newACLRig(t)
		applyACL(t, r.admin, args, "")
		if f := r.exercise(t); f != nil {
			t.Fatalf("with the documented ACL: %v", f)
		}
		if n, err := r.admin.Do(context.Background(), "ACL", "LOG").Slice(); err != nil || len(n) != 0 {
			t.Fatalf("ACL LOG = %v %v, want empty", n, err)
		}
	})
	for _, rule := range aclRules(args) {
		t.Run("without "+rule, func(t *testing.T) {
			r := newACLRig(t)
			applyACL(t, r.admin, args, rule)
			f := r.exercise(t)
			if rule == "+info" {
				// The one rule solo works without: it only lets solo
				// verify maxmemory-policy (it warns that it cannot).
				if f != nil {
					t.Fatalf("without +info: %v", f)
				}
				if n, err := r.admin.Do(context.Background(), "ACL", "LOG").Slice(); err != nil || !strings.Contains(fmt.Sprint(n), "info") {
					t.Fatalf("ACL LOG = %v %v, want INFO refused: solo must read the eviction policy", n, err)
				}
				return
			}
			if f == nil {
				t.Fatalf("everything worked without %s: drop it from the documented ACL", rule)
			}
			if f.code != exitUsage && f.code != -1 {
				t.Fatalf("exit %d, want 2: %v", f.code, f)
			}
			if !namesRule(f.out, rule) {
				t.Fatalf("the error does not name %s: %v", rule, f)
			}
		})
	}
}

// namesRule reports whether out names rule as the fix: the command
// (+evalsha), or, inside a script on Redis 7.0, the script's command list
// with it; the key or channel pattern; for "on", the refused login.
func namesRule(out, rule string) bool {
	switch {
	case rule == "on":
		return strings.Contains(out, "WRONGPASS") && strings.Contains(out, "wrong username or password")
	case strings.HasPrefix(rule, "~"):
		return strings.Contains(out, "key patterns do not cover solo's keys") && strings.Contains(out, "~PREFIX:*")
	case strings.HasPrefix(rule, "&"):
		return strings.Contains(out, "channel patterns do not cover solo's notice channels") && strings.Contains(out, "&PREFIX:*")
	}
	cmd := strings.TrimPrefix(rule, "+")
	if strings.Contains(out, "the ACL user lacks +"+cmd+" ") || strings.Contains(out, "the ACL user lacks +"+cmd+";") {
		return true
	}
	m := regexp.MustCompile(`lacks a command run by [^(]*\(it runs ([^)]*)\)`).FindStringSubmatch(out)
	return m != nil && slices.Contains(strings.Split(m[1], ", "), cmd)
}

// runtimeRules are rules a running leader and follower use (renewals,
// acquires, notices), with the ACL SETUSER rule that takes each away.
// followerOnly marks a rule only the follower's calls use: the leader
// renews on; keepsTerm one whose refusal leaves the leader its term (the
// notices' subscription: the election works without it).
var runtimeRules = []struct {
	rule, remove            string
	followerOnly, keepsTerm bool
}{
	{"+evalsha", "-evalsha", false, false},
	{"+pexpire", "-pexpire", false, false}, // the renew script's
	{"+zadd", "-zadd", true, true},         // the follower's acquire lists it
	{"~solo:*", "resetkeys", false, false},
	{"&solo:*", "resetchannels", false, true},
}

// At run time, a rule removed while an election runs (the documented
// user; a leader and a follower) keeps both instances up: each one
// refused logs the refusal naming the rule and fails /readyz with it, the
// leader's program stopped (its renewal refused, it steps down at once);
// once the rule is back, both are ready again and one leads, without a
// restart. A rule only the follower's calls use leaves the leader be; one
// only the notices use leaves the leader its term.
// Old code: exit 2 from both, the whole fleet at once.
func TestACL_RuleRemovedWhileRunningKeepsInstancesUp(t *testing.T) {
	args := aclSetUser(t)
	for _, tt := range runtimeRules {
		t.Run(tt.rule, func(t *testing.T) {
			r := newACLRig(t)
			applyACL(t, r.admin, args, "")
			name := electionName(t)
			out := filepath.Join(t.TempDir(), "out.log")
			argv := append([]string{"run", "--"}, script(t, out, false)...)
			env := func(id string) []string { return append(testEnv(r.url, name, id), "OUT="+out) }
			a := startServed(t, env("a"), argv...)
			first := waitLine(t, out, 10*time.Second, func(l line) bool { return l.id == "a" && l.event == "start" })
			b := startServed(t, env("b"), argv...)
			waitFor(t, 10*time.Second, "b listed as a candidate", func() bool {
				n, _ := r.admin.ZCard(context.Background(), leader.Config{Name: name}.CandidatesKey()).Result()
				return n == 1
			})
			if err := r.admin.Do(context.Background(), "ACL", "SETUSER", "solo", tt.remove).Err(); err != nil {
				t.Fatal(err)
			}
			refused := []*served{a, b}
			if tt.followerOnly {
				refused = refused[1:]
			}
			for _, p := range refused {
				p.waitReadyz(t, http.StatusServiceUnavailable, "redis configuration error: ")
				if _, body := p.readyz(t); !namesRule(body, tt.rule) {
					t.Fatalf("/readyz does not name %s: %q", tt.rule, body)
				}
				if text := p.output(); !strings.Contains(text, refusedMark) || !namesRule(text, tt.rule) {
					t.Fatalf("no refusal naming %s logged:\n%s", tt.rule, text)
				}
			}
			if tt.followerOnly {
				if code, body := a.readyz(t); code != http.StatusOK {
					t.Fatalf("the leader is not ready (%d %q), although its calls are not refused:\n%s", code, body, a.output())
				}
			}
			if tt.keepsTerm {
				if hasLine(t, out, "a", "sigterm") {
					t.Fatalf("the leader stopped its program, although its term's calls are not refused:\n%s", a.output())
				}
			} else {
				waitLine(t, out, 5*time.Second, func(l line) bool { return l.id == "a" && l.event == "sigterm" })
			}
			if err := r.admin.Do(context.Background(), "ACL", "SETUSER", "solo", tt.rule).Err(); err != nil {
				t.Fatal(err)
			}
			for _, p := range []*served{a, b} {
				p.waitReadyz(t, http.StatusOK, "ok")
			}
			if !tt.keepsTerm {
				waitLine(t, out, 10*time.Second, func(l line) bool { return l.event == "start" && l.term > first.term })
			}
		})
	}
}

// A password refused, or a command the server does not
// know (rename-command), exits 2 at once with the fix from every one-shot
// command, solo run --once included (which hung on a refused acquire).
// solo run without --once stays up instead (TestRun_PasswordRefusedKeepsInstancesUp).
func TestRedisConfigErrorsExit2FromEveryCommand(t *testing.T) {
	locked := redistest.Start(t)
	if err := locked.Client(t).ConfigSet(context.Background(), "requirepass", "secret").Err(); err != nil {
		t.Fatal(err)
	}
	noEvalsha := redistest.Start(t, "--rename-command", "EVALSHA", "")
	noHset := redistest.Start(t, "--rename-command", "HSET", "")
	for _, tt := range []struct {
		name, url, want string
	}{
		{"wrong password", "redis://:wrong@" + locked.Addr() + "/0", "WRONGPASS invalid username-password pair or user is disabled.: wrong username or password in redis.url"},
		{"no password", "redis://" + locked.Addr() + "/0", "NOAUTH Authentication required.: the server requires a password: put it in redis.url"},
		{"no EVALSHA", "redis://" + noEvalsha.Addr() + "/0", "ERR unknown command 'evalsha', with args beginning with: "},
		{"no HSET", "redis://" + noHset.Addr() + "/0", "ERR Unknown Redis command called from script script: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			name := electionName(t)
			for _, args := range [][]string{
				{"run", "--once", "--", "true"}, {"status"}, {"status", "--json"}, {"status", "--watch"}, {"resign"}, {"forget", name},
			} {
				if tt.name == "no HSET" && (args[0] == "status" || args[0] == "resign" || args[0] == "forget") {
					continue // they run no script with HSET
				}
				env := append(testEnv(tt.url, name, "a"), "SOLO_LOG_LEVEL=error")
				code, out := soloRun(t, env, args...)
				if code != exitUsage || !strings.Contains(out, tt.want) || !strings.Contains(out, "\nsolo: ") && !strings.HasPrefix(out, "solo: ") {
					t.Fatalf("solo %v: exit %d, want 2 naming %q:\n%s", args, code, tt.want, out)
				}
				if tt.name == "no HSET" && !strings.Contains(out, "the server does not know a command run by the election acquire script (it runs ") {
					t.Fatalf("solo %v: the fix does not name the script:\n%s", args, out)
				}
				if tt.name == "no EVALSHA" && !strings.Contains(out, "the server does not know the command EVALSHA: renamed or disabled (rename-command)?") {
					t.Fatalf("solo %v: the fix does not name EVALSHA:\n%s", args, out)
				}
			}
		})
	}
}

// The rules docs/operations.md lists as additions for options: each is
// needed with its option (exit 2 naming it without), and enough with it.
func TestACL_OptionRules(t *testing.T) {
	args := aclSetUser(t)
	for _, tt := range []struct {
		rule, path string
		env        []string
		enough     bool // with the rule, solo run --once works (no replica for +wait)
	}{
		{"+select", "/1", nil, true},
		{"+client|setname", "/0?client_name=solo-test", nil, true},
		{"+wait", "/0", []string{"SOLO_ELECTION_MIN_REPLICAS=1", "SOLO_ELECTION_REPLICA_TIMEOUT=10ms"}, false},
	} {
		t.Run(tt.rule, func(t *testing.T) {
			r := newACLRig(t)
			url := "redis://solo:pw@" + r.srv.Addr() + tt.path
			env := append(append(testEnv(url, electionName(t), "a"), "SOLO_LOG_LEVEL=error"), tt.env...)
			applyACL(t, r.admin, args, "")
			code, out := soloRun(t, env, "run", "--once", "--", "true")
			if code != exitUsage || !namesRule(out, tt.rule) {
				t.Fatalf("without %s: exit %d, want 2 naming it:\n%s", tt.rule, code, out)
			}
			if !tt.enough {
				return
			}
			if err := r.admin.Do(context.Background(), "ACL", "SETUSER", "solo", tt.rule).Err(); err != nil {
				t.Fatal(err)
			}
			if code, out := soloRun(t, env, "run", "--once", "--", "true"); code != 0 {
				t.Fatalf("with %s: exit %d, want 0:\n%s", tt.rule, code, out)
			}
		})
	}
}
