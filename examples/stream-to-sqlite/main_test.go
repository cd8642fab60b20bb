package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/solo-run/solo/examples/internal/proctest"
	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	messages  = 10000
	rate      = "800" // per second: production outlasts the fault rounds
	instances = 3
	// attempts bounds the tries of one fault round. A round whose fault did
	// not land where it must (the leader had already written the batch it
	// read) is tried again; its failover still happened, which does no harm.
	attempts = 4
)

// timing: a 1s lease renewed every 300ms, so failovers are quick; every batch
// takes 100ms between read and write (-slow-write), so a fault sent when the
// leader logs "batch read" lands while it holds the batch unacknowledged.
var timing = []string{"-ttl", "1s", "-renew", "300ms", "-deadline", "700ms", "-sweep", "500ms", "-slow-write", "100ms"}

// TestStreamToSQLite runs the ingest as 3 real instances while 10,000 messages
// are produced, SIGKILLs the leader twice and SIGSTOPs it once for longer than
// its lease, each time while it holds a batch it has read but not written.
//
// fenced: every message ends up stored exactly once, along the commit order
// the writers' terms never decrease (no stale write was accepted), and the
// paused leader's write was refused by the fence.
//
// The same scenario without the fence, or without the takeover of pending
// messages, must fail the check: those two steps are what make it correct.
func TestStreamToSQLite(t *testing.T) {
	bin := proctest.Build(t, ".")
	t.Run("fenced", func(t *testing.T) {
		s := runScenario(t, bin, nil)
		out, code := s.check(t)
		if code != 0 {
			t.Fatalf("check exit %d:\n%s", code, out)
		}
		t.Log(out)
		if s.refused == 0 || s.statsRefused(t) == 0 {
			t.Fatalf("the paused leader's write was never refused: %d log lines, %d in -stats files", s.refused, s.statsRefused(t))
		}
		if s.takenOver == 0 {
			t.Fatal("no pending message was ever taken over")
		}
		t.Logf("%d pending messages taken over, %d stale writes refused", s.takenOver, s.refused)
	})
	t.Run("unsafe-no-fence", func(t *testing.T) {
		s := runScenario(t, bin, []string{"-unsafe-no-fence"})
		out, code := s.check(t)
		if code != 1 || !strings.Contains(out, "stale write accepted") {
			t.Fatalf("check exit %d, want 1 reporting a stale write:\n%s", code, out)
		}
		t.Log(out)
	})
	t.Run("unsafe-no-autoclaim", func(t *testing.T) {
		s := runScenario(t, bin, []string{"-unsafe-no-autoclaim"})
		out, code := s.check(t)
		if code != 1 || !strings.Contains(out, "messages missing") {
			t.Fatalf("check exit %d, want 1 reporting missing messages:\n%s", code, out)
		}
		t.Log(out)
	})
}

// scenario is one run of the fault scenario.
type scenario struct {
	bin, url, db, dir string
	flags             []string // extra consume flags
	fenced, autoclaim bool
	rdb               *redis.Client
	slots             [instances]*proctest.Proc
	gen               int
	all               []*proctest.Proc // every consumer ever started
	refused           int              // "stale write refused" log lines
	takenOver         int              // messages "taken over", from the logs
}

func runScenario(t *testing.T, bin string, flags []string) *scenario {
	srv := redistest.Start(t)
	dir := t.TempDir()
	s := &scenario{
		bin: bin, url: "redis://" + srv.Addr() + "/0", db: filepath.Join(dir, "orders.db"), dir: dir,
		flags: flags, fenced: !slices.Contains(flags, "-unsafe-no-fence"), autoclaim: !slices.Contains(flags, "-unsafe-no-autoclaim"),
		rdb: srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true }),
	}
	for i := range s.slots {
		s.start(t, i)
	}
	producer := proctest.Start(t, "produce", bin, nil, "produce", "-redis", s.url, "-n", fmt.Sprint(messages), "-rate", rate)

	for _, round := range []string{"kill", "kill", "stop"} {
		landed := false
		for try := 1; try <= attempts && !landed; try++ {
			if round == "kill" {
				landed = s.killRound(t)
			} else {
				landed = s.stopRound(t)
			}
			if !landed {
				t.Logf("%s round, try %d: the fault missed the in-flight batch; again", round, try)
			}
		}
		if !landed {
			t.Fatalf("%s round: %d tries, the fault never landed on an in-flight batch", round, attempts)
		}
	}

	if code, err := producer.Wait(2 * time.Minute); err != nil || code != 0 {
		t.Fatalf("produce exit %d, %v", code, err)
	}
	s.awaitDrained(t)

	// Stop every instance: each drains, releases if it leads, exits 0.
	for i, p := range s.slots {
		if err := p.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code, err := p.Wait(30 * time.Second); err != nil || code != 0 {
			t.Fatalf("slot %d (%s) exit %d, %v; want 0", i, p.Name, code, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if h, err := leader.Lookup(ctx, s.rdb, leader.Config{Name: "stream-to-sqlite"}); !errors.Is(err, leader.ErrNoLeader) {
		t.Fatalf("after shutdown: Lookup() = %+v, %v; want ErrNoLeader (released)", h, err)
	}
	for _, p := range s.all {
		s.refused += p.Count(proctest.Msg("stale write refused"))
		for _, l := range p.Lines() {
			if m, ok := proctest.JSON(l); ok && m["msg"] == "pending messages taken over" {
				n, _ := m["n"].(float64)
				s.takenOver += int(n)
			}
		}
	}
	return s
}

// start runs a consumer in slot i, with a fresh ID.
func (s *scenario) start(t *testing.T, i int) {
	s.gen++
	id := fmt.Sprintf("c%d.%d", i, s.gen)
	args := append([]string{"consume", "-redis", s.url, "-db", s.db, "-id", id,
		"-stats", filepath.Join(s.dir, id+".json")}, timing...)
	p := proctest.Start(t, id, s.bin, nil, append(args, s.flags...)...)
	s.slots[i] = p
	s.all = append(s.all, p)
}

// leader waits until a live instance holds the lease and has started its
// term, and returns its slot and term.
func (s *scenario) leader(t *testing.T) (int, uint64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		h, err := leader.Lookup(ctx, s.rdb, leader.Config{Name: "stream-to-sqlite"})
		cancel()
		if err == nil {
			for i, p := range s.slots {
				if strings.HasPrefix(h.ID, p.Name+"-") && !p.Exited() && p.Count(termStarted(h.Term)) > 0 {
					return i, h.Term
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no live instance started a term within 30s")
	return 0, 0
}

// killRound SIGKILLs the leader right after it read a batch, and restarts the
// slot. It reports whether the kill left messages pending that are not
// stored: only the takeover by the next leader can save those.
func (s *scenario) killRound(t *testing.T) bool {
	t.Helper()
	i, term := s.leader(t)
	p := s.slots[i]
	if _, _, err := p.Await(p.Mark(), 10*time.Second, proctest.Msg("batch read")); err != nil {
		t.Logf("no batch read: %v", err)
		return false
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	lost := s.pendingNotStored(t, p.Name)
	t.Logf("killed %s (term %d) holding %d unstored pending messages", p.Name, term, lost)
	s.start(t, i)
	return lost > 0
}

// stopRound SIGSTOPs the leader right after it read a batch, until another
// instance has taken over and written, then SIGCONTs it. It reports whether
// the paused leader then tried to write its batch with its old term, and
// what came of it: refused (fenced) or committed after the new term's
// writes (unfenced).
func (s *scenario) stopRound(t *testing.T) bool {
	t.Helper()
	i, term := s.leader(t)
	p := s.slots[i]
	_, at, err := p.Await(p.Mark(), 10*time.Second, proctest.Msg("batch read"))
	if err != nil {
		t.Logf("no batch read: %v", err)
		return false
	}
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	// Wait until a newer term has written a batch. If the pause caught the
	// leader inside its transaction, holding SQLite's write lock, nobody
	// can: resume it after a while and try again.
	newer := s.awaitNewerWrite(t, term, 8*time.Second)
	if err := p.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("paused %s (term %d) for %v; newer term wrote: %v", p.Name, term, time.Since(paused).Round(time.Millisecond), newer)
	if !newer {
		return false
	}
	line, _, err := p.Await(at+1, 15*time.Second, func(l string) bool {
		return proctest.Msg("stale write refused")(l) || proctest.Msg("batch written")(l)
	})
	if err != nil {
		t.Fatalf("the resumed leader neither wrote nor was refused: %v", err)
	}
	m, _ := proctest.JSON(line)
	t.Logf("resumed %s: %v", p.Name, m["msg"])
	if s.fenced {
		return m["msg"] == "stale write refused"
	}
	return m["msg"] == "batch written" && s.staleBatches(t) > 0
}

// awaitNewerWrite waits up to d for an instance to write a batch with a
// term above term.
func (s *scenario) awaitNewerWrite(t *testing.T, term uint64, d time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		db := s.openDB(t)
		var n int
		err := db.QueryRow(`SELECT count(*) FROM batches WHERE term > ?`, int64(term)).Scan(&n)
		_ = db.Close()
		if err == nil && n > 0 {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// pendingNotStored counts the messages pending for consumer id that are not
// in the database.
func (s *scenario) pendingNotStored(t *testing.T, id string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pending, err := s.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: "orders", Group: "sqlite", Start: "-", End: "+", Count: 10000,
	}).Result()
	if err != nil {
		t.Fatal(err)
	}
	db := s.openDB(t)
	defer db.Close()
	lost := 0
	for _, e := range pending {
		// The consumer is the elector's ID: the -id flag plus a random part.
		if !strings.HasPrefix(e.Consumer, id+"-") {
			continue
		}
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM messages WHERE msg_id = ?`, e.ID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			lost++
		}
	}
	return lost
}

// staleBatches counts batches committed with a term below one committed
// before them.
func (s *scenario) staleBatches(t *testing.T) int {
	t.Helper()
	db := s.openDB(t)
	defer db.Close()
	var n int
	err := db.QueryRow(`SELECT count(*) FROM batches b WHERE b.term < (SELECT max(term) FROM batches e WHERE e.seq < b.seq)`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// awaitDrained waits until the group has been delivered every message and
// nothing is pending any more; without the takeover, until what is pending
// stops changing (it never gets processed).
func (s *scenario) awaitDrained(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var last int64 = -1
	var stableSince time.Time
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		groups, err := s.rdb.XInfoGroups(ctx, "orders").Result()
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		g := groups[0]
		if g.Lag == 0 && g.EntriesRead == messages {
			if g.Pending == 0 {
				return
			}
			if g.Pending != last {
				last, stableSince = g.Pending, time.Now()
			} else if !s.autoclaim && time.Since(stableSince) > 3*time.Second {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("the group was not drained within 90s")
}

// statsRefused sums stale_refused over the -stats files the instances wrote
// at exit (killed ones wrote none).
func (s *scenario) statsRefused(t *testing.T) int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(s.dir, "c*.json"))
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			StaleRefused int `json:"stale_refused"`
		}
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		total += st.StaleRefused
	}
	return total
}

// check runs the check command and returns its output and exit code.
func (s *scenario) check(t *testing.T) (string, int) {
	t.Helper()
	p := proctest.Start(t, "check", s.bin, nil, "check", "-redis", s.url, "-db", s.db, "-n", fmt.Sprint(messages))
	code, err := p.Wait(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(p.Lines(), "\n"), code
}

func (s *scenario) openDB(t *testing.T) *sql.DB {
	t.Helper()
	if _, err := os.Stat(s.db); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+s.db+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// termStarted matches the ingest's "term started" line of term.
func termStarted(term uint64) func(string) bool {
	return func(l string) bool {
		return proctest.Msg("term started")(l) && strings.Contains(l, fmt.Sprintf(`"term":%d`, term))
	}
}
