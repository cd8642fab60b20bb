//go:build linux

package faults

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Kill sends SIGKILL to the slot's process and waits until it is reaped.
// It returns the time the signal was sent.
func (r *Rig) Kill(s *Slot) int64 {
	r.T.Helper()
	p := s.proc
	if p == nil {
		r.T.Fatalf("kill slot %d: no process", s.Index)
	}
	at := r.H.Note(KindKill, p.ID, "SIGKILL")
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	r.awaitExit(p)
	s.proc = nil
	return at
}

// Terminate sends SIGTERM (graceful shutdown) and waits for the exit.
func (r *Rig) Terminate(s *Slot) int64 {
	r.T.Helper()
	p := s.proc
	if p == nil {
		r.T.Fatalf("terminate slot %d: no process", s.Index)
	}
	at := r.H.Note(KindFault, p.ID, "SIGTERM")
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		r.T.Fatal(err)
	}
	r.awaitExit(p)
	s.proc = nil
	return at
}

// Resign sends SIGUSR1: the candidate calls Elector.Resign.
func (r *Rig) Resign(s *Slot) int64 {
	r.T.Helper()
	at := r.H.Note(KindFault, s.ID(), "SIGUSR1 (resign)")
	if err := s.proc.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		r.T.Fatal(err)
	}
	return at
}

// Pause freezes the slot's process with SIGSTOP and returns once the
// kernel reports it stopped; the time returned is that moment.
func (r *Rig) Pause(s *Slot) int64 {
	r.T.Helper()
	p := s.proc
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		r.T.Fatal(err)
	}
	stat := fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid)
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile(stat)
		// Field 3, after the parenthesised command name, is the state.
		if i := strings.LastIndexByte(string(b), ')'); err == nil && i+2 < len(b) && b[i+2] == 'T' {
			break
		}
		if time.Now().After(deadline) {
			r.T.Fatalf("%s not stopped 5s after SIGSTOP", p.ID)
		}
		time.Sleep(time.Millisecond)
	}
	at := Mono()
	r.H.Add(Event{Mono: at, Cand: TestCand, Kind: KindPause, Detail: p.ID})
	return at
}

// Resume sends SIGCONT and returns when it was sent.
func (r *Rig) Resume(s *Slot) int64 {
	r.T.Helper()
	if err := s.proc.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		r.T.Fatal(err)
	}
	at := Mono()
	r.H.Add(Event{Mono: at, Cand: TestCand, Kind: KindResume, Detail: s.ID()})
	return at
}

func (r *Rig) awaitExit(p *Proc) {
	r.T.Helper()
	select {
	case <-p.done:
	case <-time.After(waitLimit):
		r.T.Fatalf("%s did not exit within %s", p.ID, waitLimit)
	}
}

// Sleep lets a fault last d. It is never used to wait for an effect.
func (r *Rig) Sleep(d time.Duration) { time.Sleep(d) }

// Phase sleeps a random time below the renew interval, so that a fault
// injected next hits a random point of the leader's renewal cycle.
func (r *Rig) Phase() {
	time.Sleep(time.Duration(r.Rand.Int64N(int64(r.Cfg.Timing.RenewInterval))))
}

// Between returns a random duration in [lo, hi].
func (r *Rig) Between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.Rand.Int64N(int64(hi-lo)+1))
}

// Link faults on one candidate's proxy.
type Link string

// The directions a link can be cut in.
const (
	CutBoth     Link = "both ways"
	CutRequests Link = "requests only"
	CutReplies  Link = "replies only"
)

// Cut blackholes the slot's link in the given direction (connections stay
// open, bytes are dropped) and returns the time.
func (r *Rig) Cut(s *Slot, how Link) int64 {
	switch how {
	case CutBoth:
		s.Proxy.Blackhole(true)
	case CutRequests:
		s.Proxy.BlackholeRequests(true)
	case CutReplies:
		s.Proxy.BlackholeReplies(true)
	}
	return r.H.Note(KindFault, s.ID(), "link cut "+string(how))
}

// Latency delays every chunk on the slot's link by d in each direction.
func (r *Rig) Latency(s *Slot, d time.Duration) int64 {
	s.Proxy.SetLatency(d)
	return r.H.Note(KindFault, s.ID(), "link latency "+d.String()+" each way")
}

// ResetLinks resets every connection of the slot's link.
func (r *Rig) ResetLinks(s *Slot) int64 {
	s.Proxy.ResetAll()
	return r.H.Note(KindFault, s.ID(), "link connections reset")
}

// Heal ends every fault on the slot's link.
func (r *Rig) Heal(s *Slot) int64 {
	s.Proxy.Heal()
	return r.H.Note(KindHeal, s.ID(), "link healed")
}

// LeaseWatch polls one lease in Redis, bypassing the proxies, to bound its
// server-side expiry from below: a read sent at s that finds pttl left
// proves the lease lives until at least s + pttl.
type LeaseWatch struct {
	value  string
	mu     sync.Mutex
	expiry int64 // greatest lower bound seen; 0 before the first sighting
	seen   []string
	stop   chan struct{}
	done   chan struct{}
}

// WatchLease starts polling every 10ms for the lease value "TERM ID", where
// ID is the candidate's configured ID: the value in Redis carries the
// random part the elector appends to it ("TERM ID-RANDOM").
// Stop must be called; the cleanup calls it too.
func (r *Rig) WatchLease(value string) *LeaseWatch {
	w := &LeaseWatch{value: value, stop: make(chan struct{}), done: make(chan struct{})}
	c := r.Direct()
	go func() {
		defer close(w.done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), r.Cfg.Timing.RedisTimeout)
			v, sent, pttl, err := r.LeaseOf(ctx, c)
			cancel()
			if errors.Is(err, errNoLease) {
				v, pttl, err = "", 0, nil
			}
			if err == nil {
				w.mu.Lock()
				if v == w.value || strings.HasPrefix(v, w.value+"-") {
					w.expiry = max(w.expiry, sent+int64(pttl)-int64(time.Millisecond)) // PTTL is in whole ms
				}
				if len(w.seen) == 0 || w.seen[len(w.seen)-1] != v {
					w.seen = append(w.seen, v)
				}
				w.mu.Unlock()
			}
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	r.T.Cleanup(func() { once.Do(w.halt) })
	return w
}

// Stop stops polling and returns the lower bound of the lease's expiry (0
// if it was never seen) and the values seen, in order, without repeats
// ("" for no lease).
func (w *LeaseWatch) Stop() (expiry int64, seen []string) {
	w.halt()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.expiry, slices.Clone(w.seen)
}

func (w *LeaseWatch) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}
