package leader

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultRedisTimeout is the read and write timeout NewRedisClient uses when
// the URL gives none. It is well under the default renew deadline (2/3 of
// 10s), so one hung call cannot by itself cost the leadership; the
// go-redis default (3s–5s) could.
const DefaultRedisTimeout = time.Second

// RedisURLError reports a Redis URL that ParseRedisURL cannot use. URL has
// its password (and a sentinel_password option) replaced by "xxxxx", so the
// error is safe to log.
type RedisURLError struct {
	URL    string
	Reason string
}

// Error implements error.
func (e *RedisURLError) Error() string {
	return fmt.Sprintf("invalid redis url %q: %s", e.URL, e.Reason)
}

// redisScheme says what a URL scheme connects to.
type redisScheme struct {
	tls         bool
	sentinel    bool
	cluster     bool
	defaultPort string
}

var redisSchemes = map[string]redisScheme{
	"redis":           {defaultPort: "6379"},
	"rediss":          {tls: true, defaultPort: "6379"},
	"redis+sentinel":  {sentinel: true, defaultPort: "26379"},
	"rediss+sentinel": {tls: true, sentinel: true, defaultPort: "26379"},
	"redis+cluster":   {cluster: true, defaultPort: "6379"},
	"rediss+cluster":  {tls: true, cluster: true, defaultPort: "6379"},
}

// ParseRedisURL parses a Redis URL into go-redis universal options:
//
//	redis://[user:pass@]host[:port][/db][?opts]                          single node
//	rediss://...                                                        single node, TLS
//	redis+sentinel://[user:pass@]h1[:26379],h2[:26379]/MASTER[/db][?opts] Sentinel
//	redis+cluster://[user:pass@]h1[:6379],h2[:6379][?opts]               Cluster
//
// rediss+sentinel and rediss+cluster use TLS for every connection, verified
// against each address's own host name. The user and password are the Redis
// server's (for Sentinel: the master's; the sentinels' own credentials are
// the sentinel_username and sentinel_password options). Ports default to
// 6379, or 26379 for sentinels; db defaults to 0. A cluster URL has no db
// and sets IsClusterMode, so even one seed address makes a cluster client.
//
// Options (each at most once):
//   - durations, such as "500ms", positive: dial_timeout, read_timeout,
//     write_timeout, pool_timeout, conn_max_idle_time, conn_max_lifetime,
//     min_retry_backoff, max_retry_backoff;
//   - integers: pool_size, min_idle_conns, max_idle_conns, max_active_conns
//     (≥ 0), max_retries (≥ −1; −1 disables retries), protocol (2 or 3),
//     max_redirects (cluster only, ≥ −1);
//   - strings: client_name, sentinel_username and sentinel_password
//     (Sentinel only);
//   - skip_verify=true|false (TLS only): do not verify server certificates.
//
// Options not given stay zero, meaning the go-redis default; NewRedisClient
// adds this package's own defaults. Errors are *RedisURLError.
func ParseRedisURL(s string) (*redis.UniversalOptions, error) {
	fail := func(format string, args ...any) (*redis.UniversalOptions, error) {
		return nil, &RedisURLError{URL: RedactRedisURL(s), Reason: fmt.Sprintf(format, args...)}
	}

	schemeText, rest, ok := strings.Cut(s, "://")
	if !ok {
		return fail("missing scheme (want redis://, rediss://, redis+sentinel:// or redis+cluster://)")
	}
	scheme, ok := redisSchemes[strings.ToLower(schemeText)]
	if !ok {
		return fail("unknown scheme %q (want redis, rediss, redis+sentinel, rediss+sentinel, redis+cluster or rediss+cluster)", schemeText)
	}
	if strings.Contains(rest, "#") {
		return fail("unexpected fragment")
	}
	rest, rawQuery, _ := strings.Cut(rest, "?")
	authority, path := rest, ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		authority, path = rest[:i], rest[i:]
	}

	opts := &redis.UniversalOptions{}

	// 1. User info. The last '@' ends it: a password may contain '@' only
	// percent-encoded, but be lenient like net/url.
	hosts := authority
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		user, pass, hasPass := strings.Cut(authority[:i], ":")
		var err error
		if opts.Username, err = url.PathUnescape(user); err != nil {
			return fail("bad user name escape")
		}
		if hasPass {
			if opts.Password, err = url.PathUnescape(pass); err != nil {
				return fail("bad password escape")
			}
		}
		hosts = authority[i+1:]
	}

	// 2. Addresses.
	if hosts == "" {
		return fail("missing host")
	}
	for h := range strings.SplitSeq(hosts, ",") {
		addr, reason := redisAddr(h, scheme.defaultPort)
		if reason != "" {
			return fail("%s", reason)
		}
		opts.Addrs = append(opts.Addrs, addr)
	}
	if !scheme.sentinel && !scheme.cluster && len(opts.Addrs) > 1 {
		return fail("a single-node url takes one host; use redis+sentinel:// or redis+cluster:// for several")
	}

	// 3. Path: [/MASTER][/db].
	segments := strings.Split(strings.Trim(path, "/"), "/")
	if segments[0] == "" {
		segments = nil
	}
	if scheme.sentinel {
		if len(segments) == 0 {
			return fail("missing master name")
		}
		master, err := url.PathUnescape(segments[0])
		if err != nil || master == "" {
			return fail("bad master name %q", segments[0])
		}
		opts.MasterName = master
		segments = segments[1:]
	}
	switch {
	case len(segments) == 0:
	case scheme.cluster:
		return fail("a cluster url takes no database or path (got %q)", path)
	case len(segments) > 1:
		return fail("unexpected path %q", path)
	default:
		db, err := strconv.Atoi(segments[0])
		if err != nil || db < 0 {
			return fail("bad database number %q", segments[0])
		}
		opts.DB = db
	}

	if scheme.tls {
		// ServerName stays empty: crypto/tls then verifies each connection
		// against the host of the address it dials, which is right for
		// several seeds and for the nodes a cluster or sentinel reports.
		opts.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	opts.IsClusterMode = scheme.cluster

	// 4. Options.
	if reason := setRedisOptions(opts, rawQuery, scheme); reason != "" {
		return fail("%s", reason)
	}
	return opts, nil
}

// NewRedisClient returns a client for a Redis URL (see ParseRedisURL): a
// sentinel-backed failover client for a sentinel URL, a cluster client for
// a cluster URL (even with one seed address), otherwise a single-node
// client. ContextTimeoutEnabled is set so that context deadlines bound every
// call, and read and write timeouts default to DefaultRedisTimeout. The
// client connects lazily: an unreachable server shows on the first command.
func NewRedisClient(rawURL string) (redis.UniversalClient, error) {
	opts, err := redisClientOptions(rawURL)
	if err != nil {
		return nil, err
	}
	return redis.NewUniversalClient(opts), nil
}

// redisClientOptions is ParseRedisURL plus NewRedisClient's defaults.
func redisClientOptions(rawURL string) (*redis.UniversalOptions, error) {
	opts, err := ParseRedisURL(rawURL)
	if err != nil {
		return nil, err
	}
	opts.ContextTimeoutEnabled = true
	if opts.ReadTimeout == 0 {
		opts.ReadTimeout = DefaultRedisTimeout
	}
	if opts.WriteTimeout == 0 {
		opts.WriteTimeout = DefaultRedisTimeout
	}
	return opts, nil
}

// RedactRedisURL returns s with the password of its user info and the value
// of a sentinel_password option replaced by "xxxxx". It works on text that
// does not parse, so errors about a bad URL never leak a password.
func RedactRedisURL(s string) string {
	const mask = "xxxxx"
	start := 0
	if i := strings.Index(s, "://"); i >= 0 {
		start = i + len("://")
	}
	end := len(s)
	if i := strings.IndexAny(s[start:], "/?#"); i >= 0 {
		end = start + i
	}
	if at := strings.LastIndexByte(s[start:end], '@'); at >= 0 {
		if c := strings.IndexByte(s[start:start+at], ':'); c >= 0 {
			s = s[:start+c+1] + mask + s[start+at:]
		}
	}
	q := strings.IndexByte(s, '?')
	if q < 0 {
		return s
	}
	params := strings.Split(s[q+1:], "&")
	for i, p := range params {
		name, _, _ := strings.Cut(p, "=")
		if n, err := url.QueryUnescape(name); err == nil && n == "sentinel_password" {
			params[i] = name + "=" + mask
		}
	}
	return s[:q+1] + strings.Join(params, "&")
}

// redisAddr checks one "host[:port]" and returns "host:port", or a reason.
func redisAddr(h, defaultPort string) (addr, reason string) {
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

// setRedisOptions applies the query options to opts and returns the reason
// the first bad one is bad, or "".
func setRedisOptions(opts *redis.UniversalOptions, rawQuery string, scheme redisScheme) string {
	if rawQuery == "" {
		return ""
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return fmt.Sprintf("bad query: %v", err)
	}
	durations := map[string]*time.Duration{
		"dial_timeout":       &opts.DialTimeout,
		"read_timeout":       &opts.ReadTimeout,
		"write_timeout":      &opts.WriteTimeout,
		"pool_timeout":       &opts.PoolTimeout,
		"conn_max_idle_time": &opts.ConnMaxIdleTime,
		"conn_max_lifetime":  &opts.ConnMaxLifetime,
		"min_retry_backoff":  &opts.MinRetryBackoff,
		"max_retry_backoff":  &opts.MaxRetryBackoff,
	}
	ints := map[string]struct {
		p   *int
		min int
	}{
		"pool_size":        {&opts.PoolSize, 0},
		"min_idle_conns":   {&opts.MinIdleConns, 0},
		"max_idle_conns":   {&opts.MaxIdleConns, 0},
		"max_active_conns": {&opts.MaxActiveConns, 0},
		"max_retries":      {&opts.MaxRetries, -1},
		"protocol":         {&opts.Protocol, 2},
	}
	strs := map[string]*string{"client_name": &opts.ClientName}
	if scheme.cluster {
		ints["max_redirects"] = struct {
			p   *int
			min int
		}{&opts.MaxRedirects, -1}
	}
	if scheme.sentinel {
		strs["sentinel_username"] = &opts.SentinelUsername
		strs["sentinel_password"] = &opts.SentinelPassword
	}

	// Sorted, so the reported option does not depend on map order.
	names := make([]string, 0, len(q))
	for name := range q {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		vs := q[name]
		if len(vs) > 1 {
			return fmt.Sprintf("option %s given more than once", name)
		}
		v := vs[0]
		shown := v
		if name == "sentinel_password" {
			shown = "xxxxx"
		}
		switch {
		case durations[name] != nil:
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Sprintf("bad option %s=%q: want a duration such as \"1s\"", name, shown)
			}
			if d <= 0 {
				return fmt.Sprintf("bad option %s=%q: must be positive", name, shown)
			}
			*durations[name] = d
		case ints[name].p != nil:
			o := ints[name]
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Sprintf("bad option %s=%q: want an integer", name, shown)
			}
			if n < o.min || (name == "protocol" && n > 3) {
				if name == "protocol" {
					return fmt.Sprintf("bad option %s=%q: must be 2 or 3", name, shown)
				}
				return fmt.Sprintf("bad option %s=%q: must be at least %d", name, shown, o.min)
			}
			*o.p = n
		case strs[name] != nil:
			*strs[name] = v
		case name == "skip_verify" && scheme.tls:
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Sprintf("bad option %s=%q: want true or false", name, shown)
			}
			opts.TLSConfig.InsecureSkipVerify = b
		case name == "skip_verify":
			return "option skip_verify needs TLS (a rediss scheme)"
		case name == "sentinel_username" || name == "sentinel_password":
			return fmt.Sprintf("option %s is only for redis+sentinel urls", name)
		case name == "max_redirects":
			return "option max_redirects is only for redis+cluster urls"
		default:
			return fmt.Sprintf("unknown option %q", name)
		}
	}
	return ""
}
