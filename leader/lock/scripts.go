package lock

import "github.com/solo-run/solo/internal/rediserr"

// The scripts, by name, for the fix of a configuration error: Redis 7.0
// names a script it refused a command of by its SHA1 only.
func init() {
	for name, src := range map[string]string{
		"lock acquire": acquireLua, "lock renew": renewLua, "lock release": releaseLua, "lock abandon": abandonLua,
		"fair lock acquire": fairAcquireLua, "fair lock release": fairReleaseLua, "fair lock abandon": fairAbandonLua,
		"Redlock renew": redlockRenewLua, "Redlock renew by owner": redlockRenewOwnerLua,
		"Redlock release": redlockReleaseLua, "Redlock release by owner": redlockReleaseOwnerLua, "Redlock undo": redlockUndoLua,
	} {
		rediserr.Register(name, src)
	}
}
