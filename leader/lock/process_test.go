package lock_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/leader/lock"
)

// runChild is a child process: it takes the lock SOLO_LOCK_ROUNDS times and
// appends "E TERM PID" after each acquire and "L TERM PID" before each
// release to the witness file (O_APPEND: the file's order is the order of
// the writes).
func runChild() int {
	addr, file, name := os.Getenv("SOLO_LOCK_CHILD"), os.Getenv("SOLO_LOCK_WITNESS"), os.Getenv("SOLO_LOCK_NAME")
	rounds, _ := strconv.Atoi(os.Getenv("SOLO_LOCK_ROUNDS"))
	f, err := os.OpenFile(file, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer f.Close()
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	c, err := lock.NewClient(rdb, lock.WithConfig(lock.Config{TTL: 2 * time.Second}))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	m, err := c.Mutex(name)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	pid := os.Getpid()
	for range rounds {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		h, err := m.Lock(ctx)
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Fprintf(f, "E %d %d\n", h.Term(), pid)
		time.Sleep(200 * time.Microsecond)
		fmt.Fprintf(f, "L %d %d\n", h.Term(), pid)
		if err := h.Unlock(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

// TestMutex_ProcessesWitness: four processes contend for one lock; an
// outside witness (an append-only file) sees no two holds overlap, and
// terms strictly grow from hold to hold. Mutation check: acquire.lua
// ignoring the holder fails with "line 6: E 1795387330550901 1138 while
// 1795387330550244 1139 holds".
func TestMutex_ProcessesWitness(t *testing.T) {
	srv, _ := startRedis(t)
	file := filepath.Join(t.TempDir(), "witness")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	const procs, rounds = 4, 25
	cmds := make([]*exec.Cmd, procs)
	for i := range cmds {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "SOLO_LOCK_CHILD="+srv.Addr(), "SOLO_LOCK_WITNESS="+file,
			"SOLO_LOCK_NAME="+lockName(t), "SOLO_LOCK_ROUNDS="+strconv.Itoa(rounds))
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("child: %v", err)
		}
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		holder   string // "TERM PID" inside, or ""
		lastTerm uint64
		holds    int
	)
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		kind, rest, _ := strings.Cut(sc.Text(), " ")
		term, _ := strconv.ParseUint(strings.Fields(rest)[0], 10, 64)
		switch kind {
		case "E":
			if holder != "" {
				t.Fatalf("line %d: E %s while %s holds", n, rest, holder)
			}
			if term <= lastTerm {
				t.Fatalf("line %d: term %d after %d", n, term, lastTerm)
			}
			holder, lastTerm = rest, term
			holds++
		case "L":
			if holder != rest {
				t.Fatalf("line %d: L %s while %q holds", n, rest, holder)
			}
			holder = ""
		}
	}
	if holds != procs*rounds {
		t.Fatalf("%d holds witnessed, want %d", holds, procs*rounds)
	}
}
