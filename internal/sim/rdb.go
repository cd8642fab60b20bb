package sim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// A candidate's leader.RedisStore is the real one, on a go-redis client
// whose hooks never reach a network: every command, or pipeline, is one
// round trip of the simulated network (client.roundTripKey) executed by
// the simulated server (world.exec). So the simulator runs the shipped
// scripts with the KEYS and ARGV RedisStore sends, the WAIT it pipelines
// after them, its EVALSHA-then-EVAL fallback, and its reading of the
// replies.

// newRDB returns cl's go-redis client.
func newRDB(cl *client) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: "sim:6379", Protocol: 2, DisableIdentity: true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	rdb.AddHook(rdbHook{cl})
	return rdb
}

type rdbHook struct{ cl *client }

func (h rdbHook) DialHook(redis.DialHook) redis.DialHook {
	return func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("sim: the election's client never dials")
	}
}

func (h rdbHook) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { return h.cl.do(ctx, []redis.Cmder{cmd}) }
}

func (h rdbHook) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { return h.cl.do(ctx, cmds) }
}

// do sends cmds in one round trip and sets their replies. A connection
// reset after the server ran them is retried as go-redis retries it (up
// to its MaxRetries, after its back-off): the server runs them again. A
// boundary failure the plan names fails the request unsent.
func (cl *client) do(ctx context.Context, cmds []redis.Cmder) error {
	w := cl.w
	args := make([][]string, len(cmds))
	for i, c := range cmds {
		args[i] = strArgs(c.Args())
	}
	o, key := cl.classify(args)
	w.mu.Lock()
	why := cl.boundary(ctx, o, key, args)
	if why != "" {
		w.event(cl.idx, evFault, o, 0, 0, 0, "planned failure: "+why)
	}
	w.mu.Unlock()
	if why != "" {
		return setErr(cmds, errBoundary)
	}
	var res execResult
	var err error
	for attempt := 0; ; attempt++ {
		res, err = cl.roundTripKey(ctx, o, key, func(now time.Time) execResult {
			r := execResult{epoch: w.epoch}
			w.onOldMaster(cl.idx, now, func() { cl.exec(now, args, &r) })
			return r
		})
		if !errors.Is(err, errReset) || attempt == goRedisRetries {
			break
		}
		w.mu.Lock()
		w.event(cl.idx, evLog, o, 0, 0, 0, fmt.Sprintf("go-redis sends %s again after a connection reset (retry %d)", o, attempt+1))
		w.mu.Unlock()
		t := time.NewTimer(retryBackoff(attempt))
		select {
		case <-t.C:
		case <-ctx.Done():
			err = ctx.Err()
		}
		t.Stop()
		if ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return setErr(cmds, err)
	}
	var first error
	for i, c := range cmds {
		if e := setReply(c, res.replies[i]); e != nil && first == nil {
			first = e
		}
	}
	return first
}

// exec runs one request's commands on the server, under w.mu.
func (cl *client) exec(now time.Time, args [][]string, r *execResult) {
	w := cl.w
	for _, a := range args {
		if strings.EqualFold(a[0], "WAIT") && len(a) == 3 {
			ms, _ := strconv.ParseInt(a[2], 10, 64)
			at := r.applyAt
			if at.IsZero() && cl.lastEpoch == w.epoch {
				at = cl.lastApply // WAIT counts the connection's earlier writes too
			}
			if w.onOld {
				at = now.Add(1000 * time.Hour) // the old master has no replica left
			}
			r.acked = w.waitFor(now, at, time.Duration(ms)*time.Millisecond, r)
			r.replies = append(r.replies, r.acked)
			continue
		}
		r.replies = append(r.replies, w.exec(now, cl.idx, a, r))
	}
	if !r.applyAt.IsZero() && !w.onOld {
		cl.lastApply, cl.lastEpoch = r.applyAt, w.epoch
	}
}

// setErr sets err on every command and returns it.
func setErr(cmds []redis.Cmder, err error) error {
	for _, c := range cmds {
		c.SetErr(err)
	}
	return err
}

// classify names the op of a request, for its fault stream: the script's,
// or the checkpoint load's (with the checkpoint key), or a resign notice.
// A spread member's client sends for many electors at once (their
// acquires and releases, its Hub's pipelines of renewals), so there every
// request is keyed by what it names too (see keyOf): its fate must not
// depend on the order in which goroutines woken at one instant sent.
func (cl *client) classify(args [][]string) (op, string) {
	o, key := cl.classifyOp(args)
	if cl.byKey && key == "" {
		key = keyOf(args)
	}
	return o, key
}

// keyOf names the keys (or channel) a request's commands name, in order.
func keyOf(args [][]string) string {
	var b strings.Builder
	for _, a := range args {
		k := ""
		switch strings.ToUpper(a[0]) {
		case "EVAL", "EVALSHA":
			if len(a) > 3 && a[2] != "0" {
				k = a[3]
			}
		default:
			if len(a) > 1 {
				k = a[1]
			}
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k)
	}
	return b.String()
}

func (cl *client) classifyOp(args [][]string) (op, string) {
	a := args[0]
	cpPrefix := cl.w.p.Cfg.Key("") + "cp:"
	switch strings.ToUpper(a[0]) {
	case "EVAL", "EVALSHA":
		sha := a[1]
		if strings.ToUpper(a[0]) == "EVAL" {
			sha = sha1Hex(a[1])
		}
		if sc := scripts().bySHA[strings.ToLower(sha)]; sc != nil {
			switch sc.name {
			case "leader/acquire.lua":
				return opAcquire, ""
			case "leader/renew.lua":
				return opRenew, ""
			case "leader/release.lua":
				return opRelease, ""
			case "leader/inspect.lua":
				return opInspect, ""
			case "leader/checkpoint.lua":
				if len(a) > 4 {
					return opCheckpoint, strings.TrimPrefix(a[4], cpPrefix)
				}
			}
		}
	case "GET":
		if len(a) > 1 {
			return opLoad, strings.TrimPrefix(a[1], cpPrefix)
		}
	case "PUBLISH":
		return opResignReq, ""
	case "INFO", "CONFIG":
		// A check of the server's configuration (its maxmemory-policy),
		// which may come before a Run's first acquire (invariant 8).
		return opOther, "info"
	}
	return opOther, ""
}

// strArgs formats a command's arguments as go-redis writes them.
func strArgs(in []any) []string {
	out := make([]string, len(in))
	for i, v := range in {
		switch x := v.(type) {
		case string:
			out[i] = x
		case []byte:
			out[i] = string(x)
		case int:
			out[i] = strconv.Itoa(x)
		case int64:
			out[i] = strconv.FormatInt(x, 10)
		case uint64:
			out[i] = strconv.FormatUint(x, 10)
		case float64:
			out[i] = strconv.FormatFloat(x, 'f', -1, 64)
		case bool:
			out[i] = "0"
			if x {
				out[i] = "1"
			}
		default:
			out[i] = fmt.Sprint(x)
		}
	}
	return out
}

// setReply sets a command's reply as go-redis reads it over RESP2: a nil
// bulk is redis.Nil, a status a string.
func setReply(c redis.Cmder, r any) error {
	if e, ok := r.(error); ok {
		c.SetErr(e)
		return e
	}
	if r == nil {
		c.SetErr(redis.Nil)
		return redis.Nil
	}
	switch cmd := c.(type) {
	case *redis.Cmd:
		cmd.SetVal(toGoRedis(r))
	case *redis.IntCmd:
		n, ok := r.(int64)
		if !ok {
			err := fmt.Errorf("sim: %v: reply %v is not an integer", c.Args()[0], r)
			c.SetErr(err)
			return err
		}
		cmd.SetVal(n)
	case *redis.StringCmd:
		cmd.SetVal(fmt.Sprint(toGoRedis(r)))
	case *redis.MapStringStringCmd: // CONFIG GET: name, value, …
		arr, _ := r.([]any)
		m := make(map[string]string, len(arr)/2)
		for i := 0; i+1 < len(arr); i += 2 {
			m[fmt.Sprint(arr[i])] = fmt.Sprint(arr[i+1])
		}
		cmd.SetVal(m)
	default:
		err := fmt.Errorf("sim: %v: reply type %T not simulated", c.Args()[0], c)
		c.SetErr(err)
		return err
	}
	return nil
}

func toGoRedis(r any) any {
	switch v := r.(type) {
	case status:
		return string(v)
	case redisError:
		return v
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = toGoRedis(x)
		}
		return out
	}
	return r
}
