package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/solo-run/solo/cmd/solo/internal/config"
)

// cmdDoc is the help of one subcommand. Its flags are not written here:
// help asks the command itself for them (flagDefaults), so the help lists
// every flag the command registers, with its real default.
type cmdDoc struct {
	name, summary string
	usage         []string
	description   string
	exits         []int
	examples      []string
	// config says whether the command reads the configuration (file,
	// SOLO_* variables, the common flags).
	config bool
}

// commands are solo's subcommands, in the order the help lists them.
var commands = []cmdDoc{
	{
		name:    "run",
		summary: "run a program, or the configured jobs, only while this instance leads",
		usage: []string{
			"solo run [FLAGS] -- PROGRAM [ARGS...]",
			"solo run [FLAGS]                      (the jobs of the configuration)",
		},
		description: `Every instance campaigns for the election's Redis lease; the holder runs
PROGRAM (or the configuration's jobs: pull jobs restarted while leading,
cron jobs fired on the leader only) under a keeper process that stops the
whole program tree (SIGTERM, then SIGKILL) before the lease can pass to
another instance, even when solo itself dies. The program gets SOLO_TERM
(the fencing term), SOLO_ELECTION, SOLO_ID and SOLO_JOB, and none of
solo's own SOLO_* variables unless --pass-env names them. With more than
one configured job, each line of a job's output is prefixed "[NAME] ".
INT, TERM, HUP and QUIT stop gracefully (the tree first, then the lease
is released); USR1, USR2 and WINCH are forwarded to the program. An
unreachable Redis is not fatal, at start or later: solo says so once and
keeps campaigning; nothing runs until Redis answers.`,
		exits:  []int{exitOK, exitError, exitUsage, exitGaveUp, exitNotExecutable, exitNotFound},
		config: true,
		examples: []string{
			"solo run --redis redis://127.0.0.1:6379/0 --name orders-sync -- ./consume-orders",
			"solo run --once --name nightly -- ./report     # from cron on every host: runs on one",
			"solo run -c /etc/solo/config.yaml              # the jobs listed in the file",
		},
	},
	{
		name:    "status",
		summary: "show who leads each election",
		usage:   []string{"solo status [FLAGS] [--json | --watch] [NAME...]"},
		description: `Prints the holder, term, TTL and last renewal of each named election (or
of election.name), as a table or as JSON; --watch prints one line per
change (elected, released, resigned, expired, and Redis unreachable or
reachable again) until interrupted, each stamped with when it happened as
far as Redis tells: (term start), (lease expiry), or (seen) when only
observed. In election.mode spread, no NAME means the group: its members
and every job's election (GROUP.JOB); a NAME may be a job or its election.`,
		exits:  []int{exitOK, exitError, exitUsage, exitNoLeader},
		config: true,
		examples: []string{
			"solo status --redis redis://127.0.0.1:6379/0 orders-sync",
			"solo status --json orders-sync billing",
			"solo status --watch                           # election.name, or a spread group's jobs",
		},
	},
	{
		name:    "resign",
		summary: "ask the leader to step down and wait until another instance leads",
		usage:   []string{"solo resign [FLAGS] [--wait 30s] [NAME]"},
		description: `The leader drains its jobs, releases the lease and sits out one election;
resign waits until another instance leads and prints it (e.g. before a
deploy of the leader's host).`,
		exits:    []int{exitOK, exitError, exitUsage, exitNoLeader, exitSameLeader},
		config:   true,
		examples: []string{"solo resign --redis redis://127.0.0.1:6379/0 --wait 30s orders-sync"},
	},
	{
		name:    "forget",
		summary: "delete an election's keys (term, checkpoints, failed-term count) while nobody leads",
		usage:   []string{"solo forget [FLAGS] NAME"},
		description: `Deletes every key PREFIX:{NAME}:* in one Redis script that first checks
that the lease is absent: it refuses while an instance holds the lease.
The term and the checkpoints never expire on their own (they must outlive
every instance); forget an election that is gone for good, or clear the
count of failed terms after a fix (worker.max_failed_terms). Cron jobs
then start afresh: missed ticks are not caught up.`,
		exits:    []int{exitOK, exitError, exitUsage, exitLeading},
		config:   true,
		examples: []string{"solo forget --redis redis://127.0.0.1:6379/0 orders-sync"},
	},
	{
		name:    "demo",
		summary: "a guided failover on an embedded Redis (about 6 seconds)",
		usage:   []string{"solo demo [--redis URL] [--embedded auto|redis-server|miniredis] [--verbose]"},
		description: `Three candidates share a job and a SQLite fence table; the demo crashes
the leader mid-write, shows the stale write refused by the fence, and
resigns the new leader, printing a timeline. (Not in builds with
-tags solo_nodemo.)`,
		exits:    []int{exitOK, exitError, exitUsage},
		examples: []string{"go run ./cmd/solo demo"},
	},
	{
		name:        "version",
		summary:     "print solo's version",
		usage:       []string{"solo version"},
		description: `Prints "solo VERSION (protocol P, …)", then "commit: REVISION" and "go: GOVERSION": the module version of this build (v1.2.3 for go install …@v1.2.3), else the -ldflags one (docs/release.md), else "(devel)".`,
		exits:       []int{exitOK},
		examples:    []string{"solo version"},
	},
}

// exitCodes documents every exit code solo uses.
var exitCodes = []struct {
	code int
	text string
}{
	{exitOK, "success"},
	{exitError, "runtime error: Redis unreachable after the retries, --try ran out, a term lost under --once"},
	{exitUsage, "usage or configuration error (one line naming the key and the value)"},
	{exitNoLeader, "no leader (status, resign)"},
	{exitSameLeader, "only the instance that resigned leads again (resign)"},
	{exitGaveUp, "stopped after worker.max_failed_terms failed terms in a row (run --exit-on-give-up)"},
	{exitLeading, "an instance holds the lease: nothing deleted (forget)"},
	{exitNotExecutable, "PROGRAM is not executable (run)"},
	{exitNotFound, "PROGRAM not found (run)"},
}

const helpConfig = `configuration:
  -c FILE, else $SOLO_CONFIG, else ./config.yaml when it exists (none: the
  defaults). Every key can be set by a variable named after its path
  (SOLO_ELECTION_TTL for election.ttl); flags override both. An unknown key
  or SOLO_* variable is an error. config.yaml in the repository documents
  every key, its unit and default. TLS: a rediss:// redis.url, with
  redis.tls_ca_file, tls_cert_file, tls_key_file and tls_server_name (or
  the url options of the same names).
`

const helpProgramEnv = `  given to the program (run): SOLO_TERM (fencing term), SOLO_ELECTION,
  SOLO_ID (this instance), SOLO_JOB (the job's name), SOLO_FENCE_TABLE
  (with --fence-dsn)
`

// helpEnv lists the environment variables solo reads.
func helpEnv() string {
	var b strings.Builder
	b.WriteString("environment:\n  SOLO_CONFIG (the configuration file); the configuration keys:\n")
	line := " "
	for _, v := range config.EnvVars() {
		if len(line)+len(v)+1 > 76 {
			b.WriteString(line + "\n")
			line = " "
		}
		line += " " + v
	}
	b.WriteString(line + "\n" + helpProgramEnv)
	return b.String()
}

// flagDefaults returns what the command's flag set prints for -h: each
// flag registered, its argument and default. It runs the command with -h
// and keeps what the flag package wrote, so the list cannot drift from
// the flags.
func flagDefaults(name string, env []string) string {
	var out, errb bytes.Buffer
	_ = dispatch(name, []string{"-h"}, &out, &errb, env)
	s := errb.String()
	if _, rest, ok := strings.Cut(s, "\n"); ok && strings.HasPrefix(s, "Usage of ") {
		s = rest
	}
	if !strings.Contains(s, "  -") {
		return ""
	}
	return doubleDash(s)
}

// doubleDash rewrites the flag package's "  -name" lines as "  --name",
// the spelling docs/cli.md and the examples use (the flag package takes
// both); one-letter flags keep one dash (-c).
func doubleDash(defaults string) string {
	lines := strings.Split(defaults, "\n")
	for i, l := range lines {
		if rest, ok := strings.CutPrefix(l, "  -"); ok && !strings.HasPrefix(rest, "-") {
			if name, _, _ := strings.Cut(rest, " "); len(name) > 1 {
				lines[i] = "  --" + rest
			}
		}
	}
	return strings.Join(lines, "\n")
}

// flagNames returns the names of the flags in a flagDefaults text.
func flagNames(defaults string) []string {
	var names []string
	for _, l := range strings.Split(defaults, "\n") {
		if rest, ok := strings.CutPrefix(l, "  -"); ok {
			rest = strings.TrimPrefix(rest, "-")
			n, _, _ := strings.Cut(rest, " ")
			n, _, _ = strings.Cut(n, "\t")
			names = append(names, n)
		}
	}
	return names
}

// commandHelp is `solo NAME --help`.
func commandHelp(d cmdDoc, env []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "solo %s: %s\n\nusage:\n", d.name, d.summary)
	for _, u := range d.usage {
		fmt.Fprintf(&b, "  %s\n", u)
	}
	fmt.Fprintf(&b, "\n%s\n", d.description)
	if f := flagDefaults(d.name, env); f != "" {
		fmt.Fprintf(&b, "\nflags:\n%s", f)
	}
	b.WriteString("\nexit codes:\n")
	for _, e := range exitCodes {
		if slices.Contains(d.exits, e.code) {
			fmt.Fprintf(&b, "  %3d  %s\n", e.code, e.text)
		}
	}
	if d.name == "run" {
		b.WriteString("  else the exit code of a program that ended and is not restarted (128+N for\n  signal N; --child-exit-code=false: 0); --once: 0 when another instance holds the lease\n")
	}
	if d.config {
		b.WriteString("\n" + helpConfig + "\n" + helpEnv())
	}
	b.WriteString("\nexamples:\n")
	for _, e := range d.examples {
		fmt.Fprintf(&b, "  %s\n", e)
	}
	return b.String()
}

// overview is `solo --help`.
func overview(env []string) string {
	var b strings.Builder
	b.WriteString(`solo makes a program, or a set of jobs, run on exactly one instance of a
multi-instance service, through a renewable, fenced Redis lease.

usage:
`)
	for _, d := range commands {
		for _, u := range d.usage {
			fmt.Fprintf(&b, "  %s\n", u)
		}
	}
	b.WriteString("\ncommands:\n")
	for _, d := range commands {
		fmt.Fprintf(&b, "  %-8s %s\n", d.name, d.summary)
	}
	var c common
	fs := flag.NewFlagSet("common", flag.ContinueOnError)
	c.register(fs, "", false)
	shared := helpDefaults(fs)
	fmt.Fprintf(&b, "\nFLAGS, the same on run, status, resign and forget:\n%s", shared)
	for _, d := range commands {
		var own []string
		for _, n := range flagNames(flagDefaults(d.name, env)) {
			if !slices.Contains(flagNames(shared), n) {
				own = append(own, "--"+n)
			}
		}
		if len(own) > 0 {
			fmt.Fprintf(&b, "  %s also: %s\n", d.name, strings.Join(own, " "))
		}
	}
	b.WriteString("\nexit codes:\n")
	for _, e := range exitCodes {
		fmt.Fprintf(&b, "  %3d  %s\n", e.code, e.text)
	}
	b.WriteString("  run passes on the exit code of a program that ended and is not restarted\n")
	b.WriteString("\n" + helpConfig + "\n" + helpEnv())
	b.WriteString("\nexamples:\n")
	for _, d := range commands {
		fmt.Fprintf(&b, "  %s\n", d.examples[0])
	}
	b.WriteString("\nRun `solo COMMAND --help` for a command's description, flags, exit codes and examples.\n")
	return b.String()
}

// wantsHelp reports whether args, before any "--", ask for help.
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// printHelp writes the help of command name (or the overview) to w; it
// returns false for an unknown command.
func printHelp(w io.Writer, name string, env []string) bool {
	if name == "" {
		fmt.Fprint(w, overview(env))
		return true
	}
	for _, d := range commands {
		if d.name == name {
			fmt.Fprint(w, commandHelp(d, env))
			return true
		}
	}
	return false
}
