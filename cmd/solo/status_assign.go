package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/cmd/solo/internal/config"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
)

// spreadStatusRow is `solo status --json` in election.mode spread.
type spreadStatusRow struct {
	Group   string          `json:"group"`
	Members []worker.Member `json:"members"`
	Share   int             `json:"share"`
	Jobs    []spreadJobRow  `json:"jobs"`
	// Conflict is the holder of the election of the group's name in mode
	// elect: while it holds, the group runs nothing (the modes exclude
	// each other).
	Conflict *leader.Holder `json:"conflict,omitempty"`
}

// spreadJobRow is one job of the group: its election in the words of an
// election's row (election, holder, candidates), with the job's name and
// the member whose elector holds it.
type spreadJobRow struct {
	Job        string         `json:"job"`
	Election   string         `json:"election"`
	Instance   string         `json:"instance,omitempty"`
	Holder     *leader.Holder `json:"holder"`
	Candidates []string       `json:"candidates"`
}

// spreadStatus prints the group's live members and, for each job, its
// election as elect mode shows one (holder, term, TTL left of the holder's
// TTL, since, last renewal, value, candidates) with the instance running
// it. The exit code is exitNoLeader when some job runs nowhere.
func spreadStatus(ctx context.Context, client redis.UniversalClient, cfg config.Config, t statusTargets, stdout io.Writer, asJSON bool) error {
	lc := cfg.LeaderConfig()
	lc.Name = t.group
	members, err := worker.LookupMembers(ctx, client, lc)
	if err != nil {
		return err
	}
	rows, err := lookupAll(ctx, client, cfg, t.elections)
	if err != nil {
		return err
	}
	row := spreadStatusRow{Group: t.group, Members: members, Jobs: make([]spreadJobRow, len(rows))}
	if row.Members == nil {
		row.Members = []worker.Member{}
	}
	if v, err := leader.LookupView(ctx, client, lc); err != nil {
		return err
	} else if v.Holder != nil {
		row.Conflict = v.Holder
	}
	if len(members) > 0 {
		row.Share = (len(rows) + len(members) - 1) / len(members)
	}
	for i, r := range rows {
		row.Jobs[i] = spreadJobRow{Job: t.jobs[i], Election: r.Election, Holder: r.Holder, Candidates: r.Candidates}
		if r.Holder != nil {
			row.Jobs[i].Instance = worker.MemberOf(r.Holder.ID)
		}
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(row); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(stdout, "group %s (election.mode spread): %d live members, share %d; job JOB is election %s.JOB\n",
			row.Group, len(row.Members), row.Share, row.Group)
		if c := row.Conflict; c != nil {
			fmt.Fprintf(stdout, "election %s is held in mode elect by %s (term %d): the group runs nothing until it is gone (the modes of one name exclude each other)\n",
				row.Group, c.ID, c.Term)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "MEMBER\tJOBS")
		for _, m := range row.Members {
			fmt.Fprintf(tw, "%s\t%d\n", m.ID, m.Load)
		}
		_ = tw.Flush()
		fmt.Fprintln(stdout)
		printRows(stdout, "JOB", t.jobs, rows)
	}
	for _, r := range rows {
		if r.Holder == nil {
			return &codeError{code: exitNoLeader, err: errQuiet}
		}
	}
	return nil
}

// errNoPublishedJobs is status's answer for a group whose configuration
// lists no job while no live member publishes any: nothing runs.
func errNoPublishedJobs(group string) error {
	return &codeError{code: exitNoLeader, err: fmt.Errorf("group %s (election.mode spread): no live member publishes its jobs, "+
		"and the configuration lists none (jobs:): start an instance of the group, or list its jobs, or name a job's election: solo status %s.JOB", group, group)}
}
