// Package redisurl builds go-redis clients from one Redis URL, whatever the
// deployment: a single node, a Sentinel group or a Cluster (see Parse). On
// top of go-redis's own parsers it gives one scheme per deployment, host
// lists, the master's credentials in the user info, strict option values,
// errors that never show a password, and solo's client defaults
// (NewClient).
//
// Ports default to 6379, or 26379 for sentinels; db to 0. A cluster URL has
// no db and makes a cluster client even with one seed address. TLS
// connections are verified against each address's own host name. Options,
// each at most once:
//   - durations with a unit, positive: dial_timeout, read_timeout,
//     write_timeout, pool_timeout, conn_max_idle_time, conn_max_lifetime,
//     min_retry_backoff, max_retry_backoff;
//   - integers: pool_size, min_idle_conns, max_idle_conns, max_active_conns
//     (≥ 0), max_retries (≥ −1; −1 disables retries), protocol (2 or 3),
//     max_redirects (cluster only, ≥ −1);
//   - strings: client_name; sentinel_username and sentinel_password (the
//     sentinels' own credentials; Sentinel only);
//   - TLS only (a rediss scheme): skip_verify=true|false; tls_ca_file (PEM
//     authorities that verify the server, instead of the system's);
//     tls_cert_file and tls_key_file (both or neither: the client's
//     certificate, for servers that authenticate clients); tls_server_name
//     (the name every server certificate must hold, instead of the host
//     dialed). Parse reads the files once: a rotated certificate takes
//     effect when the client is built again.
package redisurl

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultTimeout is the read and write timeout NewClient uses when the URL
// gives none. It is well under the default renew deadline of
// leader.Config (2/3 of 10s), so one hung call cannot by itself cost the
// leadership; the go-redis default (3s–5s) could.
const DefaultTimeout = time.Second

// Error reports a Redis URL that Parse cannot use. URL is redacted (Redact)
// and Reason never quotes a secret of it, so the error is safe to log.
type Error struct {
	URL    string
	Reason string
}

// Error implements error.
func (e *Error) Error() string {
	return fmt.Sprintf("invalid redis url %q: %s", e.URL, e.Reason)
}

// scheme says what a URL scheme connects to.
type scheme struct {
	tls         bool
	sentinel    bool
	cluster     bool
	defaultPort string
}

var schemes = map[string]scheme{
	"redis":           {defaultPort: "6379"},
	"rediss":          {tls: true, defaultPort: "6379"},
	"redis+sentinel":  {sentinel: true, defaultPort: "26379"},
	"rediss+sentinel": {tls: true, sentinel: true, defaultPort: "26379"},
	"redis+cluster":   {cluster: true, defaultPort: "6379"},
	"rediss+cluster":  {tls: true, cluster: true, defaultPort: "6379"},
}

// optionKind is how an option's value is checked before go-redis reads it.
type optionKind int

const (
	durationOption optionKind = iota // positive, with a unit
	intOption                        // at least min
	stringOption
	boolOption
)

type option struct {
	kind optionKind
	min  int
	only string // "sentinel", "cluster" or "tls": where the option applies
}

// options are the query options this package accepts: go-redis's names,
// with solo's stricter rules for their values.
var options = map[string]option{
	"dial_timeout":       {kind: durationOption},
	"read_timeout":       {kind: durationOption},
	"write_timeout":      {kind: durationOption},
	"pool_timeout":       {kind: durationOption},
	"conn_max_idle_time": {kind: durationOption},
	"conn_max_lifetime":  {kind: durationOption},
	"min_retry_backoff":  {kind: durationOption},
	"max_retry_backoff":  {kind: durationOption},
	"pool_size":          {kind: intOption},
	"min_idle_conns":     {kind: intOption},
	"max_idle_conns":     {kind: intOption},
	"max_active_conns":   {kind: intOption},
	"max_retries":        {kind: intOption, min: -1},
	"protocol":           {kind: intOption, min: 2},
	"max_redirects":      {kind: intOption, min: -1, only: "cluster"},
	"client_name":        {kind: stringOption},
	"sentinel_username":  {kind: stringOption, only: "sentinel"},
	"sentinel_password":  {kind: stringOption, only: "sentinel"},
	"skip_verify":        {kind: boolOption, only: "tls"},
	"tls_ca_file":        {kind: stringOption, only: "tls"},
	"tls_cert_file":      {kind: stringOption, only: "tls"},
	"tls_key_file":       {kind: stringOption, only: "tls"},
	"tls_server_name":    {kind: stringOption, only: "tls"},
}

// tlsOptions are the options this package reads itself to build the TLS
// configuration; go-redis never sees them. The names are those proposed
// for go-redis's own ParseURL.
var tlsOptions = []string{"skip_verify", "tls_ca_file", "tls_cert_file", "tls_key_file", "tls_server_name"}

// Parse parses a Redis URL into go-redis universal options:
//
//	redis://[user:pass@]host[:port][/db][?opts]                          single node
//	redis+sentinel://[user:pass@]h1[:26379],h2[:26379]/MASTER[/db][?opts] Sentinel
//	redis+cluster://[user:pass@]h1[:6379],h2[:6379][?opts]               Cluster
//
// The rediss schemes (rediss, rediss+sentinel, rediss+cluster) are the same
// over TLS. The user info is the Redis server's (with Sentinel, the
// master's). The options are listed in the package doc; those not given
// stay zero (go-redis's defaults). Errors are *Error.
func Parse(s string) (*redis.UniversalOptions, error) {
	fail := func(format string, args ...any) (*redis.UniversalOptions, error) {
		return nil, &Error{URL: Redact(s), Reason: RedactIn(fmt.Sprintf(format, args...), s)}
	}

	schemeText, rest, ok := strings.Cut(s, "://")
	if !ok {
		return fail("missing scheme (want redis://, rediss://, redis+sentinel:// or redis+cluster://)")
	}
	sc, ok := schemes[strings.ToLower(schemeText)]
	if !ok {
		return fail("unknown scheme %q (want redis, rediss, redis+sentinel, rediss+sentinel, redis+cluster or rediss+cluster)", schemeText)
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 && strings.ContainsAny(rest[:at], "/?#") {
		// A password with '/', '?' or '#' (as openssl rand -base64 gives)
		// would be read as a path, options or a fragment, and quoted back
		// in the reasons below: refuse it without a part of it.
		return fail("an '@' after a '/', '?' or '#': percent-encode them in the password (/ as %%2F, ? as %%3F, # as %%23, @ as %%40), and an '@' in an option value as %%40")
	}
	if strings.Contains(rest, "#") {
		return fail("unexpected fragment")
	}
	rest, rawQuery, _ := strings.Cut(rest, "?")
	authority, path := rest, ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		authority, path = rest[:i], rest[i:]
	}

	user, hosts, reason := parseUser(authority)
	if reason != "" {
		return fail("%s", reason)
	}
	addrs, reason := parseAddrs(hosts, sc)
	if reason != "" {
		return fail("%s", reason)
	}
	master, db, reason := parsePath(path, sc)
	if reason != "" {
		return fail("%s", reason)
	}

	// Options: checked here, read by go-redis.
	q, reason := checkQuery(rawQuery, sc)
	if reason != "" {
		return fail("%s", reason)
	}

	var tlsConfig *tls.Config
	if sc.tls {
		if tlsConfig, reason = newTLSConfig(q); reason != "" {
			return fail("%s", reason)
		}
	}
	opts, err := build(sc, user, addrs, master, db, q)
	if err != nil {
		// go-redis returns url.Parse's *url.Error as is: it quotes the URL
		// built from the parts, password included.
		return fail("%s", strings.TrimPrefix(RedactError(err, s).Error(), "redis: "))
	}
	opts.TLSConfig = tlsConfig
	return opts, nil
}

// parseUser splits the user info off authority; it returns the reason it
// is bad, or "". The last '@' ends it: a password may contain '@' only
// percent-encoded, but be lenient like net/url.
func parseUser(authority string) (user *url.Userinfo, hosts, reason string) {
	i := strings.LastIndexByte(authority, '@')
	if i < 0 {
		return nil, authority, ""
	}
	name, pass, hasPass := strings.Cut(authority[:i], ":")
	name, err := url.PathUnescape(name)
	if err != nil {
		return nil, "", "bad user name escape"
	}
	user = url.User(name)
	if hasPass {
		if pass, err = url.PathUnescape(pass); err != nil {
			return nil, "", "bad password escape"
		}
		user = url.UserPassword(name, pass)
	}
	return user, authority[i+1:], ""
}

// parseAddrs returns the host:port addresses of hosts, a comma-separated
// list (go-redis takes one host in a URL), or the reason it is bad.
func parseAddrs(hosts string, sc scheme) (addrs []string, reason string) {
	if hosts == "" {
		return nil, "missing host"
	}
	for h := range strings.SplitSeq(hosts, ",") {
		addr, reason := hostPort(h, sc.defaultPort)
		if reason != "" {
			return nil, reason
		}
		addrs = append(addrs, addr)
	}
	if !sc.sentinel && !sc.cluster && len(addrs) > 1 {
		return nil, "a single-node url takes one host; use redis+sentinel:// or redis+cluster:// for several"
	}
	return addrs, ""
}

// parsePath returns the master name and the database number of path,
// [/MASTER][/db], or the reason it is bad.
func parsePath(path string, sc scheme) (master string, db int, reason string) {
	segments := strings.Split(strings.Trim(path, "/"), "/")
	if segments[0] == "" {
		segments = nil
	}
	if sc.sentinel {
		if len(segments) == 0 {
			return "", 0, "missing master name"
		}
		m, err := url.PathUnescape(segments[0])
		if err != nil || m == "" {
			return "", 0, fmt.Sprintf("bad master name %q", segments[0])
		}
		master, segments = m, segments[1:]
	}
	switch {
	case len(segments) == 0:
		return master, 0, ""
	case sc.cluster:
		return "", 0, fmt.Sprintf("a cluster url takes no database or path (got %q)", path)
	case len(segments) > 1:
		return "", 0, fmt.Sprintf("unexpected path %q", path)
	}
	n, err := strconv.Atoi(segments[0])
	if err != nil || n < 0 {
		return "", 0, fmt.Sprintf("bad database number %q", segments[0])
	}
	return master, n, ""
}

// newTLSConfig builds the TLS configuration of a rediss URL from its
// options and the files they name; it returns the reason one is bad, or "".
func newTLSConfig(q url.Values) (*tls.Config, string) {
	for _, name := range tlsOptions[1:] {
		if q.Has(name) && q.Get(name) == "" {
			return nil, fmt.Sprintf("bad option %s=\"\": must not be empty", name)
		}
	}
	skipVerify, _ := strconv.ParseBool(q.Get("skip_verify"))
	// ServerName stays empty unless given (go-redis sets the first host's):
	// crypto/tls then verifies each connection against the host of the
	// address it dials, which is right for several seeds and for the nodes
	// a cluster or sentinel reports.
	c := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: skipVerify, ServerName: q.Get("tls_server_name")}
	if skipVerify && (q.Has("tls_ca_file") || q.Has("tls_server_name")) {
		return nil, "skip_verify=true turns off the verification that tls_ca_file and tls_server_name are for: give one or the other"
	}
	if ca := q.Get("tls_ca_file"); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Sprintf("option tls_ca_file=%q: %v", ca, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Sprintf("option tls_ca_file=%q: no PEM certificate in the file", ca)
		}
		c.RootCAs = pool
	}
	certFile, keyFile := q.Get("tls_cert_file"), q.Get("tls_key_file")
	switch {
	case certFile == "" && keyFile == "":
	case certFile == "":
		return nil, "option tls_key_file needs tls_cert_file (the client certificate)"
	case keyFile == "":
		return nil, "option tls_cert_file needs tls_key_file (the certificate's private key)"
	default:
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Sprintf("options tls_cert_file=%q, tls_key_file=%q: %v", certFile, keyFile, err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, ""
}

// NewClient returns a client for a Redis URL (see Parse): a sentinel-backed
// failover client for a sentinel URL, a cluster client for a cluster URL
// (even with one seed address), otherwise a single-node client.
// ContextTimeoutEnabled is set so that context deadlines bound every call,
// and read and write timeouts default to DefaultTimeout. The client
// connects lazily: an unreachable server shows on the first command.
func NewClient(rawURL string) (redis.UniversalClient, error) {
	opts, err := ClientOptions(rawURL)
	if err != nil {
		return nil, err
	}
	return redis.NewUniversalClient(opts), nil
}

// ClientOptions is Parse plus NewClient's defaults, for callers that adjust
// the options before building the client.
func ClientOptions(rawURL string) (*redis.UniversalOptions, error) {
	opts, err := Parse(rawURL)
	if err != nil {
		return nil, err
	}
	opts.ContextTimeoutEnabled = true
	if opts.ReadTimeout == 0 {
		opts.ReadTimeout = DefaultTimeout
	}
	if opts.WriteTimeout == 0 {
		opts.WriteTimeout = DefaultTimeout
	}
	if opts.TLSConfig != nil && opts.Dialer == nil {
		opts.Dialer = tlsDialer(opts.TLSConfig, opts.DialTimeout) // dial.go
	}
	return opts, nil
}

// build hands the parts to the go-redis parser of the deployment and
// returns its options as universal options.
func build(sc scheme, user *url.Userinfo, addrs []string, master string, db int, q url.Values) (*redis.UniversalOptions, error) {
	u := url.URL{Scheme: "redis", Host: addrs[0]}
	// Passed on separately: the TLS options are Parse's own (go-redis reads
	// only skip_verify, and only with TLS) and go-redis has no sentinel
	// credentials in its query.
	sentinelUser, sentinelPass := q.Get("sentinel_username"), q.Get("sentinel_password")
	for _, name := range append([]string{"sentinel_username", "sentinel_password"}, tlsOptions...) {
		q.Del(name)
	}
	switch {
	case sc.cluster:
		u.User = user
		for _, a := range addrs[1:] {
			q.Add("addr", a)
		}
		u.RawQuery = q.Encode()
		o, err := redis.ParseClusterURL(u.String())
		if err != nil {
			return nil, err
		}
		opts := universal(o)
		opts.IsClusterMode = true
		return opts, nil
	case sc.sentinel:
		// go-redis reads the user info as the sentinels' credentials and
		// the master's from username and password options.
		if user != nil {
			q.Set("username", user.Username())
			if p, ok := user.Password(); ok {
				q.Set("password", p)
			}
		}
		if sentinelUser != "" || sentinelPass != "" {
			u.User = url.UserPassword(sentinelUser, sentinelPass)
		}
		q.Set("master_name", master)
		for _, a := range addrs[1:] {
			q.Add("addr", a)
		}
		u.Path = "/" + strconv.Itoa(db)
		u.RawQuery = q.Encode()
		o, err := redis.ParseFailoverURL(u.String())
		if err != nil {
			return nil, err
		}
		opts := universal(o)
		opts.Addrs = o.SentinelAddrs
		return opts, nil
	default:
		u.User = user
		u.Path = "/" + strconv.Itoa(db)
		u.RawQuery = q.Encode()
		o, err := redis.ParseURL(u.String())
		if err != nil {
			return nil, err
		}
		opts := universal(o)
		opts.Addrs = []string{o.Addr}
		return opts, nil
	}
}

// universal copies every exported field of o (a *redis.Options,
// *redis.ClusterOptions or *redis.FailoverOptions) that UniversalOptions has
// under the same name and type: the credentials, timeouts, retries and pool
// settings go-redis parsed, without a hand-kept list per deployment that a
// new go-redis option would silently miss. The callers set the addresses,
// whose names differ.
func universal(o any) *redis.UniversalOptions {
	u := new(redis.UniversalOptions)
	dst := reflect.ValueOf(u).Elem()
	src := reflect.ValueOf(o).Elem()
	for i := range src.NumField() {
		f := src.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		if d := dst.FieldByName(f.Name); d.IsValid() && d.Type() == f.Type {
			d.Set(src.Field(i))
		}
	}
	return u
}

// hostPort checks one "host[:port]" and returns "host:port", or a reason.
// go-redis would take a missing host for localhost and leave a bad port
// to the first dial.
func hostPort(h, defaultPort string) (addr, reason string) {
	if h == "" {
		return "", "empty host in host list"
	}
	host, port := h, defaultPort
	switch {
	case strings.HasPrefix(h, "["): // [IPv6] or [IPv6]:port
		end := strings.IndexByte(h, ']')
		if end < 0 {
			return "", fmt.Sprintf("bad host %q", h)
		}
		host = h[1:end]
		if after := h[end+1:]; after != "" {
			p, ok := strings.CutPrefix(after, ":")
			if !ok {
				return "", fmt.Sprintf("bad host %q", h)
			}
			port = p
		}
	case strings.Count(h, ":") > 1:
		return "", fmt.Sprintf("bad host %q (write an IPv6 address in brackets: [::1]:6379)", h)
	default:
		if i := strings.IndexByte(h, ':'); i >= 0 {
			host, port = h[:i], h[i+1:]
		}
	}
	if host == "" {
		return "", fmt.Sprintf("missing host in %q", h)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || port[0] == '+' {
		return "", fmt.Sprintf("bad port %q in %q", port, h)
	}
	return net.JoinHostPort(host, port), ""
}

// checkQuery parses the query and checks every option against options; it
// returns the reason the first bad one (in name order) is bad, or "".
func checkQuery(rawQuery string, sc scheme) (url.Values, string) {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return nil, fmt.Sprintf("bad query: %v", err)
	}
	names := make([]string, 0, len(q))
	for name := range q {
		if secretName(name) && name != "sentinel_password" {
			// Before any other name is quoted: one may be a part of the
			// password (an '&' in it).
			return nil, fmt.Sprintf("option %s: the password goes in the user info (redis://USER:PASSWORD@HOST/DB), percent-encoded, not in an option", name)
		}
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		o, known := options[name]
		switch {
		case !known && slices.ContainsFunc(secretParts("?"+rawQuery), func(p string) bool { return strings.Contains(p, name) }):
			return nil, "unknown option in a password option's value: percent-encode '&' in a password as %26"
		case !known:
			return nil, fmt.Sprintf("unknown option %q", name)
		case o.only == "tls" && !sc.tls:
			return nil, fmt.Sprintf("option %s needs TLS (a rediss scheme)", name)
		case o.only == "sentinel" && !sc.sentinel:
			return nil, fmt.Sprintf("option %s is only for redis+sentinel urls", name)
		case o.only == "cluster" && !sc.cluster:
			return nil, fmt.Sprintf("option %s is only for redis+cluster urls", name)
		case len(q[name]) > 1:
			return nil, fmt.Sprintf("option %s given more than once", name)
		}
		if reason := checkValue(name, o, q.Get(name)); reason != "" {
			return nil, reason
		}
	}
	return q, ""
}

// checkValue returns the reason the value v of the option name (of kind
// o) is bad, or "". A sentinel_password is never quoted.
func checkValue(name string, o option, v string) string {
	shown := v
	if name == "sentinel_password" {
		shown = "xxxxx"
	}
	switch o.kind {
	case durationOption:
		// go-redis would take "3" as 3s and "0s" as no timeout at all.
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Sprintf("bad option %s=%q: want a duration such as \"1s\"", name, shown)
		}
		if d <= 0 {
			return fmt.Sprintf("bad option %s=%q: must be positive", name, shown)
		}
	case intOption:
		n, err := strconv.Atoi(v)
		switch {
		case err != nil:
			return fmt.Sprintf("bad option %s=%q: want an integer", name, shown)
		case name == "protocol" && (n < 2 || n > 3):
			return fmt.Sprintf("bad option %s=%q: must be 2 or 3", name, shown)
		case n < o.min:
			return fmt.Sprintf("bad option %s=%q: must be at least %d", name, shown, o.min)
		}
	case boolOption:
		if _, err := strconv.ParseBool(v); err != nil {
			return fmt.Sprintf("bad option %s=%q: want true or false", name, shown)
		}
	}
	return ""
}
