package leader

import "github.com/solo-run/solo/internal/rediserr"

// The scripts, by name, for the fix of a configuration error: Redis 7.0
// names a script it refused a command of by its SHA1 only.
func init() {
	for name, src := range map[string]string{
		"election acquire": acquireLua, "election renew": renewLua, "election release": releaseLua,
		"election inspect": inspectLua, "election proclaim": proclaimLua, "checkpoint": checkpointLua,
	} {
		rediserr.Register(name, src)
	}
}
