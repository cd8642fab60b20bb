package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/leader/fence"
	"github.com/solo-run/solo/leader/redisurl"
)

// maxListed bounds the examples each problem lists.
const maxListed = 10

// check verifies the database against the stream: the stream holds n = 1..N
// once each; the database holds each of its messages exactly once, as sent;
// and no write of a stale term was accepted: along the commit order (seq) the
// writers' terms never decrease, and none is above the fence's term.
func check(ctx context.Context, args []string, stdout io.Writer) error {
	var c common
	var n int
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	c.register(fs)
	fs.IntVar(&n, "n", 10000, "number of messages produced")
	if err := fs.Parse(args); err != nil {
		return err
	}
	client, err := redisurl.NewClient(c.redisURL)
	if err != nil {
		return err
	}
	defer client.Close()
	db, err := openDB(c.dbPath)
	if err != nil {
		return err
	}
	defer db.Close()

	var problems []string
	report := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }

	// The stream: entry ID → n.
	sent, err := readStream(ctx, client, c.stream)
	if err != nil {
		return err
	}
	if len(sent) != n {
		report("the stream holds %d entries, want %d", len(sent), n)
	}

	// The stored messages, in commit order.
	stored := make(map[int64]int, len(sent)) // n → rows
	var (
		rows, foreign int
		lastTerm      uint64
		lastSeq       int64
		reported      int
		maxTerm       uint64
	)
	rs, err := db.QueryContext(ctx, `SELECT seq, msg_id, n, term FROM messages ORDER BY seq`)
	if err != nil {
		return err
	}
	for rs.Next() {
		var seq, v int64
		var id string
		var term uint64
		if err := rs.Scan(&seq, &id, &v, &term); err != nil {
			_ = rs.Close()
			return err
		}
		rows++
		stored[v]++
		if want, ok := sent[id]; !ok || want != v {
			if foreign++; foreign <= maxListed {
				report("row seq %d: message %s n=%d is not in the stream as such", seq, id, v)
			}
		}
		if term < lastTerm && reported < maxListed {
			reported++
			report("stale write accepted: message row seq %d by term %d, after term %d wrote row seq %d", seq, term, lastTerm, lastSeq)
		}
		if term >= lastTerm {
			lastTerm, lastSeq = term, seq
		}
		maxTerm = max(maxTerm, term)
	}
	if err := rs.Close(); err != nil {
		return err
	}
	var missing, dups []int
	for v := 1; v <= n; v++ {
		switch k := stored[int64(v)]; {
		case k == 0:
			missing = append(missing, v)
		case k > 1:
			dups = append(dups, v)
		}
	}
	if len(missing) > 0 {
		report("%d messages missing: n=%s", len(missing), list(missing))
	}
	if len(dups) > 0 {
		report("%d messages stored more than once: n=%s", len(dups), list(dups))
	}

	// The batches: every committed transaction, even those that stored
	// nothing new.
	batches, terms, stale, err := checkBatches(ctx, db)
	if err != nil {
		return err
	}
	for _, s := range stale {
		report("%s", s)
	}

	// The fence: no writer above the stored term.
	if ok, err := tableExists(ctx, db, fence.DefaultTable); err != nil {
		return err
	} else if ok {
		g, err := fence.New(db)
		if err != nil {
			return err
		}
		fenced, err := g.Term(ctx, c.name)
		switch {
		case err != nil && rows > 0:
			report("fence: %v", err)
		case err == nil && maxTerm > fenced:
			report("term %d wrote, above the fence's term %d", maxTerm, fenced)
		}
	}

	if len(problems) > 0 {
		fmt.Fprintf(stdout, "check: FAILED (%d stored rows, %d batches, %d terms):\n", rows, batches, terms)
		for _, p := range problems {
			fmt.Fprintln(stdout, "  -", p)
		}
		return errCheckFailed
	}
	fmt.Fprintf(stdout, "check: ok: %d messages, each stored exactly once; %d batches by %d terms, terms never decreasing\n",
		n, batches, terms)
	return nil
}

// checkBatches walks the batches in commit order, counts them and their
// terms, and describes each batch whose term is below one that committed
// before it.
func checkBatches(ctx context.Context, db *sql.DB) (count, terms int, stale []string, err error) {
	rs, err := db.QueryContext(ctx, `SELECT seq, term, instance, read, inserted FROM batches ORDER BY seq`)
	if err != nil {
		return 0, 0, nil, err
	}
	defer rs.Close()
	var (
		seen     = map[uint64]bool{}
		maxTerm  uint64
		maxSeq   int64
		maxOwner string
	)
	for rs.Next() {
		var seq int64
		var term uint64
		var instance string
		var read, inserted int
		if err := rs.Scan(&seq, &term, &instance, &read, &inserted); err != nil {
			return 0, 0, nil, err
		}
		count++
		seen[term] = true
		if term < maxTerm && len(stale) < maxListed {
			stale = append(stale, fmt.Sprintf("stale write accepted: batch seq %d (%d read, %d new) by %s with term %d, after %s's term %d committed batch seq %d",
				seq, read, inserted, instance, term, maxOwner, maxTerm, maxSeq))
		}
		if term > maxTerm {
			maxTerm, maxSeq, maxOwner = term, seq, instance
		}
	}
	return count, len(seen), stale, rs.Err()
}

// readStream returns the stream's entries: ID → field n.
func readStream(ctx context.Context, client redis.UniversalClient, stream string) (map[string]int64, error) {
	out := map[string]int64{}
	start := "-"
	for {
		page, err := client.XRangeN(ctx, stream, start, "+", 1000).Result()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", stream, err)
		}
		for _, m := range page {
			v, err := strconv.ParseInt(fmt.Sprint(m.Values["n"]), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("entry %s: field n: %w", m.ID, err)
			}
			out[m.ID] = v
		}
		if len(page) < 1000 {
			return out, nil
		}
		start = "(" + page[len(page)-1].ID
	}
}

// list formats the first values of vs.
func list(vs []int) string {
	s := ""
	for i, v := range vs {
		if i == maxListed {
			return s + ",…"
		}
		if i > 0 {
			s += ","
		}
		s += strconv.Itoa(v)
	}
	return s
}
