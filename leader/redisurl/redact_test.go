package redisurl_test

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/solo-run/solo/leader/redisurl"
)

// secretShapes are passwords as generators and people write them, each
// between the markers the tests look for: base64 with '/', '+' and '='
// (openssl rand -base64), '?', '#', '@', '%', a space, ':', '&', unicode.
var secretShapes = []string{"/q+Z==", "a?b", "a#b", "p@ss", "50%off", "a b", "a:b:c", "x&y=z", "pässwörd✓", ""}

// leaked reports whether text holds a part of a secret made by secret.
func leaked(text string) bool {
	return strings.Contains(text, "S3CR") || strings.Contains(text, "RC3S")
}

func secret(shape string) string { return "S3CR" + shape + "RC3S" }

// urlForms are the places a password takes in a URL, raw (%s) or
// percent-encoded (%e), filled by fill.
var urlForms = []string{
	"redis://:%s@127.0.0.1:6379/0",
	"redis://user:%s@127.0.0.1:6379/0",
	"rediss://:%s@redis.example",
	"redis://:%e@127.0.0.1:6379/0",
	"redis://user:%e@127.0.0.1:6379/0?password=%e",
	"redis://user:pw@127.0.0.1:6379/0?password=%s",
	"redis://127.0.0.1/0?password=%s&client_name=x",
	"redis+sentinel://:%e@s1:26379,s2:26379,s3/mymaster/0?sentinel_password=%e",
	"redis+sentinel://:%s@s1:26379,s2:26379,s3/mymaster/0?sentinel_password=%s",
	"redis+cluster://u:%s@n1,n2:7000",
	"postgres://app:%s@db.example/app?sslmode=disable",
	"postgresql://app@db.example/app?password=%s",
	"%s", // not a URL at all: nothing to hide, nothing to find
}

func fill(form, shape string) string {
	s := secret(shape)
	return strings.NewReplacer("%s", s, "%e", url.PathEscape(s)).Replace(form)
}

// Every password shape, raw or percent-encoded, in every place a URL
// holds one, is hidden by Redact, in RedactIn's and RedactError's text,
// and in Parse's errors. Old code: a password with '/', '?' or '#' and a
// ?password= option were shown in clear.
func TestRedact_PasswordShapes(t *testing.T) {
	for _, form := range urlForms {
		for _, shape := range secretShapes {
			raw := fill(form, shape)
			if form == "%s" {
				continue
			}
			if got := redisurl.Redact(raw); leaked(got) {
				t.Errorf("Redact(%q) = %q", raw, got)
			}
			msg := "dial " + raw + ": refused; parse " + fmt.Sprintf("%q", raw)
			if got := redisurl.RedactIn(msg, raw); leaked(got) {
				t.Errorf("RedactIn(%q) = %q", msg, got)
			}
			if _, err := url.Parse(raw); err != nil {
				if got := redisurl.RedactError(fmt.Errorf("open: %w", err), raw).Error(); leaked(got) {
					t.Errorf("RedactError(%v) = %q", err, got)
				}
			}
			if _, err := redisurl.Parse(raw); err != nil && leaked(err.Error()) {
				t.Errorf("Parse(%q) error leaks: %v", raw, err)
			}
		}
	}
}

// Parse takes a percent-encoded password of every shape, and refuses a
// raw one with '/', '?' or '#' naming the fix (never a part of it).
func TestParse_PasswordShapes(t *testing.T) {
	for _, shape := range secretShapes {
		pw := secret(shape)
		o, err := redisurl.Parse("redis://u:" + url.PathEscape(pw) + "@127.0.0.1:6379/0")
		if err != nil || o.Password != pw {
			t.Errorf("encoded %q: password %q, %v", pw, o.Password, err)
		}
		if !strings.ContainsAny(shape, "/?#") {
			continue
		}
		_, err = redisurl.Parse("redis://u:" + pw + "@127.0.0.1:6379/0")
		if err == nil || !strings.Contains(err.Error(), "percent-encode") || leaked(err.Error()) {
			t.Errorf("raw %q: %v, want a refusal naming percent-encoding, without the password", pw, err)
		}
	}
	_, err := redisurl.Parse("redis://127.0.0.1/0?password=S3CRx&yRC3S")
	if err == nil || !strings.Contains(err.Error(), "the password goes in the user info") || leaked(err.Error()) {
		t.Errorf("?password=: %v", err)
	}
}

// A go-redis error that is a *url.Error quotes the URL it was given:
// RedactError hides it, and errors.Is still finds the cause.
func TestRedactError_URLError(t *testing.T) {
	raw := "redis://u:S3CRxRC3S@ex ample/0" // not a URL: a space in the host
	//lint:ignore SA1007 the URL is invalid on purpose
	_, perr := url.Parse(raw)
	err := redisurl.RedactError(fmt.Errorf("redis: %w", perr), raw)
	if leaked(err.Error()) || !strings.Contains(err.Error(), "u:xxxxx@ex ample") {
		t.Fatalf("RedactError = %q", err)
	}
	if !errors.Is(err, perr) {
		t.Fatal("RedactError lost the cause")
	}
	if _, err := redisurl.Parse(raw); err == nil || leaked(err.Error()) {
		t.Fatalf("Parse(%q) = %v", raw, err)
	}
}
