package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/solo-run/solo/leader"
)

// cycleRun is one lock-cycle run of one peer at one concurrency.
type cycleRun struct {
	perSec   float64
	p50, p99 time.Duration
}

// trips is what one acquire, renew and release cost, in round trips.
type trips struct{ acquire, renew, release int64 }

// cycleFigure measures figure 1: acquire + release cycles per second and
// their latency with 1, 8 and 64 goroutines each on its own key, and the
// round trips of one acquire, renew and release.
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

	runs := make(map[string]map[int][]cycleRun)
	for _, p := range ps {
		runs[p.name] = make(map[int][]cycleRun)
	}
	for r := range e.prof.runs {
		for _, conc := range e.prof.concurrency {
			// Rotate the order so no peer always runs first or last.
			for k := range ps {
				i := (k + r) % len(ps)
				p := ps[i]
				res, err := cycleOnce(ctx, p, cs[i], t, conc, e.prof.cycleTime)
				if err != nil {
					return figure{}, fmt.Errorf("%s × %d: %w", p.name, conc, err)
				}
				runs[p.name][conc] = append(runs[p.name][conc], res)
			}
		}
		e.logf("  lock cycle run %d/%d", r+1, e.prof.runs)
	}
	return cycleReport(ps, runs, rts, e.prof), nil
}

// cycleOnce runs conc goroutines, each acquiring and releasing its own key
// for d, and returns the cycles per second and latency percentiles.
func cycleOnce(ctx context.Context, p peer, cs clients, t timing, conc int, d time.Duration) (cycleRun, error) {
	ms := make([]mutex, conc)
	for g := range ms {
		ms[g] = p.mutex(cs, fmt.Sprintf("bench-cycle-%s-%d-%d", p.name, conc, g), fmt.Sprintf("cycle-%d", g), t)
	}
	lat := make([][]time.Duration, conc)
	errs := make([]error, conc)
	start := make(chan struct{})
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
	begin = time.Now()
	close(start)
	wg.Wait()
	elapsed := time.Since(begin)
	if err := errors.Join(append(errs, ctx.Err())...); err != nil {
		return cycleRun{}, err
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	return cycleRun{
		perSec: float64(len(all)) / elapsed.Seconds(),
		p50:    percentile(all, 0.50),
		p99:    percentile(all, 0.99),
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
		if err := m.renew(ctx); err != nil {
			return rt, fmt.Errorf("renew: %w", err)
		}
		rt.renew, n = cnt.trips.Load()-n, cnt.trips.Load()
		if err := m.release(ctx); err != nil {
			return rt, fmt.Errorf("release: %w", err)
		}
		rt.release = cnt.trips.Load() - n
		return rt, nil
	}
	if _, err := op(p.mutex(cs, "bench-trips-warm-"+p.name, "trips", t)); err != nil {
		return trips{}, fmt.Errorf("warm-up: %w", err)
	}
	return op(p.mutex(cs, "bench-trips-"+p.name, "trips", t))
}

func cycleReport(ps []peer, runs map[string]map[int][]cycleRun, rts []trips, prof profile) figure {
	type cell struct{ perSec, p50, p99 spread }
	cells := make(map[string]map[int]cell)
	for _, p := range ps {
		cells[p.name] = make(map[int]cell)
		for conc, rs := range runs[p.name] {
			var a, b, c []float64
			for _, r := range rs {
				a = append(a, r.perSec)
				b = append(b, us(r.p50))
				c = append(c, us(r.p99))
			}
			cells[p.name][conc] = cell{spreadOf(a), spreadOf(b), spreadOf(c)}
		}
	}
	// best returns the best peer's median of one column.
	best := func(conc int, get func(cell) float64, higher bool) (float64, string) {
		var v float64
		var name string
		for _, p := range ps[1:] {
			x := get(cells[p.name][conc])
			if name == "" || (higher && x > v) || (!higher && x < v) {
				v, name = x, p.name
			}
		}
		return v, name
	}
	perSec := func(c cell) float64 { return c.perSec.med }
	p50 := func(c cell) float64 { return c.p50.med }
	p99 := func(c cell) float64 { return c.p99.med }

	var b strings.Builder
	fmt.Fprintf(&b, "Acquire + release of a free key, back to back, for %s per run; every goroutine has its own key. "+
		"Latency is of one whole cycle. The solo row gives its median as a ratio to the best peer's median "+
		"(cycles/s: above 1 is better; latency: below 1 is better).\n\n", prof.cycleTime)
	b.WriteString("| goroutines | peer | cycles/s | p50 | p99 | solo ÷ best peer (cycles/s · p50 · p99) |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- |\n")
	var tg []target
	for _, conc := range prof.concurrency {
		for _, p := range ps {
			c := cells[p.name][conc]
			vs := ""
			if p.name == "solo" {
				bv, bn := best(conc, perSec, true)
				l5, n5 := best(conc, p50, false)
				l9, n9 := best(conc, p99, false)
				vs = ratio(c.perSec.med, bv, bn) + " · " + ratio(c.p50.med, l5, n5) + " · " + ratio(c.p99.med, l9, n9)
			}
			fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s |\n", conc, p.name,
				c.perSec.format(fmtInt), c.p50.format(fmtUS), c.p99.format(fmtUS), vs)
		}
		if conc == 1 || conc == 64 {
			bv, bn := best(conc, perSec, true)
			s := cells["solo"][conc].perSec.med
			tg = append(tg, target{
				what: fmt.Sprintf("lock cycles/s at %d goroutine(s) ≥ best peer", conc),
				solo: fmtInt(s), peer: fmtInt(bv) + " (" + bn + ")", ok: s >= bv,
			})
		}
	}

	b.WriteString("\nRound trips per operation, counted with a go-redis hook (`AddHook`, one per `Process` or pipeline) " +
		"after a warm-up cycle, so scripts are cached and each runs as one EVALSHA:\n\n")
	b.WriteString("| peer | acquire | renew | release |\n| --- | --- | --- | --- |\n")
	for i, p := range ps {
		f := func(n int64) string {
			if p.nodes > 1 {
				return fmt.Sprintf("%d (%d per node, in parallel)", n, n/int64(p.nodes))
			}
			return fmt.Sprint(n)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", p.name, f(rts[i].acquire), f(rts[i].renew), f(rts[i].release))
	}
	// redislock's acquire is a Lua script too: the closest like-for-like.
	var like []string
	for _, conc := range []int{1, 64} {
		like = append(like, fmt.Sprintf("%.2f× at %d goroutine(s)", cells["solo"][conc].perSec.med/cells["redislock"][conc].perSec.med, conc))
	}
	fmt.Fprintf(&b, "\nAgainst redislock, the peer whose acquire is also one Lua script, solo's cycles/s are %s.\n", strings.Join(like, " and "))
	s := rts[0]
	tg = append(tg, target{
		what: "one round trip per acquire, renew and release",
		solo: fmt.Sprintf("%d / %d / %d", s.acquire, s.renew, s.release),
		peer: "—",
		ok:   s.acquire == 1 && s.renew == 1 && s.release == 1,
	})
	b.WriteString("\nsolo's acquire does more per round trip than a bare `SET NX PX`: it reads the holder, mints the " +
		"fencing term from `TIME` and the stored term, and writes both keys; its release also PUBLISHes the notice " +
		"that lets followers skip polling.\n")
	return figure{title: "1. Lock cycle", body: b.String(), targets: tg}
}
