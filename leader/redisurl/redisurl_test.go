package redisurl_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/leader/redisurl"
)

func TestParse_Errors(t *testing.T) {
	tests := []struct {
		name string
		url  string
		want string // exact error text
	}{
		{name: "empty", url: "", want: `invalid redis url "": missing scheme (want redis://, rediss://, redis+sentinel:// or redis+cluster://)`},
		{name: "no scheme", url: "localhost:6379", want: `invalid redis url "localhost:6379": missing scheme (want redis://, rediss://, redis+sentinel:// or redis+cluster://)`},
		{name: "unknown scheme", url: "http://h:6379", want: `invalid redis url "http://h:6379": unknown scheme "http" (want redis, rediss, redis+sentinel, rediss+sentinel, redis+cluster or rediss+cluster)`},
		{name: "unix scheme", url: "unix:///tmp/redis.sock", want: `invalid redis url "unix:///tmp/redis.sock": unknown scheme "unix" (want redis, rediss, redis+sentinel, rediss+sentinel, redis+cluster or rediss+cluster)`},
		{name: "missing host", url: "redis:///0", want: `invalid redis url "redis:///0": missing host`},
		{name: "missing host with password", url: "redis://u:secret@", want: `invalid redis url "redis://u:xxxxx@": missing host`},
		{name: "port only", url: "redis://:6379", want: `invalid redis url "redis://:6379": missing host in ":6379"`},
		{name: "bad port", url: "redis://h:port", want: `invalid redis url "redis://h:port": bad port "port" in "h:port"`},
		{name: "port zero", url: "redis://h:0", want: `invalid redis url "redis://h:0": bad port "0" in "h:0"`},
		{name: "port too large", url: "redis://h:65536", want: `invalid redis url "redis://h:65536": bad port "65536" in "h:65536"`},
		{name: "empty port", url: "redis://h:", want: `invalid redis url "redis://h:": bad port "" in "h:"`},
		{name: "unbracketed ipv6", url: "redis://::1", want: `invalid redis url "redis://::1": bad host "::1" (write an IPv6 address in brackets: [::1]:6379)`},
		{name: "bad db", url: "redis://h:6379/x", want: `invalid redis url "redis://h:6379/x": bad database number "x"`},
		{name: "negative db", url: "redis://h/-1", want: `invalid redis url "redis://h/-1": bad database number "-1"`},
		{name: "deep path", url: "redis://h/0/1", want: `invalid redis url "redis://h/0/1": unexpected path "/0/1"`},
		{name: "password redacted", url: "redis://user:s3cret@h:6379/x", want: `invalid redis url "redis://user:xxxxx@h:6379/x": bad database number "x"`},
		{name: "several hosts on single node", url: "redis://h1,h2", want: `invalid redis url "redis://h1,h2": a single-node url takes one host; use redis+sentinel:// or redis+cluster:// for several`},
		{name: "empty host in list", url: "redis+cluster://h1,,h2", want: `invalid redis url "redis+cluster://h1,,h2": empty host in host list`},
		{name: "fragment", url: "redis://h#x", want: `invalid redis url "redis://h#x": unexpected fragment`},
		{name: "sentinel without master", url: "redis+sentinel://h1/", want: `invalid redis url "redis+sentinel://h1/": missing master name`},
		{name: "sentinel without path", url: "redis+sentinel://h1:26379,h2:26379", want: `invalid redis url "redis+sentinel://h1:26379,h2:26379": missing master name`},
		{name: "sentinel bad db", url: "redis+sentinel://h1/mymaster/one", want: `invalid redis url "redis+sentinel://h1/mymaster/one": bad database number "one"`},
		{name: "sentinel bad port", url: "redis+sentinel://h1:26379,h2:x/m", want: `invalid redis url "redis+sentinel://h1:26379,h2:x/m": bad port "x" in "h2:x"`},
		{name: "cluster with db", url: "redis+cluster://h1:7000/1", want: `invalid redis url "redis+cluster://h1:7000/1": a cluster url takes no database or path (got "/1")`},
		{name: "bad duration", url: "redis://h?read_timeout=abc", want: `invalid redis url "redis://h?read_timeout=abc": bad option read_timeout="abc": want a duration such as "1s"`},
		{name: "bare integer duration", url: "redis://h?dial_timeout=3", want: `invalid redis url "redis://h?dial_timeout=3": bad option dial_timeout="3": want a duration such as "1s"`},
		{name: "zero duration", url: "redis://h?write_timeout=0s", want: `invalid redis url "redis://h?write_timeout=0s": bad option write_timeout="0s": must be positive`},
		{name: "negative duration", url: "redis://h?read_timeout=-1s", want: `invalid redis url "redis://h?read_timeout=-1s": bad option read_timeout="-1s": must be positive`},
		{name: "bad pool size", url: "redis://h?pool_size=ten", want: `invalid redis url "redis://h?pool_size=ten": bad option pool_size="ten": want an integer`},
		{name: "negative pool size", url: "redis://h?pool_size=-1", want: `invalid redis url "redis://h?pool_size=-1": bad option pool_size="-1": must be at least 0`},
		{name: "max retries below -1", url: "redis://h?max_retries=-2", want: `invalid redis url "redis://h?max_retries=-2": bad option max_retries="-2": must be at least -1`},
		{name: "bad protocol", url: "redis://h?protocol=4", want: `invalid redis url "redis://h?protocol=4": bad option protocol="4": must be 2 or 3`},
		{name: "repeated option", url: "redis://h?pool_size=1&pool_size=2", want: `invalid redis url "redis://h?pool_size=1&pool_size=2": option pool_size given more than once`},
		{name: "unknown option", url: "redis://h?timeout=1s", want: `invalid redis url "redis://h?timeout=1s": unknown option "timeout"`},
		{name: "skip_verify without tls", url: "redis://h?skip_verify=true", want: `invalid redis url "redis://h?skip_verify=true": option skip_verify needs TLS (a rediss scheme)`},
		{name: "bad skip_verify", url: "rediss://h?skip_verify=maybe", want: `invalid redis url "rediss://h?skip_verify=maybe": bad option skip_verify="maybe": want true or false`},
		{name: "sentinel password on single node", url: "redis://h?sentinel_password=pw", want: `invalid redis url "redis://h?sentinel_password=xxxxx": option sentinel_password is only for redis+sentinel urls`},
		{name: "sentinel password redacted", url: "redis+sentinel://:pw@h/m/0?sentinel_password=spw&sentinel_password=x", want: `invalid redis url "redis+sentinel://:xxxxx@h/m/0?sentinel_password=xxxxx&sentinel_password=xxxxx": option sentinel_password given more than once`},
		{name: "max_redirects on single node", url: "redis://h?max_redirects=3", want: `invalid redis url "redis://h?max_redirects=3": option max_redirects is only for redis+cluster urls`},
		{name: "bad query escape", url: "redis://h?a=%zz", want: `invalid redis url "redis://h?a=%zz": bad query: invalid URL escape "%zz"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts, err := redisurl.Parse(tt.url)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("Parse(%q) = %+v, %v\nwant error %s", tt.url, opts, err, tt.want)
			}
			var ue *redisurl.Error
			if !errors.As(err, &ue) {
				t.Fatalf("error %T is not a *redisurl.Error", err)
			}
			if _, err := redisurl.NewClient(tt.url); err == nil || err.Error() != tt.want {
				t.Fatalf("NewClient(%q) = %v, want %s", tt.url, err, tt.want)
			}
		})
	}
}

func TestParse_Options(t *testing.T) {
	tests := []struct {
		name string
		url  string
		want redis.UniversalOptions
		tls  bool // TLSConfig must be set (and is not compared)
	}{
		{
			name: "single node",
			url:  "redis://127.0.0.1:6379/0",
			want: redis.UniversalOptions{Addrs: []string{"127.0.0.1:6379"}},
		},
		{
			name: "default port and db",
			url:  "redis://redis.internal",
			want: redis.UniversalOptions{Addrs: []string{"redis.internal:6379"}},
		},
		{
			name: "scheme is case-insensitive, trailing slash",
			url:  "REDIS://h:6380/",
			want: redis.UniversalOptions{Addrs: []string{"h:6380"}},
		},
		{
			name: "user, password and db",
			url:  "redis://app:p%40ss:word@h:6379/3",
			want: redis.UniversalOptions{Addrs: []string{"h:6379"}, Username: "app", Password: "p@ss:word", DB: 3},
		},
		{
			name: "password only",
			url:  "redis://:secret@h/1",
			want: redis.UniversalOptions{Addrs: []string{"h:6379"}, Password: "secret", DB: 1},
		},
		{
			name: "ipv6",
			url:  "redis://[::1]:6390",
			want: redis.UniversalOptions{Addrs: []string{"[::1]:6390"}},
		},
		{
			name: "ipv6 default port",
			url:  "redis://[::1]",
			want: redis.UniversalOptions{Addrs: []string{"[::1]:6379"}},
		},
		{
			name: "tls",
			url:  "rediss://h:6380/2",
			want: redis.UniversalOptions{Addrs: []string{"h:6380"}, DB: 2},
			tls:  true,
		},
		{
			name: "timeouts and pool",
			url:  "redis://h?dial_timeout=2s&read_timeout=500ms&write_timeout=750ms&pool_size=4&max_retries=-1&client_name=solo&protocol=3&pool_timeout=3s&conn_max_idle_time=1m&conn_max_lifetime=1h&min_retry_backoff=8ms&max_retry_backoff=512ms&min_idle_conns=1&max_idle_conns=2&max_active_conns=8",
			want: redis.UniversalOptions{
				Addrs: []string{"h:6379"}, DialTimeout: 2 * time.Second, ReadTimeout: 500 * time.Millisecond,
				WriteTimeout: 750 * time.Millisecond, PoolSize: 4, MaxRetries: -1, ClientName: "solo", Protocol: 3,
				PoolTimeout: 3 * time.Second, ConnMaxIdleTime: time.Minute, ConnMaxLifetime: time.Hour,
				MinRetryBackoff: 8 * time.Millisecond, MaxRetryBackoff: 512 * time.Millisecond,
				MinIdleConns: 1, MaxIdleConns: 2, MaxActiveConns: 8,
			},
		},
		{
			name: "sentinel timeouts and pool",
			url:  "redis+sentinel://h1/m?dial_timeout=2s&write_timeout=750ms&pool_size=4&max_retries=-1&client_name=solo&protocol=3&pool_timeout=3s&conn_max_idle_time=1m&conn_max_lifetime=1h&min_retry_backoff=8ms&max_retry_backoff=512ms&min_idle_conns=1&max_idle_conns=2&max_active_conns=8",
			want: redis.UniversalOptions{
				Addrs: []string{"h1:26379"}, MasterName: "m", DialTimeout: 2 * time.Second,
				WriteTimeout: 750 * time.Millisecond, PoolSize: 4, MaxRetries: -1, ClientName: "solo", Protocol: 3,
				PoolTimeout: 3 * time.Second, ConnMaxIdleTime: time.Minute, ConnMaxLifetime: time.Hour,
				MinRetryBackoff: 8 * time.Millisecond, MaxRetryBackoff: 512 * time.Millisecond,
				MinIdleConns: 1, MaxIdleConns: 2, MaxActiveConns: 8,
			},
		},
		{
			name: "cluster timeouts and pool",
			url:  "redis+cluster://h1:7000?dial_timeout=2s&read_timeout=500ms&pool_size=4&max_retries=-1&client_name=solo&protocol=3&pool_timeout=3s&conn_max_idle_time=1m&conn_max_lifetime=1h&min_retry_backoff=8ms&max_retry_backoff=512ms&min_idle_conns=1&max_idle_conns=2&max_active_conns=8",
			want: redis.UniversalOptions{
				Addrs: []string{"h1:7000"}, IsClusterMode: true, DialTimeout: 2 * time.Second,
				ReadTimeout: 500 * time.Millisecond, PoolSize: 4, MaxRetries: -1, ClientName: "solo", Protocol: 3,
				PoolTimeout: 3 * time.Second, ConnMaxIdleTime: time.Minute, ConnMaxLifetime: time.Hour,
				MinRetryBackoff: 8 * time.Millisecond, MaxRetryBackoff: 512 * time.Millisecond,
				MinIdleConns: 1, MaxIdleConns: 2, MaxActiveConns: 8,
			},
		},
		{
			name: "sentinel",
			url:  "redis+sentinel://app:pw@h1:26379,h2:26380,h3/mymaster/2?sentinel_username=s&sentinel_password=spw&read_timeout=2s",
			want: redis.UniversalOptions{
				Addrs: []string{"h1:26379", "h2:26380", "h3:26379"}, MasterName: "mymaster", DB: 2,
				Username: "app", Password: "pw", SentinelUsername: "s", SentinelPassword: "spw", ReadTimeout: 2 * time.Second,
			},
		},
		{
			name: "sentinel one address, no db",
			url:  "redis+sentinel://h1/mymaster",
			want: redis.UniversalOptions{Addrs: []string{"h1:26379"}, MasterName: "mymaster"},
		},
		{
			name: "sentinel over tls",
			url:  "rediss+sentinel://h1:26379/mymaster/",
			want: redis.UniversalOptions{Addrs: []string{"h1:26379"}, MasterName: "mymaster"},
			tls:  true,
		},
		{
			name: "cluster",
			url:  "redis+cluster://:pw@h1:7000,h2:7001?max_redirects=5",
			want: redis.UniversalOptions{Addrs: []string{"h1:7000", "h2:7001"}, Password: "pw", MaxRedirects: 5, IsClusterMode: true},
		},
		{
			name: "cluster one seed",
			url:  "redis+cluster://h1:7000/",
			want: redis.UniversalOptions{Addrs: []string{"h1:7000"}, IsClusterMode: true},
		},
		{
			name: "cluster over tls",
			url:  "rediss+cluster://h1:7000,h2:7000?skip_verify=true",
			want: redis.UniversalOptions{Addrs: []string{"h1:7000", "h2:7000"}, IsClusterMode: true},
			tls:  true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := redisurl.Parse(tt.url)
			if err != nil {
				t.Fatalf("Parse(%q) = %v", tt.url, err)
			}
			if tt.tls != (got.TLSConfig != nil) {
				t.Fatalf("TLSConfig = %v, want set: %v", got.TLSConfig, tt.tls)
			}
			g := *got
			g.TLSConfig = nil
			if !reflect.DeepEqual(g, tt.want) {
				t.Fatalf("Parse(%q) =\n%+v\nwant\n%+v", tt.url, g, tt.want)
			}
		})
	}
}

func TestParse_TLS(t *testing.T) {
	opts, err := redisurl.Parse("rediss://h:6380")
	if err != nil {
		t.Fatal(err)
	}
	if opts.TLSConfig.InsecureSkipVerify || opts.TLSConfig.MinVersion == 0 {
		t.Fatalf("TLSConfig = %+v, want verification on and a minimum version", opts.TLSConfig)
	}
	opts, err = redisurl.Parse("rediss://h:6380?skip_verify=true")
	if err != nil {
		t.Fatal(err)
	}
	if !opts.TLSConfig.InsecureSkipVerify {
		t.Fatal("skip_verify=true did not disable verification")
	}
}

func TestNewClient_KindAndDefaults(t *testing.T) {
	t.Run("single node", func(t *testing.T) {
		c := newRedisClient(t, "redis://127.0.0.1:1/4")
		rc, ok := c.(*redis.Client)
		if !ok {
			t.Fatalf("client is %T, want *redis.Client", c)
		}
		o := rc.Options()
		if o.Addr != "127.0.0.1:1" || o.DB != 4 || !o.ContextTimeoutEnabled ||
			o.ReadTimeout != redisurl.DefaultTimeout || o.WriteTimeout != redisurl.DefaultTimeout {
			t.Fatalf("options = Addr %s DB %d ContextTimeoutEnabled %v ReadTimeout %s WriteTimeout %s",
				o.Addr, o.DB, o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout)
		}
	})
	t.Run("given timeouts win", func(t *testing.T) {
		c := newRedisClient(t, "redis://127.0.0.1:1?read_timeout=3s&write_timeout=2s")
		o := c.(*redis.Client).Options()
		if o.ReadTimeout != 3*time.Second || o.WriteTimeout != 2*time.Second {
			t.Fatalf("ReadTimeout %s WriteTimeout %s, want 3s 2s", o.ReadTimeout, o.WriteTimeout)
		}
	})
	t.Run("sentinel", func(t *testing.T) {
		c := newRedisClient(t, "redis+sentinel://127.0.0.1:1/mymaster")
		rc, ok := c.(*redis.Client)
		if !ok {
			t.Fatalf("client is %T, want a failover *redis.Client", c)
		}
		if o := rc.Options(); !o.ContextTimeoutEnabled || o.ReadTimeout != redisurl.DefaultTimeout {
			t.Fatalf("ContextTimeoutEnabled %v ReadTimeout %s", o.ContextTimeoutEnabled, o.ReadTimeout)
		}
	})
	t.Run("cluster with one seed", func(t *testing.T) {
		c := newRedisClient(t, "redis+cluster://127.0.0.1:1")
		cc, ok := c.(*redis.ClusterClient)
		if !ok {
			t.Fatalf("client is %T, want *redis.ClusterClient", c)
		}
		o := cc.Options()
		if !o.ContextTimeoutEnabled || o.ReadTimeout != redisurl.DefaultTimeout || o.WriteTimeout != redisurl.DefaultTimeout {
			t.Fatalf("ContextTimeoutEnabled %v ReadTimeout %s WriteTimeout %s", o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout)
		}
	})
}

func TestRedact(t *testing.T) {
	tests := []struct{ in, want string }{
		{"redis://h:6379/0", "redis://h:6379/0"},
		{"redis://u:p@h", "redis://u:xxxxx@h"},
		{"redis://u@h", "redis://u@h"},
		{"redis://u:p@ss@h/0", "redis://u:xxxxx@h/0"},
		{"u:p@h:6379", "u:xxxxx@h:6379"},
		// A secret value runs to the next known option: a password may hold '&'.
		{"redis+sentinel://h/m?a=1&sentinel_password=x&b=2", "redis+sentinel://h/m?a=1&sentinel_password=xxxxx"},
		{"redis+sentinel://h/m?a=1&sentinel_password=x&dial_timeout=1s", "redis+sentinel://h/m?a=1&sentinel_password=xxxxx&dial_timeout=1s"},
		{"redis://u:pw@h/0?password=pw2", "redis://u:xxxxx@h/0?password=xxxxx"},
		{"rediss://:a/b+c==@h", "rediss://xxxxx@h"},
		{"redis://:a?b@h/0", "redis://xxxxx@h/0"},
		{"redis://:a#b@h/0", "redis://xxxxx@h/0"},
		{"postgres://u@h/db?sslmode=disable&password=p&connect_timeout=3", "postgres://u@h/db?sslmode=disable&password=xxxxx&connect_timeout=3"},
		// Conservative: an '@' in an option hides what comes before it.
		{"redis://h/0?client_name=a@b", "redis://xxxxx@b"},
	}
	for _, tt := range tests {
		if got := redisurl.Redact(tt.in); got != tt.want {
			t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func newRedisClient(t *testing.T, url string) redis.UniversalClient {
	t.Helper()
	c, err := redisurl.NewClient(url)
	if err != nil {
		t.Fatalf("NewClient(%q) = %v", url, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
