package main

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/solo-run/solo/internal/redistest"
)

// TestRun_TLSMetrics runs solo run in mode always against a redis-server
// over mutual TLS: its /metrics shows the expiry of the client
// certificate, of the server's and of the CA that verified it
// (solo_tls_cert_expiry_seconds, which SoloTLSCertExpiring alerts on), and
// its mode (solo_worker_mode, which keeps SoloElectionNoLeader quiet).
func TestRun_TLSMetrics(t *testing.T) {
	ca := redistest.NewCA(t, "solo-test")
	cert, key := ca.Issue(t, "server", "127.0.0.1")
	clientCert, clientKey := ca.Issue(t, "client")
	srv := redistest.StartTLS(t, redistest.TLS{CertFile: cert, KeyFile: key, CAFile: ca.File, AuthClients: true})
	addr := freeAddr(t)
	env := append(testEnv("rediss://"+srv.TLSAddr(), "tls-metrics", "a"),
		"SOLO_REDIS_TLS_CA_FILE="+ca.File, "SOLO_REDIS_TLS_CERT_FILE="+clientCert, "SOLO_REDIS_TLS_KEY_FILE="+clientKey,
		"SOLO_HTTP_ADDR="+addr, "SOLO_ELECTION_MODE=always")
	startSolo(t, env, "run", "--", "sleep", "1000")
	want := map[string]float64{
		`solo_tls_cert_expiry_seconds{cert="client"}`:            float64(pemNotAfter(t, clientCert)),
		`solo_tls_cert_expiry_seconds{cert="server"}`:            float64(pemNotAfter(t, cert)),
		`solo_tls_cert_expiry_seconds{cert="ca"}`:                float64(pemNotAfter(t, ca.File)),
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

// pemNotAfter returns the notAfter, in Unix seconds, of the PEM
// certificate in file.
func pemNotAfter(t *testing.T, file string) int64 {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s: no PEM block", file)
	}
	x, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return x.NotAfter.Unix()
}
