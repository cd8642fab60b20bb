package config

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestConfigYAML_LoadsAndDocumentsEveryKey keeps the sample configuration
// executable: it loads, and documents every key the loader knows.
func TestConfigYAML_LoadsAndDocumentsEveryKey(t *testing.T) {
	cfg, err := Load(filepath.Join("..", "..", "..", "..", "config.yaml"), nil)
	if err != nil {
		t.Fatalf("config.yaml does not load: %v", err)
	}
	if cfg.Election.Name == "" || cfg.Redis.URL == "" {
		t.Fatalf("config.yaml: %+v", cfg)
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
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
	for _, env := range EnvVars() {
		k := strings.ToLower(strings.TrimPrefix(env, EnvPrefix))
		section, field, _ := strings.Cut(k, "_")
		if !present[section+"."+field] {
			t.Errorf("config.yaml lacks %s.%s (overridden by %s)", section, field, env)
		}
	}
	if !present["jobs"] {
		t.Error("config.yaml lacks jobs")
	}
}
