package redistest

import "syscall"

// sysProcAttr puts the server in its own process group, so that signals reach
// any child it forks (replication, BGSAVE), and kills it when the test binary
// dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
