package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/leader/lock"
)

const (
	// contendPollRetry is the pollers' retry delay in figure 7: short, so
	// that they are at their fastest.
	contendPollRetry = 10 * time.Millisecond
	// contendShareMin, contendMaxWait: the starvation targets.
	contendShareMin = 6.0 // per cent
	contendMaxWait  = 100 * time.Millisecond
	// contendScriptsMax: the target for acquire requests per acquisition.
	contendScriptsMax = 1.5
)

// contendPeer is one lock in figure 7.
type contendPeer struct {
	name  string
	about string
	// mk makes goroutine i's lock; c is the lock.Client the goroutines of
	// a shared peer share (nil otherwise).
	mk     func(cs clients, c *lock.Client, key, id string, t timing) (waiter, error)
	shared bool
	// scripts: the acquire is a script (EVAL/EVALSHA), as the release is;
	// otherwise it is a SET (NX) and the release a script.
	scripts bool
}

func contendPeers() []contendPeer {
	return []contendPeer{
		{name: "solo-lock", shared: true, scripts: true,
			about: "`Mutex.Lock` / `Hold.Unlock`, the 8 goroutines sharing one `lock.Client` (one process)",
			mk: func(_ clients, c *lock.Client, key, _ string, _ timing) (waiter, error) {
				return sharedLockMutex(c, key)
			}},
		{name: "solo-lock fair", shared: true, scripts: true,
			about: "the same with `lock.WithFair()`",
			mk: func(_ clients, c *lock.Client, key, _ string, _ timing) (waiter, error) {
				return sharedLockMutex(c, key, lock.WithFair())
			}},
		{name: "solo-lock, Client each", scripts: true,
			about: "`Mutex.Lock` with a `lock.Client` per goroutine, as 8 processes",
			mk: func(cs clients, _ *lock.Client, key, id string, t timing) (waiter, error) {
				return newLockMutexWith(cs, key, id, t)
			}},
		{name: "redislock", scripts: true,
			about: "`Obtain` with `LinearBackoff(10ms)`",
			mk: func(cs clients, _ *lock.Client, key, id string, t timing) (waiter, error) {
				return newRedislockMutex(cs, key, id, t).(waiter), nil
			}},
		{name: "redsync-1",
			about: "`LockContext` with `WithRetryDelay(10ms)` (a failed attempt also sends a release script, counted as its acquire's)",
			mk: func(cs clients, _ *lock.Client, key, id string, t timing) (waiter, error) {
				return newRedsyncMutex(cs, key, id, t).(waiter), nil
			}},
		{name: "setnx",
			about: "`SET NX PX` retried every 10 ms",
			mk: func(cs clients, _ *lock.Client, key, id string, t timing) (waiter, error) {
				return newSetnxMutex(cs, key, id, t).(waiter), nil
			}},
	}
}

// contendRun is one run of one peer.
type contendRun struct {
	waits   []time.Duration // Lock call → return, every acquisition
	gaps    []time.Duration // a release's call → the next acquire's return
	counts  []int           // acquisitions per goroutine
	handed  int             // acquisitions whose previous holder was another goroutine
	elapsed time.Duration
	// scripts, sets: EVAL + EVALSHA and SET calls on the server over the
	// run (INFO commandstats), nested calls included.
	scripts, sets int64
}

func (r contendRun) acquisitions() int {
	n := 0
	for _, c := range r.counts {
		n += c
	}
	return n
}

// acquiresPerAcquisition is the acquire requests the server ran per
// acquisition: the peer's acquire commands (scripts less the one release
// script of every acquisition, or SETs) over the acquisitions. 1 ms holds
// at TTL 1s need no renewal.
func (r contendRun) acquiresPerAcquisition(p contendPeer) float64 {
	n := r.acquisitions()
	if n == 0 {
		return 0
	}
	if p.scripts {
		return float64(r.scripts-int64(n)) / float64(n)
	}
	return float64(r.sets) / float64(n)
}

func (r contendRun) shares() (lo, hi float64) {
	n := r.acquisitions()
	if n == 0 {
		return 0, 0
	}
	lo, hi = 100, 0
	for _, c := range r.counts {
		s := 100 * float64(c) / float64(n)
		lo, hi = min(lo, s), max(hi, s)
	}
	return lo, hi
}

// contendFigure measures figure 7: the waiter's side of a contended lock.
func contendFigure(ctx context.Context, e *env) (figure, error) {
	t, err := timingFor(e.prof.ttl)
	if err != nil {
		return figure{}, err
	}
	told := t.String() // solo's own timing; the pollers retry faster
	t.retry = contendPollRetry
	ps := contendPeers()
	cs := make([]clients, len(ps))
	for i := range ps {
		cs[i] = dial(addrsOf(e.nodes[:1]), nil)
		defer cs[i].Close()
	}
	admin := dial(addrsOf(e.nodes[:1]), nil)
	defer admin.Close()
	runs := make(map[string][]contendRun)
	nonce := randomToken()
	measure := func(where string) error {
		for r := range e.prof.runs {
			for _, pause := range contendPauses {
				for k := range ps {
					i := (k + r) % len(ps)
					res, err := contendOnce(ctx, ps[i], cs[i], admin[0], t, e.prof.handoverTime, pause,
						fmt.Sprintf("%s-%s-%d-%d", nonce, where, r, pause.Milliseconds()))
					if err != nil {
						return fmt.Errorf("%s: %w", ps[i].name, err)
					}
					key := contendKey(where, pause, ps[i].name)
					runs[key] = append(runs[key], res)
				}
			}
			e.logf("  contend %s run %d/%d", where, r+1, e.prof.runs)
		}
		return nil
	}
	oneCPU := placements()[2]
	var pinErr error
	if p, err := pin(oneCPU, e.nodes); err != nil {
		pinErr = err
		e.logf("  contend: one CPU skipped: %v", err)
	} else {
		err := measure("one CPU")
		if uerr := p.undo(); err == nil && uerr != nil {
			err = fmt.Errorf("undo pinning: %w", uerr)
		}
		if err != nil {
			return figure{}, err
		}
	}
	if err := measure("unpinned"); err != nil {
		return figure{}, err
	}
	return contendReport(ps, runs, pinErr, told, e.prof), nil
}

// contendPauses are the pauses between a release and the same goroutine's
// next Lock.
var contendPauses = []time.Duration{0, 5 * time.Millisecond}

func contendKey(where string, pause time.Duration, name string) string {
	return where + "/" + pause.String() + "/" + name
}

// contendOnce runs 8 goroutines on one key for about d: each takes the
// lock (blocking), holds it 1 ms, releases it, pauses (or not) and takes
// it again.
func contendOnce(ctx context.Context, p contendPeer, cs clients, admin *redis.Client, t timing, d, pause time.Duration, tag string) (contendRun, error) {
	key := strings.NewReplacer(" ", "-", ",", "").Replace("bench-contend-" + tag + "-" + p.name)
	var c *lock.Client
	if p.shared {
		var err error
		if c, err = newLockClient(cs, "contend", t); err != nil {
			return contendRun{}, err
		}
		defer c.Close()
	}
	ws := make([]waiter, handoverWaiters)
	defer func() {
		for _, w := range ws {
			if w != nil {
				_ = closeMutex(w)
			}
		}
	}()
	for i := range ws {
		w, err := p.mk(cs, c, key, fmt.Sprintf("contend-%d", i), t)
		if err != nil {
			return contendRun{}, err
		}
		ws[i] = w
	}
	// A waiter that never gets the lock shows as a long wait, not a hang:
	// the others stop after d.
	wctx, cancel := context.WithTimeout(ctx, d+10*t.ttl)
	defer cancel()
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		return contendRun{}, err
	}
	var (
		mu      sync.Mutex
		out     = contendRun{counts: make([]int, len(ws))}
		prev    = -1
		relAt   time.Duration
		errs    []error
		wg      sync.WaitGroup
		base    = time.Now()
		stopped = func() bool { return time.Since(base) >= d }
	)
	for i, w := range ws {
		wg.Go(func() {
			for !stopped() {
				t0 := time.Since(base)
				if err := w.wait(wctx); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("wait: %w", err))
					mu.Unlock()
					return
				}
				t1 := time.Since(base)
				mu.Lock()
				out.waits = append(out.waits, t1-t0)
				out.counts[i]++
				if prev >= 0 {
					out.gaps = append(out.gaps, t1-relAt)
					if prev != i {
						out.handed++
					}
				}
				prev = i
				mu.Unlock()
				time.Sleep(handoverHold)
				mu.Lock()
				relAt = time.Since(base)
				mu.Unlock()
				if err := w.release(context.WithoutCancel(wctx)); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("release: %w", err))
					mu.Unlock()
					return
				}
				if pause > 0 {
					time.Sleep(pause)
				}
			}
		})
	}
	wg.Wait()
	out.elapsed = time.Since(base)
	if err := errors.Join(errs...); err != nil {
		return out, err
	}
	info, err := admin.Info(ctx, "commandstats").Result()
	if err != nil {
		return out, err
	}
	out.scripts = cmdCalls(info, "evalsha") + cmdCalls(info, "eval")
	out.sets = cmdCalls(info, "set")
	return out, nil
}

// cmdCalls returns the calls of cmdstat_NAME in INFO commandstats that did
// not fail.
func cmdCalls(info, name string) int64 {
	for line := range strings.SplitSeq(info, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":")
		if !ok {
			continue
		}
		// A failed call (an EVALSHA that met NOSCRIPT and went again as
		// EVAL) ran nothing.
		var calls, failed int64
		for f := range strings.SplitSeq(v, ",") {
			k, x, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(x, 10, 64)
			switch k {
			case "calls":
				calls = n
			case "failed_calls":
				failed = n
			}
		}
		return calls - failed
	}
	return 0
}

func contendReport(ps []contendPeer, runs map[string][]contendRun, pinErr error, t string, prof profile) figure {
	type cell struct {
		p50, p99, max, handed, shareLo, shareHi, gap50, gap99, rate spread
		n                                                           int
	}
	cells := make(map[string]cell)
	for key, rs := range runs {
		var c cell
		var p50, p99, mx, hd, lo, hi, g50, g99, rate []float64
		for _, r := range rs {
			p50 = append(p50, ms(percentile(r.waits, 0.50)))
			p99 = append(p99, ms(percentile(r.waits, 0.99)))
			mx = append(mx, ms(percentile(r.waits, 1)))
			n := r.acquisitions()
			if n > 1 {
				hd = append(hd, 100*float64(r.handed)/float64(n-1))
			}
			l, h := r.shares()
			lo, hi = append(lo, l), append(hi, h)
			g50 = append(g50, ms(percentile(r.gaps, 0.50)))
			g99 = append(g99, ms(percentile(r.gaps, 0.99)))
			rate = append(rate, float64(n)/r.elapsed.Seconds())
			c.n += n
		}
		c.p50, c.p99, c.max, c.handed = spreadOf(p50), spreadOf(p99), spreadOf(mx), spreadOf(hd)
		c.shareLo, c.shareHi, c.gap50, c.gap99, c.rate = spreadOf(lo), spreadOf(hi), spreadOf(g50), spreadOf(g99), spreadOf(rate)
		cells[key] = c
	}
	acqOf := func(key string, p contendPeer) spread {
		var xs []float64
		for _, r := range runs[key] {
			xs = append(xs, r.acquiresPerAcquisition(p))
		}
		return spreadOf(xs)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "The waiter's side of a contended lock: %d goroutines of one process block on one key "+
		"with the peer's blocking lock, hold it %s, release it and (pause 0) block again at once, or after a pause. "+
		"The wait is from the blocking call to its return, for every acquisition; handed to another is the share of "+
		"acquisitions whose previous holder was another goroutine; the shares are each goroutine's part of the "+
		"acquisitions (the lowest and the highest goroutine; fair: 12.5 %%); the gap is from a release's call to the "+
		"next acquire's return, whoever takes it; acquire requests per acquisition are counted on the server "+
		"(`CONFIG RESETSTAT`, then `INFO commandstats` after the run: EVAL + EVALSHA calls less the one release "+
		"script of each acquisition for the peers whose acquire is a script, SET calls for the others), so a pipeline "+
		"counts each of its commands. %s; the pollers retry every %s. %s per run and peer, the peers interleaved. "+
		"Placements: one CPU (redis-server and the bench pinned to the same CPU, GOMAXPROCS 1) and unpinned.\n\n",
		handoverWaiters, handoverHold, t, contendPollRetry, prof.handoverTime)
	b.WriteString("| placement | pause | peer | acquisitions | handed to another | share per goroutine (lowest – highest) | wait p50 | wait p99 | longest wait | gap p50 | gap p99 | holds/s | acquire requests per acquisition |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, where := range []string{"one CPU", "unpinned"} {
		for _, pause := range contendPauses {
			for _, p := range ps {
				if where == "one CPU" && pinErr != nil {
					fmt.Fprintf(&b, "| %s | %s | %s | not measured: %v | | | | | | | | | |\n", where, pause, p.name, pinErr)
					continue
				}
				key := contendKey(where, pause, p.name)
				c := cells[key]
				fmt.Fprintf(&b, "| %s | %s | %s | %d | %s | %s – %s | %s | %s | %s | %s | %s | %s | %s |\n", where, pause, p.name, c.n,
					c.handed.format(fmtPct), c.shareLo.format(fmtPct), c.shareHi.format(fmtPct),
					c.p50.format(fmtMS), c.p99.format(fmtMS), c.max.format(fmtMS),
					c.gap50.format(fmtMS), c.gap99.format(fmtMS), c.rate.format(fmtInt), acqOf(key, p).format(fmtRate))
			}
		}
	}
	b.WriteString("\n")
	for _, p := range ps {
		fmt.Fprintf(&b, "- **%s**: %s.\n", p.name, p.about)
	}
	var tg []target
	for _, where := range []string{"one CPU", "unpinned"} {
		if where == "one CPU" && pinErr != nil {
			continue
		}
		k := func(name string) string { return contendKey(where, 0, name) }
		def, fair := cells[k("solo-lock")], cells[k("solo-lock fair")]
		tg = append(tg, target{
			what: fmt.Sprintf("solo-lock, %s, 8 goroutines re-locking at once: every share ≥ %.0f %%, longest wait ≤ %s, wait p99 ≤ 2× the fair mode's", where, contendShareMin, fmtMS(ms(contendMaxWait))),
			solo: fmt.Sprintf("lowest share %s, longest %s, p99 %s (fair %s)", fmtPct(def.shareLo.med), fmtMS(def.max.med), fmtMS(def.p99.med), fmtMS(fair.p99.med)),
			peer: "—",
			ok:   def.shareLo.ok && def.shareLo.lo >= contendShareMin && def.max.hi <= ms(contendMaxWait) && def.p99.med <= 2*fair.p99.med,
		})
		for _, name := range []string{"solo-lock", "solo-lock fair"} {
			p := ps[0]
			if name != p.name {
				p = ps[1]
			}
			a := acqOf(k(name), p)
			tg = append(tg, target{
				what: fmt.Sprintf("%s, %s: acquire scripts per acquisition ≤ %.1f (server-side)", name, where, contendScriptsMax),
				solo: fmtRate(a.med), peer: "—", ok: a.ok && a.med <= contendScriptsMax,
			})
		}
		best, bn := 0.0, ""
		for _, p := range ps {
			if strings.HasPrefix(p.name, "solo") {
				continue
			}
			if c := cells[k(p.name)]; c.gap99.ok && (bn == "" || c.gap99.med < best) {
				best, bn = c.gap99.med, p.name
			}
		}
		tg = append(tg, target{
			what: fmt.Sprintf("solo-lock fair, %s: gap p99 ≤ the best peer's, holds/s ≥ 0.9× the default mode's", where),
			solo: fmt.Sprintf("gap p99 %s, holds/s %.2f× default", fmtMS(fair.gap99.med), fair.rate.med/def.rate.med),
			peer: fmt.Sprintf("gap p99 %s (%s)", fmtMS(best), bn),
			ok:   fair.gap99.ok && fair.gap99.med <= best && fair.rate.med >= 0.9*def.rate.med,
		})
	}
	return figure{title: "7. The waiter's side of a contended lock", body: b.String(), targets: tg}
}
