package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// placement is where the lock-cycle figure runs redis-server and the
// bench's own threads. Pinning takes the scheduler's migrations (and on 2
// cores, most of its noise) out of the ratio between peers.
type placement struct {
	name  string
	about string
	// pinned: redis-server's threads go to CPU redisCPU and every thread
	// of this process to clientCPU (indexes into the CPUs this process
	// may use), with GOMAXPROCS 1.
	pinned              bool
	redisCPU, clientCPU int
	peers               []string // the peers measured; nil: all
	shorter             bool     // runs of a third of the profile's cycleTime, to keep the whole run under 5 minutes
}

// runTime is the length of one run of one peer in this placement.
func (pl placement) runTime(prof profile) time.Duration {
	if pl.shorter {
		return prof.cycleTime / 3
	}
	return prof.cycleTime
}

// placements returns the lock-cycle placements in report order.
func placements() []placement {
	sub := []string{"solo", "solo-lock", "solo-lock-unbatched", "redislock", "setnx"}
	return []placement{
		{name: "unpinned", about: "no pinning: the scheduler places redis-server and the bench's threads on any CPU (GOMAXPROCS = CPUs)"},
		{name: "split", about: "redis-server pinned to one CPU, the bench (GOMAXPROCS 1) to the other, with `taskset`",
			pinned: true, redisCPU: 0, clientCPU: 1, peers: sub, shorter: true},
		{name: "shared", about: "redis-server and the bench (GOMAXPROCS 1) both pinned to the same CPU, with `taskset`: every µs of client or server work adds up",
			pinned: true, redisCPU: 0, clientCPU: 0, peers: sub, shorter: true},
	}
}

// has reports whether the placement measures peer name.
func (pl placement) has(name string) bool {
	if pl.peers == nil {
		return true
	}
	for _, n := range pl.peers {
		if n == name {
			return true
		}
	}
	return false
}

// pinning is an applied pinned placement; undo restores what was.
type pinning struct {
	selfMask  string
	redis     []int
	redisMask []string
	procs     int
}

// pin applies pl to this process and to the servers' processes. It fails
// when taskset is missing or fewer than two CPUs are allowed.
func pin(pl placement, servers []*server) (*pinning, error) {
	if _, err := exec.LookPath("taskset"); err != nil {
		return nil, fmt.Errorf("taskset (util-linux): %w", err)
	}
	self, err := allowedCPUs(os.Getpid())
	if err != nil {
		return nil, err
	}
	cpus, err := parseCPUList(self)
	if err != nil {
		return nil, err
	}
	if len(cpus) < 2 {
		return nil, fmt.Errorf("only CPUs %s allowed: need two", self)
	}
	p := &pinning{selfMask: self, procs: runtime.GOMAXPROCS(0)}
	for _, s := range servers {
		m, err := allowedCPUs(s.pid())
		if err != nil {
			return nil, err
		}
		if err := taskset(s.pid(), strconv.Itoa(cpus[pl.redisCPU])); err != nil {
			_ = p.undo()
			return nil, err
		}
		p.redis, p.redisMask = append(p.redis, s.pid()), append(p.redisMask, m)
	}
	runtime.GOMAXPROCS(1)
	if err := taskset(os.Getpid(), strconv.Itoa(cpus[pl.clientCPU])); err != nil {
		_ = p.undo()
		return nil, err
	}
	return p, nil
}

// undo gives the processes their CPUs and GOMAXPROCS back.
func (p *pinning) undo() error {
	var errs []error
	errs = append(errs, taskset(os.Getpid(), p.selfMask))
	runtime.GOMAXPROCS(p.procs)
	for i, pid := range p.redis {
		errs = append(errs, taskset(pid, p.redisMask[i]))
	}
	return errors.Join(errs...)
}

// taskset sets the CPU list of every thread of pid. Threads started later
// inherit it from the thread that starts them.
func taskset(pid int, cpus string) error {
	out, err := exec.Command("taskset", "-a", "-p", "-c", cpus, strconv.Itoa(pid)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("taskset -a -p -c %s %d: %w: %s", cpus, pid, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// allowedCPUs returns Cpus_allowed_list of pid's main thread.
func allowedCPUs(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("/proc/%d/status: no Cpus_allowed_list", pid)
}

// parseCPUList parses a list such as "0-2,4".
func parseCPUList(s string) ([]int, error) {
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("CPU list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("CPU list %q: bad range %q", s, part)
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return out, nil
}
