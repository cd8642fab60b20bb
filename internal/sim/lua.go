package sim

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// The simulated server runs the very Lua scripts that ship, on gopher-lua
// (as miniredis does), with redis.call over the node's keyspace and the
// server clock: a bug in a script is a bug the simulator can see. Lua
// numbers are doubles, as in Redis's Lua 5.1.

// script is one shipped script, compiled once.
type script struct {
	name  string // path from the module root, e.g. "leader/acquire.lua"
	src   string
	sha   string // SHA1 of src, as EVALSHA names it
	proto *lua.FunctionProto
}

// scriptSet is every shipped script, by name and by SHA1.
type scriptSet struct {
	byName map[string]*script
	bySHA  map[string]*script
}

// scriptDirs are the module's directories holding shipped scripts.
var scriptDirs = []string{"leader", "leader/lock", "worker"}

// loadScripts reads the shipped scripts from the module's source tree, once
// per test binary: the bytes the leader, lock and worker packages embed.
// The set is never changed after loading.
var loadScripts = sync.OnceValues(func() (*scriptSet, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return nil, fmt.Errorf("sim: cannot locate the module root")
	}
	root := filepath.Join(filepath.Dir(file), "..", "..")
	set := &scriptSet{byName: map[string]*script{}, bySHA: map[string]*script{}}
	for _, dir := range scriptDirs {
		paths, err := filepath.Glob(filepath.Join(root, dir, "*.lua"))
		if err != nil {
			return nil, err
		}
		sort.Strings(paths)
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				return nil, err
			}
			s, err := compileScript(dir+"/"+filepath.Base(p), string(b))
			if err != nil {
				return nil, err
			}
			set.byName[s.name], set.bySHA[s.sha] = s, s
		}
	}
	return set, nil
})

// scripts returns the shipped scripts; it panics when they cannot be read
// or do not compile (the module's tree is broken).
func scripts() *scriptSet {
	s, err := loadScripts()
	if err != nil {
		panic(fmt.Sprintf("sim: load scripts: %v", err))
	}
	return s
}

// get returns the shipped script name ("leader/renew.lua").
func (s *scriptSet) get(name string) *script {
	sc := s.byName[name]
	if sc == nil {
		panic("sim: no shipped script " + name)
	}
	return sc
}

func compileScript(name, src string) (*script, error) {
	chunk, err := parse.Parse(strings.NewReader(src), name)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", name, err)
	}
	proto, err := lua.Compile(chunk, name)
	if err != nil {
		return nil, fmt.Errorf("compile %s: %w", name, err)
	}
	// No script reads Lua 5.0's implicit "arg" table; without the flag a
	// call does not build one (a map allocation per run).
	proto.IsVarArg &^= lua.VarArgNeedsArg
	h := sha1.Sum([]byte(src))
	return &script{name: name, src: src, sha: hex.EncodeToString(h[:]), proto: proto}, nil
}

// luaVM is one node's interpreter: one LState per world, used under w.mu.
type luaVM struct {
	L   *lua.LState
	cur *cmdCtx // the running script's command context
}

func newLuaVM() *luaVM {
	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	for _, lib := range []struct {
		name string
		fn   lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		L.Push(L.NewFunction(lib.fn))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	vm := &luaVM{L: L}
	rt := L.NewTable()
	L.SetFuncs(rt, map[string]lua.LGFunction{
		"call":  func(L *lua.LState) int { return vm.call(L, true) },
		"pcall": func(L *lua.LState) int { return vm.call(L, false) },
		"replicate_commands": func(L *lua.LState) int {
			L.Push(lua.LTrue) // always on since Redis 7
			return 1
		},
		"error_reply": func(L *lua.LState) int {
			t := L.NewTable()
			t.RawSetString("err", lua.LString(L.CheckString(1)))
			L.Push(t)
			return 1
		},
		"status_reply": func(L *lua.LState) int {
			t := L.NewTable()
			t.RawSetString("ok", lua.LString(L.CheckString(1)))
			L.Push(t)
			return 1
		},
	})
	L.SetGlobal("redis", rt)
	return vm
}

func (vm *luaVM) close() { vm.L.Close() }

// call is redis.call (raise) and redis.pcall (return {err=...}).
func (vm *luaVM) call(L *lua.LState, raise bool) int {
	n := L.GetTop()
	args := make([]string, 0, n)
	for i := 1; i <= n; i++ {
		switch v := L.Get(i).(type) {
		case lua.LString:
			args = append(args, string(v))
		case lua.LNumber:
			args = append(args, luaNumArg(float64(v)))
		default:
			L.RaiseError("Lua redis lib command arguments must be strings or integers")
			return 0
		}
	}
	res, err := vm.cur.do(args)
	if err != nil {
		if raise {
			t := L.NewTable()
			t.RawSetString("err", lua.LString(err.Error()))
			L.Error(t, 1)
			return 0
		}
		t := L.NewTable()
		t.RawSetString("err", lua.LString(err.Error()))
		L.Push(t)
		return 1
	}
	L.Push(replyToLua(L, res))
	return 1
}

// luaNumArg is a Lua number passed to redis.call: Redis prints it as
// "%.17g", so integers come out exactly.
func luaNumArg(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e17 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', 17, 64)
}

// replyToLua converts a reply as Redis does for a script: an integer to a
// number, a bulk to a string, a nil bulk to false, an array to a table, a
// status to {ok=...}.
func replyToLua(L *lua.LState, r any) lua.LValue {
	switch v := r.(type) {
	case nil:
		return lua.LFalse
	case int64:
		return lua.LNumber(v)
	case string:
		return lua.LString(v)
	case status:
		t := L.NewTable()
		t.RawSetString("ok", lua.LString(string(v)))
		return t
	case []any:
		t := L.CreateTable(len(v), 0)
		for _, x := range v {
			t.Append(replyToLua(L, x))
		}
		return t
	}
	panic(fmt.Sprintf("sim: reply type %T", r))
}

// luaToReply converts a script's return value as Redis does: a number to
// an integer (truncated), a string to a bulk, true to 1, false and nil to
// a nil bulk, a table to an array up to its first nil, {err=} to an error
// and {ok=} to a status.
func luaToReply(v lua.LValue) any {
	switch x := v.(type) {
	case lua.LNumber:
		return int64(x)
	case lua.LString:
		return string(x)
	case lua.LBool:
		if x {
			return int64(1)
		}
		return nil
	case *lua.LTable:
		if e := x.RawGetString("err"); e.Type() == lua.LTString {
			return redisError(e.String())
		}
		if s := x.RawGetString("ok"); s.Type() == lua.LTString {
			return status(s.String())
		}
		out := []any{}
		for i := 1; ; i++ {
			e := x.RawGetInt(i)
			if e == lua.LNil {
				break
			}
			out = append(out, luaToReply(e))
		}
		return out
	}
	return nil
}

// run executes sc with keys and argv in c. A script error (a command
// raising one, a runtime error) is returned as an error wrapping
// errScript; an error the script returns ({err=...}) is the reply.
func (vm *luaVM) run(c *cmdCtx, sc *script, keys, argv []string) (any, error) {
	L := vm.L
	vm.cur = c
	defer func() { vm.cur = nil }()
	kt := L.CreateTable(len(keys), 0)
	for _, k := range keys {
		kt.Append(lua.LString(k))
	}
	at := L.CreateTable(len(argv), 0)
	for _, a := range argv {
		at.Append(lua.LString(a))
	}
	L.SetGlobal("KEYS", kt)
	L.SetGlobal("ARGV", at)
	top := L.GetTop()
	L.Push(L.NewFunctionFromProto(sc.proto))
	err := L.PCall(0, 1, nil)
	if err != nil {
		L.SetTop(top)
		msg := err.Error()
		if ae, ok := err.(*lua.ApiError); ok {
			if t, ok := ae.Object.(*lua.LTable); ok {
				if e := t.RawGetString("err"); e.Type() == lua.LTString {
					msg = e.String()
				}
			}
		}
		return nil, fmt.Errorf("%w: %s: %s", errScript, sc.name, msg)
	}
	ret := L.Get(-1)
	L.SetTop(top)
	r := luaToReply(ret)
	if e, ok := r.(redisError); ok {
		return nil, e
	}
	return r, nil
}

func sha1Hex(s string) string {
	h := sha1.Sum([]byte(s))
	return hex.EncodeToString(h[:])
}

// closeVM frees the server's interpreter, under w.mu, once the schedule
// is over.
func (w *world) closeVM() {
	if w.vm != nil {
		w.vm.close()
		w.vm = nil
	}
}

// resolve returns the script the server runs for shipped script sc: sc
// itself, or its replacement under Options.Mutate (compiled once per
// schedule).
func (w *world) resolve(sc *script) *script {
	src, ok := w.p.mutate[sc.name]
	if !ok {
		return sc
	}
	if m := w.mutated[sc.name]; m != nil {
		return m
	}
	m, err := compileScript(sc.name+" (mutated)", src)
	if err != nil {
		panic(fmt.Sprintf("sim: mutated %s: %v", sc.name, err))
	}
	if w.mutated == nil {
		w.mutated = map[string]*script{}
	}
	w.mutated[sc.name] = m
	return m
}

// ShippedScript returns the source of shipped script name
// ("leader/release.lua"), as the simulated server runs it.
func ShippedScript(name string) (string, error) {
	set, err := loadScripts()
	if err != nil {
		return "", err
	}
	sc := set.byName[name]
	if sc == nil {
		return "", fmt.Errorf("sim: no shipped script %q", name)
	}
	return sc.src, nil
}
