// Package proctree finds and signals the descendants of a process on Linux,
// whatever process group or session they moved to: it walks /proc and
// follows parent links. It is what lets solo's keeper stop a whole program
// tree, including children that called setsid or double-forked (as a child
// subreaper, the keeper inherits those orphans, so they stay descendants).
//
// Walking is a read of every /proc/N/stat: callers walk when they must act
// on the tree (a stop, an orphan to reap), never on a timer while idle.
package proctree

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"syscall"
	"unsafe"
)

// Proc is one process as /proc/PID/stat shows it.
type Proc struct {
	PID, PPID int
	State     byte   // R, S, D, Z, T, ...
	Start     uint64 // start time in clock ticks since boot: PID + Start names a process uniquely
}

// FS is a proc filesystem: Root is where it is mounted. Host is the
// host's; another Root (an empty directory) stands for a system without
// /proc in tests.
type FS struct{ Root string }

// Host is the proc filesystem at /proc.
var Host = FS{Root: "/proc"}

// Available reports whether f is a mounted proc filesystem: it shows this
// process. Without it no descendant can be found: only a process group
// can be signalled.
func (f FS) Available() bool {
	_, err := os.Stat(f.Root + "/" + strconv.Itoa(os.Getpid()) + "/stat")
	return err == nil
}

// Stat reads /proc/PID/stat.
func Stat(pid int) (Proc, error) { return Host.Stat(pid) }

// Stat reads ROOT/PID/stat.
func (f FS) Stat(pid int) (Proc, error) {
	b, err := os.ReadFile(f.Root + "/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Proc{}, err
	}
	return parseStat(pid, b)
}

// parseStat parses "PID (COMM) STATE PPID ... STARTTIME ...": COMM may hold
// spaces and parentheses, so fields are counted after the last ')'.
func parseStat(pid int, b []byte) (Proc, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return Proc{}, errors.New("proctree: malformed stat")
	}
	fs := bytes.Fields(b[i+2:])
	// fs[0] is field 3 (state); field 4 is ppid, field 22 starttime.
	if len(fs) < 20 {
		return Proc{}, errors.New("proctree: short stat")
	}
	ppid, err := strconv.Atoi(string(fs[1]))
	if err != nil {
		return Proc{}, err
	}
	start, err := strconv.ParseUint(string(fs[19]), 10, 64)
	if err != nil {
		return Proc{}, err
	}
	return Proc{PID: pid, PPID: ppid, State: fs[0][0], Start: start}, nil
}

// All returns every process /proc lists (processes, not threads).
func All() ([]Proc, error) { return Host.All() }

// All returns every process f lists (processes, not threads); ErrNotMounted
// when f does not list the calling process.
func (f FS) All() ([]Proc, error) {
	d, err := os.Open(f.Root)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	out := make([]Proc, 0, len(names))
	self := strconv.Itoa(os.Getpid())
	mounted := false
	for _, n := range names {
		mounted = mounted || n == self
		pid, err := strconv.Atoi(n)
		if err != nil || pid <= 0 {
			continue
		}
		p, err := f.Stat(pid)
		if err != nil {
			continue // gone meanwhile
		}
		out = append(out, p)
	}
	if !mounted {
		return nil, ErrNotMounted
	}
	return out, nil
}

// ErrNotMounted is All's error when its root does not list the calling
// process: no proc filesystem is mounted there (an empty directory).
var ErrNotMounted = errors.New("proctree: no proc filesystem mounted")

// Descendants returns the processes below root (not root itself), parents
// before their children. A snapshot: processes forked meanwhile are missed,
// so stopping a tree walks again until nothing is left.
func Descendants(root int) ([]Proc, error) { return Host.Descendants(root) }

// Descendants is the package's Descendants read from f.
func (f FS) Descendants(root int) ([]Proc, error) {
	all, err := f.All()
	if err != nil {
		return nil, err
	}
	return descendants(all, root), nil
}

// Children returns root's direct children.
func Children(root int) ([]Proc, error) { return Host.Children(root) }

// Children is the package's Children read from f.
func (f FS) Children(root int) ([]Proc, error) {
	all, err := f.All()
	if err != nil {
		return nil, err
	}
	var out []Proc
	for _, p := range all {
		if p.PPID == root {
			out = append(out, p)
		}
	}
	return out, nil
}

func descendants(all []Proc, root int) []Proc {
	kids := map[int][]Proc{}
	start := make(map[int]uint64, len(all))
	for _, p := range all {
		start[p.PID] = p.Start
		if p.PID != root {
			kids[p.PPID] = append(kids[p.PPID], p)
		}
	}
	var out []Proc
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range kids[pid] {
			// The snapshot is not atomic: a parent that exited during it may
			// have had its PID reused by an unrelated process, whose children
			// would seem ours. A real child is never older than its parent.
			if ps, ok := start[pid]; ok && c.Start < ps {
				continue
			}
			out = append(out, c)
			queue = append(queue, c.PID)
		}
	}
	return out
}

// Signal sends sig to p if p is still the process the snapshot saw: it
// opens a pidfd, checks the start time again, and signals through the
// pidfd, so a PID reused meanwhile by an unrelated process is never hit.
// Without pidfd support (Linux < 5.3) it falls back to kill(2) after the
// same check. A process already gone is not an error.
func Signal(p Proc, sig syscall.Signal) error { return Host.Signal(p, sig) }

// Signal is the package's Signal, checking the start time in f.
func (f FS) Signal(p Proc, sig syscall.Signal) error {
	fd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(p.PID), 0, 0)
	if errno == syscall.ESRCH {
		return nil
	}
	pidfd := errno == 0
	if pidfd {
		defer syscall.Close(int(fd))
	}
	now, err := f.Stat(p.PID)
	if err != nil || now.Start != p.Start {
		return nil // gone, or another process by now
	}
	if !pidfd {
		err := syscall.Kill(p.PID, sig)
		if err == syscall.ESRCH {
			return nil
		}
		return err
	}
	_, _, errno = syscall.Syscall6(sysPidfdSendSignal, fd, uintptr(sig), 0, 0, 0, 0)
	if errno != 0 && errno != syscall.ESRCH {
		return errno
	}
	return nil
}

// Syscall numbers shared by every architecture (added after the
// unification in Linux 5.1).
const (
	sysPidfdSendSignal = 424
	sysPidfdOpen       = 434
)

// SignalAll signals every process in ps; it returns how many it signalled.
func SignalAll(ps []Proc, sig syscall.Signal) int { return Host.SignalAll(ps, sig) }

// SignalAll is the package's SignalAll, checking start times in f.
func (f FS) SignalAll(ps []Proc, sig syscall.Signal) int {
	n := 0
	for _, p := range ps {
		if f.Signal(p, sig) == nil {
			n++
		}
	}
	return n
}

// SetChildSubreaper makes the calling process a child subreaper
// (PR_SET_CHILD_SUBREAPER): orphaned descendants are re-parented to it
// instead of to init, so they stay its descendants and it reaps them.
func SetChildSubreaper() error {
	const prSetChildSubreaper = 36
	_, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// IsChildSubreaper reports whether the calling process is a child subreaper.
func IsChildSubreaper() bool {
	const prGetChildSubreaper = 37
	var v int32
	_, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prGetChildSubreaper, uintptr(unsafe.Pointer(&v)), 0)
	return errno == 0 && v != 0
}

// Monotonic returns CLOCK_MONOTONIC in nanoseconds: one clock shared by
// every process on the host, so one process can hand another a deadline.
// Go's monotonic readings are on this clock but not exposed as such.
func Monotonic() int64 {
	var ts syscall.Timespec
	const clockMonotonic = 1
	_, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0)
	if errno != 0 {
		panic("clock_gettime(CLOCK_MONOTONIC): " + errno.Error())
	}
	return ts.Nano()
}

// ExitedChild returns an exited child of the calling process without
// reaping it (waitid WEXITED|WNOHANG|WNOWAIT): 0 when none has exited.
// It needs no /proc.
func ExitedChild() int {
	// siginfo_t: signo, errno, code (int32 each), then a union aligned to
	// a pointer, whose first field for SIGCHLD is si_pid.
	var info [128]byte
	const pAll, wExited, wNohang, wNowait = 0, 4, 1, 0x1000000
	_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pAll, 0, uintptr(unsafe.Pointer(&info[0])),
		wExited|wNohang|wNowait, 0, 0)
	if errno != 0 {
		return 0
	}
	off := (12 + unsafe.Sizeof(uintptr(0)) - 1) &^ (unsafe.Sizeof(uintptr(0)) - 1)
	return int(*(*int32)(unsafe.Pointer(&info[off])))
}
