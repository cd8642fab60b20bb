package worker

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/solo-run/solo/internal/msjson"
	"github.com/solo-run/solo/leader"
)

// leaderInfo is the JSON body of /leader. Its words are the ones
// `solo status --json` uses: "holder" is who holds the lease (null when
// nobody does), "candidates" who waits for it, "self" this instance.
type leaderInfo struct {
	Election string `json:"election"`
	// Holder is the current lease holder as Redis last reported it
	// (leader.Holder's JSON form); nil when nobody leads (or Redis could
	// not be asked: see Error).
	Holder *leader.Holder `json:"holder"`
	// Candidates are the IDs of the candidates waiting for the lease,
	// sorted; never null.
	Candidates []string `json:"candidates"`
	// Self is this instance's own view.
	Self selfInfo `json:"self"`
	// Error is set when Redis could not be asked.
	Error string `json:"error,omitempty"`
}

// selfInfo is this instance's view of its own leadership.
type selfInfo struct {
	ID string `json:"id"`
	// Role is leader, follower, standby (never leads) or always (runs its
	// jobs without an election).
	Role string `json:"role"`
	// Term, Since and LastRenew are set while this instance leads, on its
	// own clock.
	Term      uint64      `json:"term,omitempty"`
	Since     msjson.Time `json:"since,omitzero"`
	LastRenew msjson.Time `json:"last_renew,omitzero"`
}

// viewRead is one read of the election for /leader.
type viewRead struct {
	view leader.View
	err  error
}

// viewKey is what the elector itself knows of the election: a read made
// under another key is not served (a new term here, a new holder seen).
type viewKey struct {
	leading bool
	term    uint64
	holder  leader.Lease
}

// info returns what /leader serves: this instance's own state as its
// elector knows it now, and the holder and candidates as a read of Redis
// shared through reads.
func (w *Worker) info(ctx context.Context, reads *readCache[viewKey, viewRead]) leaderInfo {
	e := w.elector
	st := e.Status()
	info := leaderInfo{
		Election:   e.Config().Name,
		Candidates: []string{},
		Self:       selfInfo{ID: st.ID, Role: "follower"},
	}
	switch {
	case w.mode == ModeStandby:
		info.Self.Role = "standby"
	case w.mode == ModeAlways:
		info.Self.Role = "always"
	case st.Leading:
		info.Self.Role = "leader"
		info.Self.Term, info.Self.Since, info.Self.LastRenew = st.Term, msjson.Time(st.Since), msjson.Time(st.LastRenew)
	}
	r, age, err := reads.get(ctx, viewKey{st.Leading, st.Term, st.Holder})
	if err == nil {
		err = r.err
	}
	if err != nil {
		info.Error = err.Error()
		return info
	}
	info.Holder = aged(r.view.Holder, age)
	if r.view.Candidates != nil {
		info.Candidates = r.view.Candidates
	}
	return info
}

// Handler serves /livez, /readyz and /leader (the election as JSON:
// election, holder, candidates, self); none depends on being leader.
// /leader answers from the elector's own state and a read of Redis
// shared by every request for up to leaderMaxAge (a new term or holder
// seen reads again): a flood of requests adds no Redis round trips.
// /livez fails (503) only while the renewal loop is wedged
// (leader.Elector.Healthy), never because Redis is down; /readyz fails once
// the worker gave up (ErrGaveUp), while Redis refuses its calls as a
// configuration error, while it does not campaign for version skew, and,
// with WithWaitForRedis, until Redis first answered.
// /metrics is the metrics owner's to add (workerprom.Handler). See
// docs/design.md, "Observability".
func Handler(w *Worker) http.Handler {
	mux := http.NewServeMux()
	ok := func(rw http.ResponseWriter, _ *http.Request) { writeText(rw, http.StatusOK, "ok") }
	cfg := w.elector.Config()
	tolerance := (cfg.RenewDeadline - cfg.RenewInterval) / 2
	mux.HandleFunc("GET /livez", func(rw http.ResponseWriter, r *http.Request) {
		if err := w.elector.Healthy(tolerance); err != nil {
			writeText(rw, http.StatusServiceUnavailable, err.Error())
			return
		}
		ok(rw, r)
	})
	// /readyz fails (503, with the reason) once the worker gave up after
	// Policy.MaxFailedTerms failed terms in a row (ErrGaveUp): the process
	// lives on, campaigning no more, until someone fixes the job and
	// restarts it. It does not fail while Redis is unreachable (a service
	// that serves traffic as a follower keeps serving it), but says so in
	// its body: "ok; redis unreachable: …". It fails while the elector
	// does not campaign for version skew (leader.ErrProtocolSkew: the
	// holder speaks a protocol this build does not share an election
	// with), so a rolling deploy across incompatible protocols stalls on
	// the first new instance instead of mixing them. It fails while Redis refuses
	// this instance's calls as a configuration error (an ACL that lacks a
	// rule, a wrong password: leader.ErrRedisConfig), which no waiting
	// cures, with the fix in the body.
	mux.HandleFunc("GET /readyz", func(rw http.ResponseWriter, r *http.Request) {
		if err := w.GaveUp(); err != nil {
			writeText(rw, http.StatusServiceUnavailable, err.Error())
			return
		}
		if err := w.elector.Status().ProtocolErr; err != nil {
			writeText(rw, http.StatusServiceUnavailable, "not campaigning (version skew): "+err.Error())
			return
		}
		if err := w.elector.Status().ConfigErr; err != nil {
			writeText(rw, http.StatusServiceUnavailable, "redis configuration error: "+err.Error())
			return
		}
		if err := w.redisWait(); err != nil { // WithWaitForRedis
			writeText(rw, http.StatusServiceUnavailable, err.Error())
			return
		}
		writeText(rw, http.StatusOK, readyBody(w.elector.Status(), w.mode))
	})
	reads := newReadCache[viewKey](func(ctx context.Context) viewRead {
		v, err := w.elector.View(ctx)
		return viewRead{v, err}
	})
	handleLeader(mux, func(ctx context.Context) (any, bool) {
		info := w.info(ctx, reads)
		return info, info.Error != ""
	})
	return mux
}

// readyBody is /readyz's 200 body: "ok", or what keeps Redis from
// answering this instance's calls.
func readyBody(st leader.Status, mode Mode) string {
	switch {
	case mode == ModeAlways || mode == ModeStandby: // no acquire, no renew
		return "ok"
	case st.RedisErr != nil:
		return "ok; redis unreachable, campaigning in the background: " + st.RedisErr.Error()
	case !st.Reached:
		return "ok; redis not answered yet"
	}
	return "ok"
}

// writeText writes body and a newline as text/plain with status code.
func writeText(rw http.ResponseWriter, code int, body string) {
	rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
	rw.WriteHeader(code)
	_, _ = rw.Write([]byte(body + "\n"))
}

// handleLeader adds to mux GET /leader, which serves info as indented
// JSON, with 503 when info reports it failed.
func handleLeader(mux *http.ServeMux, info func(context.Context) (body any, failed bool)) {
	mux.HandleFunc("GET /leader", func(rw http.ResponseWriter, r *http.Request) {
		body, failed := info(r.Context())
		rw.Header().Set("Content-Type", "application/json")
		if failed {
			rw.WriteHeader(http.StatusServiceUnavailable)
		}
		enc := json.NewEncoder(rw)
		enc.SetIndent("", "  ")
		_ = enc.Encode(body)
	})
}
