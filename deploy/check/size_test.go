package check

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// readmeSizes matches README's build line: "production build: X MiB
// without the demo's embedded Redis (Y MiB with".
var readmeSizes = regexp.MustCompile(`production build: ([0-9.]+) MiB without the demo's embedded Redis \(([0-9.]+) MiB with`)

// TestBinarySizes builds cmd/solo with and without the demo (-tags
// solo_nodemo) and checks that README's sizes are within 10% of them: a
// dependency that grows the binary shows here. Sizes depend on the Go
// version and the platform; README names the ones it was measured with.
func TestBinarySizes(t *testing.T) {
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := readmeSizes.FindSubmatch(readme)
	if m == nil {
		t.Fatalf("README.md has no line matching %s", readmeSizes)
	}
	nodemo := filepath.Join(t.TempDir(), "solo-nodemo")
	cmd := exec.Command("go", "build", "-tags", "solo_nodemo", "-o", nodemo, "./cmd/solo")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags solo_nodemo: %v\n%s", err, out)
	}
	for _, b := range []struct {
		name, readme, path string
	}{{"without the demo", string(m[1]), nodemo}, {"with the demo", string(m[2]), buildSolo(t)}} {
		fi, err := os.Stat(b.path)
		if err != nil {
			t.Fatal(err)
		}
		got := float64(fi.Size()) / (1 << 20)
		want, _ := strconv.ParseFloat(b.readme, 64)
		t.Logf("%s: %.1f MiB (README: %s MiB)", b.name, got, b.readme)
		if got < want*0.9 || got > want*1.1 {
			t.Errorf("solo %s is %.1f MiB; README says %s MiB: update README.md", b.name, got, b.readme)
		}
	}
}
