package main

import (
	"os"
	"path/filepath"
	"testing"
)

// A rewrite of docs/bench.md keeps the sections other measurements wrote
// below keptMarker, and a file without the marker is simply replaced.
func TestKeepTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bench.md")
	if got := keepTail(path, "new\n"); got != "new\n" {
		t.Fatalf("no file: %q", got)
	}
	if err := os.WriteFile(path, []byte("old\n\n"+keptMarker+"\n\n## 7. Kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := keepTail(path, "new\n"), "new\n\n"+keptMarker+"\n\n## 7. Kept\n"; got != want {
		t.Fatalf("keepTail = %q, want %q", got, want)
	}
	if err := os.WriteFile(path, []byte("old only\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := keepTail(path, "new\n"); got != "new\n" {
		t.Fatalf("without the marker = %q, want the report alone", got)
	}
}

// -idle rewrites its own section only: in place when there is one, else
// appended below keptMarker.
func TestSpliceIdle(t *testing.T) {
	sec := func(s string) string { return idleBegin + "\n" + s + "\n" + idleEnd + "\n" }
	report := "# report\n\n" + keptMarker + "\n\n## 7. Kept\n"
	once := spliceIdle(report, sec("one"))
	if want := "# report\n\n" + keptMarker + "\n\n## 7. Kept\n\n" + sec("one"); once != want {
		t.Fatalf("appended = %q, want %q", once, want)
	}
	twice := spliceIdle(once+"\n## 8. After\n", sec("two"))
	if want := "# report\n\n" + keptMarker + "\n\n## 7. Kept\n\n" + sec("two") + "\n## 8. After\n"; twice != want {
		t.Fatalf("replaced = %q, want %q", twice, want)
	}
	if got := spliceIdle("# report\n", sec("x")); got != "# report\n\n"+keptMarker+"\n\n"+sec("x") {
		t.Fatalf("without the marker = %q", got)
	}
}
