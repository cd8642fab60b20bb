package sim

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// keyspace is the data of one simulated Redis node: strings, hashes,
// sorted sets and lists, each with an optional expiry in server time. It
// implements only the commands the shipped scripts call (leader/*.lua,
// leader/lock/*.lua, worker/spread.lua), each with Redis's reply types:
// int64 for an integer, string for a bulk string, nil for a nil bulk,
// []any for an array, status for a status reply and an error for an error
// reply. Orders Redis keeps (a small hash's fields in insertion order, a
// sorted set by score then member) are kept, so no map order leaks into a
// reply.
type keyspace struct {
	m map[string]*entry
}

type entryKind uint8

const (
	kString entryKind = iota + 1
	kHash
	kZset
	kList
)

func (k entryKind) String() string {
	return [...]string{"none", "string", "hash", "zset", "list"}[k]
}

// entry is one key. exp is the absolute expiry in server ns, 0 for none.
type entry struct {
	kind   entryKind
	str    string
	fields []string          // hash: field order (insertion, as a listpack)
	hash   map[string]string // hash values
	zset   map[string]float64
	list   []string
	exp    int64
}

func (e *entry) clone() *entry {
	c := *e
	if e.hash != nil {
		c.fields = append([]string(nil), e.fields...)
		c.hash = make(map[string]string, len(e.hash))
		for k, v := range e.hash {
			c.hash[k] = v
		}
	}
	if e.zset != nil {
		c.zset = make(map[string]float64, len(e.zset))
		for k, v := range e.zset {
			c.zset[k] = v
		}
	}
	if e.list != nil {
		c.list = append([]string(nil), e.list...)
	}
	return &c
}

// empty reports whether a container lost its last element (Redis then
// deletes the key).
func (e *entry) empty() bool {
	switch e.kind {
	case kHash:
		return len(e.hash) == 0
	case kZset:
		return len(e.zset) == 0
	case kList:
		return len(e.list) == 0
	}
	return false
}

// status is a status reply ("+OK").
type status string

// redisError is an error reply; it satisfies go-redis's redis.Error, so
// redis.HasErrorPrefix sees it as the server's.
type redisError string

func (e redisError) Error() string { return string(e) }
func (e redisError) RedisError()   {}

var (
	errWrongType = redisError("WRONGTYPE Operation against a key holding the wrong kind of value")
	errNotInt    = redisError("ERR value is not an integer or out of range")
	errNotFloat  = redisError("ERR value is not a valid float")
	errSyntax    = redisError("ERR syntax error")
)

func errArgs(cmd string) error {
	return redisError("ERR wrong number of arguments for '" + strings.ToLower(cmd) + "' command")
}

func (ks *keyspace) clone() keyspace {
	c := keyspace{m: make(map[string]*entry, len(ks.m))}
	for k, e := range ks.m {
		c.m[k] = e.clone()
	}
	return c
}

// lookup returns key's live entry at server time srv, deleting it once
// expired (as Redis does on access).
func (ks *keyspace) lookup(key string, srv int64) *entry {
	e := ks.m[key]
	if e == nil {
		return nil
	}
	if e.exp != 0 && srv >= e.exp {
		delete(ks.m, key)
		return nil
	}
	return e
}

// set replaces key's entry (nil deletes it): a replicated write.
func (ks *keyspace) set(key string, e *entry) {
	if ks.m == nil {
		ks.m = map[string]*entry{}
	}
	if e == nil {
		delete(ks.m, key)
		return
	}
	ks.m[key] = e
}

// cmdCtx is one command's (or one script's) view of a node: its server
// time, frozen for a script as Redis freezes it, and the keys it wrote.
type cmdCtx struct {
	ks    *keyspace
	srv   int64    // server time in ns
	dirty []string // keys written, in order
	pub   []pubMsg
}

type pubMsg struct{ channel, msg string }

func (c *cmdCtx) touch(key string) {
	for _, k := range c.dirty { // a script writes a few keys
		if k == key {
			return
		}
	}
	c.dirty = append(c.dirty, key)
}

// get returns key's entry of kind k; nil when absent, an error when of
// another kind.
func (c *cmdCtx) get(key string, k entryKind) (*entry, error) {
	e := c.ks.lookup(key, c.srv)
	if e == nil {
		return nil, nil
	}
	if e.kind != k {
		return nil, errWrongType
	}
	return e, nil
}

// create returns key's entry of kind k, making an empty one when absent.
func (c *cmdCtx) create(key string, k entryKind) (*entry, error) {
	e, err := c.get(key, k)
	if err != nil || e != nil {
		return e, err
	}
	e = &entry{kind: k}
	switch k {
	case kHash:
		e.hash = map[string]string{}
	case kZset:
		e.zset = map[string]float64{}
	}
	c.ks.set(key, e)
	return e, nil
}

// wrote marks key written, deleting it when a container became empty.
func (c *cmdCtx) wrote(key string, e *entry) {
	if e != nil && e.empty() {
		c.ks.set(key, nil)
	}
	c.touch(key)
}

func parseInt(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, errNotInt
	}
	return n, nil
}

// parseScore reads a sorted-set bound or score: a float, -inf/+inf, and
// for bounds an exclusive "(" prefix.
func parseScore(s string, bound bool) (float64, bool, error) {
	excl := false
	if bound && strings.HasPrefix(s, "(") {
		excl, s = true, s[1:]
	}
	switch strings.ToLower(s) {
	case "-inf":
		return math.Inf(-1), excl, nil
	case "+inf", "inf":
		return math.Inf(1), excl, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) {
		if bound {
			return 0, false, redisError("ERR min or max is not a float")
		}
		return 0, false, errNotFloat
	}
	return f, excl, nil
}

// formatScore is how Redis prints a score (ZSCORE): integers without a
// fraction, others in the shortest form that reads back exactly.
func formatScore(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e17 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', 17, 64)
}

type zmember struct {
	m string
	s float64
}

// sorted returns a sorted set's members by score, then member.
func (e *entry) sorted() []zmember {
	out := make([]zmember, 0, len(e.zset))
	for m, s := range e.zset {
		out = append(out, zmember{m, s})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].s != out[j].s {
			return out[i].s < out[j].s
		}
		return out[i].m < out[j].m
	})
	return out
}

// byScore returns the members of e within [min, max] (bounds as parsed).
func (e *entry) byScore(lo, hi string) ([]zmember, error) {
	min, minEx, err := parseScore(lo, true)
	if err != nil {
		return nil, err
	}
	max, maxEx, err := parseScore(hi, true)
	if err != nil {
		return nil, err
	}
	var out []zmember
	if e == nil {
		return out, nil
	}
	for _, z := range e.sorted() {
		if z.s < min || (minEx && z.s == min) || z.s > max || (maxEx && z.s == max) {
			continue
		}
		out = append(out, z)
	}
	return out, nil
}

// rankRange resolves Redis's start/stop ranks (negative from the end) over
// n elements; ok is false for an empty range.
func rankRange(start, stop, n int64) (int64, int64, bool) {
	if start < 0 {
		start += n
	}
	if stop < 0 {
		stop += n
	}
	start = max(start, 0)
	if stop >= n {
		stop = n - 1
	}
	return start, stop, start <= stop && start < n
}

// do runs one command. A nil entry reply is a nil bulk.
func (c *cmdCtx) do(args []string) (any, error) {
	if len(args) == 0 {
		return nil, redisError("ERR Please specify at least one argument for this redis lib call")
	}
	name := strings.ToUpper(args[0])
	a := args[1:]
	need := func(n int, exact bool) error {
		if len(a) < n || (exact && len(a) != n) {
			return errArgs(name)
		}
		return nil
	}
	switch name {
	case "TIME":
		us := c.srv / int64(time.Microsecond)
		return []any{strconv.FormatInt(us/1e6, 10), strconv.FormatInt(us%1e6, 10)}, nil

	case "GET":
		if err := need(1, true); err != nil {
			return nil, err
		}
		e, err := c.get(a[0], kString)
		if err != nil || e == nil {
			return nil, err
		}
		return e.str, nil

	case "SET":
		if err := need(2, false); err != nil {
			return nil, err
		}
		var exp int64
		get := false
		for i := 2; i < len(a); i++ {
			switch strings.ToUpper(a[i]) {
			case "PX":
				if i+1 >= len(a) {
					return nil, errSyntax
				}
				ms, err := parseInt(a[i+1])
				if err != nil {
					return nil, err
				}
				if ms <= 0 {
					return nil, redisError("ERR invalid expire time in 'set' command")
				}
				exp = c.srv + ms*int64(time.Millisecond)
				i++
			case "GET":
				get = true
			default:
				return nil, errSyntax
			}
		}
		var old any
		if get {
			e, err := c.get(a[0], kString)
			if err != nil {
				return nil, err
			}
			if e != nil {
				old = e.str
			}
		}
		c.ks.set(a[0], &entry{kind: kString, str: a[1], exp: exp})
		c.touch(a[0])
		if get {
			return old, nil
		}
		return status("OK"), nil

	case "DEL":
		if err := need(1, false); err != nil {
			return nil, err
		}
		var n int64
		for _, k := range a {
			if c.ks.lookup(k, c.srv) != nil {
				c.ks.set(k, nil)
				c.touch(k)
				n++
			}
		}
		return n, nil

	case "PEXPIRE":
		if err := need(2, true); err != nil {
			return nil, err
		}
		ms, err := parseInt(a[1])
		if err != nil {
			return nil, err
		}
		e := c.ks.lookup(a[0], c.srv)
		if e == nil {
			return int64(0), nil
		}
		if ms <= 0 {
			c.ks.set(a[0], nil)
		} else {
			e.exp = c.srv + ms*int64(time.Millisecond)
		}
		c.touch(a[0])
		return int64(1), nil

	case "PTTL":
		if err := need(1, true); err != nil {
			return nil, err
		}
		e := c.ks.lookup(a[0], c.srv)
		switch {
		case e == nil:
			return int64(-2), nil
		case e.exp == 0:
			return int64(-1), nil
		}
		// In whole milliseconds, rounded (Redis counts whole
		// milliseconds of its clock, so it may differ by one).
		return (e.exp - c.srv + int64(time.Millisecond)/2) / int64(time.Millisecond), nil

	case "PUBLISH":
		if err := need(2, true); err != nil {
			return nil, err
		}
		c.pub = append(c.pub, pubMsg{a[0], a[1]})
		return int64(0), nil // the count is filled in by the world (publishCount)

	case "HSET":
		if len(a) < 3 || len(a)%2 != 1 {
			return nil, errArgs(name)
		}
		e, err := c.create(a[0], kHash)
		if err != nil {
			return nil, err
		}
		var n int64
		for i := 1; i+1 < len(a); i += 2 {
			if _, ok := e.hash[a[i]]; !ok {
				e.fields = append(e.fields, a[i])
				n++
			}
			e.hash[a[i]] = a[i+1]
		}
		c.wrote(a[0], e)
		return n, nil

	case "HGET":
		if err := need(2, true); err != nil {
			return nil, err
		}
		e, err := c.get(a[0], kHash)
		if err != nil || e == nil {
			return nil, err
		}
		if v, ok := e.hash[a[1]]; ok {
			return v, nil
		}
		return nil, nil

	case "HEXISTS":
		if err := need(2, true); err != nil {
			return nil, err
		}
		e, err := c.get(a[0], kHash)
		if err != nil || e == nil {
			return int64(0), err
		}
		_, ok := e.hash[a[1]]
		return b2i(ok), nil

	case "HDEL":
		if err := need(2, false); err != nil {
			return nil, err
		}
		e, err := c.get(a[0], kHash)
		if err != nil || e == nil {
			return int64(0), err
		}
		var n int64
		for _, f := range a[1:] {
			if _, ok := e.hash[f]; ok {
				delete(e.hash, f)
				e.fields = removeStr(e.fields, f)
				n++
			}
		}
		if n > 0 {
			c.wrote(a[0], e)
		}
		return n, nil

	case "HINCRBY":
		if err := need(3, true); err != nil {
			return nil, err
		}
		by, err := parseInt(a[2])
		if err != nil {
			return nil, err
		}
		e, err := c.create(a[0], kHash)
		if err != nil {
			return nil, err
		}
		cur := int64(0)
		if v, ok := e.hash[a[1]]; ok {
			if cur, err = strconv.ParseInt(v, 10, 64); err != nil {
				return nil, redisError("ERR hash value is not an integer")
			}
		} else {
			e.fields = append(e.fields, a[1])
		}
		cur += by
		e.hash[a[1]] = strconv.FormatInt(cur, 10)
		c.wrote(a[0], e)
		return cur, nil

	case "HKEYS", "HGETALL":
		if err := need(1, true); err != nil {
			return nil, err
		}
		e, err := c.get(a[0], kHash)
		if err != nil {
			return nil, err
		}
		out := []any{}
		if e != nil {
			for _, f := range e.fields {
				out = append(out, f)
				if name == "HGETALL" {
					out = append(out, e.hash[f])
				}
			}
		}
		return out, nil

	case "ZADD":
		// Flags NX (only add) and XX (only update), as the spread scripts
		// send them.
		nx, xx := false, false
		for len(a) > 1 {
			switch strings.ToUpper(a[1]) {
			case "NX":
				nx = true
			case "XX":
				xx = true
			default:
				goto zaddArgs
			}
			a = append([]string{a[0]}, a[2:]...)
		}
	zaddArgs:
		if len(a) < 3 || len(a)%2 != 1 || (nx && xx) {
			return nil, errArgs(name)
		}
		scores := make([]float64, 0, len(a)/2)
		for i := 1; i < len(a); i += 2 {
			s, _, err := parseScore(a[i], false)
			if err != nil {
				return nil, err
			}
			scores = append(scores, s)
		}
		e, err := c.create(a[0], kZset)
		if err != nil {
			return nil, err
		}
		var n int64
		for i := 2; i < len(a); i += 2 {
			_, ok := e.zset[a[i]]
			if (ok && nx) || (!ok && xx) {
				continue
			}
			if !ok {
				n++
			}
			e.zset[a[i]] = scores[i/2-1]
		}
		c.wrote(a[0], e) // XX on a new key leaves it empty: deleted
		return n, nil

	case "ZREM":
		if err := need(2, false); err != nil {
			return nil, err
		}
		e, err := c.get(a[0], kZset)
		if err != nil || e == nil {
			return int64(0), err
		}
		var n int64
		for _, m := range a[1:] {
			if _, ok := e.zset[m]; ok {
				delete(e.zset, m)
				n++
			}
		}
		if n > 0 {
			c.wrote(a[0], e)
		}
		return n, nil

	case "ZSCORE":
		if err := need(2, true); err != nil {
			return nil, err
		}
		e, err := c.get(a[0], kZset)
		if err != nil || e == nil {
			return nil, err
		}
		if s, ok := e.zset[a[1]]; ok {
			return formatScore(s), nil
		}
		return nil, nil

	case "ZRANGE":
		withScores := len(a) == 4 && strings.ToUpper(a[3]) == "WITHSCORES"
		if withScores {
			a = a[:3]
		}
		if err := need(3, true); err != nil {
			return nil, err
		}
		start, err := parseInt(a[1])
		if err != nil {
			return nil, err
		}
		stop, err := parseInt(a[2])
		if err != nil {
			return nil, err
		}
		e, err := c.get(a[0], kZset)
		if err != nil {
			return nil, err
		}
		out := []any{}
		if e == nil {
			return out, nil
		}
		all := e.sorted()
		if lo, hi, ok := rankRange(start, stop, int64(len(all))); ok {
			for _, z := range all[lo : hi+1] {
				out = append(out, z.m)
				if withScores {
					out = append(out, formatScore(z.s))
				}
			}
		}
		return out, nil

	case "ZRANGEBYSCORE":
		if err := need(3, false); err != nil {
			return nil, err
		}
		off, count := int64(0), int64(-1)
		withScores := len(a) > 3 && strings.ToUpper(a[3]) == "WITHSCORES"
		if withScores {
			a = append(a[:3:3], a[4:]...)
		}
		if len(a) > 3 {
			if len(a) != 6 || strings.ToUpper(a[3]) != "LIMIT" {
				return nil, errSyntax
			}
			var err error
			if off, err = parseInt(a[4]); err != nil {
				return nil, err
			}
			if count, err = parseInt(a[5]); err != nil {
				return nil, err
			}
		}
		e, err := c.get(a[0], kZset)
		if err != nil {
			return nil, err
		}
		zs, err := e.byScore(a[1], a[2])
		if err != nil {
			return nil, err
		}
		out := []any{}
		if off < 0 {
			return out, nil
		}
		for i := off; i < int64(len(zs)) && (count < 0 || i < off+count); i++ {
			out = append(out, zs[i].m)
			if withScores {
				out = append(out, formatScore(zs[i].s))
			}
		}
		return out, nil

	case "ZREMRANGEBYSCORE":
		if err := need(3, true); err != nil {
			return nil, err
		}
		e, err := c.get(a[0], kZset)
		if err != nil {
			return nil, err
		}
		zs, err := e.byScore(a[1], a[2])
		if err != nil || len(zs) == 0 {
			return int64(0), err
		}
		for _, z := range zs {
			delete(e.zset, z.m)
		}
		c.wrote(a[0], e)
		return int64(len(zs)), nil

	case "ZREMRANGEBYRANK":
		if err := need(3, true); err != nil {
			return nil, err
		}
		start, err := parseInt(a[1])
		if err != nil {
			return nil, err
		}
		stop, err := parseInt(a[2])
		if err != nil {
			return nil, err
		}
		e, err := c.get(a[0], kZset)
		if err != nil || e == nil {
			return int64(0), err
		}
		all := e.sorted()
		lo, hi, ok := rankRange(start, stop, int64(len(all)))
		if !ok {
			return int64(0), nil
		}
		for _, z := range all[lo : hi+1] {
			delete(e.zset, z.m)
		}
		c.wrote(a[0], e)
		return hi - lo + 1, nil

	case "RPUSH":
		if err := need(2, false); err != nil {
			return nil, err
		}
		e, err := c.create(a[0], kList)
		if err != nil {
			return nil, err
		}
		e.list = append(e.list, a[1:]...)
		c.wrote(a[0], e)
		return int64(len(e.list)), nil

	case "LPOP":
		if err := need(1, true); err != nil {
			return nil, err
		}
		e, err := c.get(a[0], kList)
		if err != nil || e == nil {
			return nil, err
		}
		v := e.list[0]
		e.list = e.list[1:]
		c.wrote(a[0], e)
		return v, nil

	case "LINDEX":
		if err := need(2, true); err != nil {
			return nil, err
		}
		i, err := parseInt(a[1])
		if err != nil {
			return nil, err
		}
		e, err := c.get(a[0], kList)
		if err != nil || e == nil {
			return nil, err
		}
		if i < 0 {
			i += int64(len(e.list))
		}
		if i < 0 || i >= int64(len(e.list)) {
			return nil, nil
		}
		return e.list[i], nil

	case "LREM":
		if err := need(3, true); err != nil {
			return nil, err
		}
		count, err := parseInt(a[1])
		if err != nil {
			return nil, err
		}
		e, err := c.get(a[0], kList)
		if err != nil || e == nil {
			return int64(0), err
		}
		var n int64
		if count >= 0 {
			out := e.list[:0:0]
			for _, v := range e.list {
				if v == a[2] && (count == 0 || n < count) {
					n++
					continue
				}
				out = append(out, v)
			}
			e.list = out
		} else {
			out := make([]string, 0, len(e.list))
			for i := len(e.list) - 1; i >= 0; i-- {
				if e.list[i] == a[2] && n < -count {
					n++
					continue
				}
				out = append(out, e.list[i])
			}
			for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
				out[i], out[j] = out[j], out[i]
			}
			e.list = out
		}
		if n > 0 {
			c.wrote(a[0], e)
		}
		return n, nil
	}
	return nil, redisError(fmt.Sprintf("ERR unknown command '%s'", args[0]))
}

func removeStr(s []string, v string) []string {
	for i, x := range s {
		if x == v {
			return append(s[:i:i], s[i+1:]...)
		}
	}
	return s
}

// errScript marks an error raised by a script (not a reply it returned).
var errScript = errors.New("script error")
