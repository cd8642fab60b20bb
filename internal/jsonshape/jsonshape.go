// Package jsonshape checks, for tests, the shape of the JSON solo prints
// for an election: one definition shared by the tests of /leader (a
// Worker's and a Spread's) and of `solo status --json`, so the two cannot
// drift apart.
package jsonshape

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// HolderKeys are the keys, sorted, of a "holder" object whose holder
// recorded everything (leader.Holder's JSON form).
const HolderKeys = "id,last_renew,lease_ttl_ms,min_peer_protocol,protocol,renew_interval_ms,since,term,ttl_left_ms,value"

// msTime is a time in JSON: UTC, milliseconds, three digits always.
var msTime = regexp.MustCompile(`^"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"$`)

// Holder returns an error unless raw is a "holder" object with exactly
// HolderKeys, its durations (_ms) integers and its times (since,
// last_renew) in UTC with milliseconds.
func Holder(raw json.RawMessage) error {
	var h map[string]json.RawMessage
	if err := json.Unmarshal(raw, &h); err != nil {
		return fmt.Errorf("holder %s: %w", raw, err)
	}
	if got := strings.Join(slices.Sorted(maps.Keys(h)), ","); got != HolderKeys {
		return fmt.Errorf("holder keys %s, want %s", got, HolderKeys)
	}
	for k, v := range h {
		if strings.HasSuffix(k, "_ms") {
			var n int64
			if err := json.Unmarshal(v, &n); err != nil {
				return fmt.Errorf("holder %s = %s: want an integer of milliseconds", k, v)
			}
		}
	}
	return Times(raw)
}

// timeField is a "since" or "last_renew" field and its value.
var timeField = regexp.MustCompile(`"(since|last_renew)":\s*("[^"]*")`)

// Times returns an error naming each "since" or "last_renew" in text, at
// any depth, that is not in UTC with milliseconds, three digits.
func Times(text []byte) error {
	var bad []string
	for _, m := range timeField.FindAllSubmatch(text, -1) {
		if !msTime.Match(m[2]) {
			bad = append(bad, fmt.Sprintf("%s %s", m[1], m[2]))
		}
	}
	if bad != nil {
		return fmt.Errorf("want times in UTC with milliseconds, three digits (2026-05-04T08:00:00.123Z): %s", strings.Join(bad, ", "))
	}
	return nil
}
