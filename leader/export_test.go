package leader

// WithTerm lets the external tests build a context as a term's function
// gets it.
var WithTerm = withTerm

// SetProtocol makes l speak protocol p and share an election with min
// and up, as a build of another protocol would (the skew tests).
func SetProtocol(l *RedisStore, p, min int) { l.proto, l.protoMin = p, min }

// EvictionGuardOf returns the eviction guard of e's RedisStore (its hub's
// with a hub), nil for another Store.
func EvictionGuardOf(e *Elector) *EvictionGuard { return guardOf(e.lock) }
