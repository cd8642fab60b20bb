package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// spread is the median of several runs and their range.
type spread struct {
	med, lo, hi float64
	ok          bool // at least one run
}

// spreadOf summarises runs.
func spreadOf(runs []float64) spread {
	if len(runs) == 0 {
		return spread{}
	}
	s := slices.Clone(runs)
	slices.Sort(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return spread{med: med, lo: s[0], hi: s[n-1], ok: true}
}

// format renders "median (min–max)" with f for each number; a single run
// shows only its value.
func (s spread) format(f func(float64) string) string {
	if !s.ok {
		return "—"
	}
	if s.lo == s.hi {
		return f(s.med)
	}
	return fmt.Sprintf("%s (%s–%s)", f(s.med), f(s.lo), f(s.hi))
}

// percentile returns the nearest-rank p-quantile (0 < p ≤ 1) of xs.
func percentile(xs []time.Duration, p float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// Number formats.

func fmtInt(v float64) string { return fmt.Sprintf("%.0f", v) }

func fmtUS(v float64) string { return fmt.Sprintf("%.0f µs", v) }

func fmtMS(v float64) string {
	switch {
	case math.Abs(v) < 10:
		return fmt.Sprintf("%.2f ms", v)
	case math.Abs(v) < 100:
		return fmt.Sprintf("%.1f ms", v)
	}
	return fmt.Sprintf("%.0f ms", v)
}

func fmtRate(v float64) string {
	if v < 10 {
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func fmtPct(v float64) string { return fmt.Sprintf("%.1f %%", v) }

func fmtBytes(v float64) string {
	switch {
	case v >= 1<<20:
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	case v >= 1<<10:
		return fmt.Sprintf("%.1f KiB", v/(1<<10))
	}
	return fmt.Sprintf("%.0f B", v)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// ratio renders solo's figure against the best peer's, e.g. "1.08× setnx".
func ratio(solo, best float64, bestName string) string {
	if best == 0 || bestName == "" {
		return "—"
	}
	return fmt.Sprintf("%.2f× %s", solo/best, bestName)
}

// mark renders a target's outcome.
func mark(ok bool) string {
	if ok {
		return "✓"
	}
	return "✗"
}

// randDuration returns a uniform duration in [0, d).
func randDuration(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}
