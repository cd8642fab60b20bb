package sim

import (
	"errors"
	"reflect"
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
	keys := []string{"s:{l}:lock", "s:{l}:lock.term"}
	r := n.must("leader/lock/acquire.lua", keys, "o1", "1000", "").([]any)
	eq(t, "acquire", r, []any{int64(1), int64(1700000000123456)})
	f := "1700000000123456 o1"
	eq(t, "held", n.must("leader/lock/acquire.lua", keys, "o2", "1000", ""), []any{int64(0), f, int64(1000)})
	eq(t, "reenter", n.must("leader/lock/acquire.lua", keys, "o1", "1000", f), []any{int64(3), int64(2)})
	eq(t, "reenter gone", n.must("leader/lock/acquire.lua", keys, "o1", "1000", "1 o1"), []any{int64(-1)})
	eq(t, "renew other", n.must("leader/lock/renew.lua", keys[:1], "1 o2", "1000"), int64(0))
	eq(t, "renew", n.must("leader/lock/renew.lua", keys[:1], f, "1000"), int64(1))
	eq(t, "release one", n.must("leader/lock/release.lua", keys[:1], f, "0", "ch"), int64(1))
	eq(t, "abandon other", n.must("leader/lock/abandon.lua", keys[:1], "o2", "ch"), int64(0))
	eq(t, "release last", n.must("leader/lock/release.lua", keys[:1], f, "1", "ch"), int64(0))
	eq(t, "gone", n.cmd("HKEYS", keys[0]), []any{})
	eq(t, "notice", n.pub, []pubMsg{{"ch", "released " + f}})
	// The stored term at or above the clock is raised by one.
	n.cmd("SET", keys[1], "1800000000000000")
	eq(t, "acquire above", n.must("leader/lock/acquire.lua", keys, "o3", "1000", ""), []any{int64(1), int64(1800000000000001)})
	eq(t, "abandon", n.must("leader/lock/abandon.lua", keys[:1], "o3", "ch"), int64(1))
	// Fair mode: queue and slot timeouts.
	fk := []string{keys[0], keys[1], "s:{l}:lock.queue", "s:{l}:lock.timeouts"}
	eq(t, "fair acquire", n.must("leader/lock/fair_acquire.lua", fk, "a", "1000", "", "1", "5000").([]any)[0], int64(1))
	eq(t, "fair held", n.must("leader/lock/fair_acquire.lua", fk, "b", "1000", "", "1", "5000").([]any)[0], int64(0))
	eq(t, "queue", n.cmd("LINDEX", fk[2], "0"), "b")
	eq(t, "fair abandon", n.must("leader/lock/fair_abandon.lua", fk, "b", "ch"), int64(0))
	eq(t, "queue left", n.cmd("LINDEX", fk[2], "0"), nil)
}

// TestLua_Spread runs worker/spread.lua, for spread members to come.
func TestLua_Spread(t *testing.T) {
	n := newNode(t)
	keys := []string{"s:{g}:members", "s:{g}:loads"}
	eq(t, "join a", n.must("worker/spread.lua", keys, "a", "1000", "2", "5000", "ch"), []any{"a", "2"})
	n.srv += int64(10 * time.Millisecond)
	eq(t, "join b", n.must("worker/spread.lua", keys, "b", "1000", "1", "5000", "ch"), []any{"a", "2", "b", "1"})
	// a's expiry passes: b's heartbeat prunes it.
	n.srv += int64(995 * time.Millisecond)
	eq(t, "prune", n.must("worker/spread.lua", keys, "b", "1000", "3", "5000", "ch"), []any{"b", "3"})
	eq(t, "leave", n.must("worker/spread.lua", keys, "b", "0", "0", "5000", "ch"), []any{})
	eq(t, "notices", n.pub, []pubMsg{{"ch", "elected 0 a"}, {"ch", "elected 0 b"}, {"ch", "released 0 a"}, {"ch", "released 0 b"}})
	eq(t, "keys gone", len(n.ks.m), 0)
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
