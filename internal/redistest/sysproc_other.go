//go:build unix && !linux

package redistest

import "syscall"

// sysProcAttr puts the server in its own process group, so that signals reach
// any child it forks. Pdeathsig exists only on Linux.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
