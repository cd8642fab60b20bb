// Package docs_test keeps the documentation executable: the README's quick
// start is examples/basic verbatim. (cmd/solo checks config.yaml.)
package docs_test

import (
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

func TestREADME_QuickStartIsTheBasicExampleVerbatim(t *testing.T) {
	readme, basic := read(t, "README.md"), read(t, "examples/basic/main.go")
	if !strings.Contains(readme, "```go\n"+basic+"```") {
		t.Fatal("README.md does not contain examples/basic/main.go verbatim in a ```go block")
	}
}

// The worker snippet is a program that compiles (go vet ./... builds it).
// Mutation: deleting its import block from README.md fails this with the
// message below.
func TestREADME_WorkerSnippetIsTheQuickstartVerbatim(t *testing.T) {
	readme, src := read(t, "README.md"), read(t, "internal/docs/workerquickstart/main.go")
	if !strings.Contains(readme, "```go\n"+src+"```") {
		t.Fatal("README.md does not contain internal/docs/workerquickstart/main.go verbatim in a ```go block")
	}
}
