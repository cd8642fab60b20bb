package main

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/solo-run/solo/examples/internal/proctest"
	"github.com/solo-run/solo/internal/redistest"
)

// TestStreamToSQLite_RedisRestartsEmpty: Redis restarts without its data
// (no persistence) while the ingest runs: the stream, its consumer group
// and the lease are gone. The instance must win a new term, recreate the
// group (with the stream, MKSTREAM) and ingest what is produced after the
// restart.
//
// Before, the group was created only at process start, so every read of
// the new term failed with NOGROUP for good:
//
//	20 of 40 rows after 15s
func TestStreamToSQLite_RedisRestartsEmpty(t *testing.T) {
	bin := proctest.Build(t, ".")
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr() + "/0"
	dir := t.TempDir()
	s := &scenario{db: filepath.Join(dir, "orders.db")}
	p := proctest.Start(t, "c", bin, nil, append([]string{"consume", "-redis", url, "-db", s.db, "-id", "c"},
		"-ttl", "1s", "-renew", "300ms", "-deadline", "700ms", "-sweep", "500ms")...)

	produce := func() {
		t.Helper()
		pr := proctest.Start(t, "produce", bin, nil, "produce", "-redis", url, "-n", "20")
		if code, err := pr.Wait(time.Minute); err != nil || code != 0 {
			t.Fatalf("produce exit %d, %v", code, err)
		}
	}
	rows := func() int {
		t.Helper()
		db := s.openDB(t)
		defer db.Close()
		var n int
		_ = db.QueryRow(`SELECT count(*) FROM messages`).Scan(&n)
		return n
	}
	await := func(want int, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for time.Now().Before(deadline) {
			if rows() >= want {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("%d of %d rows after %v", rows(), want, within)
	}

	produce()
	await(20, 30*time.Second)
	srv.Restart(t)
	produce()
	await(40, 15*time.Second)
	if n := rows(); n != 40 {
		t.Fatalf("%d rows, want 40", n)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, err := p.Wait(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("consumer exit %d, %v; want 0", code, err)
	}
	if n := p.Count(proctest.Contains("consumer group recreated")); n == 0 {
		t.Error("the consumer never logged that it recreated the group")
	}
}
