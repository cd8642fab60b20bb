package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/cmd/solo/internal/config"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
)

// statusRow is one election in `solo status`; also its JSON form, in the
// words of /leader: "holder" (null when nobody leads; leader.Holder's JSON
// form) and "candidates".
type statusRow struct {
	Election   string         `json:"election"`
	Holder     *leader.Holder `json:"holder"`
	Candidates []string       `json:"candidates"`
}

func statusCommand(args []string, stdout, stderr io.Writer, env []string) error {
	fs := flag.NewFlagSet("solo status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c common
	c.register(fs, "status", true)
	asJSON := fs.Bool("json", false, "print JSON for scripts: per election {election, holder {id, term, since, lease_ttl_ms, ttl_left_ms, renew_interval_ms, last_renew, value, protocol, min_peer_protocol} or null, candidates [ids]}, the words of /leader; in election.mode spread {group, members, share, jobs [the same, with job and instance]}")
	watch := fs.Bool("watch", false, "print one line per leadership change, and when Redis becomes unreachable and reachable again, until interrupted (SIGINT, SIGTERM)")
	names, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	// The configured name first: in election.mode spread it is the group,
	// which a NAME (a job, or a job's election) must not replace.
	cfg, err := c.load(fs, env, "")
	if err != nil && len(names) > 0 {
		cfg, err = c.load(fs, env, names[0])
	}
	if err != nil {
		return err
	}
	ctx := context.Background()
	client, t, err := openStatus(ctx, cfg, names)
	if err != nil {
		return err
	}
	defer client.Close()
	if *watch {
		// The watch retries what fails, as for an outage: a configuration
		// error (an ACL without the inspect script's commands) would never
		// heal, so one lookup first, failing with exit 2 on one.
		lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := lookupAll(lctx, client, cfg, t.elections)
		cancel()
		if err != nil && redisConfigError(err) != "" {
			return err
		}
		return watchStatus(client, cfg, t, stdout, stderr)
	}
	if t.group != "" {
		return spreadStatus(ctx, client, cfg, t, stdout, *asJSON) // status_assign.go
	}
	rows, err := lookupAll(ctx, client, cfg, t.elections)
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

// openStatus resolves and validates status's targets and connects to
// Redis: first, when the group of election.mode spread lists no job in
// the configuration (built in code), to read the jobs its members
// publish in their heartbeats.
func openStatus(ctx context.Context, cfg config.Config, names []string) (client redis.UniversalClient, t statusTargets, err error) {
	dial := func() error {
		client, err = connect(ctx, cfg.Redis.ClientURL(), 3*time.Second)
		return err
	}
	jobs := configuredJobs(cfg)
	if cfg.Election.Mode == worker.ModeSpread && len(jobs) == 0 {
		if err := dial(); err != nil {
			return nil, t, err
		}
		if jobs, err = worker.LookupJobs(ctx, client, cfg.LeaderConfig()); err != nil {
			_ = client.Close()
			return nil, t, err
		}
	}
	if t, err = checkTargets(cfg, names, jobs); err != nil {
		if client != nil {
			_ = client.Close()
		}
		return nil, t, err
	}
	if client == nil {
		if err := dial(); err != nil {
			return nil, t, err
		}
	}
	return client, t, nil
}

// checkTargets is resolveTargets, with every election's name validated.
func checkTargets(cfg config.Config, names, jobs []string) (statusTargets, error) {
	t, err := resolveTargets(cfg, names, jobs)
	if err != nil {
		return t, err
	}
	for _, name := range t.elections {
		lc := cfg.LeaderConfig()
		lc.Name = name
		if err := lc.Validate(); err != nil {
			return t, usageErr("election %q: %w", name, err)
		}
	}
	return t, nil
}

// statusTargets are the elections status shows or watches.
type statusTargets struct {
	elections []string
	// group is set when they are the jobs of a spread group, jobs[i]
	// being the job of elections[i].
	group string
	jobs  []string
}

// describe says what status --watch watches.
func (t statusTargets) describe() string {
	if t.group != "" {
		return fmt.Sprintf("group %s (election.mode spread): %d jobs, elections %s", t.group, len(t.jobs), strings.Join(t.elections, ", "))
	}
	if len(t.elections) == 1 {
		return "election " + t.elections[0]
	}
	return "elections " + strings.Join(t.elections, ", ")
}

// configuredJobs returns the names of the configuration's jobs.
func configuredJobs(cfg config.Config) []string {
	var jobs []string
	for _, j := range cfg.Jobs {
		jobs = append(jobs, j.Name)
	}
	return jobs
}

// resolveTargets resolves status's NAMEs. In election.mode spread, no NAME
// (or the group's own name) means every job of the group, jobs (the
// configured ones, else those its members publish), and a NAME that is
// one of jobs, or its election GROUP.JOB, means that job's election; any
// other NAME is an election of its own, as in the other modes.
func resolveTargets(cfg config.Config, names, jobs []string) (statusTargets, error) {
	if cfg.Election.Mode != worker.ModeSpread {
		if len(names) == 0 {
			if cfg.Election.Name == "" {
				return statusTargets{}, usageErr("election.name \"\": must not be empty: %s, or name it: solo status NAME", config.NameRemedy)
			}
			names = []string{cfg.Election.Name}
		}
		return statusTargets{elections: names}, nil
	}
	group := cfg.Election.Name
	if len(names) == 0 || len(names) == 1 && names[0] == group {
		if len(jobs) == 0 {
			return statusTargets{}, errNoPublishedJobs(group)
		}
		t := statusTargets{group: group, jobs: jobs}
		for _, j := range jobs {
			t.elections = append(t.elections, group+"."+j)
		}
		return t, nil
	}
	var t statusTargets
	for _, n := range names {
		switch {
		case n == group:
			for _, j := range jobs {
				t.elections = append(t.elections, group+"."+j)
			}
		case slices.Contains(jobs, n):
			t.elections = append(t.elections, group+"."+n)
		default:
			t.elections = append(t.elections, n)
		}
	}
	return t, nil
}

func lookupAll(ctx context.Context, client redis.UniversalClient, cfg config.Config, names []string) ([]statusRow, error) {
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
			r.Holder = v.Holder
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// printStatus prints the table. The TTL column is the time left of the
// holder's own TTL; the last renewal is computed from that TTL, so it is
// shown only when the holder recorded it (a lease taken by an older solo
// shows "-" rather than a guess from the reader's TTL).
func printStatus(w io.Writer, rows []statusRow) {
	labels := make([]string, len(rows))
	for i, r := range rows {
		labels[i] = r.Election
	}
	printRows(w, "ELECTION", labels, rows)
}

// printRows prints rows under a first column named first, labels[i] for
// rows[i] (the election, or in spread mode the job).
func printRows(w io.Writer, first string, labels []string, rows []statusRow) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, first+"\tHOLDER\tTERM\tPROTOCOL\tTTL LEFT\tLEADING SINCE\tLAST RENEWAL\tVALUE\tCANDIDATES")
	now := time.Now()
	for i, r := range rows {
		cands := "-"
		if len(r.Candidates) > 0 {
			cands = strings.Join(r.Candidates, ",")
		}
		h := r.Holder
		if h == nil {
			fmt.Fprintf(tw, "%s\t(none)\t-\t-\t-\t-\t-\t-\t%s\n", labels[i], cands)
			continue
		}
		left := h.TTLLeft.Round(time.Millisecond).String()
		if h.LeaseTTL > 0 {
			left += " of " + h.LeaseTTL.String()
		}
		last := "-"
		if !h.LastRenew.IsZero() {
			last = fmt.Sprintf("%s ago", max(now.Sub(h.LastRenew), 0).Round(time.Millisecond))
		}
		value := "-"
		if h.Value != "" {
			value = strconv.Quote(h.Value)
		}
		proto := "1 (unrecorded)" // a holder before v0.1.0
		if h.Protocol > 0 {
			proto = strconv.Itoa(h.Protocol)
			if h.MinPeerProtocol != h.Protocol {
				proto += fmt.Sprintf(" (with %d+)", h.MinPeerProtocol)
			}
		}
		since := h.Since
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s (%s ago)\t%s\t%s\t%s\n", labels[i], h.ID, h.Term, proto, left,
			since.Local().Format(time.DateTime), now.Sub(since).Round(time.Second), last, value, cands)
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
