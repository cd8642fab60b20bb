package leader_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/solo-run/solo/internal/jsonshape"
	"github.com/solo-run/solo/leader"
)

// TestHolder_JSON: a Holder's JSON form is the "holder" object of /leader
// and of solo status --json: each field named as its Go field, durations
// in milliseconds with _ms, times in UTC with milliseconds; and it reads
// back. Before, a Holder marshalled "ttl" (the time left) and "lease_ttl"
// in nanoseconds and times to the nanosecond, beside /leader's "ttl_ms"
// (the lease length) and "protocol_min".
func TestHolder_JSON(t *testing.T) {
	since := time.Date(2026, 11, 26, 10, 0, 0, 123456789, time.FixedZone("CET", 3600))
	h := leader.Holder{ID: "m-1f", Term: 7, TTLLeft: 3*time.Second + 999*time.Microsecond, Since: since,
		LeaseTTL: 10 * time.Second, RenewInterval: 3300 * time.Millisecond, LastRenew: since.Add(time.Second),
		Value: "10.0.0.7:8080", Protocol: 2, MinPeerProtocol: 1}
	got, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	const golden = `{"id":"m-1f","term":7,"since":"2026-11-26T09:00:00.123Z","lease_ttl_ms":10000,"ttl_left_ms":3000,"renew_interval_ms":3300,"last_renew":"2026-11-26T09:00:01.123Z","value":"10.0.0.7:8080","protocol":2,"min_peer_protocol":1}`
	if string(got) != golden {
		t.Fatalf("Holder JSON\n%s\nwant\n%s", got, golden)
	}
	if err := jsonshape.Holder(got); err != nil {
		t.Fatal(err)
	}
	var back leader.Holder
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatal(err)
	}
	want := h
	want.TTLLeft = 3 * time.Second
	want.Since, want.LastRenew = since.Truncate(time.Millisecond), since.Add(time.Second).Truncate(time.Millisecond)
	if !back.Since.Equal(want.Since) || !back.LastRenew.Equal(want.LastRenew) {
		t.Fatalf("read back %+v, want %+v", back, want)
	}
	back.Since, back.LastRenew, want.Since, want.LastRenew = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if back != want {
		t.Fatalf("read back %+v, want %+v", back, want)
	}

	// What an older solo's holder did not record is left out.
	old, _ := json.Marshal(leader.Holder{ID: "a", Term: 1, Since: since})
	if string(old) != `{"id":"a","term":1,"since":"2026-11-26T09:00:00.123Z","ttl_left_ms":0}` {
		t.Fatalf("an older holder's JSON = %s", old)
	}
}
