package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
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

// Every second, with a 3s lease renewed every 500ms: a SIGKILLed leader's
// lease outlives it by at least ~2.5s, so at least one whole-second tick
// always falls into the gap before the follower can take over. Which ticks
// did is read from the follower's log, not from the clock.
var timing = []string{"-schedule", "* * * * * *", "-ttl", "3s", "-renew", "500ms", "-deadline", "2s"}

const (
	msgSkip    = "skipping ticks missed during the failover"
	msgRunOnce = "ran a missed tick once, late"
)

// tickRow is one row of the ticks table.
type tickRow struct {
	tick     time.Time
	term     uint64
	instance string
}

// TestCronReport_Failover kills the leader (SIGKILL) between ticks and checks,
// for each misfire policy, that no tick was written twice, that the ticks in
// the gap were handled as the policy says, and that every write carries the
// writer's term.
func TestCronReport_Failover(t *testing.T) {
	bin := proctest.Build(t, ".")
	for _, misfire := range []string{"skip", "run-once"} {
		t.Run(misfire, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			db := filepath.Join(t.TempDir(), "report.db")
			start := func(id string) *proctest.Proc {
				args := append([]string{"-redis", "redis://" + srv.Addr() + "/0", "-db", db, "-id", id, "-misfire", misfire}, timing...)
				return proctest.Start(t, id, bin, nil, args...)
			}

			a := start("a")
			for i := 0; i < 2; i++ {
				if _, _, err := a.Await(0, 15*time.Second, nthLine(proctest.Msg("tick written"), i+1)); err != nil {
					t.Fatal(err)
				}
			}
			b := start("b")
			if _, _, err := b.Await(0, 15*time.Second, proctest.Msg("leader observed")); err != nil {
				t.Fatal(err)
			}
			if err := a.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Wait(10 * time.Second); err != nil {
				t.Fatal(err)
			}

			// b takes over when a's lease expires and applies the policy to
			// the ticks since the last one a recorded.
			want, other := msgSkip, msgRunOnce
			if misfire == "run-once" {
				want, other = msgRunOnce, msgSkip
			}
			// Skipped ticks are reported before b's first write; a tick run
			// once, late, is reported after its run (its write comes first).
			line, at, err := b.Await(0, 20*time.Second, func(l string) bool {
				return proctest.Msg(want)(l) || misfire == "skip" && proctest.Msg("tick written")(l)
			})
			if err != nil {
				t.Fatal(err)
			}
			misfireLog, _ := proctest.JSON(line)
			if misfireLog["msg"] != want {
				t.Fatalf("b wrote a tick without reporting missed ticks; a's lease should always outlive a tick: %s", line)
			}
			if n := b.Count(proctest.Msg(other)); n != 0 {
				t.Fatalf("b logged %q with misfire %s", other, misfire)
			}
			// Two more of b's own ticks.
			for i := 0; i < 2; i++ {
				if _, _, err := b.Await(at+1, 15*time.Second, nthLine(proctest.Msg("tick written"), i+1)); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if code, err := b.Wait(15 * time.Second); err != nil || code != 0 {
				t.Fatalf("b exit = %d, %v; want 0", code, err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := leader.Lookup(ctx, srv.Client(t), leader.Config{Name: "cron-report"}); !errors.Is(err, leader.ErrNoLeader) {
				t.Fatalf("after b exited: Lookup() = %v, want ErrNoLeader", err)
			}

			rows := readTicks(t, db)
			checkTicks(t, rows, a, b, misfire, misfireLog)
		})
	}
}

// checkTicks checks the table against the instances' logs.
func checkTicks(t *testing.T, rows []tickRow, a, b *proctest.Proc, misfire string, misfireLog map[string]any) {
	t.Helper()
	// Every run that wrote logged it, and nothing failed: a tick run twice
	// would have failed on the primary key.
	for _, p := range []*proctest.Proc{a, b} {
		if n := p.Count(proctest.Msg("cron job failed")); n != 0 {
			t.Errorf("%s: %d failed runs", p.Name, n)
		}
	}
	if logged := a.Count(proctest.Msg("tick written")) + b.Count(proctest.Msg("tick written")); logged != len(rows) {
		t.Errorf("%d rows, but %d writes logged", len(rows), logged)
	}
	var aRows, bRows []tickRow
	for _, r := range rows {
		switch r.instance {
		case "a":
			aRows = append(aRows, r)
		case "b":
			bRows = append(bRows, r)
		default:
			t.Fatalf("row by unknown instance: %+v", r)
		}
	}
	if len(aRows) < 2 || len(bRows) < 2 {
		t.Fatalf("a wrote %d rows, b %d; want at least 2 each", len(aRows), len(bRows))
	}
	// One term per instance; b's is newer.
	for _, r := range rows {
		if want := aRows[0].term; r.instance == "a" && r.term != want {
			t.Errorf("a wrote %+v with another term than %d", r, want)
		}
		if want := bRows[0].term; r.instance == "b" && r.term != want {
			t.Errorf("b wrote %+v with another term than %d", r, want)
		}
	}
	if bRows[0].term <= aRows[0].term {
		t.Errorf("b's term %d not above a's %d", bRows[0].term, aRows[0].term)
	}
	// The rows are in tick order (the table's order): a's, then b's.
	lastA, firstB := aRows[len(aRows)-1].tick, bRows[0].tick
	if !lastA.Before(firstB) {
		t.Errorf("a's last tick %v not before b's first %v", lastA, firstB)
	}

	missed := int(misfireLog["missed"].(float64))
	if missed < 1 {
		t.Fatalf("missed = %d in %v", missed, misfireLog)
	}
	switch misfire {
	case "skip":
		first, last := logTime(t, misfireLog, "first"), logTime(t, misfireLog, "last")
		// The gap: after a's last write, up to and including last, nothing;
		// b resumes with the tick after last.
		if !lastA.Before(first) || last.Before(first) {
			t.Errorf("gap [%v, %v] does not follow a's last tick %v", first, last, lastA)
		}
		if got := int(last.Sub(first)/time.Second) + 1; got != missed {
			t.Errorf("gap [%v, %v] holds %d ticks, log says missed=%d", first, last, got, missed)
		}
		if !firstB.After(last) {
			t.Errorf("b's first row %v is inside the skipped gap [%v, %v]", firstB, first, last)
		}
	case "run-once":
		late := logTime(t, misfireLog, "tick")
		// The latest missed tick was written, once, by b; the earlier ones
		// in the gap were not.
		if !firstB.Equal(late) {
			t.Errorf("b's first row is %v, want the late tick %v", firstB, late)
		}
		if first := late.Add(-time.Duration(missed-1) * time.Second); !lastA.Before(first) {
			t.Errorf("a wrote %v, inside the gap starting at %v", lastA, first)
		}
		if len(bRows) > 1 && !bRows[1].tick.After(late) {
			t.Errorf("b's second row %v not after the late tick %v", bRows[1].tick, late)
		}
	}
	t.Logf("a wrote %d ticks up to %v, b %d from %v; %s", len(aRows), lastA.Format(time.TimeOnly),
		len(bRows), firstB.Format(time.TimeOnly), fmt.Sprint(misfireLog["msg"], " missed=", missed))
}

func readTicks(t *testing.T, path string) []tickRow {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rs, err := db.Query(`SELECT tick, term, instance FROM ticks ORDER BY tick`)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var rows []tickRow
	for rs.Next() {
		var r tickRow
		var tick string
		if err := rs.Scan(&tick, &r.term, &r.instance); err != nil {
			t.Fatal(err)
		}
		// The ID is the -id flag plus the random part every elector adds.
		if k := strings.LastIndex(r.instance, "-"); k > 0 {
			r.instance = r.instance[:k]
		}
		if r.tick, err = time.Parse(time.RFC3339, tick); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r)
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

func logTime(t *testing.T, m map[string]any, key string) time.Time {
	t.Helper()
	s, _ := m[key].(string)
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("%s in %v: %v", key, m, err)
	}
	return v
}

// nthLine matches the n-th line (1-based) that match accepts.
func nthLine(match func(string) bool, n int) func(string) bool {
	seen := 0
	return func(l string) bool {
		if match(l) {
			seen++
		}
		return seen == n
	}
}
