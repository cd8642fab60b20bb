package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// handoffLimit is the target for solo's graceful handoff p99 on loopback.
const handoffLimit = 5 * time.Millisecond

// handoffFigure measures figure 2: from the leader's release to the next
// leader's function start, when the leader's function returns.
func handoffFigure(ctx context.Context, e *env) (figure, error) {
	t, err := timingFor(e.prof.ttl)
	if err != nil {
		return figure{}, err
	}
	ps := electionPeers()
	// Each side of the handoff has clients of its own, as two instances would.
	sides := make([][2]clients, len(ps))
	for i, p := range ps {
		addrs := addrsOf(e.nodes[:p.nodes])
		sides[i] = [2]clients{dial(addrs, nil), dial(addrs, nil)}
		defer sides[i][0].Close()
		defer sides[i][1].Close()
	}
	runs := make(map[string][]trialRun)
	nonce := randomToken()
	for r := range e.prof.runs {
		for i, p := range ps {
			res, err := runTrials(ctx, e.prof.handoffTrials, e.prof.parallel, func(ctx context.Context, k int) (time.Duration, error) {
				name := fmt.Sprintf("bench-handoff-%s-%s-%d-%d", nonce, p.name, r, k)
				return handoffTrial(ctx, p, sides[i][0], sides[i][1], t, name)
			})
			if err != nil {
				return figure{}, fmt.Errorf("%s: %w", p.name, err)
			}
			runs[p.name] = append(runs[p.name], res)
		}
		e.logf("  handoff run %d/%d", r+1, e.prof.runs)
	}
	table, tg := latencyTable(ps, runs, handoffLimit, "graceful handoff p99 < 5 ms on loopback")
	var b strings.Builder
	fmt.Fprintf(&b, "Two candidates per trial, %s, %d trials per run, %d at a time on distinct elections. "+
		"Candidate A leads; B starts, waits RetryInterval plus a uniform random part of another RetryInterval (so its polling "+
		"phase is random), then A's leader function returns. Measured from the moment A sends its release to the start of "+
		"B's leader function. solo: two `leader.Elector`s, B woken by the `released` notice; peers: B in the library's own "+
		"retry loop at RetryInterval. After a term every candidate pauses one RetryInterval (+ up to 20 %%) before it "+
		"campaigns again, as solo does, so A does not win its own lease back; a trial where it did anyway is discarded.\n\n",
		t, e.prof.handoffTrials, e.prof.parallel)
	b.WriteString(table)
	return figure{title: "2. Graceful handoff", body: b.String(), targets: []target{tg}}, nil
}

// handoffTrial runs one handoff in election name and returns its duration.
func handoffTrial(ctx context.Context, p peer, ca, cb clients, t timing, name string) (time.Duration, error) {
	var released atomic.Pointer[time.Time]
	a, err := p.candidate(ca, name, "a", t, hooks{released: func() {
		now := time.Now()
		released.CompareAndSwap(nil, &now)
	}})
	if err != nil {
		return 0, err
	}
	b, err := p.candidate(cb, name, "b", t, hooks{})
	if err != nil {
		return 0, err
	}

	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	var aTerms atomic.Int32
	aUp := make(chan struct{})
	markUp := once(func() { close(aUp) })
	quit := make(chan struct{})
	wg.Go(func() {
		_ = a.Run(runCtx, func(ctx context.Context) error {
			aTerms.Add(1)
			markUp()
			select {
			case <-quit:
			case <-ctx.Done():
			}
			return nil
		})
	})
	if err := waitClosed(runCtx, aUp, 5*t.ttl); err != nil {
		return 0, fmt.Errorf("first leader: %w", err)
	}

	bUp := make(chan time.Time, 1)
	wg.Go(func() {
		_ = b.Run(runCtx, func(ctx context.Context) error {
			select {
			case bUp <- time.Now():
			default:
			}
			<-ctx.Done()
			return nil
		})
	})
	if !sleepCtx(runCtx, t.retry+randDuration(t.retry)) {
		return 0, runCtx.Err()
	}
	close(quit)
	var started time.Time
	timer := time.NewTimer(5 * t.ttl)
	defer timer.Stop()
	select {
	case started = <-bUp:
	case <-timer.C:
		return 0, errors.New("second leader not elected within 5 TTL")
	case <-runCtx.Done():
		return 0, runCtx.Err()
	}
	if aTerms.Load() != 1 {
		return 0, fmt.Errorf("%w: the first leader won its lease back", errSkip)
	}
	rel := released.Load()
	if rel == nil {
		return 0, errors.New("second leader started before any release")
	}
	return started.Sub(*rel), nil
}

// waitClosed waits until ch is closed, at most d.
func waitClosed(ctx context.Context, ch <-chan struct{}, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-t.C:
		return fmt.Errorf("not within %s", d)
	case <-ctx.Done():
		return ctx.Err()
	}
}
