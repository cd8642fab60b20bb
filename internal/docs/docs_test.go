// Package docs_test keeps the documentation executable: every ```go block
// of README.md, docs/*.md and the examples' READMEs is a program or a
// fragment that a test runs (TestDocs_EveryGoSnippetRuns), or says why it
// cannot run alone. (cmd/solo checks config.yaml.)
package docs_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestLibrary_QuickStartIsTheBasicExampleVerbatim(t *testing.T) {
	doc, basic := read(t, "docs/library.md"), read(t, "examples/basic/main.go")
	if !strings.Contains(doc, "```go\n"+basic+"```") {
		t.Fatal("docs/library.md does not contain examples/basic/main.go verbatim in a ```go block")
	}
}

// The worker snippet is a program that compiles (go vet ./... builds it).
// Mutation: deleting its import block from docs/library.md fails this with
// the message below.
func TestLibrary_WorkerSnippetIsTheQuickstartVerbatim(t *testing.T) {
	doc, src := read(t, "docs/library.md"), read(t, "internal/docs/workerquickstart/main.go")
	if !strings.Contains(doc, "```go\n"+src+"```") {
		t.Fatal("docs/library.md does not contain internal/docs/workerquickstart/main.go verbatim in a ```go block")
	}
}

// runFiles are the whole programs that docs show verbatim, each with the
// test that runs it.
var runFiles = map[string]string{
	"examples/basic/main.go":                 "examples/basic: TestBasic",
	"internal/docs/workerquickstart/main.go": "internal/docs: TestSnippet_WorkerQuickstart",
}

// fragmentMark starts a ```go block that does not run on its own; the
// rest of its first line says why. Such a block must still parse.
const fragmentMark = "// Fragment, does not run alone: "

// TestDocs_EveryGoSnippetRuns: every ```go block of README.md, docs/*.md
// and examples/*/README.md is one of
//   - a whole program of runFiles, verbatim (its test runs it);
//   - a README:NAME fragment of this package, verbatim (its dedented
//     lines), which snippets_run_test.go runs;
//   - lines of an example's Go file, verbatim (the example's test runs
//     them);
//   - marked with fragmentMark, saying why it cannot run, and parsing as
//     Go statements or declarations.
//
// Mutation: README's lock snippet as it was (guard.Do with h.Term(),
// h.Holder() and "{ … }") fails this with "README.md: ```go block at line
// 695: not run by any test and not marked (begin it with "// Fragment,
// does not run alone: " and the reason)".
func TestDocs_EveryGoSnippetRuns(t *testing.T) {
	fragments := readFragments(t)
	var docs []string
	for _, pattern := range []string{"README.md", "docs/*.md", "examples/*/README.md"} {
		m, err := filepath.Glob(filepath.Join("..", "..", pattern))
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, m...)
	}
	exampleFiles, err := filepath.Glob(filepath.Join("..", "..", "examples", "*", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := 0
	for _, doc := range docs {
		name, _ := filepath.Rel(filepath.Join("..", ".."), doc)
		for _, b := range goBlocks(t, doc) {
			blocks++
			if why := runBy(t, b.text, fragments, exampleFiles); why != "" {
				t.Logf("%s:%d: %s", name, b.line, why)
				continue
			}
			first, _, _ := strings.Cut(b.text, "\n")
			if reason, ok := strings.CutPrefix(first, fragmentMark); ok && strings.TrimSpace(reason) != "" {
				if err := parses(b.text); err != nil {
					t.Errorf("%s: ```go block at line %d is marked as a fragment but does not parse: %v", name, b.line, err)
				}
				continue
			}
			t.Errorf("%s: ```go block at line %d: not run by any test and not marked (begin it with %q and the reason):\n%s", name, b.line, fragmentMark, b.text)
		}
	}
	if blocks < 7 {
		t.Fatalf("%d ```go blocks found, want at least 7: the extraction broke", blocks)
	}
}

// block is one ```go block: its text (ending in a newline) and the line
// of its opening fence.
type block struct {
	text string
	line int
}

func goBlocks(t *testing.T, path string) []block {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []block
	var cur *strings.Builder
	start := 0
	for i, l := range strings.Split(string(b), "\n") {
		switch {
		case cur == nil && l == "```go":
			cur, start = &strings.Builder{}, i+1
		case cur != nil && l == "```":
			out = append(out, block{text: cur.String(), line: start})
			cur = nil
		case cur != nil:
			cur.WriteString(l + "\n")
		}
	}
	if cur != nil {
		t.Fatalf("%s: ```go block at line %d never closed", path, start)
	}
	return out
}

// readFragments returns this package's README:NAME fragments, dedented.
func readFragments(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var name string
		var lines []string
		for _, l := range strings.Split(string(b), "\n") {
			mark := strings.TrimSpace(l)
			switch {
			case name == "" && strings.HasPrefix(mark, "// README:") && mark != "// README:end":
				name, lines = strings.TrimPrefix(mark, "// README:"), nil
			case name != "" && mark == "// README:end":
				out[name] = dedent(lines)
				name = ""
			case name != "":
				lines = append(lines, l)
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no README fragments found")
	}
	return out
}

// dedent removes the tabs every non-empty line starts with, and trailing
// empty lines; the result ends in a newline.
func dedent(lines []string) string {
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	indent := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, "\t"))
		if indent < 0 || n < indent {
			indent = n
		}
	}
	var b strings.Builder
	for _, l := range lines {
		if len(l) >= indent && indent > 0 {
			l = l[indent:]
		}
		b.WriteString(l + "\n")
	}
	return b.String()
}

// runBy says which test runs text, or "" for none.
func runBy(t *testing.T, text string, fragments map[string]string, exampleFiles []string) string {
	t.Helper()
	for path, test := range runFiles {
		if text == read(t, path) {
			return path + ", run by " + test
		}
	}
	for name, f := range fragments {
		if text == f {
			return "fragment README:" + name + ", run by internal/docs"
		}
	}
	want := dedent(strings.Split(strings.TrimSuffix(text, "\n"), "\n"))
	for _, f := range exampleFiles {
		lines := strings.Split(read(t, strings.TrimPrefix(f, filepath.Join("..", "..")+"/")), "\n")
		n := strings.Count(want, "\n")
		for i := 0; i+n <= len(lines); i++ {
			if dedent(lines[i:i+n]) == want {
				rel, _ := filepath.Rel(filepath.Join("..", ".."), f)
				return "verbatim from " + rel + ", run by its example's test"
			}
		}
	}
	return ""
}

// parses reports whether text parses as Go declarations, or as
// statements in a function body.
func parses(text string) error {
	fset := token.NewFileSet()
	if _, err := parser.ParseFile(fset, "", "package p\n"+text, 0); err == nil {
		return nil
	}
	_, err := parser.ParseFile(fset, "", "package p\nfunc _() {\n"+text+"\n}\n", 0)
	return err
}

// TestDocs_FenceExampleRunsInFencetest: leader/fence's Example imports no
// driver, so it only prints ("Prints:"); internal/fencetest runs the same
// body against SQLite and checks its output.
func TestDocs_FenceExampleRunsInFencetest(t *testing.T) {
	body := func(path, fn string) string {
		s := read(t, path)
		i := strings.Index(s, fn)
		if i < 0 {
			t.Fatalf("%s: no %s", path, fn)
		}
		return strings.Replace(s[i+len(fn):], "// Output:", "// Prints:", 1)
	}
	if body("leader/fence/example_test.go", "func Example() {") != body("internal/fencetest/example_test.go", "func Example_sqlite() {") {
		t.Fatal("internal/fencetest's Example_sqlite is not leader/fence's Example verbatim")
	}
}
