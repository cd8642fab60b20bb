package main

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// helpOf runs solo with args and returns its exit code and stdout.
func helpOf(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(args, &out, &errb, []string{"SOLO_CONFIG=/dev/null"}); code != 0 || errb.Len() > 0 {
		t.Fatalf("solo %q = %d, stderr %q", args, code, errb.String())
	}
	return out.String()
}

// Every flag a command registers is in its --help, in `solo --help` and
// in docs/cli.md's command reference. Mutation: a flag added to
// runCommand and not to docs/cli.md fails with `docs/cli.md's command
// reference lacks run's flag --exit-on-give-up` (checked by removing it).
func TestHelp_ListsEveryFlag(t *testing.T) {
	overview := helpOf(t, "--help")
	cli, err := os.ReadFile(filepath.Join("..", "..", "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	ref := string(cli)
	start := strings.Index(ref, "### Command reference")
	if start < 0 {
		t.Fatal("docs/cli.md has no \"### Command reference\"")
	}
	ref = ref[start:]
	ref = ref[:strings.Index(ref, "\n## ")]
	for _, d := range commands {
		help := helpOf(t, d.name, "--help")
		if help != helpOf(t, "help", d.name) {
			t.Errorf("solo %s --help and solo help %s differ", d.name, d.name)
		}
		if !strings.Contains(overview, "  "+d.name+" ") || !strings.Contains(ref, "`solo "+d.name) {
			t.Errorf("command %s missing from solo --help or docs/cli.md", d.name)
		}
		for _, want := range []string{"usage:", "exit codes:", "examples:"} {
			if !strings.Contains(help, want) {
				t.Errorf("solo %s --help lacks %q", d.name, want)
			}
		}
		names := flagNames(flagDefaults(d.name, nil))
		if d.name == "run" && len(names) < 15 {
			t.Fatalf("run registers %d flags? %q", len(names), names)
		}
		for _, n := range names {
			dashed := "--" + n
			if len(n) == 1 {
				dashed = "-" + n
			}
			// Spelled as docs/cli.md spells it. Old code:
			// "solo run --help lacks its flag --child-exit-code" (it printed
			// "  -child-exit-code").
			if !strings.Contains(help, "  "+dashed+"\n") && !strings.Contains(help, "  "+dashed+" ") {
				t.Errorf("solo %s --help lacks its flag %s", d.name, dashed)
			}
			if !regexp.MustCompile(`\s` + regexp.QuoteMeta(dashed) + `\s`).MatchString(overview) {
				t.Errorf("solo --help lacks %s's flag %s", d.name, dashed)
			}
			if !strings.Contains(ref, "`"+dashed) {
				t.Errorf("docs/cli.md's command reference lacks %s's flag %s", d.name, dashed)
			}
		}
		if d.config && !strings.Contains(help, "SOLO_ELECTION_TTL") || d.name == "run" && !strings.Contains(help, "SOLO_JOB") {
			t.Errorf("solo %s --help lacks the environment", d.name)
		}
	}
	if regexp.MustCompile(`(?m)^  -[a-z][a-z]`).MatchString(overview + helpOf(t, "run", "--help")) {
		t.Error("solo --help prints a long flag with one dash")
	}
	// After "--" the arguments are the program's.
	if wantsHelp([]string{"--", "prog", "--help"}) || !wantsHelp([]string{"NAME", "-h"}) {
		t.Error("wantsHelp looks past --, or misses -h after a name")
	}
}

// The exit codes documented are exactly the exit* constants of the
// command, and docs/cli.md lists each. Mutation: a new constant exitFoo = 7
// fails with "exit codes in the code [0 1 2 3 4 5 6 7 126 127], in the
// help [0 1 2 3 4 5 6 126 127]".
func TestHelp_ExitCodesAreTheConstants(t *testing.T) {
	fset := token.NewFileSet()
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var inCode []int
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok || len(vs.Values) != len(vs.Names) {
				return true
			}
			for i, name := range vs.Names {
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if strings.HasPrefix(name.Name, "exit") && ok && lit.Kind == token.INT {
					v, _ := strconv.Atoi(lit.Value)
					inCode = append(inCode, v)
				}
			}
			return true
		})
	}
	var inHelp []int
	for _, e := range exitCodes {
		inHelp = append(inHelp, e.code)
	}
	slices.Sort(inCode)
	inCode = slices.Compact(inCode)
	if !slices.Equal(inCode, inHelp) {
		t.Fatalf("exit codes in the code %v, in the help %v", inCode, inHelp)
	}
	cli, _ := os.ReadFile(filepath.Join("..", "..", "docs", "cli.md"))
	overview := helpOf(t, "--help")
	for _, c := range inHelp {
		s := strconv.Itoa(c)
		if !strings.Contains(string(cli), "| "+s+" |") && !strings.Contains(string(cli), " "+s+", ") && !strings.Contains(string(cli), ", "+s+" |") {
			t.Errorf("docs/cli.md lacks exit code %d", c)
		}
		if !strings.Contains(overview, "  "+s+"  ") {
			t.Errorf("solo --help lacks exit code %d", c)
		}
	}
}

// "did you mean" for a command, a configuration key and
// a flag, as for a SOLO_* variable. Old code: `solo: unknown command
// "stauts"` and `config.yaml:3: unknown key election.tll`, no suggestion.
func TestDidYouMean(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte("election:\n  name: a\n  tll: 10s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"stauts"}, `solo: unknown command "stauts" (did you mean status?)` + "\n"},
		{[]string{"help", "resing"}, `solo: unknown command "resing" (did you mean resign?)` + "\n"},
		{[]string{"frobnicate"}, `solo: unknown command "frobnicate"` + "\n"},
		{[]string{"status", "-c", cfg}, "solo: " + cfg + ":3: unknown key election.tll (did you mean election.ttl?)\n"},
		{[]string{"status", "--jsno"}, "solo: unknown flag --jsno (did you mean --json?) (see solo status --help)\n"},
	} {
		var out, errb bytes.Buffer
		code := run(tt.args, &out, &errb, []string{"SOLO_CONFIG=/dev/null"})
		got, _, _ := strings.Cut(errb.String(), "usage:")
		if code != exitUsage || got != tt.want {
			t.Errorf("solo %q = %d, stderr %q\nwant exit 2, %q", tt.args, code, errb.String(), tt.want)
		}
	}
}

// Each command's help lists the flags that mean something to it: the
// flags only running uses are in run's help alone (status, resign and
// forget still accept them, as TestStatusAndResignTakeTheNameFlag checks).
// Old code: "solo status --help lists run's flag --ttl" and each other.
func TestHelp_RunOnlyFlagsAreRuns(t *testing.T) {
	runOnly := []string{"--ttl", "--value", "--fence-dsn", "--fence-table", "--grace-period", "--dev", "--log-format", "--log-time"}
	runHelp := helpOf(t, "run", "--help")
	for _, f := range runOnly {
		if !strings.Contains(runHelp, "  "+f+" ") && !strings.Contains(runHelp, "  "+f+"\n") {
			t.Errorf("solo run --help lacks %s", f)
		}
	}
	for _, cmd := range []string{"status", "resign", "forget"} {
		help := helpOf(t, cmd, "--help")
		for _, f := range append(runOnly, "--restart", "--once") {
			if strings.Contains(help, "  "+f+" ") || strings.Contains(help, "  "+f+"\n") {
				t.Errorf("solo %s --help lists run's flag %s", cmd, f)
			}
		}
		for _, f := range []string{"-c", "--redis", "--name"} {
			if !strings.Contains(help, "  "+f+" ") {
				t.Errorf("solo %s --help lacks %s", cmd, f)
			}
		}
	}
}
