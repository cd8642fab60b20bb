package sim

import (
	"errors"
	"reflect"
	"strconv"
	"testing"
	"time"
)

// node is a keyspace with a settable server clock, for the script tests.
type node struct {
	t   *testing.T
	ks  keyspace
	vm  *luaVM
	srv int64
	pub []pubMsg
}

func newNode(t *testing.T) *node {
	n := &node{t: t, vm: newLuaVM(), srv: 1_700_000_000_123_456_789}
	t.Cleanup(n.vm.close)
	return n
}

func (n *node) eval(name string, keys []string, argv ...string) (any, error) {
	c := &cmdCtx{ks: &n.ks, srv: n.srv}
	r, err := n.vm.run(c, scripts().get(name), keys, argv)
	n.pub = append(n.pub, c.pub...)
	return r, err
}

func (n *node) must(name string, keys []string, argv ...string) any {
	n.t.Helper()
	r, err := n.eval(name, keys, argv...)
	if err != nil {
		n.t.Fatalf("%s: %v", name, err)
	}
	return r
}

func (n *node) cmd(args ...string) any {
	n.t.Helper()
	r, err := (&cmdCtx{ks: &n.ks, srv: n.srv}).do(args)
	if err != nil {
		n.t.Fatalf("%v: %v", args, err)
	}
	return r
}

func eq(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s = %#v, want %#v", what, got, want)
	}
}

func TestLua_Election(t *testing.T) {
	n := newNode(t)
	keys := []string{"s:{e}:lease", "s:{e}:term", "s:{e}:info", "s:{e}:cands"}
	acq := func(id string) []any {
		return n.must("leader/acquire.lua", keys, id, "1000", "s:{e}:events", "300", "", "2500", "16").([]any)
	}
	// The first term is the server clock in µs.
	r := acq("a")
	eq(t, "acquire", r, []any{int64(1), "1700000000123456 a", int64(1000)})
	eq(t, "term key", n.cmd("GET", "s:{e}:term"), "1700000000123456")
	eq(t, "notice", n.pub, []pubMsg{{"s:{e}:events", "elected 1700000000123456 a"}})
	// Another candidate sees the holder and its PTTL, and is listed.
	n.srv += int64(400 * time.Millisecond)
	eq(t, "held", acq("b"), []any{int64(0), "1700000000123456 a", int64(600)})
	eq(t, "candidates", n.cmd("ZRANGE", "s:{e}:cands", "0", "-1"), []any{"b"})
	// The holder adopts its own lease.
	eq(t, "adopt", acq("a"), []any{int64(2), "1700000000123456 a", int64(1000)})
	// A caller of a protocol that does not share an election with the
	// holder's is refused and not listed (version skew).
	eq(t, "skew", n.must("leader/acquire.lua", keys, "c", "1000", "s:{e}:events", "300", "", "2500", "16", "2", "2"),
		[]any{int64(4), "1700000000123456 a", int64(1000), "1 1"})
	eq(t, "skew not listed", n.cmd("ZRANGE", "s:{e}:cands", "0", "-1"), []any{"b"})
	// renew and release compare the exact value.
	eq(t, "renew other", n.must("leader/renew.lua", keys[:1], "1 a", "1000"), int64(0))
	eq(t, "renew", n.must("leader/renew.lua", []string{keys[0], keys[2]}, "1700000000123456 a", "1000"), int64(1))
	eq(t, "release other", n.must("leader/release.lua", []string{keys[0], keys[2], keys[3]}, "1700000000123456 b", "ch", "released", "b"), int64(0))
	// checkpoint is fenced and monotonic.
	cp := []string{keys[0], "s:{e}:cp:x"}
	eq(t, "cp", n.must("leader/checkpoint.lua", cp, "1700000000123456 a", "5"), int64(1))
	eq(t, "cp lower", n.must("leader/checkpoint.lua", cp, "1700000000123456 a", "4"), int64(0))
	eq(t, "cp other", n.must("leader/checkpoint.lua", cp, "1700000000123456 b", "9"), int64(-1))
	ins := n.must("leader/inspect.lua", []string{keys[0], keys[2], keys[3]}, "16").([]any)
	eq(t, "inspect value", ins[0], "1700000000123456 a")
	eq(t, "inspect cands", ins[3], []any{"b"})
	eq(t, "release", n.must("leader/release.lua", []string{keys[0], keys[2], keys[3]}, "1700000000123456 a", "ch", "released 1700000000123456 a", "a"), int64(1))
	// The lease expires on the server clock; the next term is the clock
	// when the stored term is below it, else stored+1.
	n.cmd("SET", "s:{e}:term", "1800000000000000")
	eq(t, "acquire after", acq("b")[1], "1800000000000001 b")
	n.srv += int64(1001 * time.Millisecond)
	eq(t, "expired", n.cmd("GET", keys[0]), nil)
}

func TestLua_Lock(t *testing.T) {
	n := newNode(t)
	keys := []string{"s:{l}:lock", "s:{l}:lock.term", "s:{l}:lock.gone"}
	gone := []string{keys[0], keys[2]}
	r := n.must("leader/lock/acquire.lua", keys, "c1.1", "1000", "").([]any)
	eq(t, "acquire", r, []any{int64(1), int64(1700000000123456)})
	f := "1700000000123456 c1.1"
	eq(t, "held", n.must("leader/lock/acquire.lua", keys, "c2.1", "1000", ""), []any{int64(0), f, int64(1000)})
	// Only the same call's earlier attempts named in ARGV[4..] adopt.
	eq(t, "adopt", n.must("leader/lock/acquire.lua", keys, "c1.2", "1000", "", "c1.1"), []any{int64(2), f})
	// The same request run twice (go-redis's retry) adopts its own hold.
	eq(t, "run twice", n.must("leader/lock/acquire.lua", keys, "c1.1", "1000", ""), []any{int64(2), f})
	eq(t, "reenter", n.must("leader/lock/acquire.lua", keys, "", "1000", f), []any{int64(3), int64(2)})
	eq(t, "reenter gone", n.must("leader/lock/acquire.lua", keys, "", "1000", "1 c1.1"), []any{int64(-1)})
	eq(t, "renew other", n.must("leader/lock/renew.lua", keys[:1], "1 c2.1", "1000"), int64(0))
	eq(t, "renew", n.must("leader/lock/renew.lua", keys[:1], f, "1000"), int64(1))
	eq(t, "release one", n.must("leader/lock/release.lua", gone, f, "0", "ch", "1000"), int64(1))
	eq(t, "abandon other", n.must("leader/lock/abandon.lua", gone, "ch", "60000", "c2.1"), int64(0))
	// A tombstoned attempt that lands later takes nothing.
	eq(t, "release last", n.must("leader/lock/release.lua", gone, f, "1", "ch", "1000"), int64(0))
	// Run twice: released, with no second notice; another field: not ours.
	eq(t, "release last twice", n.must("leader/lock/release.lua", gone, f, "1", "ch", "1000"), int64(0))
	eq(t, "release stale", n.must("leader/lock/release.lua", gone, "1 c9.1", "1", "ch", "1000"), int64(-1))
	eq(t, "tombstoned", n.must("leader/lock/acquire.lua", keys, "c2.1", "1000", ""), []any{int64(-2)})
	eq(t, "gone", n.cmd("HKEYS", keys[0]), []any{})
	eq(t, "notice", n.pub, []pubMsg{{"ch", "released " + f}})
	// The stored term at or above the clock is raised by one.
	n.cmd("SET", keys[1], "1800000000000000")
	eq(t, "acquire above", n.must("leader/lock/acquire.lua", keys, "c3.1", "1000", ""), []any{int64(1), int64(1800000000000001)})
	eq(t, "abandon", n.must("leader/lock/abandon.lua", gone, "ch", "60000", "c3.1"), int64(1))
	// Fair mode: queue and slot timeouts (the queue holds calls).
	fk := []string{keys[0], keys[1], "s:{l}:lock.queue", "s:{l}:lock.timeouts", keys[2]}
	eq(t, "fair acquire", n.must("leader/lock/fair_acquire.lua", fk, "a.1", "1000", "", "1", "5000", "a").([]any)[0], int64(1))
	eq(t, "fair held", n.must("leader/lock/fair_acquire.lua", fk, "b.1", "1000", "", "1", "5000", "b").([]any)[0], int64(0))
	eq(t, "queue", n.cmd("LINDEX", fk[2], "0"), "b")
	fa := []string{keys[0], keys[2], fk[2], fk[3]}
	eq(t, "fair abandon", n.must("leader/lock/fair_abandon.lua", fa, "ch", "60000", "b", "b.1"), int64(0))
	eq(t, "queue left", n.cmd("LINDEX", fk[2], "0"), nil)
}

// TestLua_Spread runs worker/spread.lua: members join, one is pruned, one
// leaves; the heartbeat refuses to register while the election of the
// group's name (mode elect) is held.
func TestLua_Spread(t *testing.T) {
	n := newNode(t)
	keys := []string{"s:{g}:members", "s:{g}:loads", "s:{g}:lease", "s:{g}:spread", "s:{g}:state", "s:{g}:jobsets"}
	hb := func(id, ttl, load, excl string) []any {
		return n.must("worker/spread.lua", keys, id, ttl, load, "5000", "ch", excl, "d1", "j1 j2", "").([]any)
	}
	members := func(r []any) []any {
		if r[0] != "ok" {
			t.Fatalf("heartbeat = %v", r)
		}
		m, _ := strconv.Atoi(r[1].(string))
		var ids []any
		for i := range m {
			ids = append(ids, r[2+3*i])
		}
		return ids
	}
	eq(t, "join a", members(hb("a", "1000", "2", "2000")), []any{"a"})
	n.srv += int64(10 * time.Millisecond)
	eq(t, "join b", members(hb("b", "1000", "1", "2000")), []any{"a", "b"})
	// a's expiry passes: b's heartbeat prunes it.
	n.srv += int64(995 * time.Millisecond)
	eq(t, "prune", members(hb("b", "1000", "3", "2000")), []any{"b"})
	eq(t, "leave", members(hb("b", "0", "0", "0")), []any(nil))
	// b's leave is told twice: it left the members, and its exclusion
	// entry went (an elect-mode candidate waiting for the group retries).
	eq(t, "notices", n.pub, []pubMsg{{"ch", "elected 0 a"}, {"ch", "elected 0 b"}, {"ch", "released 0 a"}, {"ch", "released 0 b"}, {"ch", "released 0 b"}})
	// The election of the group's name held in mode elect: refused.
	n.cmd("SET", keys[2], "1 e")
	eq(t, "refused", hb("c", "1000", "0", "2000"), []any{"elect", "1 e"})
}

// TestLua_Errors: a wrong type or an unknown command fails the script.
func TestLua_Errors(t *testing.T) {
	n := newNode(t)
	n.cmd("HSET", "s:{e}:lease", "f", "1")
	_, err := n.eval("leader/renew.lua", []string{"s:{e}:lease"}, "1 a", "1000")
	if !errors.Is(err, errScript) {
		t.Fatalf("renew over a hash: %v, want a script error", err)
	}
	if _, err := (&cmdCtx{ks: &n.ks}).do([]string{"FLUSHALL"}); err == nil {
		t.Fatal("FLUSHALL: no error")
	}
}
