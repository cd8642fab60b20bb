package main

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/solo-run/solo/cmd/solo/internal/config"
	"github.com/solo-run/solo/internal/redistest"
)

// TestStatus_TLS runs solo status against a redis-server that requires
// client certificates, with the TLS files given as config keys through
// their environment variables.
func TestStatus_TLS(t *testing.T) {
	m := redistest.StartTLSWithCA(t, true)
	ca, srv, clientCert, clientKey := m.CA, m.Server, m.ClientCert, m.ClientKey
	other := redistest.NewCA(t, "other")

	status := func(extra ...string) (int, string) {
		env := append([]string{"SOLO_CONFIG=/dev/null", "SOLO_REDIS_URL=rediss://" + srv.TLSAddr(), "SOLO_ELECTION_NAME=tls"}, extra...)
		var out, errb bytes.Buffer
		code := run([]string{"status"}, &out, &errb, env)
		return code, out.String() + errb.String()
	}
	mtls := []string{"SOLO_REDIS_TLS_CERT_FILE=" + clientCert, "SOLO_REDIS_TLS_KEY_FILE=" + clientKey}
	if code, out := status(append(mtls, "SOLO_REDIS_TLS_CA_FILE="+ca.File)...); code != exitNoLeader || !strings.Contains(out, "(none)") {
		t.Fatalf("status over mutual TLS = %d %q, want %d (read from Redis: no leader)", code, out, exitNoLeader)
	}
	// The wrong CA is a configuration error, reported at once (not retried
	// as an unreachable server) and naming the key to fix.
	code, out := status(append(mtls, "SOLO_REDIS_TLS_CA_FILE="+other.File)...)
	if code != exitUsage || !strings.Contains(out, "certificate signed by unknown authority") || !strings.Contains(out, "redis.tls_ca_file") {
		t.Fatalf("status with the wrong CA = %d %q, want a usage error naming the certificate and redis.tls_ca_file", code, out)
	}
	// No client certificate: the server refuses the handshake.
	code, out = status("SOLO_REDIS_TLS_CA_FILE=" + ca.File)
	if code != exitUsage || !strings.Contains(out, "certificate required") || !strings.Contains(out, "redis.tls_cert_file") {
		t.Fatalf("status without a client certificate = %d %q, want a usage error naming redis.tls_cert_file", code, out)
	}
	// A client certificate of an authority the server does not trust.
	strangerCert, strangerKey := other.Issue(t, "stranger")
	code, out = status("SOLO_REDIS_TLS_CA_FILE="+ca.File, "SOLO_REDIS_TLS_CERT_FILE="+strangerCert, "SOLO_REDIS_TLS_KEY_FILE="+strangerKey)
	if code != exitUsage || !strings.Contains(out, "refused the client certificate") {
		t.Fatalf("status with a stranger's client certificate = %d %q, want a usage error", code, out)
	}
}

func TestConfig_RedisTLS(t *testing.T) {
	ca := redistest.NewCA(t, "solo-test")
	tests := []struct{ name, url, yaml, want string }{
		{"added to the url", "rediss://h:6380/0", "  tls_ca_file: " + ca.File + "\n  tls_server_name: redis.test\n", ""},
		{"given twice", "rediss://h?tls_ca_file=" + ca.File, "  tls_ca_file: " + ca.File + "\n", `redis.tls_ca_file "` + ca.File + `": also given as tls_ca_file in redis.url: give it once`},
		{"without TLS", "redis://h", "  tls_server_name: redis.test\n", `redis.tls_server_name "redis.test": needs TLS`},
		{"unreadable file", "rediss://h", "  tls_ca_file: /nonexistent.pem\n", `redis: option tls_ca_file="/nonexistent.pem": open /nonexistent.pem: no such file or directory`},
		{"certificate without key", "rediss://h", "  tls_cert_file: " + ca.File + "\n", "redis: option tls_cert_file needs tls_key_file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := "redis:\n  url: " + tt.url + "\n" + tt.yaml + "election:\n  name: e\n"
			cfg, err := config.Parse([]byte(data), nil)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				want := tt.url + "?tls_ca_file=" + strings.ReplaceAll(ca.File, "/", "%2F") + "&tls_server_name=redis.test"
				if got := cfg.Redis.ClientURL(); got != want {
					t.Fatalf("ClientURL() = %q, want %q", got, want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse = %v, want %q", err, tt.want)
			}
		})
	}
}

// TestRun_TLSMetrics runs solo run in mode always against a redis-server
// over mutual TLS: its /metrics shows the expiry of the client
// certificate, of the server's and of the CA that verified it
// (solo_tls_cert_expiry_seconds, which SoloTLSCertExpiring alerts on), and
// its mode (solo_worker_mode, which keeps SoloElectionNoLeader quiet).
func TestRun_TLSMetrics(t *testing.T) {
	m := redistest.StartTLSWithCA(t, true)
	addr := freeAddr(t)
	env := append(testEnv("rediss://"+m.Server.TLSAddr(), "tls-metrics", "a"),
		"SOLO_REDIS_TLS_CA_FILE="+m.CA.File, "SOLO_REDIS_TLS_CERT_FILE="+m.ClientCert, "SOLO_REDIS_TLS_KEY_FILE="+m.ClientKey,
		"SOLO_HTTP_ADDR="+addr, "SOLO_ELECTION_MODE=always")
	startSolo(t, env, "run", "--", "sleep", "1000")
	expiry := func(file string) float64 { return float64(redistest.NotAfter(t, file).Unix()) }
	want := map[string]float64{
		`solo_tls_cert_expiry_seconds{cert="client"}`:            expiry(m.ClientCert),
		`solo_tls_cert_expiry_seconds{cert="server"}`:            expiry(m.CertFile),
		`solo_tls_cert_expiry_seconds{cert="ca"}`:                expiry(m.CA.File),
		`solo_worker_mode{election="tls-metrics",mode="always"}`: 1,
	}
	var body string
	defer func() {
		if t.Failed() {
			t.Logf("/metrics:\n%s", body)
		}
	}()
	waitFor(t, 20*time.Second, "the certificates' expiry and the mode on /metrics", func() bool {
		_, body = httpGet(t, "http://"+addr+"/metrics")
		got := map[string]float64{}
		for line := range strings.SplitSeq(body, "\n") {
			if series, value, ok := strings.Cut(line, " "); ok {
				got[series], _ = strconv.ParseFloat(value, 64)
			}
		}
		for series, v := range want {
			if g, ok := got[series]; !ok || g != v {
				return false
			}
		}
		return true
	})
}
