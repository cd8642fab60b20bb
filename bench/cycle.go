package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/solo-run/solo/leader"
)

// cycleRun is one lock-cycle run of one peer at one concurrency.
type cycleRun struct {
	perSec   float64
	p50, p99 time.Duration
	// CPU per cycle: this process (getrusage) and the servers' main
	// threads (schedstat). Unlike the rates, these hardly move when other
	// processes compete for the CPUs.
	clientCPU, serverCPU time.Duration
}

// trips is what one acquire, renew and release cost, in round trips; renew
// is -1 for a peer that renews on its own (errWatchdog).
type trips struct{ acquire, renew, release int64 }

// cycleFigure measures figure 1: acquire + release cycles per second and
// their latency with 1, 8 and 64 goroutines each on its own key, in every
// placement (unpinned, and pinned with taskset when it can); the round
// trips of one acquire, renew and release; and the Redis CPU of one
// acquire and one release.
func cycleFigure(ctx context.Context, e *env) (figure, error) {
	t, err := timingFor(leader.DefaultTTL)
	if err != nil {
		return figure{}, err
	}
	ps := peers()
	cs := make([]clients, len(ps))
	cnt := make([]*counter, len(ps))
	for i, p := range ps {
		cnt[i] = &counter{}
		cs[i] = dial(addrsOf(e.nodes[:p.nodes]), cnt[i])
		defer cs[i].Close()
	}

	// Round trips first: this also loads every script into the script
	// cache, so no EVALSHA of the runs falls back to EVAL.
	rts := make([]trips, len(ps))
	for i, p := range ps {
		if rts[i], err = roundTrips(ctx, p, cs[i], cnt[i], t); err != nil {
			return figure{}, fmt.Errorf("%s: %w", p.name, err)
		}
	}
	costs := make(map[string]opCost)
	for i, p := range ps {
		if !slices.Contains(costPeers, p.name) {
			continue
		}
		if costs[p.name], err = serverCost(ctx, p, cs[i], e.nodes[0], t, e.prof.costOps); err != nil {
			return figure{}, fmt.Errorf("%s: Redis CPU: %w", p.name, err)
		}
	}

	var placed []placedRuns
	for _, pl := range placements() {
		pr := placedRuns{pl: pl, runs: make(map[string]map[int][]cycleRun)}
		if pl.pinned {
			pin, err := pin(pl, e.nodes)
			if err != nil {
				pr.skipped = err
				placed = append(placed, pr)
				e.logf("  placement %s skipped: %v", pl.name, err)
				continue
			}
			err = cyclePlacement(ctx, e, pl, ps, cs, t, pr.runs)
			if uerr := pin.undo(); err == nil && uerr != nil {
				err = fmt.Errorf("undo pinning: %w", uerr)
			}
			if err != nil {
				return figure{}, fmt.Errorf("placement %s: %w", pl.name, err)
			}
		} else if err := cyclePlacement(ctx, e, pl, ps, cs, t, pr.runs); err != nil {
			return figure{}, fmt.Errorf("placement %s: %w", pl.name, err)
		}
		placed = append(placed, pr)
	}
	return cycleReport(ps, placed, rts, costs, e.prof), nil
}

// placedRuns is the runs of one placement, by peer and goroutines.
type placedRuns struct {
	pl      placement
	runs    map[string]map[int][]cycleRun
	skipped error // the placement could not be applied
}

// cyclePlacement runs every run of placement pl into runs.
func cyclePlacement(ctx context.Context, e *env, pl placement, ps []peer, cs []clients, t timing, runs map[string]map[int][]cycleRun) error {
	var idx []int
	for i, p := range ps {
		if pl.has(p.name) {
			idx = append(idx, i)
			runs[p.name] = make(map[int][]cycleRun)
		}
	}
	for r := range e.prof.runs {
		for _, conc := range e.prof.concurrency {
			// Rotate the order so no peer always runs first or last.
			for k := range idx {
				i := idx[(k+r)%len(idx)]
				p := ps[i]
				res, err := cycleOnce(ctx, p, cs[i], e.nodes[:p.nodes], t, conc, pl.runTime(e.prof), pl.name)
				if err != nil {
					return fmt.Errorf("%s × %d: %w", p.name, conc, err)
				}
				runs[p.name][conc] = append(runs[p.name][conc], res)
			}
		}
		e.logf("  lock cycle %s run %d/%d", pl.name, r+1, e.prof.runs)
	}
	return nil
}

// cycleOnce runs conc goroutines, each acquiring and releasing its own key
// for d, and returns the cycles per second and latency percentiles.
func cycleOnce(ctx context.Context, p peer, cs clients, nodes []*server, t timing, conc int, d time.Duration, where string) (res cycleRun, err error) {
	ms := make([]mutex, conc)
	keys := make([]string, conc)
	for g := range keys {
		keys[g] = fmt.Sprintf("bench-cycle-%s-%s-%d-%d", where, p.name, conc, g)
	}
	if p.group != nil {
		var closeGroup func() error
		if ms, closeGroup, err = p.group(cs, keys, "cycle", t); err != nil {
			return cycleRun{}, err
		}
		defer func() {
			if cerr := closeGroup(); err == nil {
				err = cerr
			}
		}()
	} else {
		for g := range ms {
			ms[g] = p.mutex(cs, keys[g], fmt.Sprintf("cycle-%d", g), t)
		}
	}
	defer func() {
		for _, m := range ms {
			if cerr := closeMutex(m); err == nil {
				err = cerr
			}
		}
	}()
	lat := make([][]time.Duration, conc)
	errs := make([]error, conc)
	start := make(chan struct{})
	serverCPU := func() (time.Duration, error) {
		var sum time.Duration
		for _, n := range nodes {
			c, err := n.mainThreadCPU()
			if err != nil {
				return 0, err
			}
			sum += c
		}
		return sum, nil
	}
	var begin time.Time
	var wg sync.WaitGroup
	for g := range conc {
		wg.Go(func() {
			<-start
			l := make([]time.Duration, 0, 1024)
			for time.Since(begin) < d && ctx.Err() == nil {
				t0 := time.Now()
				ok, err := ms[g].tryAcquire(ctx)
				if err == nil && !ok {
					err = errors.New("own key held by someone else")
				}
				if err == nil {
					err = ms[g].release(ctx)
				}
				if err != nil {
					errs[g] = err
					break
				}
				l = append(l, time.Since(t0))
			}
			lat[g] = l
		})
	}
	s0, err := serverCPU()
	if err != nil {
		return cycleRun{}, err
	}
	c0 := selfCPU()
	begin = time.Now()
	close(start)
	wg.Wait()
	elapsed := time.Since(begin)
	c1 := selfCPU()
	s1, err := serverCPU()
	if err != nil {
		return cycleRun{}, err
	}
	if err := errors.Join(append(errs, ctx.Err())...); err != nil {
		return cycleRun{}, err
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	n := time.Duration(max(len(all), 1))
	return cycleRun{
		perSec:    float64(len(all)) / elapsed.Seconds(),
		p50:       percentile(all, 0.50),
		p99:       percentile(all, 0.99),
		clientCPU: (c1 - c0) / n,
		serverCPU: (s1 - s0) / n,
	}, nil
}

// roundTrips counts the round trips of one acquire, renew and release with
// the client hook, after one warm-up cycle on another key.
func roundTrips(ctx context.Context, p peer, cs clients, cnt *counter, t timing) (trips, error) {
	op := func(m mutex) (trips, error) {
		var rt trips
		n := cnt.trips.Load()
		ok, err := m.tryAcquire(ctx)
		if err == nil && !ok {
			err = errors.New("fresh key held")
		}
		if err != nil {
			return rt, fmt.Errorf("acquire: %w", err)
		}
		rt.acquire, n = cnt.trips.Load()-n, cnt.trips.Load()
		switch err := m.renew(ctx); {
		case errors.Is(err, errWatchdog):
			rt.renew = -1
		case err != nil:
			return rt, fmt.Errorf("renew: %w", err)
		default:
			rt.renew = cnt.trips.Load() - n
		}
		n = cnt.trips.Load()
		if err := m.release(ctx); err != nil {
			return rt, fmt.Errorf("release: %w", err)
		}
		rt.release = cnt.trips.Load() - n
		return rt, nil
	}
	warm := p.mutex(cs, "bench-trips-warm-"+p.name, "trips", t)
	defer closeMutex(warm)
	if _, err := op(warm); err != nil {
		return trips{}, fmt.Errorf("warm-up: %w", err)
	}
	m := p.mutex(cs, "bench-trips-"+p.name, "trips", t)
	defer closeMutex(m)
	return op(m)
}

// costPeers are the peers whose Redis CPU per operation figure 1 reports:
// the one-node peers whose operations are one command or one script.
var costPeers = []string{"solo", "solo-lock", "redislock", "redsync-1", "setnx"}

// opCost is what one acquire and one release cost Redis, in µs: the
// command's execution time from INFO commandstats, and the CPU time of the
// server's main thread (schedstat: parsing, execution, reply).
type opCost struct{ acquire, release, acquireCPU, releaseCPU float64 }

// serverCost acquires n free keys one after the other, then releases
// them, and reads the server's own time for each phase from INFO
// commandstats (reset before each). A script's time includes the commands
// it calls, which commandstats also lists on their own; so when a phase
// ran scripts, only EVALSHA and EVAL count.
func serverCost(ctx context.Context, p peer, cs clients, srv *server, t timing, n int) (c opCost, err error) {
	ms := make([]mutex, n)
	for i := range ms {
		ms[i] = p.mutex(cs, fmt.Sprintf("bench-cost-%s-%d", p.name, i), "cost", t)
	}
	defer func() {
		for _, m := range ms {
			if cerr := closeMutex(m); err == nil {
				err = cerr
			}
		}
	}()
	phase := func(op func(mutex) error) (exec, cpu float64, err error) {
		if err := cs[0].ConfigResetStat(ctx).Err(); err != nil {
			return 0, 0, err
		}
		cpu0, err := srv.mainThreadCPU()
		if err != nil {
			return 0, 0, err
		}
		for _, m := range ms {
			if err := op(m); err != nil {
				return 0, 0, err
			}
		}
		cpu1, err := srv.mainThreadCPU()
		if err != nil {
			return 0, 0, err
		}
		info, err := cs[0].Info(ctx, "commandstats").Result()
		if err != nil {
			return 0, 0, err
		}
		return scriptOrAllUsec(info) / float64(n), us(cpu1-cpu0) / float64(n), nil
	}
	if c.acquire, c.acquireCPU, err = phase(func(m mutex) error {
		ok, err := m.tryAcquire(ctx)
		if err == nil && !ok {
			err = errors.New("fresh key held")
		}
		return err
	}); err != nil {
		return c, fmt.Errorf("acquire: %w", err)
	}
	if c.release, c.releaseCPU, err = phase(func(m mutex) error { return m.release(ctx) }); err != nil {
		return c, fmt.Errorf("release: %w", err)
	}
	return c, nil
}

// scriptOrAllUsec sums usec of INFO commandstats: of EVALSHA and EVAL when
// any ran, else of every command but CONFIG and INFO (the bench's own).
func scriptOrAllUsec(info string) float64 {
	var scripts, all float64
	ran := false
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd || name == "config" || name == "info" {
			continue
		}
		var usec float64
		for kv := range strings.SplitSeq(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "usec="); ok {
				usec, _ = strconv.ParseFloat(v, 64)
			}
		}
		all += usec
		if name == "evalsha" || name == "eval" {
			scripts += usec
			ran = true
		}
	}
	if ran {
		return scripts
	}
	return all
}

// cycleCell is one peer's medians at one concurrency.
type cycleCell struct{ perSec, p50, p99, client, server, cpu spread }

func cycleCells(runs map[string]map[int][]cycleRun) map[string]map[int]cycleCell {
	cells := make(map[string]map[int]cycleCell)
	for name, byConc := range runs {
		cells[name] = make(map[int]cycleCell)
		for conc, rs := range byConc {
			var a, b, c, cl, sv, cpu []float64
			for _, r := range rs {
				a = append(a, r.perSec)
				b = append(b, us(r.p50))
				c = append(c, us(r.p99))
				cl = append(cl, us(r.clientCPU))
				sv = append(sv, us(r.serverCPU))
				cpu = append(cpu, us(r.clientCPU+r.serverCPU))
			}
			cells[name][conc] = cycleCell{spreadOf(a), spreadOf(b), spreadOf(c), spreadOf(cl), spreadOf(sv), spreadOf(cpu)}
		}
	}
	return cells
}

func cycleReport(ps []peer, placed []placedRuns, rts []trips, costs map[string]opCost, prof profile) figure {
	perSec := func(c cycleCell) float64 { return c.perSec.med }
	p50 := func(c cycleCell) float64 { return c.p50.med }
	p99 := func(c cycleCell) float64 { return c.p99.med }

	var b strings.Builder
	b.WriteString("Acquire + release of a free key, back to back; every goroutine has its own key. " +
		"Latency is of one whole cycle. solo's rows (solo: `leader.RedisStore`; solo-lock: the `leader/lock` Mutex, " +
		"whose every hold gets a fencing term) give their median as a ratio to the best other peer's median " +
		"(cycles/s: above 1 is better; latency: below 1 is better), and their cycles/s as a ratio to redislock's and setnx's.\n\n" +
		"Placements:\n\n")
	for _, pr := range placed {
		fmt.Fprintf(&b, "- **%s**: %s; %s per run.\n", pr.pl.name, pr.pl.about, pr.pl.runTime(prof))
	}
	var tg []target
	for _, pr := range placed {
		fmt.Fprintf(&b, "\n### Placement: %s\n\n", pr.pl.name)
		if pr.skipped != nil {
			fmt.Fprintf(&b, "Not measured: %v.\n", pr.skipped)
			continue
		}
		cells := cycleCells(pr.runs)
		var in []peer
		for _, p := range ps {
			if pr.pl.has(p.name) {
				in = append(in, p)
			}
		}
		// best returns the best other peer's median of one column.
		best := func(conc int, get func(cycleCell) float64, higher bool) (float64, string) {
			var v float64
			var name string
			for _, p := range others(in) {
				x := get(cells[p.name][conc])
				if name == "" || (higher && x > v) || (!higher && x < v) {
					v, name = x, p.name
				}
			}
			return v, name
		}
		b.WriteString("| goroutines | peer | cycles/s | p50 | p99 | CPU per cycle: bench + Redis | ÷ best other peer (cycles/s · p50 · p99) | cycles/s ÷ redislock · ÷ setnx | CPU ÷ redislock · ÷ setnx |\n")
		b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
		for _, conc := range prof.concurrency {
			for _, p := range in {
				c := cells[p.name][conc]
				vs, vr, vc := "", "", ""
				if p.ours {
					vc = fmt.Sprintf("%.2f× · %.2f×", c.cpu.med/cells["redislock"][conc].cpu.med, c.cpu.med/cells["setnx"][conc].cpu.med)
					bv, bn := best(conc, perSec, true)
					l5, n5 := best(conc, p50, false)
					l9, n9 := best(conc, p99, false)
					vs = ratio(c.perSec.med, bv, bn) + " · " + ratio(c.p50.med, l5, n5) + " · " + ratio(c.p99.med, l9, n9)
					vr = fmt.Sprintf("%.2f× · %.2f×", c.perSec.med/cells["redislock"][conc].perSec.med, c.perSec.med/cells["setnx"][conc].perSec.med)
				}
				fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %.0f + %.0f = %s | %s | %s | %s |\n", conc, p.name,
					c.perSec.format(fmtInt), c.p50.format(fmtUS), c.p99.format(fmtUS),
					c.client.med, c.server.med, c.cpu.format(fmtUS), vs, vr, vc)
			}
			if pr.pl.name == "unpinned" && (conc == 1 || conc == 64) {
				bv, bn := best(conc, perSec, true)
				s := cells["solo"][conc].perSec.med
				tg = append(tg, target{
					what: fmt.Sprintf("lock cycles/s at %d goroutine(s) ≥ best peer", conc),
					solo: fmtInt(s), peer: fmtInt(bv) + " (" + bn + ")", ok: s >= bv,
				})
			}
		}
		for _, name := range []string{"solo-lock", "solo-lock-unbatched"} {
			if _, ok := cells[name]; ok {
				tg = append(tg, lockTarget(name, pr.pl.name, cells, prof.concurrency))
				if pr.pl.name == "split" {
					tg = append(tg, lockCPUTarget(name, pr.pl.name, cells, prof.concurrency))
				}
			}
		}
	}

	b.WriteString("\nRound trips per operation, counted with a go-redis hook (`AddHook`, one per `Process` or pipeline) " +
		"after a warm-up cycle, so scripts are cached and each runs as one EVALSHA:\n\n")
	b.WriteString("| peer | acquire | renew | release |\n| --- | --- | --- | --- |\n")
	for i, p := range ps {
		f := func(n int64) string {
			switch {
			case n < 0:
				return "— (its watchdog renews: one EVALSHA per RenewInterval)"
			case p.nodes > 1:
				return fmt.Sprintf("%d (%d per node, in parallel)", n, n/int64(p.nodes))
			}
			return fmt.Sprint(n)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", p.name, f(rts[i].acquire), f(rts[i].renew), f(rts[i].release))
	}
	fmt.Fprintf(&b, "\nRedis cost per operation, unpinned: %d free keys acquired one after the other, then released. "+
		"*exec* is the server's own time for the command from `INFO commandstats` (reset before each phase; of EVALSHA alone "+
		"when the phase ran scripts, since the commands a script calls are listed too); it is wall time, so a busy machine "+
		"inflates it. *CPU* is the CPU time of the server's main thread over the phase (`/proc/PID/task/PID/schedstat`): "+
		"reading the request, executing, writing the reply, and the kernel's share of the loopback TCP.\n\n", prof.costOps)
	b.WriteString("| peer | acquire exec | release exec | cycle exec | acquire CPU | release CPU | cycle CPU |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, p := range ps {
		c, ok := costs[p.name]
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "| %s | %.1f µs | %.1f µs | %.1f µs | %.1f µs | %.1f µs | %.1f µs |\n", p.name,
			c.acquire, c.release, c.acquire+c.release, c.acquireCPU, c.releaseCPU, c.acquireCPU+c.releaseCPU)
	}
	// redislock's acquire is a Lua script too: the closest like-for-like.
	for _, pr := range placed {
		if pr.pl.name != "unpinned" {
			continue
		}
		cells := cycleCells(pr.runs)
		var like []string
		for _, conc := range []int{1, 64} {
			like = append(like, fmt.Sprintf("%.2f× at %d goroutine(s)", cells["solo"][conc].perSec.med/cells["redislock"][conc].perSec.med, conc))
		}
		fmt.Fprintf(&b, "\nUnpinned, against redislock, the peer whose acquire is also one Lua script, solo's cycles/s are %s.\n", strings.Join(like, " and "))
	}
	s := rts[0]
	tg = append(tg, target{
		what: "one round trip per acquire, renew and release",
		solo: fmt.Sprintf("%d / %d / %d", s.acquire, s.renew, s.release),
		peer: "—",
		ok:   s.acquire == 1 && s.renew == 1 && s.release == 1,
	})
	b.WriteString("\nsolo's acquire does more per round trip than a bare `SET NX PX`: it reads the holder, mints the " +
		"fencing term from `TIME` and the stored term, and writes both keys; its release also PUBLISHes the notice " +
		"that lets followers skip polling. solo-lock's acquire does the same into a hash of hold counts (for re-entry); " +
		"its client also starts the hold's watchdog and deadline timer and stops them at the release.\n")
	return figure{title: "1. Lock cycle", body: b.String(), targets: tg}
}

// lockTarget is the target for one solo-lock peer's cycle in one
// placement: cycles/s ≥ redislock's and ≥ 0.8× setnx's, at every
// concurrency.
func lockTarget(name, where string, cells map[string]map[int]cycleCell, concs []int) target {
	var vr, vs, pr, ps, cs []string
	ok := true
	for _, conc := range concs {
		s := cells[name][conc].perSec.med
		r, x := cells["redislock"][conc].perSec.med, cells["setnx"][conc].perSec.med
		vr, vs = append(vr, fmt.Sprintf("%.2f×", s/r)), append(vs, fmt.Sprintf("%.2f×", s/x))
		pr, ps = append(pr, fmtInt(r)), append(ps, fmtInt(x))
		cs = append(cs, fmt.Sprint(conc))
		ok = ok && s >= r && s >= 0.8*x
	}
	return target{
		what: fmt.Sprintf("%s cycles/s (with a term) ≥ redislock's and ≥ 0.8× setnx's, %s, at %s goroutines", name, where, strings.Join(cs, "/")),
		solo: "÷ redislock " + strings.Join(vr, " / ") + "; ÷ setnx " + strings.Join(vs, " / "),
		peer: "redislock " + strings.Join(pr, " / ") + "; setnx " + strings.Join(ps, " / "),
		ok:   ok,
	}
}

// lockCPUTarget is lockTarget in CPU per cycle (bench + Redis), the form
// of it that other processes on the machine hardly move: CPU ≤ redislock's
// and ≤ 1.25× setnx's (the rate targets, if the cycle were CPU-bound).
func lockCPUTarget(name, where string, cells map[string]map[int]cycleCell, concs []int) target {
	var vr, vs, pr, ps, cs []string
	ok := true
	for _, conc := range concs {
		s := cells[name][conc].cpu.med
		r, x := cells["redislock"][conc].cpu.med, cells["setnx"][conc].cpu.med
		vr, vs = append(vr, fmt.Sprintf("%.2f×", s/r)), append(vs, fmt.Sprintf("%.2f×", s/x))
		pr, ps = append(pr, fmtUS(r)), append(ps, fmtUS(x))
		cs = append(cs, fmt.Sprint(conc))
		ok = ok && s <= r && s <= 1.25*x
	}
	return target{
		what: fmt.Sprintf("%s CPU per cycle (bench + Redis) ≤ redislock's and ≤ 1.25× setnx's, %s, at %s goroutines", name, where, strings.Join(cs, "/")),
		solo: "÷ redislock " + strings.Join(vr, " / ") + "; ÷ setnx " + strings.Join(vs, " / "),
		peer: "redislock " + strings.Join(pr, " / ") + "; setnx " + strings.Join(ps, " / "),
		ok:   ok,
	}
}
