package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/leader"
)

const (
	// scaleCPULimit is the target share of one core for renewing 10,000
	// elections at TTL 10s.
	scaleCPULimit = 10.0
	// scaleBatch is how many electors start at once.
	scaleBatch = 250
	// scaleMaxClients lets the server accept more than its default 10,000
	// connections, so the figure shows what solo uses, not where Redis
	// stops it.
	scaleMaxClients = "19000"
)

// scaleResult is figure 5 for one number of elections.
type scaleResult struct {
	n          int
	hub        bool          // electors built WithHub (one shared leader.Hub)
	elect      time.Duration // until all n lead
	cpu        spread        // % of one core, this process
	redisCPU   spread        // % of one core, redis-server
	heapPer    float64       // bytes of live heap per election
	goroutines float64       // per election
	conns      int           // Redis connections the process holds
	poolSize   int           // the shared client's pool size
	leaders    int           // elections with exactly one leader, ours, in its first term
}

// scaleFigure measures figure 5: one process holding many elections with
// one shared client.
func scaleFigure(ctx context.Context, e *env) (figure, error) {
	var rs []scaleResult
	for _, n := range e.prof.scaleSizes {
		for _, hub := range []bool{false, true} {
			srv, err := e.lab.start("--maxclients", scaleMaxClients)
			if err != nil {
				return figure{}, err
			}
			r, err := scaleOnce(ctx, e, srv, n, hub)
			cerr := srv.Close()
			if err := errors.Join(err, cerr); err != nil {
				return figure{}, fmt.Errorf("%d elections (hub %v): %w", n, hub, err)
			}
			rs = append(rs, r)
			e.logf("  %d elections (hub %v) done", n, hub)
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "solo only: one process, one go-redis client (default options) shared by n `leader.Elector`s "+
		"with distinct names, built either plainly (`leader.New(client, cfg)`: each elector its own pub/sub subscription "+
		"and its own renew round trips) or with one shared `leader.Hub` (`leader.New(client, cfg, leader.WithHub(hub))`: "+
		"one pub/sub connection for all notices, concurrent renewals sent together in pipelines), TTL %s (RenewInterval %s), each the only candidate of its election. CPU is `getrusage(RUSAGE_SELF)` "+
		"user+sys over %d windows of one RenewInterval each (%s), as a share of one core; redis-server's CPU is read from "+
		"/proc over the same windows. Memory is `runtime.MemStats.HeapAlloc` after a GC, before and after starting the "+
		"electors, divided by n. Connections are `INFO clients connected_clients` minus the probe's own; the server runs "+
		"with `--maxclients %s` (the default 10000 would refuse part of the 10,000 elections). At the end every election "+
		"is checked with `leader.Lookup`: its lease must be held by its elector, in the term it first won, and the elector "+
		"must still say it leads.\n\n",
		e.prof.scaleTTL, (e.prof.scaleTTL / 3).Round(time.Millisecond), e.prof.runs, e.prof.scaleWindow.Round(time.Millisecond), scaleMaxClients)
	b.WriteString("| elections | electors built | all elected in | renew CPU (% of one core) | redis-server CPU | heap per election | goroutines per election | Redis connections | exactly one leader |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	var tg []target
	for _, r := range rs {
		built := "plain `New`"
		if r.hub {
			built = "`WithHub`"
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %.1f | %d | %d / %d |\n", r.n, built, r.elect.Round(time.Millisecond),
			r.cpu.format(fmtPct), r.redisCPU.format(fmtPct), fmtBytes(r.heapPer), r.goroutines, r.conns, r.leaders, r.n)
	}
	last := rs[len(rs)-1]
	bound := last.poolSize + 1
	tg = append(tg,
		target{
			what: fmt.Sprintf("%d elections with a Hub: renewing uses < 10 %% of one core at TTL %s", last.n, e.prof.scaleTTL),
			solo: fmtPct(last.cpu.med), peer: "—",
			ok: last.cpu.med < scaleCPULimit,
		},
		target{
			what: fmt.Sprintf("%d elections with a Hub share a bounded number of Redis connections, pub/sub included (≤ pool size %d + 1 subscriber)", last.n, last.poolSize),
			solo: fmt.Sprint(last.conns), peer: "—",
			ok: last.conns <= bound,
		},
		target{
			what: fmt.Sprintf("%d elections with a Hub: every one keeps exactly one leader", last.n),
			solo: fmt.Sprintf("%d / %d", last.leaders, last.n), peer: "—",
			ok: last.leaders == last.n,
		},
	)
	fmt.Fprintf(&b, "\nWithout a Hub, connections grow with the number of elections because every `Elector.Run` opens its own "+
		"pub/sub subscription for release notices (`RedisStore.Watch` → `client.Subscribe`, one dedicated connection "+
		"with about 64 KiB of buffers each, pinged every TTL); the lease commands share the client's pool of %d. "+
		"With a Hub, all notices come over one pub/sub connection (one PING per TTL for all) and the renewals that fall "+
		"due together share a pipeline (one pool checkout and one write and read for up to 512 of them).\n", last.poolSize)
	return figure{title: "5. Scale: many elections in one process", body: b.String(), targets: tg}, nil
}

// scaleOnce runs n electors against srv and measures them.
func scaleOnce(ctx context.Context, e *env, srv *server, n int, withHub bool) (scaleResult, error) {
	res := scaleResult{n: n, hub: withHub}
	client := redis.NewClient(&redis.Options{Addr: srv.addr})
	defer client.Close()
	var opts []leader.Option
	if withHub {
		hub := leader.NewHub(client)
		defer hub.Close() // after the electors stopped (wg.Wait below runs first)
		opts = append(opts, leader.WithHub(hub))
	}
	res.poolSize = client.Options().PoolSize
	probe := redis.NewClient(&redis.Options{Addr: srv.addr, PoolSize: 1})
	defer probe.Close()

	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()

	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	electors := make([]*leader.Elector, n)
	firstTerm := make([]atomic.Uint64, n)
	began := time.Now()
	for lo := 0; lo < n; lo += scaleBatch {
		hi := min(lo+scaleBatch, n)
		// The elector that brings the batch's count to its size closes done.
		var leading atomic.Int64
		done := make(chan struct{})
		for i := lo; i < hi; i++ {
			el, err := leader.New(client, leader.Config{
				Name: fmt.Sprintf("bench-scale-%d", i),
				ID:   fmt.Sprintf("scale-%d", i),
				TTL:  e.prof.scaleTTL,
			}, opts...)
			if err != nil {
				return res, err
			}
			electors[i] = el
			mark := once(func() {
				if leading.Add(1) == int64(hi-lo) {
					close(done)
				}
			})
			wg.Go(func() {
				_ = el.Run(runCtx, func(ctx context.Context) error {
					term, _ := leader.TermFrom(ctx)
					firstTerm[i].CompareAndSwap(0, term)
					mark()
					<-ctx.Done()
					return nil
				})
			})
		}
		if err := waitClosed(runCtx, done, 4*e.prof.scaleTTL); err != nil {
			return res, fmt.Errorf("electors %d–%d not all leading: %w", lo, hi-1, err)
		}
	}
	res.elect = time.Since(began)

	// Let the start-up burst settle, then take memory and connections.
	if !sleepCtx(runCtx, time.Second) {
		return res, runCtx.Err()
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	res.heapPer = (float64(m1.HeapAlloc) - float64(m0.HeapAlloc)) / float64(n)
	res.goroutines = float64(runtime.NumGoroutine()-g0) / float64(n)
	conns, err := connectedClients(runCtx, probe)
	if err != nil {
		return res, err
	}
	res.conns = conns - 1 // the probe

	var cpu, rcpu []float64
	for range e.prof.runs {
		u0, r0, t0 := selfCPU(), mustCPU(srv), time.Now()
		if !sleepCtx(runCtx, e.prof.scaleWindow) {
			return res, runCtx.Err()
		}
		u1, r1, t1 := selfCPU(), mustCPU(srv), time.Now()
		wall := t1.Sub(t0).Seconds()
		cpu = append(cpu, 100*(u1-u0).Seconds()/wall)
		rcpu = append(rcpu, 100*(r1-r0).Seconds()/wall)
	}
	res.cpu, res.redisCPU = spreadOf(cpu), spreadOf(rcpu)

	res.leaders, err = countLeaders(runCtx, probe, electors, firstTerm)
	return res, err
}

// countLeaders returns how many elections are led by their elector in
// the term it first won, by leader.Lookup.
func countLeaders(ctx context.Context, probe *redis.Client, electors []*leader.Elector, firstTerm []atomic.Uint64) (int, error) {
	var ok atomic.Int64
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				el := electors[i]
				h, err := leader.Lookup(ctx, probe, el.Config())
				if err != nil && !errors.Is(err, leader.ErrNoLeader) {
					mu.Lock()
					firstErr = firstOf(firstErr, err)
					mu.Unlock()
					continue
				}
				if err == nil && h.ID == el.ID() && h.Term == firstTerm[i].Load() && el.IsLeader() && el.Term() == h.Term {
					ok.Add(1)
				}
			}
		})
	}
	for i := range electors {
		next <- i
	}
	close(next)
	wg.Wait()
	return int(ok.Load()), firstErr
}

// selfCPU returns the user+system CPU time this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func mustCPU(s *server) time.Duration {
	d, _ := s.cpu()
	return d
}

func firstOf(first, err error) error {
	if first != nil {
		return first
	}
	return err
}
