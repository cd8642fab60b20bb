package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/solo-run/solo/examples/internal/proctest"
	"github.com/solo-run/solo/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	procs    = 3
	accounts = "6"
	// attempts bounds the tries of the pause round: a pause lands only if
	// another process wrote one of the paused transfer's accounts while it
	// was frozen (it nearly always does with 6 accounts).
	attempts = 4
	// ttl is the locks' TTL; the pause lasts pauseFor, past it.
	ttl      = time.Second
	pauseFor = 2 * ttl
)

// timing: 1s locks renewed every 300ms; every transfer takes 100ms between
// reading the balances and writing them (-think), so a signal sent when a
// process logs "transfer prepared" lands while it holds a transfer in hand.
var timing = []string{"-ttl", ttl.String(), "-renew", "300ms", "-deadline", "700ms", "-think", "100ms"}

// TestTransfer runs 3 processes moving money between 6 accounts, SIGKILLs
// two of them in the middle of a transfer (each slot restarts) and SIGSTOPs
// one with a transfer in hand for twice the locks' TTL.
//
// fenced: the check passes (total constant, no negative balance, every
// balance equal to its opening balance plus its ledger — no lost update, no
// transfer applied twice — and no account written with a term below one it
// was written with before), and the paused process's write was refused by
// the fence and counted.
//
// unsafe-no-fence: the same pause makes the woken process write balances it
// read before the pause over newer ones, and the check fails: the fence is
// what makes the locks safe against a pause.
func TestTransfer(t *testing.T) {
	bin := proctest.Build(t, ".")
	t.Run("fenced", func(t *testing.T) {
		b := newBank(t, bin, nil)
		b.killRound(t)
		b.killRound(t)
		landed := false
		for try := 1; try <= attempts && !landed; try++ {
			msg := b.pauseRound(t)
			landed = msg == "stale write refused"
			if !landed {
				t.Logf("pause round, try %d: the paused transfer was %q (nobody wrote its accounts meanwhile); again", try, msg)
			}
		}
		if !landed {
			t.Fatalf("%d pauses, no stale write refused", attempts)
		}
		b.stopAll(t)
		out, code := b.check(t)
		if code != 0 {
			t.Fatalf("check exit %d:\n%s", code, out)
		}
		t.Log(out)
		applied, refused := 0, 0
		for _, p := range b.all {
			applied += p.Count(proctest.Msg("transfer applied"))
			refused += p.Count(proctest.Msg("stale write refused"))
		}
		if applied == 0 {
			t.Fatal("no transfer applied")
		}
		t.Logf("%d transfers applied, %d stale writes refused", applied, refused)
	})
	t.Run("unsafe-no-fence", func(t *testing.T) {
		b := newBank(t, bin, []string{"-unsafe-no-fence"})
		var out string
		code := 0
		for try := 1; try <= attempts && code == 0; try++ {
			if msg := b.pauseRound(t); msg != "transfer applied" {
				t.Fatalf("unfenced paused transfer: %q, want applied", msg)
			}
			out, code = b.check(t)
		}
		if code != 1 || !strings.Contains(out, "lost update") {
			t.Fatalf("check exit %d, want 1 reporting a lost update:\n%s", code, out)
		}
		t.Log(out)
	})
}

// bank is one run: Redis, the database and the processes.
type bank struct {
	bin, url, db string
	flags        []string
	slots        [procs]*proctest.Proc
	gen          int
	all          []*proctest.Proc
	next         int // the slot the next round signals
}

func newBank(t *testing.T, bin string, flags []string) *bank {
	srv := redistest.Start(t)
	b := &bank{bin: bin, url: "redis://" + srv.Addr() + "/0", db: filepath.Join(t.TempDir(), "bank.db"), flags: flags}
	p := proctest.Start(t, "init", bin, nil, "init", "-db", b.db, "-accounts", accounts, "-balance", "1000")
	if code, err := p.Wait(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("init exit %d, %v", code, err)
	}
	for i := range b.slots {
		b.start(t, i)
	}
	return b
}

// start runs a process in slot i, with a fresh ID.
func (b *bank) start(t *testing.T, i int) {
	b.gen++
	id := fmt.Sprintf("p%d.%d", i, b.gen)
	args := append([]string{"run", "-redis", b.url, "-db", b.db, "-id", id}, timing...)
	p := proctest.Start(t, id, b.bin, nil, append(args, b.flags...)...)
	b.slots[i] = p
	b.all = append(b.all, p)
}

// prepared waits for the next "transfer prepared" line of the next slot in
// turn and returns the slot and the transfer's id.
func (b *bank) prepared(t *testing.T) (int, string) {
	t.Helper()
	i := b.next
	b.next = (b.next + 1) % procs
	p := b.slots[i]
	line, _, err := p.Await(p.Mark(), 10*time.Second, proctest.Msg("transfer prepared"))
	if err != nil {
		t.Fatal(err)
	}
	m, _ := proctest.JSON(line)
	id, _ := m["transfer"].(string)
	return i, id
}

// killRound SIGKILLs a process with a transfer in hand, and restarts its
// slot.
func (b *bank) killRound(t *testing.T) {
	t.Helper()
	i, id := b.prepared(t)
	p := b.slots[i]
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGKILLed %s with transfer %s in hand", p.Name, id)
	b.start(t, i)
}

// pauseRound SIGSTOPs a process with a transfer in hand for pauseFor,
// resumes it, and returns what became of that transfer: "transfer
// applied" or "stale write refused".
func (b *bank) pauseRound(t *testing.T) string {
	t.Helper()
	i, id := b.prepared(t)
	p := b.slots[i]
	mark := p.Mark()
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(pauseFor) // the fault's length, not a wait for an effect
	if err := p.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	line, _, err := p.Await(mark, 10*time.Second, func(l string) bool {
		m, ok := proctest.JSON(l)
		return ok && m["transfer"] == id && (m["msg"] == "transfer applied" || m["msg"] == "stale write refused")
	})
	if err != nil {
		t.Fatalf("transfer %s of %s after SIGCONT: %v", id, p.Name, err)
	}
	m, _ := proctest.JSON(line)
	msg, _ := m["msg"].(string)
	t.Logf("SIGSTOPped %s for %s with transfer %s in hand: %s", p.Name, pauseFor, id, msg)
	return msg
}

// stopAll sends SIGTERM to every process and waits for exit 0.
func (b *bank) stopAll(t *testing.T) {
	t.Helper()
	for _, p := range b.slots {
		if err := p.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range b.slots {
		if code, err := p.Wait(15 * time.Second); err != nil || code != 0 {
			t.Fatalf("%s exit %d, %v; want 0", p.Name, code, err)
		}
	}
}

// check runs the check command and returns its output and exit code.
func (b *bank) check(t *testing.T) (string, int) {
	t.Helper()
	p := proctest.Start(t, "check", b.bin, nil, "check", "-db", b.db)
	code, err := p.Wait(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(p.Lines(), "\n"), code
}
