package proctest

import "syscall"

// sysProcAttr kills the program when the test binary dies, so a crashed
// test leaves no instance behind holding a lease.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
