package main

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/solo-run/solo/examples/internal/proctest"
	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestBasic runs the program twice against a real Redis: the first instance
// leads, Ctrl-C makes it step down, release and exit 0, the second takes over
// with a higher term, and after its own Ctrl-C nobody holds the lease.
func TestBasic(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr() + "/0"
	bin := proctest.Build(t, ".")

	a := proctest.Start(t, "basic-a", bin, nil, "-redis", url)
	termA := awaitTerm(t, a, 0)
	b := proctest.Start(t, "basic-b", bin, nil, "-redis", url)
	// Give b time to see a as the holder; it must not lead meanwhile.
	if _, _, err := b.Await(0, time.Second, proctest.Contains("leading")); err == nil {
		t.Fatal("b leads while a holds the lease")
	}

	mark := b.Mark()
	stopAndExpectZero(t, a)
	if !strings.Contains(a.Tail(3), "stepping down, term "+strconv.FormatUint(termA, 10)) {
		t.Fatalf("a exited without stepping down:\n%s", a.Tail(10))
	}
	// a released the lease, so b takes over at once rather than after the
	// 10s TTL; the bound is generous for a busy machine.
	termB := awaitTerm(t, b, mark)
	if termB <= termA {
		t.Fatalf("b leads with term %d, not above a's %d", termB, termA)
	}

	stopAndExpectZero(t, b)
	client := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if h, err := leader.Lookup(ctx, client, leader.Config{Name: "basic"}); !errors.Is(err, leader.ErrNoLeader) {
		t.Fatalf("after both stopped: Lookup() = %+v, %v; want ErrNoLeader (lease released)", h, err)
	}
}

// awaitTerm waits for p to print that it leads and returns its term.
func awaitTerm(t *testing.T, p *proctest.Proc, from int) uint64 {
	t.Helper()
	line, _, err := p.Await(from, 8*time.Second, proctest.Contains("leading, term "))
	if err != nil {
		t.Fatal(err)
	}
	term, err := strconv.ParseUint(strings.TrimPrefix(line, "leading, term "), 10, 64)
	if err != nil {
		t.Fatalf("%s: bad line %q: %v", p.Name, line, err)
	}
	return term
}

// stopAndExpectZero sends SIGINT, as Ctrl-C does, and expects exit code 0.
func stopAndExpectZero(t *testing.T, p *proctest.Proc) {
	t.Helper()
	if err := p.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	code, err := p.Wait(15 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Fatalf("%s exited with %d, want 0", p.Name, code)
	}
}
