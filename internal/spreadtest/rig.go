//go:build linux

package spreadtest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/redistest"
)

// Rig is one test's world: a redis-server, the instance processes and the
// history of their reports. It owns every process it starts; they are
// killed and awaited in the test's cleanup.
type Rig struct {
	T     *testing.T
	Redis *redistest.Server
	Group string
	Jobs  int
	TTL   time.Duration
	Admin *redis.Client // the test's own client, if it made one

	logDir string
	wg     sync.WaitGroup
	mu     sync.Mutex
	cond   *sync.Cond
	events []Event
	procs  map[string]*exec.Cmd
	gen    int
}

// NewRig starts a redis-server; Spawn starts instances.
func NewRig(t *testing.T, jobs int, ttl time.Duration) *Rig {
	r := &Rig{
		T: t, Redis: redistest.Start(t), Group: "g", Jobs: jobs, TTL: ttl,
		logDir: t.TempDir(), procs: map[string]*exec.Cmd{},
	}
	r.cond = sync.NewCond(&r.mu)
	t.Cleanup(func() {
		r.mu.Lock()
		for _, c := range r.procs {
			_ = c.Process.Signal(syscall.SIGKILL)
		}
		r.mu.Unlock()
		r.wg.Wait()
		if t.Failed() {
			r.dumpLogs()
		}
	})
	return r
}

// Spawn starts a new instance and returns its ID.
func (r *Rig) Spawn() string {
	t := r.T
	r.mu.Lock()
	id := fmt.Sprintf("i%02d", r.gen)
	r.gen++
	r.mu.Unlock()
	env, err := json.Marshal(InstanceConfig{ID: id, Redis: r.Redis.Addr(), Group: r.Group, Jobs: r.Jobs, TTL: r.TTL})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), InstanceEnv+"="+string(env))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := os.Create(filepath.Join(r.logDir, id+".log"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.procs[id] = cmd
	r.mu.Unlock()
	r.wg.Go(func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var ev Event
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.Inst != id {
				t.Errorf("%s: garbled report %q", id, sc.Text())
				continue
			}
			r.add(ev)
		}
		// EOF: the process exited; after Wait none of its code runs.
		_ = cmd.Wait()
		r.mu.Lock()
		delete(r.procs, id) // before the event: who waits for it sees it gone
		r.mu.Unlock()
		r.add(Event{Kind: "reaped", Inst: id, Mono: Mono()})
	})
	return id
}

func (r *Rig) add(ev Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
	r.cond.Broadcast()
}

// Kill sends SIGKILL to id and waits until it is reaped; it returns the
// kill's time.
func (r *Rig) Kill(id string) int64 { return r.signal(id, syscall.SIGKILL) }

// Stop sends SIGTERM to id (graceful leave) and waits until it exited; it
// returns the signal's time.
func (r *Rig) Stop(id string) int64 { return r.signal(id, syscall.SIGTERM) }

func (r *Rig) signal(id string, sig syscall.Signal) int64 {
	r.mu.Lock()
	c := r.procs[id]
	r.mu.Unlock()
	if c == nil {
		r.T.Fatalf("%s is not running", id)
	}
	at := Mono()
	_ = c.Process.Signal(sig)
	if !r.WaitFor(30*time.Second, func(evs []Event) bool {
		for _, ev := range evs {
			if ev.Kind == "reaped" && ev.Inst == id {
				return true
			}
		}
		return false
	}) {
		r.T.Fatalf("%s did not exit after %s", id, sig)
	}
	return at
}

// Live returns the running instances, in ID order.
func (r *Rig) Live() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for id := range r.procs {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// Events returns a copy of the history.
func (r *Rig) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// WaitFor waits until cond holds on the history, or timeout.
func (r *Rig) WaitFor(timeout time.Duration, cond func([]Event) bool) bool {
	deadline := time.Now().Add(timeout)
	stop := time.AfterFunc(timeout, r.cond.Broadcast)
	defer stop.Stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for !cond(r.events) {
		if time.Now().After(deadline) {
			return false
		}
		r.cond.Wait()
	}
	return true
}

// WaitLoads waits until the live instances run exactly want jobs each (in
// any order) and returns the time the history reached it.
func (r *Rig) WaitLoads(timeout time.Duration, want ...int) (int64, bool) {
	var at int64
	ok := r.WaitFor(timeout, func(evs []Event) bool {
		got := Loads(evs)
		var ls []int
		for _, n := range got {
			if n > 0 {
				ls = append(ls, n)
			}
		}
		sort.Ints(ls)
		w := append([]int(nil), want...)
		sort.Ints(w)
		if fmt.Sprint(ls) == fmt.Sprint(w) {
			at = evs[len(evs)-1].Mono
			return true
		}
		return false
	})
	return at, ok
}

func (r *Rig) dumpLogs() {
	if dir := os.Getenv("SOLO_SPREADTEST_LOGS"); dir != "" {
		// Keep every instance's whole log for a post-mortem.
		if err := os.CopyFS(filepath.Join(dir, filepath.Base(r.logDir)), os.DirFS(r.logDir)); err != nil {
			r.T.Logf("keep logs: %v", err)
		}
	}
	ents, _ := os.ReadDir(r.logDir)
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(r.logDir, e.Name()))
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		r.T.Logf("--- %s (last lines)\n%s", e.Name(), strings.Join(lines, "\n"))
	}
}

// Run is one job run on one instance, from the witness's view.
type Run struct {
	Job        int
	Inst       string
	Term       uint64
	Start, End int64 // End is 0 while it runs
}

// Runs returns every job run in the history; a run whose instance was
// reaped without a stop report ends at the reap (after which no code of
// the instance runs).
func Runs(evs []Event) []Run {
	type key struct {
		inst string
		job  int
	}
	open := map[key]int{}
	var out []Run
	for _, ev := range evs {
		switch ev.Kind {
		case "start":
			open[key{ev.Inst, ev.Job}] = len(out)
			out = append(out, Run{Job: ev.Job, Inst: ev.Inst, Term: ev.Term, Start: ev.Mono})
		case "stop":
			if i, ok := open[key{ev.Inst, ev.Job}]; ok {
				out[i].End = ev.Mono
				delete(open, key{ev.Inst, ev.Job})
			}
		case "reaped":
			for k, i := range open {
				if k.inst == ev.Inst {
					out[i].End = ev.Mono
					delete(open, k)
				}
			}
		}
	}
	return out
}

// Loads returns how many jobs each instance runs at the end of evs.
func Loads(evs []Event) map[string]int {
	out := map[string]int{}
	for _, r := range Runs(evs) {
		if r.End == 0 {
			out[r.Inst]++
		}
	}
	return out
}

// Overlaps returns a description of every pair of runs of one job that
// overlap in time (two runners at once), empty when there is none.
func Overlaps(evs []Event, now int64) []string {
	byJob := map[int][]Run{}
	for _, r := range Runs(evs) {
		if r.End == 0 {
			r.End = now
		}
		byJob[r.Job] = append(byJob[r.Job], r)
	}
	var out []string
	for job, rs := range byJob {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Start < rs[j].Start })
		for i := 1; i < len(rs); i++ {
			for k := range i {
				if rs[k].End > rs[i].Start {
					out = append(out, fmt.Sprintf("job %d: %s (term %d) until %d and %s (term %d) from %d",
						job, rs[k].Inst, rs[k].Term, rs[k].End, rs[i].Inst, rs[i].Term, rs[i].Start))
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// Moves counts the runs that started at or after from on another instance
// than the job's previous run.
func Moves(evs []Event, from int64) int {
	last := map[int]string{}
	n := 0
	runs := Runs(evs)
	sort.SliceStable(runs, func(i, j int) bool { return runs[i].Start < runs[j].Start })
	for _, r := range runs {
		if prev, ok := last[r.Job]; ok && prev != r.Inst && r.Start >= from {
			n++
		}
		last[r.Job] = r.Inst
	}
	return n
}

// Window is a span of time excluded from coverage (a failover window).
type Window struct{ From, To int64 }

// Coverage returns, for the worst job, the fraction of [from, to] outside
// the windows during which the job ran on some instance, and that job.
func Coverage(evs []Event, jobs int, from, to int64, windows []Window) (float64, int) {
	// The measured time: [from, to] minus the windows, as sorted disjoint spans.
	spans := subtract([]Window{{from, to}}, windows)
	total := length(spans)
	if total == 0 {
		return 1, -1
	}
	byJob := make([][]Window, jobs)
	for _, r := range Runs(evs) {
		end := r.End
		if end == 0 {
			end = to
		}
		byJob[r.Job] = append(byJob[r.Job], Window{r.Start, end})
	}
	worst, worstJob := 1.0, -1
	for j, runs := range byJob {
		idle := length(subtract(spans, runs))
		if c := 1 - float64(idle)/float64(total); c < worst {
			worst, worstJob = c, j
		}
	}
	return worst, worstJob
}

// subtract returns the parts of spans (sorted, disjoint) outside cut.
func subtract(spans, cut []Window) []Window {
	out := spans
	for _, c := range cut {
		var next []Window
		for _, s := range out {
			if c.To <= s.From || c.From >= s.To {
				next = append(next, s)
				continue
			}
			if c.From > s.From {
				next = append(next, Window{s.From, c.From})
			}
			if c.To < s.To {
				next = append(next, Window{c.To, s.To})
			}
		}
		out = next
	}
	return out
}

func length(ws []Window) int64 {
	var n int64
	for _, w := range ws {
		n += w.To - w.From
	}
	return n
}

// Outside returns how long [from, to] lasts outside the windows.
func Outside(from, to int64, windows []Window) int64 {
	return length(subtract([]Window{{from, to}}, windows))
}

// Gaps returns the spans of [from, to] outside the windows during which
// job ran nowhere.
func Gaps(evs []Event, job int, from, to int64, windows []Window) []Window {
	var runs []Window
	for _, r := range Runs(evs) {
		if r.Job != job {
			continue
		}
		end := r.End
		if end == 0 {
			end = to
		}
		runs = append(runs, Window{r.Start, end})
	}
	return subtract(subtract([]Window{{from, to}}, windows), runs)
}
