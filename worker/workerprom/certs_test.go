package workerprom_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader/redisurl"
	"github.com/solo-run/solo/worker/workerprom"
)

// TestWatchTLS: against a real redis-server over TLS, with a client
// certificate, solo_tls_cert_expiry_seconds shows the client certificate's
// notAfter from the start and the server's and its CA's once a connection
// was made; watching twice changes nothing. With skip_verify=true nothing
// verified the server: no ca. A client without TLS exports nothing.
func TestWatchTLS(t *testing.T) {
	s := redistest.StartTLSWithCA(t, true)
	ca, srv, cert, clientCert, clientKey := s.CA, s.Server, s.CertFile, s.ClientCert, s.ClientKey

	gauge := func(lines ...string) string {
		return "# HELP solo_tls_cert_expiry_seconds Unix time at which a TLS certificate solo uses with Redis expires (notAfter): cert client (its own), server (the earliest the servers presented), ca (the authorities that verified them).\n" +
			"# TYPE solo_tls_cert_expiry_seconds gauge\n" + strings.Join(lines, "\n") + "\n"
	}
	check := func(url string, before, after string) {
		t.Helper()
		reg := prometheus.NewRegistry()
		client, err := redisurl.NewClient(url)
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		for range 2 {
			if err := workerprom.WatchTLS(reg, client); err != nil {
				t.Fatal(err)
			}
		}
		if err := testutil.GatherAndCompare(reg, strings.NewReader(before), "solo_tls_cert_expiry_seconds"); err != nil {
			t.Fatalf("before the first connection: %v", err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if err := client.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := testutil.GatherAndCompare(reg, strings.NewReader(after), "solo_tls_cert_expiry_seconds"); err != nil {
			t.Fatalf("after PING: %v", err)
		}
	}
	expiry := func(file string) string { return strconv.FormatInt(redistest.NotAfter(t, file).Unix(), 10) }
	client := `solo_tls_cert_expiry_seconds{cert="client"} ` + expiry(clientCert)
	server := `solo_tls_cert_expiry_seconds{cert="server"} ` + expiry(cert)
	caLine := `solo_tls_cert_expiry_seconds{cert="ca"} ` + expiry(ca.File)
	base := "rediss://" + srv.TLSAddr() + "?tls_cert_file=" + clientCert + "&tls_key_file=" + clientKey
	check(base+"&tls_ca_file="+ca.File, gauge(client), gauge(caLine, client, server))
	check(base+"&skip_verify=true", gauge(client), gauge(client, server))
	check("redis://"+srv.Addr(), "", "")
}
