package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/solo-run/solo/leader"
)

// program runs an external command as a job: in its own process group,
// with the term in its environment, and never past the lease.
type program struct {
	argv     []string
	env      []string // base environment
	election string
	id       string
	// killAfter is when SIGKILL follows SIGTERM: three quarters of the stop
	// budget (TTL − renew deadline), leaving the rest for the kill to land
	// before the lease can expire and pass to another instance.
	killAfter time.Duration
	stdout    io.Writer
	stderr    io.Writer
	log       *zap.Logger
}

// run starts the program and waits for it. When ctx ends it sends SIGTERM
// to the program's process group, then SIGKILL at killAfter; either way,
// whatever is left of the group is killed before run returns. A non-zero
// exit is an error (the worker's restart policy decides what follows).
func (p *program) run(ctx context.Context) error {
	term, _ := leader.TermFrom(ctx)
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Env = append(append([]string(nil), p.env...),
		"SOLO_TERM="+strconv.FormatUint(term, 10),
		"SOLO_ELECTION="+p.election,
		"SOLO_ID="+p.id,
	)
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	// Own process group: signals reach the program's children too.
	// Pdeathsig: if solo itself dies (even SIGKILL), the kernel kills the
	// program. It is bound to the thread that forked, so the goroutine
	// stays on its thread until the program is gone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.argv[0], err)
	}
	pid := cmd.Process.Pid
	log := p.log.With(zap.Int("pid", pid), zap.Uint64("term", term))
	log.Info("program started", zap.Strings("argv", p.argv))
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	defer func() { _ = syscall.Kill(-pid, syscall.SIGKILL) }() // leftovers of its group

	select {
	case err := <-waited:
		return exitResult(log, err)
	case <-ctx.Done():
	}
	log.Info("term ended: SIGTERM to the program's process group", zap.NamedError("cause", context.Cause(ctx)))
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	t := time.NewTimer(p.killAfter)
	defer t.Stop()
	select {
	case err := <-waited:
		log.Info("program stopped", zap.String("status", status(err)))
	case <-t.C:
		log.Error("program ignored SIGTERM: SIGKILL before the lease can pass on", zap.Duration("after", p.killAfter))
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-waited
	}
	return nil
}

func exitResult(log *zap.Logger, err error) error {
	if err == nil {
		log.Info("program exited", zap.String("status", "exit status 0"))
		return nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return fmt.Errorf("program %s", status(err))
	}
	return err
}

func status(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}
