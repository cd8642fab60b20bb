// Package docs_test keeps the documentation executable: the README's quick
// start is examples/basic verbatim, and config.yaml loads and documents
// every key the loader knows.
package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/solo-run/solo/worker"
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

func TestConfigYAML_LoadsAndDocumentsEveryKey(t *testing.T) {
	path := filepath.Join("..", "..", "config.yaml")
	cfg, err := worker.Load(path, nil)
	if err != nil {
		t.Fatalf("config.yaml does not load: %v", err)
	}
	if cfg.Election.Name == "" || cfg.Redis.URL == "" {
		t.Fatalf("config.yaml: %+v", cfg)
	}
	text := read(t, "config.yaml")
	lines := strings.Split(text, "\n")
	key := regexp.MustCompile(`^(\s*)([a-z_]+):`)
	var section string
	present := map[string]bool{}
	for i, l := range lines {
		m := key.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		if m[1] == "" {
			section = m[2]
			present[section] = true
			continue
		}
		present[section+"."+m[2]] = true
		if i == 0 || !strings.HasPrefix(strings.TrimSpace(lines[i-1]), "#") {
			t.Errorf("config.yaml:%d: key %s.%s has no comment above it", i+1, section, m[2])
		}
	}
	// Every key the loader knows (one environment variable each) is in the file.
	for _, env := range worker.EnvVars() {
		k := strings.ToLower(strings.TrimPrefix(env, worker.EnvPrefix))
		section, field, _ := strings.Cut(k, "_")
		if !present[section+"."+field] {
			t.Errorf("config.yaml lacks %s.%s (overridden by %s)", section, field, env)
		}
	}
	if !present["jobs"] {
		t.Error("config.yaml lacks jobs")
	}
}
