package sim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/solo-run/solo/leader"
)

// A client's side of the plan's shapes: single failures at a boundary
// and go-redis's retry of a request whose connection reset.

// errBoundary is a planned single failure at a boundary (CandPlan's
// FailRead, FailLeave): the request never reaches the server.
var errBoundary = errors.New("sim: i/o timeout (a single failed call at a boundary)")

// errReset is a connection reset after the server ran the request
// (CandPlan.Resets): go-redis sends the request again.
var errReset = errors.New("sim: read: connection reset by peer")

// goRedisRetries is go-redis's default MaxRetries; each retry waits
// 8ms << attempt, at most 512ms (its MinRetryBackoff and MaxRetryBackoff;
// go-redis draws a jitter within it, the simulator takes its upper end).
const goRedisRetries = 3

func retryBackoff(attempt int) time.Duration {
	return min(8*time.Millisecond<<attempt, 512*time.Millisecond)
}

// scriptName names the shipped script a command runs, or "".
func scriptName(a []string) string {
	if len(a) < 2 || (!strings.EqualFold(a[0], "EVAL") && !strings.EqualFold(a[0], "EVALSHA")) {
		return ""
	}
	sha := a[1]
	if strings.EqualFold(a[0], "EVAL") {
		sha = sha1Hex(a[1])
	}
	if sc := scripts().bySHA[strings.ToLower(sha)]; sc != nil {
		return sc.name
	}
	return ""
}

// boundary says why the plan fails this request at a boundary, or "",
// under w.mu: the first read of each checkpoint key in the first term the
// candidate starts at or after CandPlan.FailRead, the process's first
// release (CandPlan.FailRelease), or a spread member's first leave that
// extends its exclusion entry over the drain (CandPlan.FailLeave).
func (cl *client) boundary(ctx context.Context, o op, key string, args [][]string) string {
	w, p := cl.w, cl.plan
	if o == opLoad && p.FailRead > 0 {
		term, ok := leader.TermFrom(ctx)
		if !ok {
			return ""
		}
		if cl.failTerm == 0 {
			f := w.fns[fnKey{cl.idx, term}]
			if f == nil || f.elected.Before(w.start.Add(p.FailRead)) {
				return ""
			}
			cl.failTerm = term
		}
		if term != cl.failTerm || cl.failed[key] {
			return ""
		}
		if cl.failed == nil {
			cl.failed = map[string]bool{}
		}
		cl.failed[key] = true
		return fmt.Sprintf("the first read of %s in term %d", key, term)
	}
	if p.FailRelease && !cl.failed["release"] && o == opRelease {
		if cl.failed == nil {
			cl.failed = map[string]bool{}
		}
		cl.failed["release"] = true
		return "the first release"
	}
	if p.FailLeave && !cl.failed["leave"] && scriptName(args[0]) == "worker/spread.lua" {
		// ARGV[2] (member TTL) 0 and ARGV[6] (exclusion) above 0: the leave
		// that extends the exclusion entry over the drain.
		if a := args[0]; len(a) > 3 && a[2] == "6" && len(a) > 3+6+5 && a[3+6+1] == "0" && a[3+6+5] != "0" {
			if cl.failed == nil {
				cl.failed = map[string]bool{}
			}
			cl.failed["leave"] = true
			return "the leave that extends the exclusion entry"
		}
	}
	return ""
}
