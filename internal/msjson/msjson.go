// Package msjson is the JSON form of times and durations that solo's
// outputs share (/leader, a Spread's /leader, `solo status --json`): a
// time is UTC with milliseconds, three digits always
// ("2026-05-04T08:00:00.123Z"); a duration is an integer number of
// milliseconds in a field whose name ends in _ms.
package msjson

import (
	"fmt"
	"time"
)

// Layout is the layout of a Time.
const Layout = "2006-01-02T15:04:05.000Z07:00"

// Time is a time.Time whose JSON form is Layout, in UTC. Its zero value is
// the zero time: use `json:",omitzero"` to leave it out.
type Time time.Time

// MarshalJSON writes t as Layout in UTC.
func (t Time) MarshalJSON() ([]byte, error) {
	return []byte(`"` + time.Time(t).UTC().Format(Layout) + `"`), nil
}

// UnmarshalJSON reads any RFC 3339 time (Layout is one).
func (t *Time) UnmarshalJSON(b []byte) error {
	var v time.Time
	if err := v.UnmarshalJSON(b); err != nil {
		return fmt.Errorf("msjson: %w", err)
	}
	*t = Time(v)
	return nil
}

// IsZero reports whether t is the zero time (for omitzero).
func (t Time) IsZero() bool { return time.Time(t).IsZero() }

// Millis is d in whole milliseconds, for a field ending in _ms.
func Millis(d time.Duration) int64 { return d.Milliseconds() }

// Duration is the duration of ms milliseconds.
func Duration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
