package worker_test

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
)

// leaderBody is /leader's JSON body as a client reads it (the worker's own
// types are unexported: the body, not a Go type, is the interface).
type leaderBody struct {
	Election   string         `json:"election"`
	Holder     *leader.Holder `json:"holder"` // its JSON form
	Candidates []string       `json:"candidates"`
	Self       struct {
		ID        string    `json:"id"`
		Role      string    `json:"role"`
		Term      uint64    `json:"term"`
		Since     time.Time `json:"since"`
		LastRenew time.Time `json:"last_renew"`
	} `json:"self"`
	Error string `json:"error"`
}

// spreadBody is a Spread's /leader body.
type spreadBody struct {
	Group   string `json:"group"`
	Member  string `json:"member"`
	Members []struct {
		ID   string `json:"id"`
		Load int    `json:"load"`
	} `json:"members"`
	Share int `json:"share"`
	Jobs  []struct {
		Job      string         `json:"job"`
		Election string         `json:"election"`
		Instance string         `json:"instance"`
		Holder   *leader.Holder `json:"holder"`
		Self     bool           `json:"self"`
	} `json:"jobs"`
	Conflict string `json:"conflict"`
	Error    string `json:"error"`
}

// spreadServed returns what s's /leader serves.
func spreadServed(t *testing.T, s *worker.Spread) spreadBody {
	t.Helper()
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/leader", nil))
	var b spreadBody
	if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil || rec.Code != 200 {
		t.Fatalf("/leader: %d %v %s", rec.Code, err, rec.Body)
	}
	return b
}

// TestAssignment_JSON: an Assignment's holder (a *leader.Holder)
// marshals in elect mode's words, as a Worker's /leader does:
// lease_ttl_ms the lease length, ttl_left_ms the time left,
// renew_interval_ms and value. Before, a Spread's /leader put the time
// left in ttl_ms, always wrote ttl_left_ms 0 and left out renew_ms and
// value.
func TestAssignment_JSON(t *testing.T) {
	since := time.Date(2026, 11, 26, 10, 0, 0, 123000000, time.UTC)
	a := []worker.Assignment{{Job: "j", Election: "g.j", Instance: "m", Self: true,
		Holder: &leader.Holder{ID: "m-1f", Term: 7, TTLLeft: 3 * time.Second, Since: since, LastRenew: since.Add(time.Second), Protocol: 1, MinPeerProtocol: 1,
			LeaseTTL: 10 * time.Second, RenewInterval: 3 * time.Second, Value: "v"}},
		{Job: "k", Election: "g.k"}}
	got, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	const want = `[{"job":"j","election":"g.j","instance":"m","holder":{"id":"m-1f","term":7,"since":"2026-11-26T10:00:00.123Z","lease_ttl_ms":10000,"ttl_left_ms":3000,"renew_interval_ms":3000,"last_renew":"2026-11-26T10:00:01.123Z","value":"v","protocol":1,"min_peer_protocol":1},"self":true},{"job":"k","election":"g.k","holder":null,"self":false}]`
	if string(got) != want {
		t.Fatalf("Assignment JSON\n%s\nwant\n%s", got, want)
	}
}
