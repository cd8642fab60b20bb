package leader

import (
	"encoding/json"
	"time"

	"github.com/solo-run/solo/internal/msjson"
)

// holderJSON is the JSON form of a Holder: each field's name is the Go
// field's in snake case, a duration in milliseconds with _ms, a time in
// UTC with milliseconds. A field the holder did not record (zero) is left
// out, except ttl_left_ms and since.
type holderJSON struct {
	ID              string      `json:"id"`
	Term            uint64      `json:"term"`
	Since           msjson.Time `json:"since"`
	LeaseTTL        int64       `json:"lease_ttl_ms,omitempty"`
	TTLLeft         int64       `json:"ttl_left_ms"`
	RenewInterval   int64       `json:"renew_interval_ms,omitempty"`
	LastRenew       msjson.Time `json:"last_renew,omitzero"`
	Value           string      `json:"value,omitempty"`
	Protocol        int         `json:"protocol,omitempty"`
	MinPeerProtocol int         `json:"min_peer_protocol,omitempty"`
}

// MarshalJSON writes h as {"id", "term", "since", "lease_ttl_ms",
// "ttl_left_ms", "renew_interval_ms", "last_renew", "value", "protocol",
// "min_peer_protocol"}: durations in milliseconds, times in UTC with
// milliseconds ("2026-05-04T08:00:00.123Z"); a zero field other than
// ttl_left_ms and since is left out (the holder did not record it).
func (h Holder) MarshalJSON() ([]byte, error) {
	return json.Marshal(holderJSON{
		ID: h.ID, Term: h.Term, Since: msjson.Time(h.Since),
		LeaseTTL: msjson.Millis(h.LeaseTTL), TTLLeft: msjson.Millis(h.TTLLeft),
		RenewInterval: msjson.Millis(h.RenewInterval), LastRenew: msjson.Time(h.LastRenew),
		Value: h.Value, Protocol: h.Protocol, MinPeerProtocol: h.MinPeerProtocol,
	})
}

// UnmarshalJSON reads what MarshalJSON writes (a client of /leader or of
// `solo status --json` decodes its "holder" into a Holder).
func (h *Holder) UnmarshalJSON(b []byte) error {
	var j holderJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*h = Holder{
		ID: j.ID, Term: j.Term, Since: time.Time(j.Since),
		LeaseTTL: msjson.Duration(j.LeaseTTL), TTLLeft: msjson.Duration(j.TTLLeft),
		RenewInterval: msjson.Duration(j.RenewInterval), LastRenew: time.Time(j.LastRenew),
		Value: j.Value, Protocol: j.Protocol, MinPeerProtocol: j.MinPeerProtocol,
	}
	return nil
}
