package redisurl

import (
	"errors"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// mask is what Redact puts in place of a secret.
const mask = "xxxxx"

// Redact returns s, a URL (redis://, postgres://, any scheme) or text meant
// to be one, with every secret replaced by "xxxxx": the password of the
// user info, and the value of every option whose name holds "pass",
// "secret" or "token" (password, sentinel_password, sslpassword). It works
// on text that does not parse, and errs on the side of hiding: when the
// user info holds '/', '?' or '#' (a password not percent-encoded, as
// `openssl rand -base64` gives), everything between "://" and the last '@'
// is hidden, the user name too, and a secret option's value runs to the
// next '&' that starts another name=value option.
func Redact(s string) string {
	var b strings.Builder
	last := 0
	for _, sp := range secretSpans(s) {
		b.WriteString(s[last:sp[0]])
		b.WriteString(mask)
		last = sp[1]
	}
	b.WriteString(s[last:])
	return b.String()
}

// RedactIn returns text (an error message, a log line) with every secret
// of the URL raw hidden: raw itself, quoted or not, becomes Redact(raw),
// and each of its secrets, as written or percent-decoded, becomes "xxxxx".
// It is for messages of other packages that may embed the URL (a
// *url.Error does) or a part of it.
func RedactIn(text, raw string) string {
	if raw == "" {
		return text
	}
	red := Redact(raw)
	q, redQ := strconv.Quote(raw), strconv.Quote(red)
	text = strings.ReplaceAll(text, q[1:len(q)-1], redQ[1:len(redQ)-1])
	text = strings.ReplaceAll(text, raw, red)
	for _, secret := range secretParts(raw) {
		forms := []string{secret}
		if u, err := url.PathUnescape(secret); err == nil {
			forms = append(forms, u)
		}
		if u, err := url.QueryUnescape(secret); err == nil {
			forms = append(forms, u)
		}
		for _, f := range forms {
			if f != "" {
				text = strings.ReplaceAll(text, f, mask)
			}
		}
	}
	return text
}

// quoted matches a Go-quoted string.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// redactedError is an error whose message has the secrets of a URL
// hidden; it unwraps to the original, so errors.Is and errors.As still
// see the cause.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// RedactError returns err with the secrets of the URL raw hidden from its
// message (RedactIn), or nil for nil. The result unwraps to err: print the
// result, never the error it wraps.
func RedactError(err error, raw string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if ue, ok := errors.AsType[*url.Error](err); ok {
		// It quotes its URL (one built from raw's parts, or raw cut at a
		// '#') and may quote a part of it that is a password's: an
		// "invalid port" that is the password after a '/'.
		u := ue.URL
		if strings.HasPrefix(raw, u) {
			u = raw
		}
		reason := ue.Err.Error()
		if len(secretSpans(raw)) > 0 || len(secretSpans(u)) > 0 {
			reason = quoted.ReplaceAllString(reason, `"`+mask+`"`)
		}
		msg = strings.ReplaceAll(msg, ue.Error(), ue.Op+" "+strconv.Quote(Redact(u))+": "+reason)
	}
	red := RedactIn(msg, raw)
	if red == err.Error() {
		return err
	}
	return &redactedError{msg: red, err: err}
}

// secretParts returns the secrets of s, as written: see Redact.
func secretParts(s string) []string {
	var parts []string
	for _, sp := range secretSpans(s) {
		parts = append(parts, s[sp[0]:sp[1]])
	}
	return parts
}

// secretSpans returns the byte ranges [start, end) of s that hold secrets,
// in order and apart: see Redact.
func secretSpans(s string) [][2]int {
	var spans [][2]int
	start := 0
	if i := strings.Index(s, "://"); i >= 0 {
		start = i + len("://")
	}
	host := start // where the host and what follows it begin
	if at := strings.LastIndexByte(s[start:], '@'); at >= 0 {
		at += start
		info := s[start:at]
		switch c := strings.IndexByte(info, ':'); {
		case strings.ContainsAny(info, "/?#"):
			// Ambiguous: a password with '/', '?' or '#', or an '@' in an
			// option's value. Hide it all.
			spans = append(spans, [2]int{start, at})
		case c >= 0:
			spans = append(spans, [2]int{start + c + 1, at})
		}
		host = at + 1
	}
	// The options, read from the first '?' and from the first after the
	// host: when the user info is ambiguous, one of the two is right.
	spans = append(spans, optionSpans(s, start)...)
	spans = append(spans, optionSpans(s, host)...)
	slices.SortFunc(spans, func(a, b [2]int) int { return a[0] - b[0] })
	var merged [][2]int
	for _, sp := range spans {
		if n := len(merged); n > 0 && sp[0] <= merged[n-1][1] {
			merged[n-1][1] = max(merged[n-1][1], sp[1])
			continue
		}
		merged = append(merged, sp)
	}
	return merged
}

// optionSpans returns the values of the secret options of the query that
// starts at the first '?' of s[from:]. A secret value runs to the next '&'
// that starts a name=value option of a known or secret name, else to the
// end: a password may hold '&' and '='.
func optionSpans(s string, from int) [][2]int {
	q := strings.IndexByte(s[from:], '?')
	if q < 0 {
		return nil
	}
	var spans [][2]int
	params := strings.Split(s[from+q+1:], "&")
	at := from + q + 1 // the offset of params[i]
	for i := 0; i < len(params); i++ {
		name, _, hasValue := strings.Cut(params[i], "=")
		begin := at + len(params[i]) + 1
		if !hasValue || !secretName(name) {
			at = begin
			continue
		}
		end := at + len(params[i])
		for i+1 < len(params) && !optionStart(params[i+1]) {
			i++
			end += 1 + len(params[i])
		}
		spans = append(spans, [2]int{at + len(name) + 1, end})
		at = end + 1
	}
	return spans
}

// optionStart reports whether param starts an option of its own: a known
// name (solo's Redis options, common PostgreSQL ones) or a secret name,
// with a value.
func optionStart(param string) bool {
	name, _, ok := strings.Cut(param, "=")
	if !ok {
		return false
	}
	_, known := options[name]
	return known || knownDSNOptions[name] || secretName(name)
}

// knownDSNOptions are PostgreSQL connection options that may follow a
// password option in a URL.
var knownDSNOptions = map[string]bool{
	"sslmode": true, "sslrootcert": true, "sslcert": true, "sslkey": true, "connect_timeout": true,
	"application_name": true, "search_path": true, "target_session_attrs": true, "dbname": true,
	"user": true, "host": true, "port": true, "pool_max_conns": true, "timezone": true,
}

// secretName reports whether an option or key named name holds a secret.
func secretName(name string) bool {
	if n, err := url.QueryUnescape(name); err == nil {
		name = n
	}
	name = strings.ToLower(name)
	return strings.Contains(name, "pass") || strings.Contains(name, "secret") || strings.Contains(name, "token")
}
