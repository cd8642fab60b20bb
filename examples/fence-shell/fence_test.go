package fenceshell_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/solo-run/solo/examples/internal/proctest"
	"github.com/solo-run/solo/internal/pgtest"
	"github.com/solo-run/solo/internal/redistest"
)

// TestFenceShell: two instances of `solo run --fence-dsn -- write.sh`, one
// after the other; then the first one's write replayed with its old term,
// as a stale leader would: refused.
func TestFenceShell(t *testing.T) {
	if _, err := exec.LookPath("psql"); err != nil {
		if os.Getenv(pgtest.RequireEnv) == "1" {
			t.Fatalf("psql not found (%s=1)", pgtest.RequireEnv)
		}
		t.Skip("psql not found")
	}
	pg := pgtest.Start(t)
	db := pg.DB(t)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE items (term BIGINT, holder TEXT, n INT)`); err != nil {
		t.Fatal(err)
	}
	srv := redistest.Start(t)
	solo := proctest.Build(t, "../../cmd/solo")
	script, _ := filepath.Abs("write.sh")
	env := []string{"DATABASE_URL=" + pg.DSN()}
	args := []string{"run", "--redis", "redis://" + srv.Addr() + "/0", "--name", "fence-shell",
		"--ttl", "2s", "--fence-dsn", pg.DSN(), "--", "sh", script}

	// newRow waits until the items table holds a row of a term other than
	// the ones given, and returns that term and holder.
	newRow := func(old ...int64) (int64, string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			var term int64
			var holder string
			err := db.QueryRowContext(ctx, `SELECT term, holder FROM items ORDER BY term DESC LIMIT 1`).Scan(&term, &holder)
			if err == nil && (len(old) == 0 || term != old[0]) {
				return term, holder
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("no row of a new term within 20s")
		return 0, ""
	}

	a := proctest.Start(t, "solo-a", solo, env, args...)
	termA, holderA := newRow()
	if err := a.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, err := a.Wait(15 * time.Second); err != nil || code != 0 {
		t.Fatalf("a exit = %d, %v", code, err)
	}
	b := proctest.Start(t, "solo-b", solo, env, args...)
	termB, holderB := newRow(termA)
	if termB <= termA || holderB == holderA {
		t.Fatalf("b wrote term %d as %q after a's term %d as %q", termB, holderB, termA, holderA)
	}

	countA := func() int {
		t.Helper()
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM items WHERE term = $1`, termA).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := countA()

	// a, paused past its lease, wakes up and writes with its old term.
	stale := exec.Command("sh", script)
	stale.Env = append(os.Environ(), "DATABASE_URL="+pg.DSN(), "WRITE_ONCE=1",
		"SOLO_ELECTION=fence-shell", "SOLO_FENCE_TABLE=solo_fence",
		"SOLO_TERM="+strconv.FormatInt(termA, 10), "SOLO_ID="+holderA)
	out, err := stale.CombinedOutput()
	if err == nil {
		t.Fatalf("a stale write was accepted:\n%s", out)
	}
	if !strings.Contains(string(out), "division by zero") {
		t.Fatalf("stale write failed for another reason: %v\n%s", err, out)
	}
	if after := countA(); after != before {
		t.Fatalf("rows of the stale term %d: %d before its late write, %d after", termA, before, after)
	}
	_ = b.Signal(syscall.SIGTERM)
	if code, err := b.Wait(15 * time.Second); err != nil || code != 0 {
		t.Fatalf("b exit = %d, %v", code, err)
	}
}
