package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
)

// statusRow is one election in `solo status`; also its JSON form, in the
// words of /leader: "holder" (null when nobody leads) and "candidates".
type statusRow struct {
	Election   string             `json:"election"`
	Holder     *worker.HolderInfo `json:"holder"`
	Candidates []string           `json:"candidates"`
}

func statusCommand(args []string, stdout, stderr io.Writer, env []string) error {
	fs := flag.NewFlagSet("solo status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c common
	c.register(fs, "status", true)
	asJSON := fs.Bool("json", false, "print JSON for scripts: per election {election, holder {id, term, since, ttl_ms, ttl_left_ms, renew_ms, last_renew, value} or null, candidates [ids]}, the words of /leader")
	watch := fs.Bool("watch", false, "print one line per leadership change until interrupted (SIGINT, SIGTERM)")
	names, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	first := ""
	if len(names) > 0 {
		first = names[0]
	}
	cfg, err := c.load(fs, env, first)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		if cfg.Election.Name == "" {
			return usageErr("election.name \"\": must not be empty: %s, or name it: solo status NAME", nameRemedy)
		}
		names = []string{cfg.Election.Name}
	}
	ctx := context.Background()
	client, err := connect(ctx, cfg.Redis.ClientURL(), 3*time.Second)
	if err != nil {
		return err
	}
	defer client.Close()
	if ok, err := spreadStatus(ctx, client, cfg, stdout, *asJSON, *watch); ok { // status_assign.go
		return err
	}
	if *watch {
		return watchStatus(client, cfg, names, stdout)
	}
	rows, err := lookupAll(ctx, client, cfg, names)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rows); err != nil {
			return err
		}
	} else {
		printStatus(stdout, rows)
	}
	for _, r := range rows {
		if r.Holder == nil {
			return &codeError{code: exitNoLeader, err: errQuiet}
		}
	}
	return nil
}

func lookupAll(ctx context.Context, client redis.UniversalClient, cfg Config, names []string) ([]statusRow, error) {
	rows := make([]statusRow, 0, len(names))
	for _, name := range names {
		lc := cfg.LeaderConfig()
		lc.Name = name
		v, err := leader.LookupView(ctx, client, lc)
		if err != nil {
			var ce *leader.ConfigError
			if errors.As(err, &ce) {
				return nil, usageErr("election %q: %w", name, err)
			}
			return nil, fmt.Errorf("election %q: %w", name, err)
		}
		r := statusRow{Election: name, Candidates: v.Candidates}
		if r.Candidates == nil {
			r.Candidates = []string{}
		}
		if v.Holder != nil {
			r.Holder = worker.NewHolderInfo(*v.Holder)
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// watchStatus prints a line for every leadership change of the elections
// (leader.Observe: the current leader first) until SIGINT or SIGTERM:
//
//	2026-05-04T10:00:00.123+02:00  orders-sync  elected   host-a-1f2e  term 1795316457433330
func watchStatus(client redis.UniversalClient, cfg Config, names []string, stdout io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var mu sync.Mutex
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		lc := cfg.LeaderConfig()
		lc.Name = name
		wg.Go(func() {
			errs[i] = leader.Observe(ctx, client, lc, func(c leader.Change) {
				mu.Lock()
				defer mu.Unlock()
				fmt.Fprintf(stdout, "%s  %s  %-8s  %s  term %d\n", c.At.Format("2006-01-02T15:04:05.000Z07:00"), name, c.Kind, c.Holder.ID, c.Holder.Term)
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return usageErr("election %q: %w", names[i], err)
		}
	}
	return nil
}

// printStatus prints the table. The TTL column is the time left of the
// holder's own TTL; the last renewal is computed from that TTL, so it is
// shown only when the holder recorded it (a lease taken by an older solo
// shows "-" rather than a guess from the reader's TTL).
func printStatus(w io.Writer, rows []statusRow) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ELECTION\tHOLDER\tTERM\tTTL LEFT\tLEADING SINCE\tLAST RENEWAL\tVALUE\tCANDIDATES")
	now := time.Now()
	for _, r := range rows {
		cands := "-"
		if len(r.Candidates) > 0 {
			cands = strings.Join(r.Candidates, ",")
		}
		h := r.Holder
		if h == nil {
			fmt.Fprintf(tw, "%s\t(none)\t-\t-\t-\t-\t-\t%s\n", r.Election, cands)
			continue
		}
		left := (time.Duration(h.TTLLeftMillis) * time.Millisecond).String()
		if h.TTLMillis > 0 {
			left += " of " + (time.Duration(h.TTLMillis) * time.Millisecond).String()
		}
		last := "-"
		if !h.LastRenew.IsZero() {
			last = fmt.Sprintf("%s ago", max(now.Sub(h.LastRenew), 0).Round(time.Millisecond))
		}
		value := "-"
		if h.Value != "" {
			value = strconv.Quote(h.Value)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s (%s ago)\t%s\t%s\t%s\n", r.Election, h.ID, h.Term, left,
			h.Since.Local().Format(time.DateTime), now.Sub(h.Since).Round(time.Second), last, value, cands)
	}
	_ = tw.Flush()
}

func resignCommand(args []string, stdout, stderr io.Writer, env []string) error {
	fs := flag.NewFlagSet("solo resign", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c common
	c.register(fs, "resign", true)
	wait := fs.Duration("wait", 30*time.Second, "how long to wait for another instance to take over")
	cfg, name, err := c.loadOne(fs, "resign", args, env)
	if err != nil {
		return err
	}
	if *wait <= 0 {
		return usageErr("--wait %s: must be positive", *wait)
	}
	ctx := context.Background()
	client, err := connect(ctx, cfg.Redis.ClientURL(), 3*time.Second)
	if err != nil {
		return err
	}
	defer client.Close()
	lc := cfg.LeaderConfig()
	lc.Name = name
	old, err := leader.RequestResign(ctx, client, lc)
	switch {
	case errors.Is(err, leader.ErrNoLeader):
		fmt.Fprintf(stdout, "%s: no leader\n", name)
		return &codeError{code: exitNoLeader, err: errQuiet}
	case err != nil:
		return err
	}
	fmt.Fprintf(stdout, "%s: asked %s (term %d) to resign\n", name, old.ID, old.Term)
	start := time.Now()
	deadline := start.Add(*wait)
	for time.Now().Before(deadline) {
		h, err := leader.Lookup(ctx, client, lc)
		if err == nil && h.Term > old.Term && h.ID == old.ID {
			// The resigner sat out its cooldown and won again: leadership
			// did not move, which is what resign was asked for.
			return &codeError{code: exitSameLeader, err: fmt.Errorf("%s: %s leads again (term %d) after its cooldown: no other instance took over", name, h.ID, h.Term)}
		}
		if err == nil && h.Term > old.Term {
			fmt.Fprintf(stdout, "%s: %s leads now (term %d), %s after the request\n", name, h.ID, h.Term, time.Since(start).Round(time.Millisecond))
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s: nobody took over within %s", name, *wait)
}
