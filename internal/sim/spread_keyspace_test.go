package sim

import "testing"

// TestKeyspace_SpreadCommands: the sorted-set options the spread scripts
// (and acquire.lua's exclusion of a live spread group) send, as Redis
// answers them.
func TestKeyspace_SpreadCommands(t *testing.T) {
	n := newNode(t)
	eq(t, "ZADD XX on a new key", n.cmd("ZADD", "z", "XX", "5", "a"), int64(0))
	eq(t, "XX created nothing", n.cmd("ZRANGE", "z", "0", "-1"), []any{})
	eq(t, "ZADD", n.cmd("ZADD", "z", "10", "a", "20", "b"), int64(2))
	eq(t, "ZADD XX updates", n.cmd("ZADD", "z", "XX", "30", "a", "1", "c"), int64(0))
	eq(t, "ZADD NX adds only", n.cmd("ZADD", "z", "NX", "1", "a", "15", "c"), int64(1))
	eq(t, "ZRANGE WITHSCORES", n.cmd("ZRANGE", "z", "0", "-1", "WITHSCORES"), []any{"c", "15", "b", "20", "a", "30"})
	eq(t, "ZRANGE -1 -1 WITHSCORES", n.cmd("ZRANGE", "z", "-1", "-1", "WITHSCORES"), []any{"a", "30"})
	eq(t, "ZRANGEBYSCORE WITHSCORES LIMIT", n.cmd("ZRANGEBYSCORE", "z", "(15", "+inf", "WITHSCORES", "LIMIT", "0", "1"), []any{"b", "20"})
	eq(t, "ZRANGEBYSCORE LIMIT", n.cmd("ZRANGEBYSCORE", "z", "-inf", "+inf", "LIMIT", "1", "5"), []any{"b", "a"})
	if _, err := (&cmdCtx{ks: &n.ks, srv: n.srv}).do([]string{"ZADD", "z", "NX", "XX", "1", "a"}); err == nil {
		t.Fatal("ZADD NX XX: no error")
	}
}
