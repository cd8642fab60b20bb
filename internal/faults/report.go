//go:build linux

package faults

import (
	"bytes"
	"cmp"
	_ "embed"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The hand-written parts of docs/faults.md: how to run and read the suite
// (guide.md), and which change to leader makes which row fail. The
// narratives of past runs stay in notes.md, which the report leaves out.
var (
	//go:embed guide.md
	guideMD string
	//go:embed mutations.md
	mutationsMD string
)

// Profile is how much of each row a run does.
type Profile struct {
	// Name is "short" (CI) or "long" (the published figures).
	Name string
	// Long is the iteration count of every row variant in the long profile.
	Long int
}

// CurrentProfile reads SOLO_FAULTS ("long" selects the long profile) and
// SOLO_FAULTS_ITERATIONS (the long profile's iterations per variant,
// default 25).
func CurrentProfile() Profile {
	p := Profile{Name: "short", Long: 25}
	if os.Getenv("SOLO_FAULTS") == "long" {
		p.Name = "long"
	}
	if n, err := strconv.Atoi(os.Getenv("SOLO_FAULTS_ITERATIONS")); err == nil && n > 0 {
		p.Long = n
	}
	return p
}

// Iterations returns short in the short profile and the long count in the
// long one.
func (p Profile) Iterations(short int) int {
	if p.Name == "long" {
		return max(p.Long, short)
	}
	return short
}

// RowStats are the figures of one row (or variant) of the fault table,
// accumulated over its iterations. It is safe for concurrent use.
type RowStats struct {
	Name string

	mu             sync.Mutex
	iterations     int
	faults         int
	overlaps       int
	longest        time.Duration
	staleRefused   int
	staleAccepted  int
	falseFailovers int
	failover       []time.Duration
	handover       []time.Duration
	extra          map[string][]time.Duration
	extraOrder     []string
	counts         map[string]int
	countOrder     []string
}

// Iteration counts one iteration that injected n faults.
func (s *RowStats) Iteration(faults int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.iterations++
	s.faults += faults
}

// AddRun adds a finished run's overlaps and stale writes.
func (s *RowStats) AddRun(res Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range res.Overlaps {
		s.overlaps++
		s.longest = max(s.longest, o.Dur())
	}
	s.staleRefused += res.StaleRefused
	s.staleAccepted += len(res.Witness.Stale)
}

// Failover records the time from a fault to the next leader's start.
func (s *RowStats) Failover(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failover = append(s.failover, d)
}

// Handover records the gap from a leader's stop to the next one's start.
func (s *RowStats) Handover(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handover = append(s.handover, d)
}

// FalseFailover counts a leadership change where the fault must not cause
// one.
func (s *RowStats) FalseFailover() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.falseFailovers++
}

// Measure records a further named duration, reported as p50/p99/max.
func (s *RowStats) Measure(name string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.extra == nil {
		s.extra = map[string][]time.Duration{}
	}
	if _, ok := s.extra[name]; !ok {
		s.extraOrder = append(s.extraOrder, name)
	}
	s.extra[name] = append(s.extra[name], d)
}

// Count adds n to a named counter, reported as is.
func (s *RowStats) Count(name string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.counts == nil {
		s.counts = map[string]int{}
	}
	if _, ok := s.counts[name]; !ok {
		s.countOrder = append(s.countOrder, name)
	}
	s.counts[name] += n
}

// Report collects the rows of one test binary run.
type Report struct {
	mu    sync.Mutex
	rows  []*RowStats
	start time.Time
}

// NewReport returns an empty report whose wall time starts now.
func NewReport() *Report { return &Report{start: time.Now()} }

// Row returns the stats of the named row, created on first use.
func (r *Report) Row(name string) *RowStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.rows {
		if s.Name == name {
			return s
		}
	}
	s := &RowStats{Name: name}
	r.rows = append(r.rows, s)
	return s
}

// rowOrder is the order of the rows in docs/faults.md: a row is ranked by
// the first of these its name contains; others go last.
var rowOrder = []string{
	"leader SIGKILL", "graceful stop (SIGTERM)", "graceful stop (resign)",
	"leader SIGSTOP 0.5", "leader SIGSTOP 1.5", "leader SIGSTOP 3.0",
	"link cut both", "link cut requests", "link cut replies",
	"latency 50", "connection resets", "latency 400",
	"(CLIENT PAUSE) 0.5", "(CLIENT PAUSE) 2.0", "(SIGSTOP) 0.5", "(SIGSTOP) 2.0",
	"redis-server SIGKILL", "with MinReplicas", "without MinReplicas",
	"lease deleted", "lease expired", "cancellation, voluntary", "cancellation, lease lost",
	"12 candidates",
}

// lockRowOrder orders the rows of package leader/lock (lock_test.go,
// named "lock: …"), which follow the elections' rows.
var lockRowOrder = []string{
	"holder SIGKILL", "holder SIGSTOP", "link cut both", "link cut replies",
	"redis-server SIGKILL", "6 candidates",
}

func rowRank(name string) int {
	if rest, ok := strings.CutPrefix(name, "lock: "); ok {
		for i, key := range lockRowOrder {
			if strings.Contains(rest, key) {
				return len(rowOrder) + 1 + i
			}
		}
		return len(rowOrder) + 1 + len(lockRowOrder)
	}
	for i, key := range rowOrder {
		if strings.Contains(name, key) {
			return i
		}
	}
	return len(rowOrder)
}

// Markdown renders the report. failed says whether any test failed.
func (r *Report) Markdown(p Profile, failed bool) string {
	r.mu.Lock()
	rows := slices.Clone(r.rows)
	r.mu.Unlock()
	slices.SortStableFunc(rows, func(a, b *RowStats) int { return cmp.Compare(rowRank(a.Name), rowRank(b.Name)) })
	var b strings.Builder
	b.WriteString("# solo fault suite: measured figures\n\n")
	b.WriteString("<!-- Generated by `go test ./internal/faults` (internal/faults/report.go); do not edit by hand. -->\n\n")
	fmt.Fprintf(&b, "- Measured: %s, profile **%s** (%s), wall time %s.\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), p.Name, iterationsText(p), time.Since(r.start).Round(time.Second))
	fmt.Fprintf(&b, "- Machine: %s, %d cores, shared with other engineers' test runs (noisy); candidates, proxies and Redis on loopback.\n",
		runtime.GOOS+"/"+runtime.GOARCH, runtime.NumCPU())
	fmt.Fprintf(&b, "- Versions: %s, %s, SQLite store via modernc.org/sqlite (WAL).\n", runtime.Version(), redisVersion())
	t := DefaultTiming()
	fmt.Fprintf(&b, "- Timing: TTL %s, renew interval %s, renew deadline %s (stop budget %s), retry %s; Redis client timeouts %s; jobs write every %s–%s.\n",
		t.TTL, t.RenewInterval, t.RenewDeadline, t.TTL-t.RenewDeadline, t.RetryInterval, t.RedisTimeout, t.WriteMin, t.WriteMax)
	lt, lm := LockTiming(), DefaultLockMode()
	fmt.Fprintf(&b, "- Lock rows (`lock: …`) timing: TTL %s, renew interval %s, renew deadline %s (stop budget %s), retry %s; Redis client timeouts %s; holds of %s–%s.\n",
		lt.TTL, lt.RenewInterval, lt.RenewDeadline, lt.TTL-lt.RenewDeadline, lt.RetryInterval, lt.RedisTimeout, lm.HoldMin, lm.HoldMax)
	fmt.Fprintf(&b, "- Seed %d (replay: `SOLO_FAULTS_SEED=%d`).", Seed(), Seed())
	if failed {
		b.WriteString(" **Some invariant failed in this run; see the test output.**")
	}
	b.WriteString("\n\n")
	b.WriteString("Overlaps are of leader-function intervals (CLOCK_MONOTONIC start/stop of each candidate's job, a SIGKILLed one ending when it was reaped); ")
	b.WriteString("in rows whose fault the lease model does not cover (pauses, data loss, early expiry, a job ignoring cancellation) they are expected and level 2 is what must hold. ")
	b.WriteString("Stale writes: attempts of a term below the store's claimed term; refused = the fence said ErrStaleTerm, accepted = committed after a higher claim by the store's own commit-order log. ")
	b.WriteString("Failover: from the fault (kill, resume, heal, stall end…) to the next leader's start; handover: from the old job's stop to the new one's start.\n\n")
	b.WriteString("| row | iterations | faults | overlaps (n, longest) | stale writes attempted / refused / accepted | failover p50 / p99 / max | handover p50 / p99 / max | false failovers |\n")
	b.WriteString("| --- | ---: | ---: | --- | --- | --- | --- | ---: |\n")
	for _, s := range rows {
		s.mu.Lock()
		ov := "0"
		if s.overlaps > 0 {
			ov = fmt.Sprintf("%d, %s", s.overlaps, fmtDur(s.longest))
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %s | %d / %d / %d | %s | %s | %d |\n",
			s.Name, s.iterations, s.faults, ov,
			s.staleRefused+s.staleAccepted, s.staleRefused, s.staleAccepted,
			dist(s.failover), dist(s.handover), s.falseFailovers)
		s.mu.Unlock()
	}
	b.WriteString("\n## Further measurements\n\n| row | measure | n | p50 / p99 / max |\n| --- | --- | ---: | --- |\n")
	for _, s := range rows {
		s.mu.Lock()
		for _, name := range s.extraOrder {
			fmt.Fprintf(&b, "| %s | %s | %d | %s |\n", s.Name, name, len(s.extra[name]), dist(s.extra[name]))
		}
		for _, name := range s.countOrder {
			fmt.Fprintf(&b, "| %s | %s | %d | |\n", s.Name, name, s.counts[name])
		}
		s.mu.Unlock()
	}
	b.WriteString("\n")
	b.WriteString(guideMD)
	b.WriteString("\n")
	b.WriteString(mutationsMD)
	return b.String()
}

// WriteFile writes the report to path; a relative path is taken from the
// module root (the directory holding go.mod).
func (r *Report) WriteFile(path string, p Profile, failed bool) (string, error) {
	if !filepath.IsAbs(path) {
		root, err := moduleRoot()
		if err != nil {
			return "", err
		}
		path = filepath.Join(root, path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	return path, os.WriteFile(path, []byte(r.Markdown(p, failed)), 0o644)
}

func iterationsText(p Profile) string {
	if p.Name == "long" {
		return fmt.Sprintf("%d iterations per row variant", p.Long)
	}
	return "a few iterations per row variant"
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

func redisVersion() string {
	out, err := exec.Command("redis-server", "--version").Output()
	if err != nil {
		return "redis-server (version unknown)"
	}
	for f := range strings.FieldsSeq(string(bytes.TrimSpace(out))) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return "Redis " + v
		}
	}
	return strings.TrimSpace(string(out))
}

// dist renders p50 / p99 / max (nearest rank), or "–" without samples.
func dist(ds []time.Duration) string {
	if len(ds) == 0 {
		return "–"
	}
	s := slices.Clone(ds)
	slices.SortFunc(s, cmp.Compare)
	return fmt.Sprintf("%s / %s / %s", fmtDur(Percentile(s, 50)), fmtDur(Percentile(s, 99)), fmtDur(s[len(s)-1]))
}

// Percentile returns the nearest-rank p-th percentile of sorted.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%dms", d.Milliseconds())
	default:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	}
}
