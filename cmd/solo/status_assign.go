package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
)

// spreadStatusRow is `solo status --json` in election.mode spread.
type spreadStatusRow struct {
	Group   string              `json:"group"`
	Members []worker.Member     `json:"members"`
	Share   int                 `json:"share"`
	Jobs    []worker.Assignment `json:"jobs"`
	// Conflict is the holder of the election of the group's name in mode
	// elect: while it holds, the group runs nothing (the modes exclude
	// each other).
	Conflict *worker.HolderInfo `json:"conflict,omitempty"`
}

// spreadStatus prints, when cfg's mode is spread, the group's live members
// and the assignment of its jobs (job → instance, term, since), and reports
// true; it does nothing and reports false in the other modes and with
// --watch (which follows the elections named). The exit
// code is exitNoLeader when some job runs nowhere.
func spreadStatus(ctx context.Context, client redis.UniversalClient, cfg Config, stdout io.Writer, asJSON, watch bool) (bool, error) {
	if cfg.Election.Mode != worker.ModeSpread || watch {
		return false, nil
	}
	if len(cfg.Jobs) == 0 {
		return true, usageErr("election.mode spread: list the group's jobs in the configuration (jobs:)")
	}
	lc := cfg.LeaderConfig()
	names := make([]string, len(cfg.Jobs))
	for i, j := range cfg.Jobs {
		names[i] = j.Name
	}
	members, err := worker.LookupMembers(ctx, client, lc)
	if err != nil {
		return true, err
	}
	jobs, err := worker.LookupAssignments(ctx, client, lc, names)
	if err != nil {
		return true, err
	}
	row := spreadStatusRow{Group: lc.Name, Members: members, Jobs: jobs}
	if h, err := leader.Lookup(ctx, client, lc); err == nil {
		row.Conflict = &worker.HolderInfo{ID: h.ID, Term: h.Term, TTLMillis: h.TTL.Milliseconds(), Since: h.Since, LastRenew: h.LastRenew}
	} else if !errors.Is(err, leader.ErrNoLeader) {
		return true, err
	}
	if len(members) > 0 {
		row.Share = (len(jobs) + len(members) - 1) / len(members)
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(row); err != nil {
			return true, err
		}
	} else {
		printSpreadStatus(stdout, row)
	}
	for _, j := range jobs {
		if j.Holder == nil {
			return true, &codeError{code: exitNoLeader, err: errQuiet}
		}
	}
	return true, nil
}

func printSpreadStatus(w io.Writer, row spreadStatusRow) {
	fmt.Fprintf(w, "group %s: %d live members, share %d\n", row.Group, len(row.Members), row.Share)
	if c := row.Conflict; c != nil {
		fmt.Fprintf(w, "election %s is held in mode elect by %s (term %d): the group runs nothing until it is gone (the modes of one name exclude each other)\n",
			row.Group, c.ID, c.Term)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tJOBS")
	for _, m := range row.Members {
		fmt.Fprintf(tw, "%s\t%d\n", m.ID, m.Load)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "JOB\tINSTANCE\tTERM\tTTL LEFT\tSINCE")
	now := time.Now()
	for _, j := range row.Jobs {
		if j.Holder == nil {
			fmt.Fprintf(tw, "%s\t(none)\t-\t-\t-\n", j.Job)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s (%s ago)\n", j.Job, j.Instance, j.Holder.Term,
			(time.Duration(j.Holder.TTLMillis) * time.Millisecond).String(),
			j.Holder.Since.Local().Format(time.DateTime), now.Sub(j.Holder.Since).Round(time.Second))
	}
	_ = tw.Flush()
}
