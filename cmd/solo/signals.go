package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"go.uber.org/zap"
)

// handleSignals acts on solo's signals until sigs closes.
func handleSignals(sigs <-chan os.Signal, sup *supervisor, cancel context.CancelCauseFunc, log *zap.Logger) {
	for s := range sigs {
		sig := s.(syscall.Signal)
		switch sig {
		case syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT:
			cancel(fmt.Errorf("signal %s", sig))
			log.Info("stopping: signal received", zap.String("signal", sig.String()))
		case syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH:
			sup.broadcast("S " + strconv.Itoa(int(sig)))
			log.Debug("signal forwarded to the program's process group", zap.String("signal", sig.String()))
		case syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU:
			// Stop the program trees first, then solo: a stopped solo must
			// never leave its program running unsupervised. While solo is
			// stopped the keepers still stop their trees at the renew
			// deadline, before the lease can pass.
			sup.broadcast("Z")
			_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		case syscall.SIGCONT:
			sup.broadcast("C")
			log.Info("continued", zap.String("signal", sig.String()))
		}
	}
}
