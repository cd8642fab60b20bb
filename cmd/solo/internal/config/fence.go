package config

import (
	"errors"
	"net/url"
	"strings"

	"github.com/solo-run/solo/leader/redisurl"
)

// FenceDriver returns the database/sql driver name and data source for a
// fence DSN: "pgx" for postgres:// and postgresql:// URLs, "sqlite" for
// sqlite:PATH. The drivers themselves are the caller's to register.
func FenceDriver(dsn string) (driver, source string, err error) {
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		// Refused here, not by pgx: its error for a URL it cannot parse
		// quotes the URL, best-effort redacted. Neither error shows it.
		_, rest, _ := strings.Cut(dsn, "://")
		at := strings.LastIndexByte(rest, '@')
		if u, err := url.Parse(dsn); err != nil || u.Fragment != "" || at >= 0 && strings.ContainsAny(rest[:at], "/?#") {
			return "", "", errors.New("not a URL net/url can parse: percent-encode the password (/ as %2F, ? as %3F, # as %23, @ as %40, % as %25, a space as %20)")
		}
		return "pgx", dsn, nil
	case strings.HasPrefix(dsn, "sqlite:"):
		path := strings.TrimPrefix(dsn, "sqlite:")
		if path == "" {
			return "", "", errors.New("sqlite: needs a file path, such as sqlite:/var/lib/app/app.db")
		}
		return "sqlite", path, nil
	}
	return "", "", errors.New("want postgres://…, postgresql://… or sqlite:PATH")
}

// RedactDSN returns dsn with every password replaced by "xxxxx", whatever
// its form: a URL (postgres://USER:PASSWORD@HOST/DB?password=…, redacted by
// redisurl.Redact, even when net/url cannot parse it), key=value pairs
// (password=secret or password='a b', any key holding "pass"), or sqlite:PATH
// (no secret). It is the one place a fence DSN is made safe to show.
func RedactDSN(dsn string) string {
	if strings.Contains(dsn, "://") || strings.HasPrefix(dsn, "sqlite:") {
		return redisurl.Redact(dsn)
	}
	var b strings.Builder
	rest := dsn
	for rest != "" {
		eq := strings.IndexByte(rest, '=')
		if eq < 0 {
			b.WriteString(rest)
			break
		}
		key := rest[:eq]
		if i := strings.LastIndexAny(key, " \t\n"); i >= 0 {
			key = key[i+1:]
		}
		value, after := dsnValue(rest[eq+1:])
		b.WriteString(rest[:eq+1])
		if strings.Contains(strings.ToLower(key), "pass") {
			b.WriteString("xxxxx")
		} else {
			b.WriteString(value)
		}
		rest = after
	}
	return b.String()
}

// dsnValue splits the value of a key=value pair off s: up to a space, or
// a single-quoted string with backslash escapes (libpq's rules); an
// unterminated quote runs to the end.
func dsnValue(s string) (value, rest string) {
	if !strings.HasPrefix(s, "'") {
		if i := strings.IndexAny(s, " \t\n"); i >= 0 {
			return s[:i], s[i:]
		}
		return s, ""
	}
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '\'':
			return s[:i+1], s[i+1:]
		}
	}
	return s, ""
}
