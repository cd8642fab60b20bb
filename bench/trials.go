package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// trialRun is the outcome of one run of timed trials.
type trialRun struct {
	samples   []time.Duration
	discarded int
	firstErr  error // of a discarded trial, for the notes
}

// runTrials runs n trials, parallel at a time, and collects their
// durations. A trial returning an error is discarded and counted; the run
// fails when more than half are.
func runTrials(ctx context.Context, n, parallel int, trial func(ctx context.Context, i int) (time.Duration, error)) (trialRun, error) {
	var (
		mu  sync.Mutex
		out trialRun
		wg  sync.WaitGroup
	)
	next := make(chan int)
	for range min(parallel, n) {
		wg.Go(func() {
			for i := range next {
				d, err := trial(ctx, i)
				mu.Lock()
				if err != nil {
					out.discarded++
					if out.firstErr == nil {
						out.firstErr = err
					}
				} else {
					out.samples = append(out.samples, d)
				}
				mu.Unlock()
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return out, err
	}
	if out.discarded*2 > n {
		return out, fmt.Errorf("%d of %d trials failed, first: %w", out.discarded, n, out.firstErr)
	}
	return out, nil
}

// splitRun splits one run's samples into k runs of equal size, in the
// order the trials finished.
func splitRun(all trialRun, k int) []trialRun {
	out := make([]trialRun, k)
	for i, d := range all.samples {
		out[i*k/len(all.samples)].samples = append(out[i*k/len(all.samples)].samples, d)
	}
	out[0].discarded, out[0].firstErr = all.discarded, all.firstErr
	return out
}

// latencyTable renders figures 2 and 3: p50 and p99 per peer, each the
// median of the runs with their range, solo's as a ratio to the best peer,
// and solo's p99 against limit.
func latencyTable(ps []peer, runs map[string][]trialRun, limit time.Duration, what string) (string, target) {
	type cell struct {
		p50, p99, max spread
		n, discarded  int
		firstErr      error
	}
	cells := make(map[string]cell)
	for _, p := range ps {
		var c cell
		var a, b, m []float64
		for _, r := range runs[p.name] {
			a = append(a, ms(percentile(r.samples, 0.50)))
			b = append(b, ms(percentile(r.samples, 0.99)))
			m = append(m, ms(percentile(r.samples, 1)))
			c.n += len(r.samples)
			c.discarded += r.discarded
			if c.firstErr == nil {
				c.firstErr = r.firstErr
			}
		}
		c.p50, c.p99, c.max = spreadOf(a), spreadOf(b), spreadOf(m)
		cells[p.name] = c
	}
	best := func(get func(cell) float64) (float64, string) {
		var v float64
		var name string
		for _, p := range ps[1:] {
			if x := get(cells[p.name]); name == "" || x < v {
				v, name = x, p.name
			}
		}
		return v, name
	}
	var b strings.Builder
	b.WriteString("| peer | trials (discarded) | p50 | p99 | max | solo ÷ best peer (p50 · p99) |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- |\n")
	for _, p := range ps {
		c := cells[p.name]
		vs := ""
		if p.name == "solo" {
			v5, n5 := best(func(c cell) float64 { return c.p50.med })
			v9, n9 := best(func(c cell) float64 { return c.p99.med })
			vs = ratio(c.p50.med, v5, n5) + " · " + ratio(c.p99.med, v9, n9)
		}
		fmt.Fprintf(&b, "| %s | %d (%d) | %s | %s | %s | %s |\n", p.name, c.n, c.discarded,
			c.p50.format(fmtMS), c.p99.format(fmtMS), c.max.format(fmtMS), vs)
	}
	var notes []string
	for _, p := range ps {
		if c := cells[p.name]; c.firstErr != nil && !errors.Is(c.firstErr, errSkip) {
			notes = append(notes, fmt.Sprintf("%s, first discarded trial: %v", p.name, c.firstErr))
		}
	}
	if len(notes) > 0 {
		b.WriteString("\nDiscarded trials: " + strings.Join(notes, "; ") + ".\n")
	}
	solo := cells["solo"]
	tg := target{what: what, solo: "p99 " + fmtMS(solo.p99.med), peer: "—", ok: solo.p99.ok && solo.p99.med < ms(limit)}
	if v9, n9 := best(func(c cell) float64 { return c.p99.med }); n9 != "" {
		tg.peer = "p99 " + fmtMS(v9) + " (" + n9 + ")"
	}
	return b.String(), tg
}
