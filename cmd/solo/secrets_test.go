package main

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/solo-run/solo/internal/redistest"
)

// secretMarked is a password of every awkward shape (openssl rand
// -base64's '/', '+', '='; '?', '#', '@', '%', ':', '&', a space,
// unicode) between markers a leak shows.
const secretMarked = "S3CR/q+Z=?#@:%&x y=äRC3S"

func leaksSecret(out string) bool {
	return strings.Contains(out, "S3CR") || strings.Contains(out, "RC3S") || strings.Contains(out, url.PathEscape(secretMarked)[4:12])
}

// The real binary never shows a Redis password or a fence DSN's, whatever
// its shape and wherever the URL goes: solo run's start-up log (at debug)
// and its errors (a URL it refuses, a wrong password, Redis or the fence
// database unreachable), solo status's output and errors. Old code: a
// password with '/', '?' or '#', a ?password= or sentinel_password= with
// '&', a key=value DSN, were printed in clear.
func TestSecrets_NeverShownByTheBinary(t *testing.T) {
	srv := redistest.Start(t)
	if err := srv.Client(t).ConfigSet(context.Background(), "requirepass", secretMarked).Err(); err != nil {
		t.Fatal(err)
	}
	enc := url.PathEscape(secretMarked)
	wrong := url.PathEscape(strings.Replace(secretMarked, "q", "Q", 1))
	addr := srv.Addr()
	urlFile := filepath.Join(t.TempDir(), "redis-url")
	if err := os.WriteFile(urlFile, []byte("redis://:"+enc+"@"+addr+"/0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		env  []string // over testEnv's
		args []string
		code int
	}{
		{"run, good password (encoded)", []string{"SOLO_REDIS_URL=redis://:" + enc + "@" + addr + "/0"}, []string{"run", "--once", "--", "true"}, 0},
		{"run, url from a file", []string{"SOLO_REDIS_URL=", "SOLO_REDIS_URL_FILE=" + urlFile}, []string{"run", "--once", "--", "true"}, 0},
		{"status, good password", []string{"SOLO_REDIS_URL=redis://default:" + enc + "@" + addr + "/0"}, []string{"status"}, 3},
		{"status --json, good password", []string{"SOLO_REDIS_URL=redis://:" + enc + "@" + addr + "/0"}, []string{"status", "--json"}, 3},
		{"run, raw password", []string{"SOLO_REDIS_URL=redis://:" + secretMarked + "@" + addr + "/0"}, []string{"run", "--once", "--", "true"}, exitUsage},
		{"status, raw password", []string{"SOLO_REDIS_URL=rediss://:" + secretMarked + "@" + addr + "/0"}, []string{"status"}, exitUsage},
		{"run, wrong password", []string{"SOLO_REDIS_URL=redis://:" + wrong + "@" + addr + "/0"}, []string{"run", "--once", "--", "true"}, exitUsage},
		{"status, wrong password", []string{"SOLO_REDIS_URL=redis://u:" + wrong + "@" + addr + "/0"}, []string{"status"}, exitUsage},
		{"run, password option", []string{"SOLO_REDIS_URL=redis://user:pw@" + addr + "/0?password=" + secretMarked}, []string{"run", "--once", "--", "true"}, exitUsage},
		{"run, sentinels", []string{"SOLO_REDIS_URL=redis+sentinel://:" + enc + "@127.0.0.1:1,127.0.0.1:2/mymaster/0?sentinel_password=S3CRx&yRC3S"}, []string{"run", "--once", "--", "true"}, exitUsage},
		{"run, --redis raw", nil, []string{"run", "--redis", "redis://:" + secretMarked + "@" + addr, "--once", "--", "true"}, exitUsage},
		{"run, unreachable", []string{"SOLO_REDIS_URL=redis://:" + enc + "@127.0.0.1:1/0"}, []string{"run", "--", "true"}, -1},
		{"status --watch", []string{"SOLO_REDIS_URL=redis://default:" + enc + "@" + addr + "/0"}, []string{"status", "--watch"}, -1},
		{"status, unreachable", []string{"SOLO_REDIS_URL=redis://:" + enc + "@127.0.0.1:1/0"}, []string{"status"}, 1},
		{"run, fence key=value", []string{"SOLO_REDIS_URL=redis://:" + enc + "@" + addr + "/0", "SOLO_FENCE_DSN=host=127.0.0.1 password='" + strings.ReplaceAll(secretMarked, "'", "") + "'"}, []string{"run", "--once", "--", "true"}, exitUsage},
		{"run, fence raw password", []string{"SOLO_REDIS_URL=redis://:" + enc + "@" + addr + "/0", "SOLO_FENCE_DSN=postgres://app:" + secretMarked + "@127.0.0.1:1/app"}, []string{"run", "--once", "--", "true"}, exitUsage},
		{"run, fence raw password option", []string{"SOLO_REDIS_URL=redis://:" + enc + "@" + addr + "/0", "SOLO_FENCE_DSN=postgres://app@127.0.0.1:1/app?password=" + secretMarked}, []string{"run", "--once", "--", "true"}, exitUsage},
		{"run, fence unreachable", []string{"SOLO_REDIS_URL=redis://:" + enc + "@" + addr + "/0", "SOLO_FENCE_DSN=postgres://app:" + enc + "@127.0.0.1:1/app"}, []string{"run", "--once", "--", "true"}, 1},
		{"run, fence password option unreachable", []string{"SOLO_REDIS_URL=redis://:" + enc + "@" + addr + "/0", "SOLO_FENCE_DSN=postgres://app@127.0.0.1:1/app?sslmode=disable&password=" + url.QueryEscape(secretMarked)}, []string{"run", "--once", "--", "true"}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.code < 0 {
				// solo run waits for an unreachable Redis (its log says
				// so); solo status --watch runs until stopped.
				p := startSolo(t, append(testEnv("", electionName(t), "a"), tt.env...), tt.args...)
				waitFor(t, 15*time.Second, "the URL shown", func() bool { return strings.Contains(p.output(), "@127.0.0.1:") })
				p.signal(syscall.SIGTERM)
				p.wait(10 * time.Second)
				if out := p.output(); leaksSecret(out) {
					t.Errorf("the password is shown:\n%s", out)
				}
				return
			}
			env := append(testEnv("", electionName(t), "a"), tt.env...)
			code, out := soloRun(t, env, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d:\n%s", code, tt.code, out)
			}
			if leaksSecret(out) {
				t.Errorf("the password is shown:\n%s", out)
			}
		})
	}
}
