package config

import (
	"fmt"
	"strings"
)

// Error reports one bad configuration value, or a key the loader
// does not know. Its Error is one line:
//
//	config.yaml:12: election.ttl -1s: must be positive   (from a file)
//	election.ttl -1s: must be positive                   (Validate)
//	SOLO_ELECTION_TTL="-1s": must be positive             (from the environment)
//	config.yaml:12: unknown key election.tll              (Key empty)
type Error struct {
	// Key is the dotted path of the key: election.ttl, jobs[0].schedule.
	// Empty when Reason says it all.
	Key string
	// Value is the bad value as shown in the message: strings (and text
	// that does not parse) quoted, numbers and durations as written.
	// Passwords in a Redis URL are replaced by "xxxxx".
	Value string
	// Reason says what is wrong.
	Reason string
	// File and Line locate the key in the configuration file, when known.
	File string
	Line int
	// Env is the environment variable the value came from, when it did.
	Env string
}

// Error implements error.
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		if e.Line > 0 {
			fmt.Fprintf(&b, "%s:%d: ", e.File, e.Line)
		} else {
			fmt.Fprintf(&b, "%s: ", e.File)
		}
	}
	switch {
	case e.Env != "":
		fmt.Fprintf(&b, "%s=%s: %s", e.Env, e.Value, e.Reason)
	case e.Key == "":
		b.WriteString(e.Reason)
	case e.Value == "":
		fmt.Fprintf(&b, "%s: %s", e.Key, e.Reason)
	default:
		fmt.Fprintf(&b, "%s %s: %s", e.Key, e.Value, e.Reason)
	}
	return b.String()
}
