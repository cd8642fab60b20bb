//go:build linux

package faults

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// Kind names an Event.
type Kind string

// Events reported by candidates.
const (
	KindReady    Kind = "ready"    // the candidate runs its elector
	KindStart    Kind = "start"    // the leader function started (Term)
	KindStop     Kind = "stop"     // the leader function is about to return (Detail: cause)
	KindClaim    Kind = "claim"    // fence claim of Term (Result)
	KindWrite    Kind = "write"    // one fenced write attempt (Term, N, Result)
	KindAcquire  Kind = "acquire"  // acquire round trip (Result: acquired, adopted, held, error)
	KindRenew    Kind = "renew"    // renew round trip (Result: ok, lost, error)
	KindRelease  Kind = "release"  // release round trip (Result: ok, lost, error)
	KindElected  Kind = "elected"  // elector transition
	KindReleased Kind = "released" // elector transition: stepped down, lease released
	KindLost     Kind = "lost"     // elector transition: renew deadline or lease lost
	KindStepDown Kind = "stepdown" // elector transition: stepped down without release
	KindOverrun  Kind = "overrun"  // leader function still running past the stop budget
	KindResign   Kind = "resign"   // Resign returned (Result)
	KindSignal   Kind = "signal"   // the candidate received a signal (Detail)
	KindExit     Kind = "exit"     // Run returned (Detail: error)
)

// Events recorded by the test.
const (
	KindSpawn   Kind = "spawn"   // a candidate process was started
	KindKill    Kind = "kill"    // SIGKILL sent
	KindReaped  Kind = "reaped"  // the process is gone: no code of it runs any more
	KindPause   Kind = "pause"   // SIGSTOP sent and delivered
	KindResume  Kind = "resume"  // SIGCONT sent
	KindFault   Kind = "fault"   // a fault begins (Detail)
	KindHeal    Kind = "heal"    // a fault ends (Detail)
	KindGarbled Kind = "garbled" // a line a candidate wrote that is no Event
)

// Results of candidate events.
const (
	ResultAccepted      = "accepted"       // write or claim committed
	ResultStale         = "stale"          // refused: a higher term is stored
	ResultUnclaimed     = "unclaimed"      // refused: the term was not claimed
	ResultCancelled     = "cancelled"      // the call's context ended
	ResultError         = "error"          // any other error
	ResultOK            = "ok"             // renew, release, resign succeeded
	ResultLost          = "lost"           // renew or release found the lease not ours
	ResultNotReplicated = "not-replicated" // acquire refused by MinReplicas
)

// TestCand is the Cand of events the test itself records.
const TestCand = "test"

// Event is one line of a run's history. Times are CLOCK_MONOTONIC
// nanoseconds (Mono), comparable across the processes of the host.
type Event struct {
	Mono   int64  `json:"mono"`
	Cand   string `json:"cand"`
	Kind   Kind   `json:"kind"`
	Term   uint64 `json:"term,omitempty"`
	Result string `json:"result,omitempty"`
	N      int64  `json:"n,omitempty"`
	Dur    int64  `json:"dur,omitempty"` // round trip of the call, ns
	Detail string `json:"detail,omitempty"`
}

// History is the event log of one run: the candidates' events and the
// test's own, in arrival order. It is safe for concurrent use.
type History struct {
	mu      sync.Mutex
	evs     []Event
	changed chan struct{} // closed and replaced on every Add
}

// NewHistory returns an empty History.
func NewHistory() *History { return &History{changed: make(chan struct{})} }

// Add appends ev and returns its index.
func (h *History) Add(ev Event) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.evs = append(h.evs, ev)
	close(h.changed)
	h.changed = make(chan struct{})
	return len(h.evs) - 1
}

// Note records a test event now and returns its time.
func (h *History) Note(kind Kind, cand, detail string) int64 {
	now := Mono()
	h.Add(Event{Mono: now, Cand: cand, Kind: kind, Detail: detail})
	return now
}

// Len returns the number of events so far.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.evs)
}

// Events returns a copy of the events from index from on.
func (h *History) Events(from int) []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.evs[min(from, len(h.evs)):])
}

// Wait returns the first event at index from or later that pred accepts,
// waiting for it at most timeout; ok is false on timeout.
func (h *History) Wait(timeout time.Duration, from int, pred func(Event) bool) (ev Event, idx int, ok bool) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		h.mu.Lock()
		for ; from < len(h.evs); from++ {
			if pred(h.evs[from]) {
				ev = h.evs[from]
				h.mu.Unlock()
				return ev, from, true
			}
		}
		changed := h.changed
		h.mu.Unlock()
		select {
		case <-changed:
		case <-timer.C:
			return Event{}, from, false
		}
	}
}

// Interval is one run of a leader function, from its start to its stop.
type Interval struct {
	Cand  string
	Term  uint64
	Start int64
	// Stop is the function's stop event; for a process that died while
	// running it the time the test reaped the process, and for one still
	// running at the end of the history the end given to Intervals.
	Stop  int64
	Ended string // "stop", "reaped" or "open"
	Cause string // the stop event's cause
}

// Dur returns the interval's length.
func (iv Interval) Dur() time.Duration { return time.Duration(iv.Stop - iv.Start) }

// Intervals returns the leader-function intervals of evs, ordered by start.
// end closes intervals of processes still running.
func Intervals(evs []Event, end int64) []Interval {
	open := map[string]*Interval{}
	var out []Interval
	for _, ev := range evs {
		switch ev.Kind {
		case KindStart:
			if iv := open[ev.Cand]; iv != nil {
				// Two starts without a stop: cannot happen; close it here
				// so the overlap check still sees both.
				iv.Stop, iv.Ended = ev.Mono, "stop"
				out = append(out, *iv)
			}
			open[ev.Cand] = &Interval{Cand: ev.Cand, Term: ev.Term, Start: ev.Mono}
		case KindStop:
			if iv := open[ev.Cand]; iv != nil {
				iv.Stop, iv.Ended, iv.Cause = ev.Mono, "stop", ev.Detail
				out = append(out, *iv)
				delete(open, ev.Cand)
			}
		case KindReaped:
			if iv := open[ev.Cand]; iv != nil {
				iv.Stop, iv.Ended = ev.Mono, "reaped"
				out = append(out, *iv)
				delete(open, ev.Cand)
			}
		}
	}
	for _, iv := range open {
		iv.Stop, iv.Ended = max(end, iv.Start), "open"
		out = append(out, *iv)
	}
	slices.SortFunc(out, func(a, b Interval) int { return cmp.Compare(a.Start, b.Start) })
	return out
}

// Overlap is a time when two candidates ran the leader function at once.
type Overlap struct {
	A, B     Interval // A started first
	From, To int64
}

// Dur returns the overlap's length.
func (o Overlap) Dur() time.Duration { return time.Duration(o.To - o.From) }

func (o Overlap) String() string {
	return fmt.Sprintf("%s (term %d) and %s (term %d) both ran for %s",
		o.A.Cand, o.A.Term, o.B.Cand, o.B.Term, o.Dur())
}

// Overlaps returns every pair of intervals of different candidates that
// intersect, ordered by the time they begin to.
func Overlaps(ivs []Interval) []Overlap {
	var out []Overlap
	for i, a := range ivs {
		for _, b := range ivs[i+1:] {
			if b.Start >= a.Stop {
				continue
			}
			if a.Cand == b.Cand {
				continue
			}
			out = append(out, Overlap{A: a, B: b, From: max(a.Start, b.Start), To: min(a.Stop, b.Stop)})
		}
	}
	slices.SortFunc(out, func(x, y Overlap) int { return cmp.Compare(x.From, y.From) })
	return out
}

// TermsIncrease checks the terms the elections handed out: of two
// successful acquires whose round trips do not overlap, the later one's
// term is higher. (Round trips that overlap cannot both have minted a new
// term on the same lease, but their order is unknown.) It returns one line
// per violation.
func TermsIncrease(evs []Event) []string {
	var acq []Event
	for _, ev := range evs {
		if ev.Kind == KindAcquire && ev.Result == "acquired" {
			acq = append(acq, ev)
		}
	}
	slices.SortFunc(acq, func(a, b Event) int { return cmp.Compare(a.Mono, b.Mono) })
	var bad []string
	for i, b := range acq {
		for _, a := range acq[:i] {
			if a.Mono+a.Dur < b.Mono && a.Term >= b.Term {
				bad = append(bad, fmt.Sprintf("%s acquired term %d after %s had acquired term %d", b.Cand, b.Term, a.Cand, a.Term))
			}
		}
	}
	return bad
}

// WitnessRow is one row of the store's witness table: a write, or a claim
// of a higher term logged by a trigger, in commit order.
type WitnessRow struct {
	Seq  int64
	Kind string // "write" or "claim"
	Term uint64
	Cand string
	N    int64
}

// Witness is what the store's own log says about level 2.
type Witness struct {
	Claims, Writes int
	// Stale are the writes committed after a claim of a higher term.
	Stale []WitnessRow
	// Unclaimed are the writes committed with a term above every claim.
	Unclaimed []WitnessRow
	// Missing are writes a candidate reported accepted that the store
	// does not have.
	Missing []Event
}

// Violations returns one line per level-2 violation.
func (w Witness) Violations() []string {
	var out []string
	for _, r := range w.Stale {
		out = append(out, fmt.Sprintf("stale write accepted: %s write %d of term %d committed after a higher claim (row %d)", r.Cand, r.N, r.Term, r.Seq))
	}
	for _, r := range w.Unclaimed {
		out = append(out, fmt.Sprintf("unclaimed write accepted: %s write %d of term %d (row %d)", r.Cand, r.N, r.Term, r.Seq))
	}
	for _, ev := range w.Missing {
		out = append(out, fmt.Sprintf("write reported accepted but not in the store: %s write %d of term %d", ev.Cand, ev.N, ev.Term))
	}
	return out
}

// CheckWitness replays the store's log in commit order against the claims
// it contains, and matches it with the writes the candidates reported.
func CheckWitness(rows []WitnessRow, evs []Event) Witness {
	var w Witness
	var claimed uint64
	type key struct {
		cand string
		n    int64
	}
	stored := map[key]bool{}
	for _, r := range rows {
		switch r.Kind {
		case "claim":
			w.Claims++
			claimed = max(claimed, r.Term)
		case "write":
			w.Writes++
			stored[key{r.Cand, r.N}] = true
			switch {
			case r.Term < claimed:
				w.Stale = append(w.Stale, r)
			case r.Term > claimed:
				w.Unclaimed = append(w.Unclaimed, r)
			}
		}
	}
	for _, ev := range evs {
		if ev.Kind == KindWrite && ev.Result == ResultAccepted && !stored[key{ev.Cand, ev.N}] {
			w.Missing = append(w.Missing, ev)
		}
	}
	return w
}

// FormatHistory renders evs for a failure message, times in milliseconds
// since origin. Runs of accepted writes of one term are folded into one
// line.
func FormatHistory(evs []Event, origin int64) string {
	var b strings.Builder
	type run struct {
		cand       string
		term       uint64
		n          int
		first, end int64
	}
	var cur *run
	flush := func() {
		if cur != nil {
			fmt.Fprintf(&b, "%10.1f %-8s writes      term=%d ×%d accepted (until %.1f)\n",
				ms(cur.first-origin), cur.cand, cur.term, cur.n, ms(cur.end-origin))
			cur = nil
		}
	}
	for _, ev := range evs {
		if ev.Kind == KindWrite && ev.Result == ResultAccepted {
			if cur != nil && cur.cand == ev.Cand && cur.term == ev.Term {
				cur.n++
				cur.end = ev.Mono
				continue
			}
			flush()
			cur = &run{cand: ev.Cand, term: ev.Term, n: 1, first: ev.Mono, end: ev.Mono}
			continue
		}
		if ev.Kind == KindRenew && ev.Result == ResultOK || ev.Kind == KindAcquire && ev.Result == "held" {
			continue // routine; their absence shows
		}
		flush()
		fmt.Fprintf(&b, "%10.1f %-8s %-11s", ms(ev.Mono-origin), ev.Cand, ev.Kind)
		if ev.Term != 0 {
			fmt.Fprintf(&b, " term=%d", ev.Term)
		}
		if ev.N != 0 {
			fmt.Fprintf(&b, " n=%d", ev.N)
		}
		if ev.Result != "" {
			fmt.Fprintf(&b, " %s", ev.Result)
		}
		if ev.Dur != 0 {
			fmt.Fprintf(&b, " (%.1fms)", ms(ev.Dur))
		}
		if ev.Detail != "" {
			fmt.Fprintf(&b, " %s", ev.Detail)
		}
		b.WriteByte('\n')
	}
	flush()
	return b.String()
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }

// PausedDuring returns a predicate telling whether a candidate was frozen
// (between a pause and its resume, or its reaping) at some time during an
// interval. The lease model does not cover such an interval: its overlaps
// are checked at level 2 only.
func PausedDuring(evs []Event) func(Interval) bool {
	type span struct{ from, to int64 }
	spans := map[string][]span{}
	paused := map[string]int64{}
	for _, ev := range evs {
		switch ev.Kind {
		case KindPause:
			paused[ev.Detail] = ev.Mono
		case KindResume:
			if from, ok := paused[ev.Detail]; ok {
				spans[ev.Detail] = append(spans[ev.Detail], span{from, ev.Mono})
				delete(paused, ev.Detail)
			}
		case KindReaped:
			if from, ok := paused[ev.Cand]; ok {
				spans[ev.Cand] = append(spans[ev.Cand], span{from, ev.Mono})
				delete(paused, ev.Cand)
			}
		}
	}
	for cand, from := range paused {
		spans[cand] = append(spans[cand], span{from, math.MaxInt64})
	}
	return func(iv Interval) bool {
		for _, s := range spans[iv.Cand] {
			if s.from < iv.Stop && s.to > iv.Start {
				return true
			}
		}
		return false
	}
}
