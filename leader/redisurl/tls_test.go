package redisurl_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader/redisurl"
)

// tlsSetup is a server certificate authority, a redis-server serving TLS
// with a certificate it signed for 127.0.0.1 and redis.test, and a client
// certificate it signed.
type tlsSetup struct {
	ca                    *redistest.CA
	srv                   *redistest.Server
	clientCert, clientKey string
}

func startTLS(t *testing.T, authClients bool) tlsSetup {
	t.Helper()
	ca := redistest.NewCA(t, "solo-test")
	cert, key := ca.Issue(t, "server", "127.0.0.1", "redis.test")
	clientCert, clientKey := ca.Issue(t, "client")
	srv := redistest.StartTLS(t, redistest.TLS{CertFile: cert, KeyFile: key, CAFile: ca.File, AuthClients: authClients})
	return tlsSetup{ca: ca, srv: srv, clientCert: clientCert, clientKey: clientKey}
}

// pingURL builds a client for url and returns the error of one PING.
func pingURL(t *testing.T, url string) error {
	t.Helper()
	c, err := redisurl.NewClient(url)
	if err != nil {
		t.Fatalf("NewClient(%q) = %v", url, err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}

func TestTLS_ServerOnly(t *testing.T) {
	s := startTLS(t, false)
	base := "rediss://" + s.srv.TLSAddr()
	if err := pingURL(t, base+"?tls_ca_file="+s.ca.File); err != nil {
		t.Fatalf("PING over TLS with the server's CA: %v", err)
	}
	// The system's authorities do not know the test CA.
	err := pingURL(t, base)
	if err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Fatalf("PING without tls_ca_file = %v, want certificate signed by unknown authority", err)
	}
	if err := pingURL(t, base+"?skip_verify=true"); err != nil {
		t.Fatalf("PING with skip_verify=true: %v", err)
	}
}

func TestTLS_Mutual(t *testing.T) {
	s := startTLS(t, true)
	base := "rediss://" + s.srv.TLSAddr() + "?tls_ca_file=" + s.ca.File
	if err := pingURL(t, base+"&tls_cert_file="+s.clientCert+"&tls_key_file="+s.clientKey); err != nil {
		t.Fatalf("PING with a client certificate: %v", err)
	}
	if err := pingURL(t, base); err == nil {
		t.Fatal("PING without a client certificate succeeded against --tls-auth-clients yes")
	}
	// A client certificate from another authority is refused too.
	other := redistest.NewCA(t, "other")
	cert, key := other.Issue(t, "stranger")
	if err := pingURL(t, base+"&tls_cert_file="+cert+"&tls_key_file="+key); err == nil {
		t.Fatal("PING with a client certificate of another CA succeeded")
	}
}

func TestTLS_WrongCA(t *testing.T) {
	s := startTLS(t, false)
	other := redistest.NewCA(t, "other")
	err := pingURL(t, "rediss://"+s.srv.TLSAddr()+"?tls_ca_file="+other.File)
	if err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Fatalf("PING with the wrong CA = %v, want certificate signed by unknown authority", err)
	}
}

func TestTLS_ServerName(t *testing.T) {
	ca := redistest.NewCA(t, "solo-test")
	cert, key := ca.Issue(t, "server", "redis.test") // no IP address
	srv := redistest.StartTLS(t, redistest.TLS{CertFile: cert, KeyFile: key, CAFile: ca.File})
	base := "rediss://" + srv.TLSAddr() + "?tls_ca_file=" + ca.File
	err := pingURL(t, base)
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Fatalf("PING checking the dialed IP = %v, want a certificate name error naming 127.0.0.1", err)
	}
	if err := pingURL(t, base+"&tls_server_name=redis.test"); err != nil {
		t.Fatalf("PING with tls_server_name=redis.test: %v", err)
	}
	if err := pingURL(t, base+"&tls_server_name=other.test"); err == nil {
		t.Fatal("PING with tls_server_name=other.test succeeded")
	}
}

func TestParse_TLSFiles(t *testing.T) {
	ca := redistest.NewCA(t, "solo-test")
	cert, key := ca.Issue(t, "client")
	_, otherKey := ca.Issue(t, "other")
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")

	opts, err := redisurl.Parse("rediss://h:6380?tls_ca_file=" + ca.File + "&tls_cert_file=" + cert + "&tls_key_file=" + key + "&tls_server_name=redis.test")
	if err != nil {
		t.Fatal(err)
	}
	c := opts.TLSConfig
	if c.RootCAs == nil || len(c.Certificates) != 1 || c.ServerName != "redis.test" || c.InsecureSkipVerify {
		t.Fatalf("TLSConfig: RootCAs %v, %d certificates, ServerName %q, InsecureSkipVerify %v",
			c.RootCAs != nil, len(c.Certificates), c.ServerName, c.InsecureSkipVerify)
	}
	// The cluster and sentinel schemes take the same options.
	for _, u := range []string{
		"rediss+cluster://h1,h2?tls_ca_file=" + ca.File,
		"rediss+sentinel://h1,h2/m?tls_ca_file=" + ca.File,
	} {
		if opts, err := redisurl.Parse(u); err != nil || opts.TLSConfig.RootCAs == nil {
			t.Fatalf("Parse(%q): err %v", u, err)
		}
	}

	tests := []struct{ name, query, want string }{
		{"missing CA file", "tls_ca_file=" + missing, `option tls_ca_file="` + missing + `": open ` + missing + `: no such file or directory`},
		{"CA file without PEM", "tls_ca_file=" + notPEM, `option tls_ca_file="` + notPEM + `": no PEM certificate in the file`},
		{"certificate without key", "tls_cert_file=" + cert, "option tls_cert_file needs tls_key_file"},
		{"key without certificate", "tls_key_file=" + key, "option tls_key_file needs tls_cert_file"},
		{"key of another certificate", "tls_cert_file=" + cert + "&tls_key_file=" + otherKey, "private key does not match public key"},
		{"skip_verify with a CA", "skip_verify=true&tls_ca_file=" + ca.File, "skip_verify=true turns off the verification"},
		{"empty server name", "tls_server_name=", "bad option tls_server_name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := redisurl.Parse("rediss://h:6380?" + tt.query)
			var ue *redisurl.Error
			if !errors.As(err, &ue) || !strings.Contains(ue.Reason, tt.want) {
				t.Fatalf("Parse(?%s) = %v, want a *redisurl.Error containing %q", tt.query, err, tt.want)
			}
		})
	}
	for _, name := range []string{"tls_ca_file", "tls_cert_file", "tls_key_file", "tls_server_name"} {
		_, err := redisurl.Parse("redis://h?" + name + "=x")
		if err == nil || !strings.Contains(err.Error(), "option "+name+" needs TLS (a rediss scheme)") {
			t.Fatalf("Parse(redis://h?%s=x) = %v, want needs TLS", name, err)
		}
	}
}
