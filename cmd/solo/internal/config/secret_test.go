package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// RedactDSN hides the password of every form of fence.dsn, and Validate's
// error for a DSN solo refuses shows none. Old code: a key=value DSN, a
// ?password= option and a URL net/url cannot parse were shown as given.
func TestRedactDSN_Forms(t *testing.T) {
	for _, tt := range []struct{ dsn, want string }{
		{"postgres://app:S3CRsecretRC3S@db/app", "postgres://app:xxxxx@db/app"},
		{"postgres://app:S3CR/q+Z==RC3S@db/app", "postgres://xxxxx@db/app"},
		{"postgresql://app@db/app?sslmode=disable&password=S3CRa b&cRC3S", "postgresql://app@db/app?sslmode=disable&password=xxxxx"},
		{"postgres://app:S3CRa#bRC3S@db/app?password=S3CRxRC3S", "postgres://xxxxx@db/app?password=xxxxx"},
		{"host=db user=app password='S3CRa b\\' cRC3S' dbname=app", "host=db user=app password=xxxxx dbname=app"},
		{"host=db password=S3CRsecretRC3S sslpassword=S3CRkRC3S", "host=db password=xxxxx sslpassword=xxxxx"},
		{"sqlite:/var/lib/app.db", "sqlite:/var/lib/app.db"},
	} {
		if got := RedactDSN(tt.dsn); got != tt.want {
			t.Errorf("RedactDSN(%q) = %q, want %q", tt.dsn, got, tt.want)
		}
		c := DefaultConfig()
		c.Fence.DSN = tt.dsn
		if err := c.validateFence(); err != nil && (strings.Contains(err.Error(), "S3CR") || strings.Contains(err.Error(), "RC3S")) {
			t.Errorf("validateFence(%q) leaks: %v", tt.dsn, err)
		}
	}
}

// redis.url_file and fence.dsn_file (SOLO_REDIS_URL_FILE,
// SOLO_FENCE_DSN_FILE) stand for redis.url and fence.dsn, read at start
// with the trailing newline trimmed; beside their key, missing or empty,
// they are refused naming the file key, never showing the contents.
func TestLoad_SecretFiles(t *testing.T) {
	dir := t.TempDir()
	urlFile, dsnFile := filepath.Join(dir, "url"), filepath.Join(dir, "dsn")
	const url, dsn = "redis://solo:S3CR/q+Z==RC3S@127.0.0.1:6379/0", "postgres://app:S3CRxRC3S@db/app"
	if err := os.WriteFile(urlFile, []byte(url+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dsnFile, []byte(dsn+"\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"SOLO_ELECTION_NAME=e", "SOLO_REDIS_URL_FILE=" + urlFile, "SOLO_FENCE_DSN_FILE=" + dsnFile}
	c, err := Load("", env)
	if err == nil || !strings.Contains(err.Error(), "percent-encode") || strings.Contains(err.Error(), "S3CR") {
		t.Fatalf("a raw '/' in the file's password: %v, want the percent-encoding refusal without it", err)
	}
	enc := "redis://solo:S3CR%2Fq+Z==RC3S@127.0.0.1:6379/0"
	if err := os.WriteFile(urlFile, []byte(enc+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err = Load("", env); err != nil || c.Redis.URL != enc || c.Fence.DSN != dsn || c.Redis.URLFile != "" {
		t.Fatalf("Load = %q %q %q, %v", c.Redis.URL, c.Fence.DSN, c.Redis.URLFile, err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		env  []string
		want string
	}{
		{[]string{"SOLO_REDIS_URL=" + enc, "SOLO_REDIS_URL_FILE=" + urlFile}, "redis.url_file \"" + urlFile + "\": give redis.url or redis.url_file, not both"},
		{[]string{"SOLO_REDIS_URL_FILE=" + filepath.Join(dir, "none")}, "redis.url_file \"" + filepath.Join(dir, "none") + "\": open "},
		{[]string{"SOLO_FENCE_DSN_FILE=" + empty}, "fence.dsn_file \"" + empty + "\": the file is empty: it must hold the fence.dsn"},
	} {
		_, err := Load("", append([]string{"SOLO_ELECTION_NAME=e"}, tt.env...))
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "S3CR") {
			t.Errorf("Load(%q) = %v, want %q", tt.env, err, tt.want)
		}
	}
}
