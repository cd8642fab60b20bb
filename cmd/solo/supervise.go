package main

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"os/signal"
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

func newSupervisor(log *zap.Logger) *supervisor {
	s := &supervisor{log: log, self: os.Getpid(), keepers: map[int]*keeperProc{}}
	s.idle = sync.NewCond(&s.mu)
	return s
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
		strconv.FormatInt(deadline, 10), "--", path}, argv...)
	cmd := &exec.Cmd{Path: "/proc/self/exe", Args: args, Env: env, Stdout: stdout, Stderr: stderr,
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
// every SIGCHLD until stop closes.
func (s *supervisor) reapLoop(stop <-chan struct{}) {
	if err := proctree.SetChildSubreaper(); err != nil {
		s.log.Warn("not a child subreaper: orphans of a killed keeper go to init", zap.Error(err))
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGCHLD)
	defer signal.Stop(ch)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ch:
		case <-t.C:
		}
		s.sweep()
	}
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
	kids, err := proctree.Children(s.self)
	if err != nil {
		return 0
	}
	killed := 0
	for _, c := range kids {
		if _, ok := s.keepers[c.PID]; ok {
			continue
		}
		if s.orphansDie && c.State != 'Z' {
			if ds, err := proctree.Descendants(c.PID); err == nil {
				proctree.SignalAll(ds, syscall.SIGKILL)
			}
			_ = proctree.Signal(c, syscall.SIGKILL)
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
