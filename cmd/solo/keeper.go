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

// The keeper is solo re-executed (/proc/self/exe keeperArg ...) as a small
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
// <AT>" when it had to SIGKILL; last "exit <code> <signal> <AT> <why>" (code
// −1 when killed by a signal) or "error <message>" when the program did not
// start.

// keeperMain is the keeper process: args are killAfter (ns), the initial
// deadline (mono ns, 0 for none), "--", the program's path and argv.
func keeperMain(args []string) int {
	// The program's PDEATHSIG (if the keeper itself is SIGKILLed) is tied to
	// the thread that forks it: this goroutine keeps its thread for good.
	runtime.LockOSThread()
	ctl, st := os.NewFile(3, "ctl"), os.NewFile(4, "status")
	if ctl == nil || st == nil || len(args) < 5 || args[2] != "--" {
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
	k := &keeper{st: st, killAfter: killAfter, deadline: deadline, self: os.Getpid()}
	return k.run(args[3], args[4:], ctl)
}

type keeper struct {
	st        *os.File
	self      int
	prog      int
	killAfter int64 // ns
	deadline  int64 // mono ns; 0: none

	progDone   bool
	progStatus syscall.WaitStatus
	stopping   bool
	why        string
	killAt     int64 // mono ns, while stopping
	killed     bool
	frozen     bool // the tree was SIGSTOPped on solo's request
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
	safety := time.NewTicker(500 * time.Millisecond) // reaping does not rely on SIGCHLD alone
	defer safety.Stop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if k.reap() {
			return
		}
		var wake <-chan time.Time
		if at := k.nextEvent(); at != 0 {
			timer.Reset(time.Duration(at - proctree.Monotonic()))
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
		case <-safety.C:
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
		return proctree.Monotonic() + int64(10*time.Millisecond)
	case k.stopping:
		return k.killAt
	default:
		return k.deadline
	}
}

// timers acts on the deadline and the SIGKILL time.
func (k *keeper) timers() {
	now := proctree.Monotonic()
	if !k.stopping && k.deadline != 0 && now >= k.deadline {
		k.stop("renew deadline passed", k.deadline+k.killAfter)
	}
	if k.stopping && now >= k.killAt {
		at := time.Now()
		first := !k.killed
		k.killed = true
		k.signalTree(syscall.SIGKILL) // before the report: nothing may delay it
		if first {
			k.report("sigkill %d %d", (now-k.killAt)/int64(time.Millisecond), at.UnixNano())
		}
	}
}

// boundedKillAt is the SIGKILL time of a stop beginning now: killAfter from
// now, and never later than killAfter past the renew deadline.
func (k *keeper) boundedKillAt() int64 {
	at := proctree.Monotonic() + k.killAfter
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
	k.stopping, k.why, k.killAt = true, why, killAt
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
	ps, err := proctree.Descendants(k.self)
	if err != nil {
		// No /proc: the program's process group is all we can reach.
		if !k.progDone {
			_ = syscall.Kill(-k.prog, sig)
		}
		return
	}
	proctree.SignalAll(ps, sig)
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
