package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/solo-run/solo/leader/lock"
)

const (
	// handoverLimit is the target for solo-lock's waiter wake-up p99.
	handoverLimit = 2 * time.Millisecond
	// handoverWaiters is how many goroutines contend for one key.
	handoverWaiters = 8
	// handoverHold is how long each holder keeps the lock.
	handoverHold = time.Millisecond
)

// handoverPeer is one lock in the contended-handover figure.
type handoverPeer struct {
	name  string
	about string
	// groups is how many independent keys (each with its own 8
	// goroutines) run at once: more for the polling peers, whose
	// hand-overs are slow, so their percentiles rest on enough samples.
	groups int
	mk     func(cs clients, key, id string, t timing) (waiter, error)
	// shared, when set, makes the goroutines of a group share one
	// lock.Client (one process): mk is not used.
	shared func(c *lock.Client, key string) (waiter, error)
}

func handoverPeers() []handoverPeer {
	return []handoverPeer{
		{name: "solo-lock", groups: 1,
			about: "`Mutex.Lock`, the 8 goroutines sharing one `lock.Client` (one process, one pub/sub connection): waiters sleep until the release notice or the holder's PTTL",
			shared: func(c *lock.Client, key string) (waiter, error) {
				return sharedLockMutex(c, key)
			}},
		{name: "solo-lock fair", groups: 1,
			about: "the same with `lock.WithFair()`: waiters take the lock in the order they started waiting",
			shared: func(c *lock.Client, key string) (waiter, error) {
				return sharedLockMutex(c, key, lock.WithFair())
			}},
		{name: "solo-lock, Client each", groups: 1,
			about: "`Mutex.Lock` with a `lock.Client` per goroutine, as 8 processes: each Client subscribes when its goroutine starts to wait and unsubscribes when it stops, so a release that comes before a waiter's subscription is live reaches it only through its retry once the subscription is live",
			mk: func(cs clients, key, id string, t timing) (waiter, error) {
				return newLockMutexWith(cs, key, id, t)
			}},
		{name: "redislock", groups: 4,
			about: "`Obtain` with `LinearBackoff(RetryInterval)`",
			mk: func(cs clients, key, id string, t timing) (waiter, error) {
				return newRedislockMutex(cs, key, id, t).(waiter), nil
			}},
		{name: "redsync-1", groups: 4,
			about: "`LockContext` with `WithRetryDelay(RetryInterval)`",
			mk: func(cs clients, key, id string, t timing) (waiter, error) {
				return newRedsyncMutex(cs, key, id, t).(waiter), nil
			}},
	}
}

// handoverRun is one run of one peer.
type handoverRun struct {
	wake    []time.Duration // release call → the next holder's acquire return
	holds   int
	elapsed time.Duration
	groups  int
	// sched99 is the p99 of the Go scheduler's latency over the run (how
	// long a runnable goroutine waited for a CPU), from runtime/metrics.
	sched99 time.Duration
	// queued is the time the bench's threads and redis-server's main
	// thread spent runnable but off a CPU (the kernel's run queue), per
	// second of the run.
	queued time.Duration
}

// holdsPerSec is the holds per second of one key.
func (r handoverRun) holdsPerSec() float64 {
	return float64(r.holds) / float64(r.groups) / r.elapsed.Seconds()
}

// handoverFigure measures figure 6: 8 goroutines on one key, each taking
// the lock once per round and holding it 1 ms; the time from a release to
// the next holder's acquire, and the holds per second.
func handoverFigure(ctx context.Context, e *env) (figure, error) {
	t, err := timingFor(e.prof.ttl)
	if err != nil {
		return figure{}, err
	}
	hps := handoverPeers()
	cs := make([]clients, len(hps))
	for i := range hps {
		cs[i] = dial(addrsOf(e.nodes[:1]), nil)
		defer cs[i].Close()
	}
	runs := make(map[string][]handoverRun)
	unavailable := make(map[string]error)
	nonce := randomToken()
	measure := func(where string, only func(handoverPeer) bool) error {
		for r := range e.prof.runs {
			for k := range hps {
				i := (k + r) % len(hps)
				hp := hps[i]
				if !only(hp) || unavailable[hp.name] != nil {
					continue
				}
				res, err := handoverOnce(ctx, hp, cs[i], e.nodes[0], t, e.prof.handoverTime, fmt.Sprintf("%s-%s-%d", nonce, where, r))
				var un *unavailableError
				if errors.As(err, &un) {
					unavailable[hp.name] = un.err
					e.logf("  handover: %s not available: %v", hp.name, un.err)
					continue
				}
				if err != nil {
					return fmt.Errorf("%s: %w", hp.name, err)
				}
				runs[where+"/"+hp.name] = append(runs[where+"/"+hp.name], res)
			}
			e.logf("  handover %s run %d/%d", where, r+1, e.prof.runs)
		}
		return nil
	}
	if err := measure("unpinned", func(handoverPeer) bool { return true }); err != nil {
		return figure{}, err
	}
	// solo-lock again with redis-server and the bench on CPUs of their own,
	// where the scheduler's noise weighs less on a 1 ms scale; the polling
	// peers' wake-ups are their retry interval wherever they run.
	split := placements()[1]
	var splitErr error
	if pin, err := pin(split, e.nodes); err != nil {
		splitErr = err
		e.logf("  handover: placement split skipped: %v", err)
	} else {
		err := measure(split.name, func(hp handoverPeer) bool { return strings.HasPrefix(hp.name, "solo") })
		if uerr := pin.undo(); err == nil && uerr != nil {
			err = fmt.Errorf("undo pinning: %w", uerr)
		}
		if err != nil {
			return figure{}, err
		}
	}
	return handoverReport(hps, runs, unavailable, splitErr, t, e.prof), nil
}

// unavailableError is a peer that cannot be made (a mode not built yet).
type unavailableError struct{ err error }

func (e *unavailableError) Error() string { return "not available: " + e.err.Error() }

// handoverOnce runs hp.groups keys at once for about d: on each, rounds
// of 8 goroutines that each take the lock once, hold it 1 ms and release
// it. Within a round every acquire but the first follows a release by
// another goroutine; its wake-up is the time from that release's call to
// the acquire's return, on one monotonic clock shared by the goroutines.
func handoverOnce(ctx context.Context, hp handoverPeer, cs clients, srv *server, t timing, d time.Duration, tag string) (handoverRun, error) {
	base := time.Now() // the shared clock: time.Since(base) is monotonic
	// Every waiter gives up after a few TTLs: a lost wake-up shows as an
	// error instead of a hang.
	wctx, cancel := context.WithTimeout(ctx, d+5*t.ttl)
	defer cancel()

	type group struct {
		ms    []waiter
		wake  []time.Duration
		holds int
		err   error
	}
	gs := make([]*group, hp.groups)
	var shared []*lock.Client
	defer func() {
		for _, g := range gs {
			for _, m := range g.ms {
				_ = closeMutex(m)
			}
		}
		for _, c := range shared {
			_ = c.Close()
		}
	}()
	for gi := range gs {
		g := &group{}
		gs[gi] = g
		key := fmt.Sprintf("bench-handover-%s-%s-%d", tag, strings.NewReplacer(" ", "-", ",", "").Replace(hp.name), gi)
		var c *lock.Client
		if hp.shared != nil {
			var err error
			if c, err = newLockClient(cs, fmt.Sprintf("handover-%d", gi), t); err != nil {
				return handoverRun{}, err
			}
			shared = append(shared, c)
		}
		for w := range handoverWaiters {
			var m waiter
			var err error
			if c != nil {
				m, err = hp.shared(c, key)
			} else {
				m, err = hp.mk(cs, key, fmt.Sprintf("handover-%d", w), t)
			}
			if err != nil {
				return handoverRun{}, &unavailableError{err}
			}
			g.ms = append(g.ms, m)
		}
	}

	sched0 := readSchedLatency()
	queued := func() time.Duration {
		a, _ := runQueueWait(os.Getpid(), false)
		b, _ := runQueueWait(srv.pid(), true)
		return a + b
	}
	q0 := queued()
	var wg sync.WaitGroup
	for _, g := range gs {
		wg.Go(func() {
			for time.Since(base) < d && g.err == nil {
				var (
					last atomic.Int64 // the round's last release call, ns since base; -1 none yet
					mu   sync.Mutex
					errs []error
					rwg  sync.WaitGroup
				)
				last.Store(-1)
				for _, m := range g.ms {
					rwg.Go(func() {
						if err := m.wait(wctx); err != nil {
							mu.Lock()
							errs = append(errs, fmt.Errorf("wait: %w", err))
							mu.Unlock()
							return
						}
						at := time.Since(base)
						prev := last.Load()
						time.Sleep(handoverHold)
						last.Store(int64(time.Since(base)))
						err := m.release(context.WithoutCancel(wctx))
						mu.Lock()
						defer mu.Unlock()
						if prev >= 0 {
							g.wake = append(g.wake, at-time.Duration(prev))
						}
						g.holds++
						if err != nil {
							errs = append(errs, fmt.Errorf("release: %w", err))
						}
					})
				}
				rwg.Wait()
				g.err = errors.Join(errs...)
			}
		})
	}
	wg.Wait()
	out := handoverRun{elapsed: time.Since(base), groups: hp.groups,
		sched99: schedLatencyQuantile(sched0, readSchedLatency(), 0.99)}
	out.queued = time.Duration(float64(queued()-q0) / out.elapsed.Seconds())
	var errs []error
	for _, g := range gs {
		out.wake = append(out.wake, g.wake...)
		out.holds += g.holds
		errs = append(errs, g.err)
	}
	return out, errors.Join(errs...)
}

func handoverReport(hps []handoverPeer, runs map[string][]handoverRun, unavailable map[string]error, splitErr error, t timing, prof profile) figure {
	type cell struct {
		p50, p99, max, rate, sched, queued spread
		n                                  int
	}
	cells := make(map[string]cell)
	for key, rs := range runs {
		var c cell
		var a, b, m, r, sc, qu []float64
		for _, run := range rs {
			sc = append(sc, ms(run.sched99))
			qu = append(qu, ms(run.queued))
			a = append(a, ms(percentile(run.wake, 0.50)))
			b = append(b, ms(percentile(run.wake, 0.99)))
			m = append(m, ms(percentile(run.wake, 1)))
			r = append(r, run.holdsPerSec())
			c.n += len(run.wake)
		}
		c.p50, c.p99, c.max, c.rate, c.sched = spreadOf(a), spreadOf(b), spreadOf(m), spreadOf(r), spreadOf(sc)
		c.queued = spreadOf(qu)
		cells[key] = c
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d goroutines on one key, in rounds: each goroutine of a round takes the lock once (blocking), holds it %s, "+
		"and releases it, so every acquire of a round but the first waits for another goroutine's release. The wake-up is "+
		"the time from the release's call (taken right before it is sent) to the next holder's acquire return, on one "+
		"monotonic clock shared by the goroutines; it includes the release's round trip. Holds/s are per key. %s; %s per "+
		"run and peer; the polling peers run several keys at once (column keys) so that their percentiles rest on enough "+
		"hand-overs. Placements as in figure 1: every peer unpinned, and solo's locks again split (redis-server on one CPU, "+
		"the bench with GOMAXPROCS 1 on the other). The last column is the p99 of the time this process's runnable "+
		"goroutines waited for a CPU during the run (`runtime/metrics` `/sched/latencies:seconds`, the upper bound of its "+
		"bucket): a wake-up takes at least two such waits (the notice's reader, then the waiter), so when it is near a "+
		"millisecond the wake-up p99 shows the machine's load, not the lock. It cannot see the kernel's share: the "+
		"threads of the bench and redis-server's main thread waiting runnable on the kernel's run queue "+
		"(`/proc/PID/task/TID/schedstat`, second field), summed, per second of the run, in the last column.\n\n", handoverWaiters, handoverHold, t, prof.handoverTime)
	b.WriteString("| placement | peer | keys | hand-overs | wake-up p50 | wake-up p99 | max | holds/s per key | Go scheduler latency p99 | kernel run-queue wait per second |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, where := range []string{"unpinned", "split"} {
		for _, hp := range hps {
			if where == "split" && !strings.HasPrefix(hp.name, "solo") {
				continue
			}
			if err := unavailable[hp.name]; err != nil {
				fmt.Fprintf(&b, "| %s | %s | — | not available: %v | | | | | | |\n", where, hp.name, err)
				continue
			}
			if where == "split" && splitErr != nil {
				fmt.Fprintf(&b, "| %s | %s | — | not measured: %v | | | | | | |\n", where, hp.name, splitErr)
				continue
			}
			c := cells[where+"/"+hp.name]
			fmt.Fprintf(&b, "| %s | %s | %d | %d | %s | %s | %s | %s | %s | %s |\n", where, hp.name, hp.groups, c.n,
				c.p50.format(fmtMS), c.p99.format(fmtMS), c.max.format(fmtMS), c.rate.format(fmtInt), c.sched.format(fmtMS), c.queued.format(fmtMS))
		}
	}
	b.WriteString("\n")
	for _, hp := range hps {
		fmt.Fprintf(&b, "- **%s**: %s.\n", hp.name, hp.about)
	}
	for _, where := range []string{"unpinned", "split"} {
		if un, fa := cells[where+"/solo-lock"], cells[where+"/solo-lock fair"]; un.n > 0 && fa.n > 0 {
			fmt.Fprintf(&b, "\nCost of fairness, %s: fair ÷ unfair holds/s %.2f×, wake-up p50 %.2f×, p99 %.2f×.\n",
				where, fa.rate.med/un.rate.med, fa.p50.med/un.p50.med, fa.p99.med/un.p99.med)
		}
	}
	best, bn := 0.0, ""
	for _, hp := range hps {
		if c, ok := cells["unpinned/"+hp.name]; ok && !strings.HasPrefix(hp.name, "solo") && (bn == "" || c.p99.med < best) {
			best, bn = c.p99.med, hp.name
		}
	}
	var tg []target
	for _, where := range []string{"unpinned", "split"} {
		for _, name := range []string{"solo-lock", "solo-lock fair"} {
			c, ok := cells[where+"/"+name]
			what := fmt.Sprintf("%s, %s: contended handover (8 goroutines, 1 ms holds) wake-up p99 < %s", name, where, fmtMS(ms(handoverLimit)))
			switch {
			case unavailable[name] != nil:
				tg = append(tg, target{what: what, solo: "not available", peer: "—"})
			case !ok:
				tg = append(tg, target{what: what, solo: "not measured", peer: "—"})
			default:
				tg = append(tg, target{what: what, solo: "p99 " + fmtMS(c.p99.med), peer: "p99 " + fmtMS(best) + " (" + bn + ", unpinned)",
					ok: c.p99.ok && c.p99.med < ms(handoverLimit)})
			}
		}
	}
	return figure{title: "6. Lock handover under contention", body: b.String(), targets: tg}
}
