// Command bench measures solo side by side with the usual alternatives for
// electing a leader through Redis, on redis-servers it starts itself on
// loopback, and prints the results as Markdown.
//
//	cd bench && go run . -o ../docs/bench.md     # full run, about 5–6 minutes on 2 cores
//	cd bench && go run . -quick                  # fewer runs and trials, to stdout
//	go run -C bench . -o ../docs/bench.md        # the same from the repository root
//	cd bench && go run . -idle -o ../docs/bench.md   # the idle cost of solo run only (idle.go)
//
// See README.md beside this file for what each figure measures.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// profile is how much to measure.
type profile struct {
	name string
	runs int // runs behind every median and min–max

	cycleTime   time.Duration // length of one lock-cycle run
	concurrency []int         // goroutines of the lock-cycle figure
	costOps     int           // operations behind figure 1's Redis CPU per operation

	handoverTime time.Duration // length of one run of one peer in figure 6

	ttl            time.Duration // lease TTL of figures 2–4
	handoffTrials  int           // graceful handoffs per run
	failoverTrials int           // crash failovers per run
	parallel       int           // trials of figures 2 and 3 in flight at once

	followers  []int         // waiting candidates of figure 4
	loadWindow time.Duration // one measured window of figure 4

	scaleSizes  []int         // elections of figure 5
	scaleTTL    time.Duration // lease TTL of figure 5
	scaleWindow time.Duration // one CPU window of figure 5
}

// fullProfile is the default: about 5–6 minutes on 2 cores.
func fullProfile() profile {
	return profile{
		name: "full", runs: 3,
		cycleTime: 600 * time.Millisecond, concurrency: []int{1, 8, 64}, costOps: 1000,
		handoverTime: 800 * time.Millisecond,
		ttl:          time.Second, handoffTrials: 50, failoverTrials: 20, parallel: 10,
		followers: []int{1, 10, 100}, loadWindow: 3 * time.Second,
		scaleSizes: []int{1000, 10000}, scaleTTL: 10 * time.Second, scaleWindow: 10 * time.Second / 3,
	}
}

// quickProfile is -quick: fewer runs, trials and elections.
func quickProfile() profile {
	return profile{
		name: "quick", runs: 2,
		cycleTime: 200 * time.Millisecond, concurrency: []int{1, 8, 64}, costOps: 500,
		handoverTime: 500 * time.Millisecond,
		ttl:          time.Second, handoffTrials: 15, failoverTrials: 5, parallel: 5,
		followers: []int{1, 10}, loadWindow: 2 * time.Second,
		scaleSizes: []int{1000}, scaleTTL: 10 * time.Second, scaleWindow: 10 * time.Second / 3,
	}
}

// env is what every figure works with. Figures 1–3 share three servers
// (redsync-3 uses all of them, every other peer the first); figures 4 and
// 5 start servers of their own through lab.
type env struct {
	lab   *lab
	nodes []*server
	prof  profile
	self  string // this binary, re-executed as the crash-failover child
	log   io.Writer
}

func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(e.log, "bench: "+format+"\n", args...)
}

// figure is one section of the report.
type figure struct {
	title   string
	body    string // Markdown
	targets []target
}

// target is one row of the report's summary.
type target struct {
	what string // the target, as stated
	solo string // solo's figure
	peer string // the best peer's, or "—"
	ok   bool
}

func main() {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "fewer runs and trials (about a minute)")
	out := fs.String("o", "", "write the Markdown report to this file instead of standard output")
	only := fs.String("figures", "1,2,3,4,5,6,7", "comma-separated figures to run")
	bin := fs.String("redis-server", "redis-server", "redis-server binary")
	idle := fs.Bool("idle", false, "measure the idle cost of `solo run` instead of the figures, and rewrite only its section of -o")
	idleBaseline := fs.String("idle-baseline", "df0614a", "git `revision` whose solo -idle measures as \"before\" (\"\": none)")
	idleRoot := fs.String("idle-root", "..", "the solo repository whose cmd/solo -idle builds")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *idle {
		return runIdleCommand(idleConfig{root: *idleRoot, baseline: *idleBaseline}, *quick, *bin, *out, stdout, stderr)
	}
	prof := fullProfile()
	if *quick {
		prof = quickProfile()
	}
	want, err := parseFigures(*only)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	report, err := measure(ctx, prof, want, *bin, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	if *out == "" {
		_, err = io.WriteString(stdout, report)
	} else {
		err = os.WriteFile(*out, []byte(keepTail(*out, report)), 0o644)
	}
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	return 0
}

// runIdleCommand is bench -idle: it measures, then prints the section or
// writes it into out.
func runIdleCommand(cfg idleConfig, quick bool, redisBin, out string, stdout, stderr io.Writer) int {
	cfg.windows, cfg.window, cfg.warmup = 3, 10*time.Second, 5*time.Second
	if quick {
		cfg.windows, cfg.window = 1, 4*time.Second
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	section, err := runIdle(ctx, cfg, redisBin, stderr)
	if err == nil && out == "" {
		_, err = io.WriteString(stdout, section)
	} else if err == nil {
		err = writeIdle(out, section)
	}
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	return 0
}

// keptMarker starts the part of the report file that other measurements
// wrote (internal/spreadtest's figures): a rewrite keeps it.
const keptMarker = "<!-- Sections below are not generated by bench/: it keeps them when it rewrites this file. -->"

// keepTail returns report followed by the part of the file at path from
// keptMarker on, if the file has one.
func keepTail(path, report string) string {
	old, err := os.ReadFile(path)
	if err != nil {
		return report
	}
	i := strings.Index(string(old), keptMarker)
	if i < 0 {
		return report
	}
	return strings.TrimRight(report, "\n") + "\n\n" + string(old[i:])
}

// measure starts the servers, runs the figures in want and returns the
// report.
func measure(ctx context.Context, prof profile, want []int, bin string, log io.Writer) (string, error) {
	began := time.Now()
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	l, err := newLab(bin)
	if err != nil {
		return "", err
	}
	defer l.Close()
	nodes, err := l.startN(3)
	if err != nil {
		return "", err
	}
	e := &env{lab: l, nodes: nodes, prof: prof, self: self, log: log}
	loadBefore := loadAverage()
	redisVersion, err := serverVersion(ctx, nodes[0].addr)
	if err != nil {
		return "", err
	}

	all := []struct {
		n  int
		fn func(context.Context, *env) (figure, error)
	}{
		{1, cycleFigure},
		{2, handoffFigure},
		{3, failoverFigure},
		{4, loadFigure},
		{5, scaleFigure},
		{6, handoverFigure},
		{7, contendFigure},
	}
	var figs []figure
	for _, f := range all {
		if !slices.Contains(want, f.n) {
			continue
		}
		start := time.Now()
		e.logf("figure %d…", f.n)
		fig, err := f.fn(ctx, e)
		if err != nil {
			return "", fmt.Errorf("figure %d: %w", f.n, err)
		}
		e.logf("figure %d done in %s", f.n, time.Since(start).Round(time.Second))
		figs = append(figs, fig)
	}
	out := render(prof, figs, redisVersion, time.Since(began))
	// The load of the machine, from other work too, bounds how far
	// millisecond latencies can be trusted.
	return strings.Replace(out, "| Go | ", "| load average (1 5 15 min) | "+loadBefore+" at the start, "+loadAverage()+" at the end |\n| Go | ", 1), nil
}

// loadAverage returns the first three fields of /proc/loadavg.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func parseFigures(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 7 {
			return nil, fmt.Errorf("-figures: %q is not a figure (1–7)", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func serverVersion(ctx context.Context, addr string) (string, error) {
	cs := dial([]string{addr}, nil)
	defer cs.Close()
	info, err := cs[0].Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	return infoField(info, "redis_version"), nil
}

// render writes the report.
func render(prof profile, figs []figure, redisVersion string, took time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# solo compared with other Redis leader elections\n\n")
	fmt.Fprintf(&b, "Generated by `bench/` (`cd bench && go run . -o ../docs/bench.md`); do not edit by hand.\n\n")
	fmt.Fprintf(&b, "Measured on a **noisy, shared 2-core machine**: absolute numbers move from run to run, "+
		"so every peer is measured in the same run, on the same redis-server, with the runs of different peers interleaved. "+
		"Each figure is the median of %d runs with the min–max of the runs in parentheses.\n\n", prof.runs)
	fmt.Fprintf(&b, "| | |\n| --- | --- |\n")
	fmt.Fprintf(&b, "| date | %s |\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "| machine | %s, %d CPUs (GOMAXPROCS %d), %s/%s |\n", cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(&b, "| Redis | %s on 127.0.0.1, `--save \"\" --appendonly no`, started by the bench |\n", redisVersion)
	fmt.Fprintf(&b, "| Go | %s |\n", runtime.Version())
	fmt.Fprintf(&b, "| libraries | %s |\n", depVersions())
	fmt.Fprintf(&b, "| profile | %s (%d runs); whole run took %s |\n\n", prof.name, prof.runs, took.Round(time.Second))

	b.WriteString("## Targets\n\n")
	b.WriteString("| target | solo | best peer | met |\n| --- | --- | --- | --- |\n")
	for _, f := range figs {
		for _, t := range f.targets {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", t.what, t.solo, t.peer, mark(t.ok))
		}
	}
	for _, f := range figs {
		for _, t := range f.targets {
			if !t.ok && (strings.HasPrefix(t.what, "lock cycles/s") || strings.HasPrefix(t.what, "solo-lock cycles/s")) {
				b.WriteString(cycleMissNote)
				goto peers
			}
		}
	}
peers:
	b.WriteString("\n## Peers\n\n| peer | what it is |\n| --- | --- |\n")
	for _, p := range peers() {
		fmt.Fprintf(&b, "| %s | %s |\n", p.name, p.about)
	}
	b.WriteString("\nAll peers use solo's timing for the TTL of the figure: renew every TTL/3 (RenewInterval), " +
		"retry every TTL/5 (RetryInterval). Every peer gets its own go-redis v9 clients with default options plus ContextTimeoutEnabled.\n")
	for _, f := range figs {
		fmt.Fprintf(&b, "\n## %s\n\n%s", f.title, f.body)
	}
	return b.String()
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func depVersions() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	var out []string
	for _, d := range bi.Deps {
		switch d.Path {
		case "github.com/redis/go-redis/v9", "github.com/bsm/redislock", "github.com/go-redsync/redsync/v4":
			out = append(out, d.Path+" "+d.Version)
		}
	}
	if len(out) == 0 {
		return "unknown"
	}
	return strings.Join(out, ", ")
}

// errSkip marks a trial that was discarded rather than failed.
var errSkip = errors.New("trial discarded")

// cycleMissNote explains a missed lock-cycle target: the round trips are
// equal (one per operation); the difference is the work on either side.
const cycleMissNote = "\n**Why solo's lock cycles can trail the bare `SET NX PX`:** every peer but polling makes one round trip per acquire " +
	"and per release (figure 1's round-trip table), so the difference is work on either side of the wire. With one goroutine " +
	"nothing can share a round trip: solo-lock's client does about what redislock's does, and on the server its acquire " +
	"script mints the fencing term into a hash of hold counts (HKEYS, TIME, SET…GET on the term key, HSET, PEXPIRE: five calls " +
	"against redislock's one SET NX PX) and its release PUBLISHes the notice that spares waiters from polling; figure 1's Redis " +
	"cost table gives both. Where the work of both sides adds up (the shared placement, and the unpinned runs whenever the " +
	"scheduler puts both on one CPU) the term's server work is the gap. From 8 goroutines on, solo-lock's Client sends the " +
	"calls made while two are in flight as one pipeline (solo-lock-unbatched: the same locks with a Client each, so no call " +
	"shares a round trip), which more than pays for the term; `bench/README.md` gives the profile.\n"
