package worker

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/solo-run/solo/leader"
)

// LeaderInfo is the JSON body of /leader.
type LeaderInfo struct {
	Election string `json:"election"`
	// Holder is the current lease holder as Redis reports it; nil when
	// nobody leads (or Redis could not be asked: see Error).
	Holder *HolderInfo `json:"holder"`
	// Role is this instance's role: leader, follower, standby or always.
	Role string `json:"role"`
	// Self is this instance's own view.
	Self SelfInfo `json:"self"`
	// Error is set when Redis could not be asked.
	Error string `json:"error,omitempty"`
}

// HolderInfo describes the lease holder.
type HolderInfo struct {
	ID        string    `json:"id"`
	Term      uint64    `json:"term"`
	TTLMillis int64     `json:"ttl_ms"`
	Since     time.Time `json:"since"`
	LastRenew time.Time `json:"last_renew,omitzero"`
}

// SelfInfo is this instance's view of its own leadership.
type SelfInfo struct {
	ID        string    `json:"id"`
	Leading   bool      `json:"leading"`
	Term      uint64    `json:"term,omitempty"`
	Since     time.Time `json:"since,omitzero"`
	LastRenew time.Time `json:"last_renew,omitzero"`
}

// Info returns what /leader serves: one Redis round trip.
func (w *Worker) Info(ctx context.Context) LeaderInfo {
	e := w.elector
	st := e.Status()
	info := LeaderInfo{
		Election: e.Config().Name,
		Role:     "follower",
		Self:     SelfInfo{ID: st.ID, Leading: st.Leading, Term: st.Term},
	}
	switch {
	case w.mode == ModeStandby:
		info.Role = "standby"
	case w.mode == ModeAlways:
		info.Role = "always"
	case st.Leading:
		info.Role = "leader"
		info.Self.Since, info.Self.LastRenew = st.Since, st.LastRenew
	}
	h, err := e.Leader(ctx)
	switch {
	case err == nil:
		info.Holder = &HolderInfo{ID: h.ID, Term: h.Term, TTLMillis: h.TTL.Milliseconds(), Since: h.Since, LastRenew: h.LastRenew}
	case !errors.Is(err, leader.ErrNoLeader):
		info.Error = err.Error()
	}
	return info
}

// Handler serves /livez and /readyz (neither depends on being leader: a
// follower is healthy), /leader (LeaderInfo as JSON) and, when gatherer is
// not nil, /metrics.
//
// /livez fails (503, with the reason) while this instance leads but its
// last successful renewal is overdue by more than half the renew budget
// (RenewInterval + (RenewDeadline − RenewInterval)/2): Redis is slow or
// unreachable, or this process is starved, and the term is at risk — the
// signal client-go's leader-election healthz adaptor gives a liveness
// probe. It is healthy again once the renewal succeeds, or once the
// deadline passed and the instance stepped down.
func Handler(w *Worker, gatherer prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	ok := func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = rw.Write([]byte("ok\n"))
	}
	cfg := w.elector.Config()
	tolerance := (cfg.RenewDeadline - cfg.RenewInterval) / 2
	mux.HandleFunc("GET /livez", func(rw http.ResponseWriter, r *http.Request) {
		if err := w.elector.Healthy(tolerance); err != nil {
			rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
			rw.WriteHeader(http.StatusServiceUnavailable)
			_, _ = rw.Write([]byte(err.Error() + "\n"))
			return
		}
		ok(rw, r)
	})
	// /readyz fails (503, with the reason) once the worker gave up after
	// Policy.MaxFailedTerms failed terms in a row (ErrGaveUp): the process
	// lives on, campaigning no more, until someone fixes the job and
	// restarts it.
	mux.HandleFunc("GET /readyz", func(rw http.ResponseWriter, r *http.Request) {
		if err := w.GaveUp(); err != nil {
			rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
			rw.WriteHeader(http.StatusServiceUnavailable)
			_, _ = rw.Write([]byte(err.Error() + "\n"))
			return
		}
		ok(rw, r)
	})
	mux.HandleFunc("GET /leader", func(rw http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		info := w.Info(ctx)
		rw.Header().Set("Content-Type", "application/json")
		if info.Error != "" {
			rw.WriteHeader(http.StatusServiceUnavailable)
		}
		enc := json.NewEncoder(rw)
		enc.SetIndent("", "  ")
		_ = enc.Encode(info)
	})
	if gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	}
	return mux
}
