package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/solo-run/solo/internal/proctree"
	"github.com/solo-run/solo/leader"
)

// program runs an external command as a job, under a keeper process (see
// keeper.go): with the term in its environment, and never past the lease.
type program struct {
	argv []string
	// job is the job's name, given to the program as SOLO_JOB; prefix,
	// when set, is written before every line of its output.
	job, prefix string
	env         []string // the program's environment, without the SOLO_* variables
	election    string
	id          string
	// fenceTable, when set, is the fence table the term was claimed in
	// (fence.dsn): the program gets it as SOLO_FENCE_TABLE.
	fenceTable string
	// killAfter is when SIGKILL follows SIGTERM (see stopTiming): three
	// quarters of the margin between the renew deadline and
	// TTL × (1 − drift), leaving the rest for the kill to land before the
	// lease can pass to another instance.
	killAfter time.Duration
	// renewDeadline and status give the keeper its dead-man's deadline:
	// LastRenew + renewDeadline of the term, read when the next renewal is
	// due (renewInterval after the last) and, until it shows, at growing
	// steps up to poll (nextPoll).
	renewDeadline time.Duration
	renewInterval time.Duration
	status        func() leader.Status
	poll          time.Duration
	stdout        io.Writer
	stderr        io.Writer
	sup           *supervisor
	log           *zap.Logger
}

// run starts the program under a keeper and waits until the keeper is gone,
// that is until the whole program tree is gone. When ctx ends it asks the
// keeper to stop the tree (SIGTERM to every descendant, SIGKILL at
// killAfter); the keeper does so on its own when the renew deadline it was
// last told passes, or when solo dies. A non-zero exit is an error (the
// worker's restart policy decides what follows).
func (p *program) run(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err // the term ended before the program could start: start nothing
	}
	term, leading := leader.TermFrom(ctx)
	path, err := exec.LookPath(p.argv[0])
	if err != nil {
		return fmt.Errorf("start %s: %w", p.argv[0], err)
	}
	var lastRenew time.Time
	deadline := func() int64 {
		if !leading || p.status == nil {
			return 0
		}
		st := p.status()
		if st.Term != term && !lastRenew.IsZero() {
			return 0 // the term has ended: no renewal moves the deadline any more
		}
		lastRenew = st.LastRenew
		return proctree.Monotonic() + int64(time.Until(st.LastRenew.Add(p.renewDeadline)))
	}
	env := p.environ(term)
	stdout, stderr := p.stdout, p.stderr
	if p.prefix != "" {
		pp, err := newPrefixed(p.prefix, p.stdout, p.stderr)
		if err != nil {
			return fmt.Errorf("start %s: %w", p.argv[0], err)
		}
		defer pp.wait()
		defer pp.closeWriters() // the keeper has its own copies once started
		stdout, stderr = pp.stdout, pp.stderr
	}
	k, err := p.sup.start(path, p.argv, env, p.killAfter, deadline(), stdout, stderr)
	if err != nil {
		return fmt.Errorf("start %s: %w", p.argv[0], err)
	}
	log := p.log.With(zap.Int("keeper", k.pid), zap.Uint64("term", term))
	go k.readStatus(log, p.argv, p.killAfter)

	poll := time.NewTimer(p.nextPoll(lastRenew, 0))
	defer poll.Stop()
	misses := 0
	tick := poll.C
	if !leading {
		tick = nil
	}
	done := ctx.Done()
	for {
		select {
		case <-k.exited:
			return k.result(log, ctx.Err() != nil)
		case <-done:
			done = nil
			// The keeper's report of the SIGTERM logs the line, stamped when
			// it acted; when it had already stopped the tree on its own (solo
			// was stopped past the renew deadline) there is no such line, and
			// its own one stands.
			k.stopCause.Store(&stopCause{err: context.Cause(ctx)})
			k.send("T")
		case <-tick:
			if done == nil {
				tick = nil // stopping: the deadline no longer moves
				continue
			}
			prev := lastRenew
			if d := deadline(); d != 0 && !lastRenew.Equal(prev) {
				k.send("D " + strconv.FormatInt(d, 10))
				misses = 0
			} else {
				misses++
			}
			poll.Reset(p.nextPoll(lastRenew, misses))
		}
	}
}

// environ is the program's environment in term: solo's without its own
// SOLO_* variables, and the term's.
func (p *program) environ(term uint64) []string {
	env := append(append([]string(nil), p.env...),
		"SOLO_TERM="+strconv.FormatUint(term, 10),
		"SOLO_ELECTION="+p.election,
		"SOLO_ID="+p.id,
		"SOLO_JOB="+p.job,
	)
	if p.fenceTable != "" {
		env = append(env, "SOLO_FENCE_TABLE="+p.fenceTable)
	}
	return env
}

// pollSlack is how long after a renewal is due solo first reads it: about
// a round trip on a LAN.
const pollSlack = 2 * time.Millisecond

// nextPoll is how long to wait before reading the lease's status again,
// the last renewal seen at last and misses reads since without a new one:
// until the next renewal is due (renewInterval after the last) plus
// pollSlack, then steps doubling from pollSlack up to poll, the longest
// wait that still moves the keeper's deadline in time. Idle, solo thus
// wakes about once per renewal, not every poll.
func (p *program) nextPoll(last time.Time, misses int) time.Duration {
	if p.renewInterval <= 0 || last.IsZero() {
		return p.poll
	}
	if due := time.Until(last.Add(p.renewInterval)); due > 0 && misses == 0 {
		return due + pollSlack
	}
	return min(pollSlack<<min(misses, 16), p.poll)
}

// keeperProc is one running keeper, seen from solo.
type keeperProc struct {
	cmd    *exec.Cmd
	pid    int
	ctl    *os.File // write end of the control pipe
	status *os.File // read end of the status pipe
	exited chan struct{}
	// Filled by readStatus before statusDone closes.
	statusDone chan struct{}
	startErr   string
	exitLine   string
	progPID    int
	// stopCause is why the term ended, set before "T" is sent.
	stopCause atomic.Pointer[stopCause]
}

type stopCause struct{ err error }

// send writes one control line. It never waits long: a keeper that does not
// read (stopped by someone) loses the message; the keeper's own deadline
// still stands.
func (k *keeperProc) send(msg string) {
	_ = k.ctl.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = k.ctl.Write([]byte(msg + "\n"))
}

// readStatus logs what the keeper reports, until it is gone. Each line is
// stamped with when the keeper acted (see logAt).
func (k *keeperProc) readStatus(log *zap.Logger, argv []string, killAfter time.Duration) {
	defer close(k.statusDone)
	sc := bufio.NewScanner(k.status)
	for sc.Scan() {
		verb, rest, _ := strings.Cut(sc.Text(), " ")
		switch verb {
		case "pid":
			pid, at, _ := strings.Cut(rest, " ")
			k.progPID, _ = strconv.Atoi(pid)
			logAt(log, zap.InfoLevel, keeperTime(at), "program started", zap.Int("pid", k.progPID), zap.Strings("argv", argv))
		case "sigterm":
			at, why, _ := strings.Cut(rest, " ")
			switch why {
			case "program exited":
			case "term ended":
				var cause error
				if c := k.stopCause.Load(); c != nil {
					cause = c.err
				}
				logAt(log, zap.InfoLevel, keeperTime(at), "term ended: stopping the program tree (SIGTERM, then SIGKILL)",
					zap.NamedError("cause", cause), zap.Duration("kill_after", killAfter))
			default:
				logAt(log, zap.WarnLevel, keeperTime(at), "keeper stopping the program tree on its own", zap.String("why", why))
			}
		case "sigkill":
			logSIGKILL(log, rest, killAfter)
		case "error":
			k.startErr = rest
		case "exit":
			k.exitLine = rest
		}
	}
}

// logSIGKILL logs the keeper's "sigkill <late ms> <AT> <grace ms>". The
// program is blamed for ignoring SIGTERM only when it had its grace: a
// keeper that was stopped (SIGSTOP) or starved past its schedule may have
// sent SIGKILL milliseconds after SIGTERM, and then says so instead.
func logSIGKILL(log *zap.Logger, rest string, killAfter time.Duration) {
	f := strings.Fields(rest)
	if len(f) < 2 {
		return
	}
	late, _ := strconv.ParseInt(f[0], 10, 64)
	at := keeperTime(f[1])
	grace := killAfter
	if len(f) >= 3 {
		if ms, err := strconv.ParseInt(f[2], 10, 64); err == nil {
			grace = time.Duration(ms) * time.Millisecond
		}
	}
	if grace < killAfter/2 {
		msg := "SIGKILL before the program had its grace after SIGTERM: the stop began close to the lease's bound"
		if keeperLate := time.Duration(late) * time.Millisecond; keeperLate >= (killAfter-grace)/2 {
			msg = "keeper was late (stopped or starved): SIGKILL came before the program had its grace after SIGTERM"
		}
		logAt(log, zap.ErrorLevel, at, msg, zap.Duration("grace", grace), zap.Duration("kill_after", killAfter),
			zap.Duration("keeper_late", time.Duration(late)*time.Millisecond))
		return
	}
	logAt(log, zap.ErrorLevel, at, "program ignored SIGTERM: SIGKILL before the lease can pass on",
		zap.Duration("after", killAfter), zap.String("late", f[0]+"ms"))
}

// result turns the keeper's report into the job's result.
func (k *keeperProc) result(log *zap.Logger, stopped bool) error {
	<-k.statusDone
	if k.startErr != "" {
		return errors.New(k.startErr)
	}
	var code, sig int
	var at int64
	var why string
	if _, err := fmt.Sscanf(k.exitLine, "%d %d %d", &code, &sig, &at); err != nil {
		// No report: the keeper itself was killed. Its program died with it
		// (PDEATHSIG); orphans of the tree came to solo, which kills them.
		return fmt.Errorf("keeper %d died (%s) without reporting; program tree killed", k.pid, k.cmd.ProcessState)
	}
	if f := strings.SplitN(k.exitLine, " ", 4); len(f) == 4 {
		why = f[3]
	}
	var ended time.Time // when the keeper saw the tree gone
	if at > 0 {
		ended = time.Unix(0, at)
	}
	st := "exit status " + strconv.Itoa(code)
	if sig != 0 {
		st = "signal: " + syscall.Signal(sig).String()
	}
	log = log.With(zap.Int("pid", k.progPID))
	if stopped || why != "program exited" {
		logAt(log, zap.InfoLevel, ended, "program tree stopped", zap.String("status", st), zap.String("why", why))
		if why == "renew deadline passed" || why == "solo exited" {
			return fmt.Errorf("program stopped by its keeper: %s", why)
		}
		return nil
	}
	if code == 0 {
		logAt(log, zap.InfoLevel, ended, "program exited", zap.String("status", st))
		return nil
	}
	return &exitStatus{code: code, sig: sig}
}

// lateLog is how long after the keeper acted a line about it may be
// written before it says so.
const lateLog = 250 * time.Millisecond

// logAt writes a line about what the keeper did, stamped at, the time it
// acted, rather than when solo got to read it: after solo was stopped
// (Ctrl-Z, SIGSTOP) or starved, a line stamped on reading would put the
// stop seconds after the next leader started. A line written more than
// lateLog after at carries logged_late, how much later it was written.
func logAt(log *zap.Logger, level zapcore.Level, at time.Time, msg string, fields ...zap.Field) {
	if at.IsZero() {
		at = time.Now()
	}
	if late := time.Since(at); late > lateLog {
		fields = append(fields, zap.Duration("logged_late", late.Round(time.Millisecond)))
	}
	if ce := log.Check(level, msg); ce != nil {
		ce.Time = at
		ce.Write(fields...)
	}
}

// keeperTime parses a status line's AT (Unix ns); zero if it does not parse.
func keeperTime(s string) time.Time {
	ns, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ns <= 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// exitStatus is the job's error for a program that exited non-zero or was
// killed by a signal.
type exitStatus struct{ code, sig int }

func (e *exitStatus) Error() string {
	if e.sig != 0 {
		return "program signal: " + syscall.Signal(e.sig).String()
	}
	return "program exit status " + strconv.Itoa(e.code)
}

// exitCode is the code a shell reports for the program's end of a job
// whose error is err: 0, the exit status, 128+N for signal N, and 1 for a
// program that could not be run or whose keeper died.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if es, ok := errors.AsType[*exitStatus](err); ok {
		if es.sig != 0 {
			return 128 + es.sig
		}
		return es.code
	}
	return exitError
}

// Exit codes of a program that cannot be run, as env, timeout and nohup
// use them.
const (
	exitNotExecutable = 126
	exitNotFound      = 127
)

// resolveProgram checks, before solo campaigns, that name can be executed:
// a program that is missing (exit 127) or not executable (exit 126) is
// reported in one line instead of failing, and backing off, in every term.
func resolveProgram(name string) error {
	_, err := exec.LookPath(name)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, exec.ErrNotFound) && !strings.ContainsRune(name, '/'):
		return &codeError{code: exitNotFound, err: fmt.Errorf("%s: not found in $PATH", name)}
	case errors.Is(err, fs.ErrNotExist):
		return &codeError{code: exitNotFound, err: fmt.Errorf("%s: no such file or directory", name)}
	default:
		return &codeError{code: exitNotExecutable, err: fmt.Errorf("%s: not executable", name)}
	}
}
