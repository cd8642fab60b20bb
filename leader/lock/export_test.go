package lock

import (
	"strconv"

	"github.com/solo-run/solo/leader"
)

// Field returns the hash field of h's term in Redis: "TERM OWNER".
func Field(h *Hold) string { return strconv.FormatUint(h.l.term, 10) + " " + h.Holder() }

// QueuedCalls returns how many calls wait in c's batcher for the send in
// flight to return (-1 without a batcher).
func QueuedCalls(c *Client) int {
	if c.batch == nil {
		return -1
	}
	return c.batch.q.Len()
}

// MaxInflight is how many sends a batcher lets fly at once.
const MaxInflight = maxInflight

// FairReleaseLua is fair_release.lua, for tests that send a release the
// way a late request lands.
var FairReleaseLua = fairReleaseLua

// EvictionGuardOf returns the Client's eviction guard of its own Redis
// client.
func EvictionGuardOf(c *Client) *leader.EvictionGuard { return c.evictionFor(c.rdb).g }
