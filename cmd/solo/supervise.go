package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/solo-run/solo/internal/proctree"
)

// supervisor is solo's side of supervision: it starts keepers, knows them
// all (to forward signals, and to wait for them before solo exits), and is
// itself a child subreaper that reaps — and, once a keeper died without
// stopping its tree, kills — every other process re-parented to solo. As
// PID 1 of a container it reaps every orphan the same way.
type supervisor struct {
	log  *zap.Logger
	self int
	// procs is where processes are read (proctree.Host); exe is the file
	// keepers are started from (keeperExecutable).
	procs proctree.FS
	exe   string

	mu      sync.Mutex // held across a keeper's fork, so a sweep never mistakes it for an orphan
	keepers map[int]*keeperProc
	idle    *sync.Cond
	// orphansDie is set once a keeper died without reporting: from then on
	// any non-keeper child of solo is what is left of its program tree.
	orphansDie bool
	// closed is set by wait: no keeper starts after solo decided to exit
	// (a job goroutine Run gave up on must not start a tree then).
	closed bool
}

// errSupervisorClosed is start's error once solo is on its way out.
var errSupervisorClosed = errors.New("solo is exiting: no new program run")

// newSupervisor returns the supervisor of solo run, on the host's /proc;
// an error when solo cannot find its own executable to start keepers from.
func newSupervisor(log *zap.Logger) (*supervisor, error) {
	exe, err := keeperExecutable(proctree.Host)
	if err != nil {
		return nil, usageErr("%w", err)
	}
	return supervisorOn(log, proctree.Host, exe), nil
}

// supervisorOn returns a supervisor reading processes from procs and
// starting keepers from exe.
func supervisorOn(log *zap.Logger, procs proctree.FS, exe string) *supervisor {
	s := &supervisor{log: log, self: os.Getpid(), procs: procs, exe: exe, keepers: map[int]*keeperProc{}}
	s.idle = sync.NewCond(&s.mu)
	return s
}

// keeperExecutable is the file keepers are started from: this very
// binary. ROOT/self/exe names it even if the file was replaced or removed
// since solo started; without a proc filesystem, the path os.Executable
// found when the process started, else argv[0] looked up as a shell
// would (the keeper is then whatever that file is when it starts).
func keeperExecutable(procs proctree.FS) (string, error) {
	self := procs.Root + "/self/exe"
	if _, err := os.Stat(self); err == nil {
		return self, nil
	}
	if p, err := os.Executable(); err == nil {
		return p, nil
	}
	p, err := exec.LookPath(os.Args[0])
	if err == nil {
		p, err = filepath.Abs(p)
	}
	if err != nil {
		return "", fmt.Errorf("solo run cannot find its own executable to start its keeper: %s/self/exe is missing (mount proc at %s) and argv[0] %q: %w", procs.Root, procs.Root, os.Args[0], err)
	}
	return p, nil
}

// start starts a keeper running argv (path resolved) with env.
func (s *supervisor) start(path string, argv, env []string, killAfter time.Duration, deadline int64,
	stdout, stderr io.Writer) (*keeperProc, error) {
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	stR, stW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return nil, err
	}
	args := append([]string{"solo", keeperArg, strconv.FormatInt(int64(killAfter), 10),
		strconv.FormatInt(deadline, 10), s.procs.Root, "--", path}, argv...)
	cmd := &exec.Cmd{Path: s.exe, Args: args, Env: env, Stdout: stdout, Stderr: stderr,
		ExtraFiles: []*os.File{ctlR, stW},
		// Its own process group: a terminal's Ctrl-C or Ctrl-Z reaches solo,
		// which decides, and not the keeper.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true}}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ctlR.Close()
		ctlW.Close()
		stR.Close()
		stW.Close()
		return nil, errSupervisorClosed
	}
	err = cmd.Start()
	ctlR.Close()
	stW.Close()
	if err != nil {
		s.mu.Unlock()
		ctlW.Close()
		stR.Close()
		return nil, err
	}
	k := &keeperProc{cmd: cmd, pid: cmd.Process.Pid, ctl: ctlW, status: stR,
		exited: make(chan struct{}), statusDone: make(chan struct{})}
	s.keepers[k.pid] = k
	s.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		<-k.statusDone
		ctlW.Close()
		stR.Close()
		s.mu.Lock()
		if s.keepers[k.pid] == k { // the PID may already be a newer keeper's
			delete(s.keepers, k.pid)
		}
		if k.exitLine == "" && k.startErr == "" {
			// Killed without reporting (kill -9 of the keeper): its program
			// got PDEATHSIG; the rest of the tree was re-parented to solo.
			s.orphansDie = true
		}
		s.mu.Unlock()
		s.sweepUntilClear()
		s.mu.Lock()
		if len(s.keepers) == 0 {
			s.idle.Broadcast()
		}
		s.mu.Unlock()
		close(k.exited)
	}()
	return k, nil
}

// broadcast sends a control line to every keeper.
func (s *supervisor) broadcast(msg string) {
	s.mu.Lock()
	ks := make([]*keeperProc, 0, len(s.keepers))
	for _, k := range s.keepers {
		ks = append(ks, k)
	}
	s.mu.Unlock()
	for _, k := range ks {
		k.send(msg)
	}
}

// wait returns once no keeper runs: solo never exits while a program tree
// lives. From its call on no keeper starts. It logs every 5s while it waits.
func (s *supervisor) wait() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.mu.Lock()
		for len(s.keepers) > 0 {
			s.idle.Wait()
		}
		s.mu.Unlock()
		close(done)
	}()
	for {
		select {
		case <-done:
			return
		case <-time.After(5 * time.Second):
			s.log.Warn("waiting for program trees to end before exiting")
		}
	}
}

// reapLoop makes solo a child subreaper and reaps re-parented orphans on
// every SIGCHLD until stop closes. It walks /proc only then: idle, it
// sleeps. Once a keeper died without stopping its tree, it also sweeps
// every second (a re-parented live orphan raises no SIGCHLD).
func (s *supervisor) reapLoop(stop <-chan struct{}) {
	if err := proctree.SetChildSubreaper(); err != nil {
		s.log.Warn("not a child subreaper: orphans of a killed keeper go to init", zap.Error(err))
	}
	if !s.procs.Available() {
		s.log.Warn("no proc filesystem: solo run stops the program's process group only; a process that leaves it (setsid, setpgid) is neither found nor stopped, and solo waits for it to exit: mount proc",
			zap.String("proc", s.procs.Root))
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGCHLD)
	defer signal.Stop(ch)
	var tick <-chan time.Time
	for {
		select {
		case <-stop:
			return
		case <-ch:
		case <-tick:
		}
		s.sweep()
		if tick == nil && s.orphansMayLive() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			tick = t.C
		}
	}
}

// orphansMayLive reports whether a keeper died without stopping its tree.
func (s *supervisor) orphansMayLive() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.orphansDie
}

// sweepUntilClear sweeps until, after a keeper died without stopping its
// tree, no live orphan is left under solo: a single /proc snapshot misses
// what the tree forks meanwhile, and such a re-parented child raises no
// SIGCHLD. Bounded (2s of 10ms passes); the 1s sweep goes on after it.
func (s *supervisor) sweepUntilClear() {
	for range 200 {
		if s.sweep() == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sweep reaps solo's children that are not keepers (os/exec reaps those),
// and, after a keeper died without stopping its tree, kills them and their
// descendants first. It returns how many live orphans it killed.
func (s *supervisor) sweep() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	kids, err := s.procs.Children(s.self)
	if err != nil {
		s.reapBlind()
		return 0
	}
	killed := 0
	for _, c := range kids {
		if _, ok := s.keepers[c.PID]; ok {
			continue
		}
		if s.orphansDie && c.State != 'Z' {
			if ds, err := s.procs.Descendants(c.PID); err == nil {
				s.procs.SignalAll(ds, syscall.SIGKILL)
			}
			_ = s.procs.Signal(c, syscall.SIGKILL)
			s.log.Warn("killed an orphan of a keeper that died", zap.Int("pid", c.PID))
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(c.PID, &ws, syscall.WNOHANG, nil) // else the next sweep reaps it
			killed++
			continue
		}
		if c.State == 'Z' {
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(c.PID, &ws, syscall.WNOHANG, nil)
		}
	}
	return killed
}

// reapBlind is sweep without /proc: it reaps the exited children that are
// not keepers, one at a time as waitid names them, and stops at a keeper
// (os/exec reaps it, and its end sweeps again). Live orphans cannot be
// found. s.mu is held.
func (s *supervisor) reapBlind() {
	for {
		pid := proctree.ExitedChild()
		if _, keeper := s.keepers[pid]; pid <= 0 || keeper {
			return
		}
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); err != nil {
			return
		}
	}
}
