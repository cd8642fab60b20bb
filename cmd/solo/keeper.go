package main

import (
	"bufio"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/solo-run/solo/internal/proctree"
)

// The keeper is solo re-executed (its own executable, keeperArg ...: see
// keeperExecutable) as a small
// process of its own between solo and the program:
//
//	solo ──ctl pipe──▶ keeper (own process group, child subreaper) ──▶ program tree
//	     ◀─status pipe─
//
// It starts the program, reaps everything below it (as a child subreaper it
// inherits every orphan of the tree, setsid or double fork included), and
// stops the whole tree — every descendant, whatever its process group or
// session — SIGTERM first, SIGKILL at a bound, never leaving before the
// tree is gone. It acts on its own, not only when solo asks:
//
//   - solo sends, after every successful renewal, the renew deadline on
//     CLOCK_MONOTONIC (shared by all processes). When it passes the keeper
//     stops the tree itself, SIGKILL at deadline + killAfter: a dead-man's
//     switch for a solo that is stopped (SIGSTOP), stuck or slow;
//   - EOF on the control pipe means solo is gone (even kill -9): the keeper
//     stops the tree, SIGKILL by the same bound;
//   - when the program exits on its own, the rest of the tree is stopped
//     the same way (systemd's KillMode=control-group).
//
// Without /proc it stops the program's process group only (see
// signalTree); solo warns at start.
//
// It writes nothing to stdout or stderr (a blocked stderr must not hold it)
// and reports to solo on the status pipe only.
const keeperArg = "__solo_keeper"

// Control messages, one line each: "D <mono ns>" new renew deadline, "T"
// stop the tree, "S <signal>" forward a signal to the program's process
// group, "Z" stop (SIGSTOP) the tree, "C" continue it.
//
// Status lines, each with AT, the keeper's wall clock (Unix ns) when it
// acted — solo may read them late (stopped, or starved), and logs them at
// AT: "pid <N> <AT>" once started; "sigterm <AT> <why>"; "sigkill <late ms>
// <AT> <grace ms>" when it had to SIGKILL (late: how far behind its own
// schedule the keeper was; grace: how long after SIGTERM the SIGKILL
// came); last "exit <code> <signal> <AT> <why>" (code −1 when killed by a
// signal) or "error <message>" when the program did not start.

// keeperMain is the keeper process: args are killAfter (ns), the initial
// deadline (mono ns, 0 for none), the proc filesystem's root, "--", the
// program's path and argv.
func keeperMain(args []string) int {
	// The program's PDEATHSIG (if the keeper itself is SIGKILLed) is tied to
	// the thread that forks it: this goroutine keeps its thread for good.
	runtime.LockOSThread()
	// Non-blocking, the pipes go through Go's poller: a read waiting on
	// solo does not hold a thread in a system call, which keeps the
	// runtime's monitor thread waking every few milliseconds.
	_ = syscall.SetNonblock(3, true)
	_ = syscall.SetNonblock(4, true)
	ctl, st := os.NewFile(3, "ctl"), os.NewFile(4, "status")
	if ctl == nil || st == nil || len(args) < 6 || args[3] != "--" {
		return 2
	}
	// Neither pipe may leak into the program: solo reads EOF on the status
	// pipe when the keeper is gone, and the keeper reads EOF on ctl when
	// solo is.
	syscall.CloseOnExec(3)
	syscall.CloseOnExec(4)
	killAfter, err1 := strconv.ParseInt(args[0], 10, 64)
	deadline, err2 := strconv.ParseInt(args[1], 10, 64)
	if err1 != nil || err2 != nil {
		return 2
	}
	k := &keeper{st: st, killAfter: killAfter, deadline: deadline, self: os.Getpid(),
		procs: proctree.FS{Root: args[2]}, now: proctree.Monotonic}
	return k.run(args[4], args[5:], ctl)
}

type keeper struct {
	st        *os.File
	self      int
	prog      int
	killAfter int64 // ns
	deadline  int64 // mono ns; 0: none
	// procs is where the tree is read; without it the keeper signals the
	// program's process group only.
	procs proctree.FS
	// now reads CLOCK_MONOTONIC (proctree.Monotonic; a fake in tests).
	now func() int64

	progDone   bool
	progStatus syscall.WaitStatus
	stopping   bool
	why        string
	killAt     int64 // mono ns, while stopping
	termAt     int64 // mono ns: when SIGTERM was sent
	// stopLate is how far past the renew deadline the keeper began a stop
	// the deadline called for: it was stopped or starved meanwhile.
	stopLate  int64
	killed    bool
	groupGone bool // without /proc: the program's process group is empty
	frozen    bool // the tree was SIGSTOPped on solo's request
}

func (k *keeper) report(format string, args ...any) {
	_, _ = fmt.Fprintf(k.st, format+"\n", args...)
}

// run starts the program, keeps it until its tree is gone and reports its
// end; it returns the keeper process's exit code.
func (k *keeper) run(path string, argv []string, ctl *os.File) int {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP,
		syscall.SIGQUIT, syscall.SIGPIPE, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
	if !k.start(path, argv) {
		return 1
	}
	k.watch(ctl, sigs)
	k.reportExit()
	return 0
}

// start makes the keeper the subreaper of the program's tree and starts
// the program in its own process group; false when it could not (reported).
func (k *keeper) start(path string, argv []string) bool {
	if err := proctree.SetChildSubreaper(); err != nil {
		k.report("error PR_SET_CHILD_SUBREAPER: %v", err)
		return false
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		k.report("error %v", err)
		return false
	}
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{null.Fd(), 1, 2},
		// Own process group (signals forwarded by solo reach its children);
		// SIGKILL if the keeper dies.
		Sys: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	null.Close()
	if err != nil {
		k.report("error start %s: %v", argv[0], err)
		return false
	}
	k.prog = pid
	k.report("pid %d %d", pid, time.Now().UnixNano())
	return true
}

// watch acts on solo's messages on ctl, the keeper's signals and its
// timers until the program's tree is gone.
func (k *keeper) watch(ctl *os.File, sigs <-chan os.Signal) {
	msgs := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(ctl)
		for sc.Scan() {
			msgs <- sc.Text()
		}
		close(msgs)
	}()
	// Event-driven: SIGCHLD (every exit in the tree, re-parented orphans'
	// included, since the keeper is their subreaper), solo's messages, and
	// one timer for the next deadline. Idle, the keeper sleeps.
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if k.reap() {
			return
		}
		var wake <-chan time.Time
		if at := k.nextEvent(); at != 0 {
			timer.Reset(time.Duration(at - k.now()))
			wake = timer.C
		}
		select {
		case m, ok := <-msgs:
			if !ok {
				msgs = nil
				k.stop("solo exited", k.boundedKillAt())
				continue
			}
			k.handle(m)
		case s := <-sigs:
			switch s {
			case syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT:
				k.stop("keeper got "+s.String(), k.boundedKillAt())
			}
		case <-wake:
		}
		k.timers()
	}
}

// reportExit reports how the program ended, and why.
func (k *keeper) reportExit() {
	code, sig := -1, 0
	switch {
	case k.progStatus.Exited():
		code = k.progStatus.ExitStatus()
	case k.progStatus.Signaled():
		sig = int(k.progStatus.Signal())
	}
	why := k.why
	if why == "" {
		why = "program exited"
	}
	k.report("exit %d %d %d %s", code, sig, time.Now().UnixNano(), why)
}

// nextEvent is when the keeper must act next without being asked (mono ns;
// 0 for never): the deadline, the SIGKILL, or the next sweep of a tree
// being killed (processes forked between two walks).
func (k *keeper) nextEvent() int64 {
	switch {
	case k.killed:
		return k.now() + int64(10*time.Millisecond)
	case k.stopping:
		return k.killAt
	default:
		return k.deadline
	}
}

// timers acts on the deadline and the SIGKILL time.
func (k *keeper) timers() {
	now := k.now()
	if !k.stopping && k.deadline != 0 && now >= k.deadline {
		k.stop("renew deadline passed", k.deadline+k.killAfter)
		k.stopLate = k.termAt - k.deadline
	}
	if k.stopping && now >= k.killAt {
		at := time.Now()
		first := !k.killed
		k.killed = true
		k.signalTree(syscall.SIGKILL) // before the report: nothing may delay it
		if first {
			// Measured on the monotonic clock: a keeper that was stopped
			// (SIGSTOP) or starved wakes far past its schedule, and then
			// gave the program a fraction of killAfter. solo tells that
			// from a program that ignored SIGTERM.
			late := max(now-k.killAt, k.stopLate)
			ms := int64(time.Millisecond)
			k.report("sigkill %d %d %d", late/ms, at.UnixNano(), (now-k.termAt)/ms)
		}
	}
}

// boundedKillAt is the SIGKILL time of a stop beginning now: killAfter from
// now, and never later than killAfter past the renew deadline.
func (k *keeper) boundedKillAt() int64 {
	at := k.now() + k.killAfter
	if k.deadline != 0 {
		at = min(at, k.deadline+k.killAfter)
	}
	return at
}

func (k *keeper) handle(m string) {
	verb, arg, _ := strings.Cut(m, " ")
	n, err := strconv.ParseInt(arg, 10, 64)
	switch verb {
	case "D":
		// A deadline that does not parse, or is not positive, never turns
		// the dead-man's switch off: the last good one stands.
		if !k.stopping && err == nil && n > 0 {
			k.deadline = n
		}
	case "T":
		k.stop("term ended", k.boundedKillAt())
	case "S":
		// The process group of the program, as tini -g and dumb-init do;
		// its PID is not reused while it is unreaped.
		if !k.progDone && n > 0 {
			_ = syscall.Kill(-k.prog, syscall.Signal(n))
		}
	case "Z":
		if !k.stopping {
			k.frozen = true
			k.signalTree(syscall.SIGSTOP)
		}
	case "C":
		if k.frozen {
			k.frozen = false
			k.signalTree(syscall.SIGCONT)
		}
	}
}

// stop begins stopping the tree: SIGTERM to every descendant now (SIGCONT
// after it if the tree was frozen, so handlers run), SIGKILL at killAt.
func (k *keeper) stop(why string, killAt int64) {
	if k.stopping {
		k.killAt = min(k.killAt, killAt)
		return
	}
	k.stopping, k.why, k.killAt, k.termAt = true, why, killAt, k.now()
	at := time.Now()
	k.signalTree(syscall.SIGTERM)
	if k.frozen {
		k.frozen = false
		k.signalTree(syscall.SIGCONT)
	}
	k.report("sigterm %d %s", at.UnixNano(), why)
}

// signalTree signals every descendant of the keeper, whatever its process
// group or session.
func (k *keeper) signalTree(sig syscall.Signal) {
	ps, err := k.procs.Descendants(k.self)
	if err == nil {
		k.procs.SignalAll(ps, sig)
		return
	}
	// No /proc: the program's process group is all the keeper can reach,
	// also after the program exited (its ID stays the group's while the
	// group has a member), until the group is found empty: the ID may then
	// be reused.
	if k.prog > 0 && !k.groupGone {
		k.groupGone = syscall.Kill(-k.prog, sig) == syscall.ESRCH
	}
}

// reap collects every exited child (the program, and orphans re-parented
// to the keeper) and reports whether the tree is gone. When the program
// exits on its own, the rest of the tree is stopped.
func (k *keeper) reap() bool {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.ECHILD:
			return k.progDone || k.prog == 0
		case err != nil || pid == 0:
			return false
		case pid == k.prog:
			k.progDone, k.progStatus = true, ws
			if !k.stopping {
				k.stop("program exited", k.boundedKillAt())
			}
		}
	}
}
