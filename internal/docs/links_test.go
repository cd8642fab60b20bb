package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// mdLink matches a Markdown link's target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocs_RelativeLinksResolve: every relative link of README.md,
// docs/*.md, docs/decisions/*.md and examples/*/README.md names a file or
// directory that exists, and its #anchor, if any, a heading of that file
// (as GitHub makes anchors of headings). Mutation: renaming design.md's
// "## The fence" fails this with "docs/cli.md: design.md#the-fence: no
// such heading".
func TestDocs_RelativeLinksResolve(t *testing.T) {
	root := filepath.Join("..", "..")
	var docs []string
	for _, pattern := range []string{"README.md", "docs/*.md", "docs/decisions/*.md", "examples/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, m...)
	}
	links := 0
	for _, doc := range docs {
		name, _ := filepath.Rel(root, doc)
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(withoutCode(string(b)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			path, anchor, _ := strings.Cut(target, "#")
			file := doc
			if path != "" {
				file = filepath.Join(filepath.Dir(doc), path)
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s: %s: no such file", name, target)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(file, ".md") {
				continue
			}
			if !anchors(t, file)[anchor] {
				t.Errorf("%s: %s: no such heading", name, target)
			}
		}
	}
	if links < 50 {
		t.Fatalf("%d relative links found, want at least 50: the extraction broke", links)
	}
}

// withoutCode drops fenced code blocks and inline code spans, whose
// brackets are not links.
func withoutCode(s string) string {
	span := regexp.MustCompile("`[^`]*`")
	var b strings.Builder
	fenced := false
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			b.WriteString(span.ReplaceAllString(l, "") + "\n")
		}
	}
	return b.String()
}

// anchors returns the anchors GitHub makes of a Markdown file's headings:
// lower case, punctuation dropped, spaces to hyphens, "-N" for repeats.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
		}
		if fenced || !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(l, "#"))
		var a strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				a.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127 && r != '—' && r != '→' && r != '↔' && r != '×':
				a.WriteRune(r)
			}
		}
		s := a.String()
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}
