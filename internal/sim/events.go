package sim

import (
	"fmt"
	"strings"
	"time"
)

// evKind is the kind of one event in a schedule's log.
type evKind uint8

const (
	evSend      evKind = iota + 1 // a call sent (a: request delay, b: reply delay, s: faults)
	evExec                        // the server executed a request (s: result)
	evReturn                      // a call returned to the client (s: result or error)
	evFault                       // a server-side or process fault
	evRun                         // Run started
	evStop                        // Run's context cancelled
	evRunEnd                      // Run returned (s: error)
	evResign                      // Resign called / returned
	evElected                     // a leader function started (a: term)
	evCancelled                   // a leader function's context cancelled (a: term, s: cause)
	evFnEnd                       // a leader function's last job returned (a: term)
	evWrite                       // a pull job's write (a: term, b: 1 accepted)
	evTick                        // a cron job fired (a: term, b: tick in Unix ms)
	evLog                         // the elector's or worker's log (s: message)
	evNote                        // the checker's notes
	evViolation                   // an invariant broken
)

// event is one line of a schedule's log. Events are kept raw and
// formatted only when a schedule is printed.
type event struct {
	at   time.Duration
	cand int8 // -1: the server or the checker
	kind evKind
	op   op
	n    uint64
	a, b int64
	s    string
	x    *execResult // evExec: formatted only when printed
}

func (e event) String() string {
	who := "  srv"
	if e.cand >= 0 {
		who = fmt.Sprintf("   c%d", e.cand)
	}
	var what string
	switch e.kind {
	case evSend:
		what = fmt.Sprintf("→ %s#%d req %s rep %s%s", e.op, e.n, time.Duration(e.a), time.Duration(e.b), e.s)
	case evExec:
		res := e.s
		if e.x != nil {
			res = e.x.String(e.op)
		}
		what = fmt.Sprintf("  exec %s#%d: %s", e.op, e.n, res)
	case evReturn:
		what = fmt.Sprintf("← %s#%d: %s", e.op, e.n, e.s)
	case evFault:
		what = "!! " + e.s
	case evRun:
		what = fmt.Sprintf("Run #%d starts", e.a)
	case evStop:
		what = fmt.Sprintf("Run #%d: context cancelled", e.a)
	case evRunEnd:
		what = fmt.Sprintf("Run #%d returned: %s", e.a, strings.ReplaceAll(e.s, "\n", "; ")) // errors.Join: one line
	case evResign:
		what = "Resign: " + e.s
	case evElected:
		what = fmt.Sprintf("** leader function starts, term %d", e.a)
	case evCancelled:
		what = fmt.Sprintf("leader function of term %d cancelled: %s", e.a, e.s)
	case evFnEnd:
		what = fmt.Sprintf("leader function of term %d returned", e.a)
	case evWrite:
		res := "refused"
		if e.b == 1 {
			res = "accepted"
		}
		what = fmt.Sprintf("write term %d: %s%s", e.a, res, e.s)
	case evTick:
		what = fmt.Sprintf("cron %s fired tick %s (term %d)", e.s, time.UnixMilli(e.b).UTC().Format("15:04:05.000"), e.a)
	case evLog:
		what = "log: " + e.s
	case evNote:
		what = "note: " + e.s
	case evViolation:
		what = "VIOLATION " + e.s
	}
	return fmt.Sprintf("%12s %s  %s", fmtDur(e.at), who, what)
}

func fmtDur(d time.Duration) string {
	return fmt.Sprintf("%.6fs", d.Seconds())
}

// formatLog renders the last max events (all when max <= 0).
func formatLog(evs []event, max int) string {
	var b strings.Builder
	from := 0
	if max > 0 && len(evs) > max {
		from = len(evs) - max
		fmt.Fprintf(&b, "  … %d earlier events (SOLO_SIM_LOG=all prints them)\n", from)
	}
	for _, e := range evs[from:] {
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	return b.String()
}
