package main

import (
	"fmt"
	"math"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// schedLatencyMetric is the Go runtime's histogram of the time goroutines
// spent runnable before they ran.
const schedLatencyMetric = "/sched/latencies:seconds"

// schedSnapshot is the scheduler-latency histogram at one moment.
type schedSnapshot struct {
	counts  []uint64
	buckets []float64
}

func readSchedLatency() schedSnapshot {
	s := []metrics.Sample{{Name: schedLatencyMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return schedSnapshot{}
	}
	h := s[0].Value.Float64Histogram()
	return schedSnapshot{counts: append([]uint64(nil), h.Counts...), buckets: h.Buckets}
}

// schedLatencyQuantile returns the q-quantile (0 < q ≤ 1) of the scheduler
// latencies between two snapshots: the upper bound of the bucket it falls
// in (so it errs high), or 0 when nothing was recorded.
func schedLatencyQuantile(before, after schedSnapshot, q float64) time.Duration {
	if len(after.counts) == 0 || len(before.counts) != len(after.counts) {
		return 0
	}
	var total uint64
	d := make([]uint64, len(after.counts))
	for i := range d {
		d[i] = after.counts[i] - before.counts[i]
		total += d[i]
	}
	if total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i, n := range d {
		seen += n
		if seen >= rank {
			hi := after.buckets[i+1]
			if math.IsInf(hi, 1) {
				hi = after.buckets[i]
			}
			return time.Duration(hi * float64(time.Second))
		}
	}
	return 0
}

// runQueueWait returns the time the threads of process pid (every task
// under /proc/PID/task, or only the main thread when mainOnly) spent
// runnable but waiting for a CPU, from schedstat's second field: the
// kernel's share of the scheduling delay, which runtime/metrics cannot see.
func runQueueWait(pid int, mainOnly bool) (time.Duration, error) {
	tids := []string{strconv.Itoa(pid)}
	if !mainOnly {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return 0, err
		}
		tids = tids[:0]
		for _, e := range ents {
			tids = append(tids, e.Name())
		}
	}
	var sum time.Duration
	for _, tid := range tids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, tid))
		if err != nil {
			continue // the thread exited
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			continue
		}
		ns, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return 0, err
		}
		sum += time.Duration(ns)
	}
	return sum, nil
}
