package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
)

// pinnedCommit is the last commit of this repository before the protocol
// was versioned: a solo that speaks protocol 1 without recording it. The
// skew test builds it from the repository's own history.
const pinnedCommit = "22088b4b3218082ea9b8042e033eb122fc54a082"

// skewBins are the builds the skew tests run: solo and the lock program
// (lockProg) of pinnedCommit, of this tree, and solo of a next protocol.
type skewBins struct {
	old, oldLock, cur, curLock, next string
}

// lockProg takes a lock of leader/lock again and again and writes each
// hold to the witness file: "ID start TERM NANOS" once it holds it, "ID
// end TERM NANOS" before it unlocks. Its source is compiled against the
// pinned commit and against this tree, so it uses only API both have.
const lockProg = `package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/leader/lock"
)

// usage: skewlock ADDR NAME ID OUT HOLDS fair|plain
func main() {
	ctx := context.Background()
	holds, _ := strconv.Atoi(os.Args[5])
	rdb := redis.NewClient(&redis.Options{Addr: os.Args[1], ContextTimeoutEnabled: true})
	c, err := lock.NewClient(rdb, lock.WithID(os.Args[3]))
	if err != nil {
		panic(err)
	}
	var opts []lock.Option
	if os.Args[6] == "fair" {
		opts = append(opts, lock.WithFair())
	}
	m, err := c.Mutex(os.Args[2], opts...)
	if err != nil {
		panic(err)
	}
	f, err := os.OpenFile(os.Args[4], os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		panic(err)
	}
	for range holds {
		h, err := m.Lock(ctx)
		if err != nil {
			panic(err)
		}
		fmt.Fprintf(f, "%s start %d %d\n", os.Args[3], h.Term(), time.Now().UnixNano())
		time.Sleep(5 * time.Millisecond)
		fmt.Fprintf(f, "%s end %d %d\n", os.Args[3], h.Term(), time.Now().UnixNano())
		if err := h.Unlock(ctx); err != nil {
			panic(err)
		}
	}
	_ = c.Close()
	_ = rdb.Close()
}
`

// buildSkew builds the skew tests' binaries into dir.
func buildSkew(t *testing.T, dir string) skewBins {
	t.Helper()
	var b skewBins
	b.old, b.oldLock = buildPinned(t, pinnedCommit, dir)
	start := time.Now()
	b.next = filepath.Join(dir, "solo-next")
	if out, err := exec.Command("go", "build", "-tags", "solo_skew_next", "-o", b.next, ".").CombinedOutput(); err != nil {
		t.Fatalf("build the next-protocol solo: %v\n%s", err, out)
	}
	t.Logf("built the next-protocol solo in %s", time.Since(start).Round(time.Millisecond))
	b.cur = soloBin
	// The lock program in this tree: an overlay adds it as a package of
	// this module without writing into the work tree.
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "skewlock.go")
	if err := os.WriteFile(prog, []byte(lockProg), 0o644); err != nil {
		t.Fatal(err)
	}
	overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{filepath.Join(wd, "skewlock", "main.go"): prog}})
	ov := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ov, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	b.curLock = filepath.Join(dir, "skewlock-current")
	if out, err := exec.Command("go", "build", "-overlay", ov, "-o", b.curLock, "./skewlock").CombinedOutput(); err != nil {
		t.Fatalf("build the lock program: %v\n%s", err, out)
	}
	return b
}

// buildPinned builds cmd/solo and lockProg of commit into dir and returns
// the binaries. It needs that commit in the clone (a shallow clone may
// lack it: .ci/run deepens it): without it the test fails under CI=true
// and skips elsewhere.
func buildPinned(t *testing.T, commit, dir string) (solo, lockBin string) {
	t.Helper()
	missing := func(why string) {
		msg := fmt.Sprintf("the skew test builds solo from commit %s of this repository's history: %s; clone with full history (git fetch --unshallow)", commit[:12], why)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		missing("not in a git work tree")
	}
	top := strings.TrimSpace(string(root))
	if err := exec.Command("git", "-C", top, "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
		missing("the commit is not in the clone")
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	arch := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", top, commit, src)
	if out, err := arch.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", commit, err, out)
	}
	if err := os.MkdirAll(filepath.Join(src, "skewlock"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "skewlock", "main.go"), []byte(lockProg), 0o644); err != nil {
		t.Fatal(err)
	}
	solo, lockBin = filepath.Join(dir, "solo-"+commit[:12]), filepath.Join(dir, "skewlock-"+commit[:12])
	for _, b := range [][2]string{{solo, "./cmd/solo"}, {lockBin, "./skewlock"}} {
		build := exec.Command("go", "build", "-o", b[0], b[1])
		build.Dir = src
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build %s of %s: %v\n%s", b[1], commit, err, out)
		}
	}
	t.Logf("built solo and the lock program of %s in %s", commit[:12], time.Since(start).Round(time.Millisecond))
	return solo, lockBin
}

// freeAddr returns a loopback address nobody listens on (as far as the
// kernel knows at this moment).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// witnessRun is one leadership of the witness: a script's start and its exit.
type witnessRun struct {
	id, election string
	term         uint64
	start, end   time.Time
}

// witnessRuns reads the script's lines (start, ticks, sigterm) into runs,
// one per (ID, term), in start order; a run without its sigterm line has
// no end.
func witnessRuns(t *testing.T, out string) []witnessRun {
	t.Helper()
	idx := map[string]int{}
	var runs []witnessRun
	for _, l := range readLines(t, out) {
		k := fmt.Sprintf("%s %d", l.id, l.term)
		i, ok := idx[k]
		if !ok {
			i = len(runs)
			idx[k] = i
			runs = append(runs, witnessRun{id: l.id, term: l.term})
		}
		switch l.event {
		case "start":
			runs[i].start, runs[i].election = l.at, l.election
		case "sigterm", "end":
			runs[i].end = l.at
		}
	}
	slices.SortFunc(runs, func(a, b witnessRun) int { return a.start.Compare(b.start) })
	return runs
}

// TestSkew builds the skew tests' binaries once and runs them: an
// election, a spread group and a lock shared by the solo of pinnedCommit
// and this one (and, in the election, a next protocol) through rolling
// restarts. 25-75 s on a loaded 2-core machine, most of it the builds.
func TestSkew(t *testing.T) {
	bins := buildSkew(t, t.TempDir())
	t.Run("Election", func(t *testing.T) { skewElection(t, bins) })
	t.Run("Spread", func(t *testing.T) { skewSpread(t, bins) })
	t.Run("Lock", func(t *testing.T) { skewLock(t, bins) })
}

// checkNoOverlap fails the test when two runs in the witness file out (of
// one election, with perElection) overlap, or one lacks its start or its
// end, or terms do not grow; it returns the runs.
func checkNoOverlap(t *testing.T, out string, perElection bool) []witnessRun {
	t.Helper()
	runs := witnessRuns(t, out)
	last := map[string]witnessRun{}
	for _, r := range runs {
		if r.start.IsZero() || r.end.IsZero() {
			t.Fatalf("run %s term %d has no start or no exit line:\n%s", r.id, r.term, mustRead(out))
		}
		k := ""
		if perElection {
			k = r.election
		}
		if prev, ok := last[k]; ok {
			if !r.start.After(prev.end) {
				t.Fatalf("overlap: %s (term %d) started %s before %s (term %d) exited:\n%s",
					r.id, r.term, prev.end.Sub(r.start), prev.id, prev.term, mustRead(out))
			}
			if r.term <= prev.term {
				t.Fatalf("term %d of %s not above %d of %s", r.term, r.id, prev.term, prev.id)
			}
		}
		last[k] = r
	}
	return runs
}

// skewElection runs the solo of pinnedCommit
// (protocol 1, unrecorded), this solo (protocol 1, recorded) and a build
// of a next protocol that drops protocol 1 (tag solo_skew_next) in one
// election through rolling restarts, with an outside witness: the program
// each one runs appends its start and its exit, with SOLO_TERM and the
// time, to one file. Never do two programs run at once; across the
// compatible versions leadership moves both ways (old → new, new → old);
// across the incompatible ones the newcomer refuses, loudly (error log,
// /readyz 503, solo_election_protocol_refused 1), until every instance of
// the other protocol is stopped, and then leads. Mutation: with
// acquire.lua's refusal removed, the next protocol's instance waits as an
// ordinary follower, unannounced, and the test fails with `timed out
// after 10s waiting for next: no "not campaigning" refusal within 10s`.
func skewElection(t *testing.T, bins skewBins) {
	oldBin, nextBin, soloBin := bins.old, bins.next, bins.cur
	if out, err := exec.Command(nextBin, "version").Output(); err != nil || !strings.Contains(string(out), "(protocol 2, shares an election with 2 and up)") {
		t.Fatalf("next solo version = %q %v, want protocol 2 from 2", out, err)
	}

	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	name := electionName(t)
	out := filepath.Join(t.TempDir(), "witness.log")
	argv := script(t, out, false)
	procs := map[string]*proc{}
	launch := func(bin, id string, extra ...string) *proc {
		env := append(append(testEnv(url, name, id), "OUT="+out), extra...)
		p := startBin(t, bin, env, append([]string{"run", "--"}, argv...)...)
		procs[id] = p
		return p
	}
	stop := func(id string) {
		t.Helper()
		p := procs[id]
		p.signal(syscall.SIGTERM)
		if code := p.wait(10 * time.Second); code != 0 {
			t.Fatalf("%s exited %d after SIGTERM:\n%s", id, code, p.output())
		}
		delete(procs, id)
	}
	leads := func(what string, ids ...string) string {
		t.Helper()
		l := waitLine(t, out, 10*time.Second, func(l line) bool {
			if l.event != "start" || !slices.Contains(ids, l.id) {
				return false
			}
			for _, r := range witnessRuns(t, out) {
				if r.id == l.id && r.term == l.term && r.end.IsZero() {
					return true // still running
				}
			}
			return false
		})
		t.Logf("%s: %s leads (term %d)", what, l.id, l.term)
		return l.id
	}
	follows := func(id string) {
		t.Helper()
		waitFor(t, 10*time.Second, id+" to follow", func() bool { return strings.Contains(procs[id].output(), `"leader observed"`) })
	}
	statusJSON := func(bin string) map[string]any {
		t.Helper()
		cmd := exec.Command(bin, "status", "--json", name)
		cmd.Env = testEnv(url, name, "status")
		b, err := cmd.Output()
		var rows []map[string]any
		if err != nil || json.Unmarshal(b, &rows) != nil || len(rows) != 1 {
			t.Fatalf("%s status --json = %v\n%s", filepath.Base(bin), err, b)
		}
		h, _ := rows[0]["holder"].(map[string]any)
		return h
	}

	// Compatible: the pinned solo and this one, both ways.
	launch(oldBin, "old1")
	leads("start", "old1")
	launch(oldBin, "old2")
	follows("old2")
	stop("old2") // the follower first
	launch(soloBin, "new2")
	follows("new2")
	if h := statusJSON(soloBin); h == nil || !strings.HasPrefix(h["id"].(string), "old1-") || h["protocol"] != nil {
		t.Fatalf("status of the old holder = %v, want old1 with no protocol recorded", h)
	}
	stop("old1") // the leader: old → new
	leads("old → new", "new2")
	launch(soloBin, "new1")
	follows("new1")
	if h := statusJSON(soloBin); h == nil || h["protocol"] != float64(leader.Protocol) || h["min_peer_protocol"] != float64(leader.MinPeerProtocol) {
		t.Fatalf("status of the new holder = %v, want protocol %d from %d", h, leader.Protocol, leader.MinPeerProtocol)
	}
	if h := statusJSON(oldBin); h == nil || !strings.HasPrefix(h["id"].(string), "new2-") {
		t.Fatalf("the old solo's status of the new holder = %v, want new2", h)
	}
	stop("new1")
	launch(oldBin, "old3")
	follows("old3")
	stop("new2") // new → old (a rollback)
	leads("new → old", "old3")
	launch(soloBin, "new3")
	follows("new3")

	// Incompatible: the next protocol refuses while a protocol 1 instance
	// holds the lease, and leads once every one of them is stopped.
	addr := freeAddr(t)
	next := launch(nextBin, "next1", "SOLO_HTTP_ADDR="+addr)
	waitFor(t, 10*time.Second, `next: no "not campaigning" refusal within 10s`, func() bool {
		return strings.Contains(next.output(), `"not campaigning: the holder speaks a protocol this build does not share an election with`)
	})
	if strings.Contains(next.output(), `"elected"`) {
		t.Fatalf("next1 led beside a protocol 1 holder:\n%s", next.output())
	}
	waitFor(t, 5*time.Second, "next1's /readyz to fail", func() bool {
		code, body := httpGet(t, "http://"+addr+"/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "version skew") && strings.Contains(body, "speaks protocol 1")
	})
	if _, body := httpGet(t, "http://"+addr+"/metrics"); !strings.Contains(body, `solo_election_protocol_refused{election="`+name+`"} 1`) {
		t.Fatalf("next1's /metrics has no solo_election_protocol_refused 1:\n%s", body)
	}
	if h := statusJSON(soloBin); h == nil || !strings.HasPrefix(h["id"].(string), "old3-") {
		t.Fatalf("holder while next1 refuses = %v, want old3 still", h)
	}
	stop("new3") // the stop-the-world of protocol 1: followers, then the holder
	stop("old3")
	leads("next after the stop-the-world", "next1")
	waitFor(t, 5*time.Second, "next1's /readyz to pass", func() bool {
		code, _ := httpGet(t, "http://"+addr+"/readyz")
		return code == http.StatusOK
	})
	// A rollback to this solo refuses the next protocol's holder; the
	// pinned solo cannot tell and waits as a follower: neither runs.
	back := launch(soloBin, "new4")
	waitFor(t, 10*time.Second, `new4: no "not campaigning" refusal`, func() bool {
		return strings.Contains(back.output(), `"not campaigning: the holder speaks a protocol this build does not share an election with`) &&
			strings.Contains(back.output(), "speaks protocol 2 and shares an election with protocols 2 and up")
	})
	launch(oldBin, "old4")
	follows("old4")
	time.Sleep(time.Second) // a few more refused and held acquires
	stop("next1")
	leads("after the next protocol's holder left", "new4", "old4")
	stop("new4")
	stop("old4")

	runs := checkNoOverlap(t, out, false)
	var ids []string
	for _, r := range runs {
		ids = append(ids, fmt.Sprintf("%s/%d", r.id, r.term))
	}
	t.Logf("runs in order: %s", strings.Join(ids, " "))
}

// skewSpread: a spread group of four jobs shared by the solo of
// pinnedCommit and this one through a rolling restart (old, old → old,
// new → new, new → new, new, old), each job's program writing the same
// witness lines: never two runs of one job at once, and every job runs
// again on a member of either version after each step.
func skewSpread(t *testing.T, bins skewBins) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	dir := t.TempDir()
	out := filepath.Join(dir, "witness.log")
	argv := script(t, out, false)
	cfgPath := filepath.Join(dir, "config.yaml")
	yaml := "election:\n  mode: spread\njobs:\n"
	for _, j := range []string{"a", "b", "c", "d"} {
		yaml += "  - name: " + j + "\n    command: [\"sh\", \"" + argv[1] + "\"]\n"
	}
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	procs := map[string]*proc{}
	launch := func(bin, id string) {
		env := slices.DeleteFunc(testEnv(url, "skewgrp", id), func(kv string) bool { return strings.HasPrefix(kv, "SOLO_CONFIG=") })
		procs[id] = startBin(t, bin, append(env, "SOLO_CONFIG="+cfgPath, "OUT="+out), "run")
	}
	stop := func(id string) {
		t.Helper()
		p := procs[id]
		p.signal(syscall.SIGTERM)
		if code := p.wait(15 * time.Second); code != 0 {
			t.Fatalf("%s exited %d after SIGTERM:\n%s", id, code, p.output())
		}
		delete(procs, id)
	}
	// settled waits until all four jobs run and each of ids runs one.
	settled := func(what string, ids ...string) {
		t.Helper()
		waitFor(t, 30*time.Second, what, func() bool {
			jobs, by := map[string]bool{}, map[string]int{}
			for _, r := range witnessRuns(t, out) {
				if !r.start.IsZero() && r.end.IsZero() {
					jobs[r.election] = true
					by[r.id]++
				}
			}
			for _, id := range ids {
				if by[id] == 0 {
					return false
				}
			}
			return len(jobs) == 4
		})
	}
	launch(bins.old, "old1")
	launch(bins.old, "old2")
	settled("the old members to run the four jobs", "old1", "old2")
	stop("old2")
	launch(bins.cur, "new2")
	settled("old1 and new2 to run the four jobs", "old1", "new2")
	stop("old1")
	launch(bins.cur, "new1")
	settled("the new members to run the four jobs", "new1", "new2")
	launch(bins.old, "old3")
	settled("new1, new2 and old3 to run the four jobs", "new1", "new2", "old3")
	for _, id := range []string{"new1", "new2", "old3"} {
		stop(id)
	}
	runs := checkNoOverlap(t, out, true)
	t.Logf("%d job runs, none overlapping within its job", len(runs))
}

// skewLock: the lock program of pinnedCommit and of this tree, two
// processes each, take one lock 25 times each, plain and fair: the
// holds (written while held) never overlap and both versions hold it.
func skewLock(t *testing.T, bins skewBins) {
	srv := redistest.Start(t)
	for _, mode := range []string{"plain", "fair"} {
		out := filepath.Join(t.TempDir(), "witness.log")
		done := make(chan error, 4)
		for i, bin := range []string{bins.oldLock, bins.curLock, bins.oldLock, bins.curLock} {
			id := fmt.Sprintf("new%d", i)
			if bin == bins.oldLock {
				id = fmt.Sprintf("old%d", i)
			}
			cmd := exec.CommandContext(t.Context(), bin, srv.Addr(), "skewlock-"+mode, id, out, "25", mode) // killed when the test ends, a failed one included
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			go func() {
				b, err := cmd.CombinedOutput()
				if err != nil {
					err = fmt.Errorf("%s: %w\n%s", id, err, b)
				}
				done <- err
			}()
		}
		for range 4 {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("%s: %v", mode, err)
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("%s: the lock programs did not finish within 60s:\n%s", mode, mustRead(out))
			}
		}
		runs := checkNoOverlap(t, out, false)
		by := map[string]int{}
		for _, r := range runs {
			by[r.id[:3]]++
		}
		if len(runs) != 100 || by["old"] == 0 || by["new"] == 0 {
			t.Fatalf("%s: %d holds (%v), want 100 from both versions", mode, len(runs), by)
		}
		t.Logf("%s: %d holds (%v), none overlapping", mode, len(runs), by)
	}
}
