package workerprom

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// WatchTLS exports on reg the expiry of the TLS certificates client uses
// with Redis, as solo_tls_cert_expiry_seconds{cert} (Unix seconds, the
// certificate's notAfter):
//
//	cert="client"  the earliest notAfter of the client certificate's chain (the URL's tls_cert_file), from the start
//	cert="server"  the earliest notAfter among the servers' certificates, as each address presented its certificate at its last handshake
//	cert="ca"      the same, of the authorities (intermediates and root) that verified them: the latest-lasting verified chain of each address
//
// server and ca appear with the first TLS connection (ca only when the
// server is verified, not with skip_verify=true). A client without TLS
// exports nothing. A server certificate rotated on the server shows at
// the next connection to that address; an address no longer dialed keeps
// its last value. The alerts SoloTLSCertExpiring and
// SoloTLSCertExpiringCritical read it (deploy/prometheus).
//
// It watches the connections through a go-redis dial hook: call it before
// client's first command (a cluster client's nodes created before it are
// not watched). Watching the same client twice, or several clients on one
// reg, is fine: they share one collector.
func WatchTLS(reg prometheus.Registerer, client redis.UniversalClient) error {
	var conf *tls.Config
	switch c := client.(type) {
	case *redis.Client:
		conf = c.Options().TLSConfig
	case *redis.ClusterClient:
		conf = c.Options().TLSConfig
	}
	if conf == nil {
		return nil
	}
	ce := newCertExpiry()
	if err := register(reg, &ce); err != nil {
		return err
	}
	if !ce.watch(client, conf) {
		return nil
	}
	h := certHook{ce}
	if c, ok := client.(*redis.ClusterClient); ok {
		c.OnNewNode(func(n *redis.Client) { n.AddHook(h) })
		return nil
	}
	client.AddHook(h)
	return nil
}

// certExpiry is the collector of solo_tls_cert_expiry_seconds.
type certExpiry struct {
	desc *prometheus.Desc

	mu      sync.Mutex
	watched map[redis.UniversalClient]bool
	client  time.Time            // earliest of the client chains; zero: none
	servers map[string]time.Time // address → its leaf's notAfter
	cas     map[string]time.Time // address → its authorities' notAfter
}

func newCertExpiry() *certExpiry {
	return &certExpiry{
		desc: prometheus.NewDesc("solo_tls_cert_expiry_seconds",
			"Unix time at which a TLS certificate solo uses with Redis expires (notAfter): cert client (its own), server (the earliest the servers presented), ca (the authorities that verified them).",
			[]string{"cert"}, nil),
		watched: map[redis.UniversalClient]bool{},
		servers: map[string]time.Time{},
		cas:     map[string]time.Time{},
	}
}

// watch records client's own certificates from conf; it returns false
// when client was watched already.
func (ce *certExpiry) watch(client redis.UniversalClient, conf *tls.Config) bool {
	ce.mu.Lock()
	defer ce.mu.Unlock()
	if ce.watched[client] {
		return false
	}
	ce.watched[client] = true
	for _, c := range conf.Certificates {
		for _, der := range c.Certificate {
			if x, err := x509.ParseCertificate(der); err == nil {
				ce.client = earliest(ce.client, x.NotAfter)
			}
		}
	}
	return true
}

// seen records the certificates of a handshake with addr.
func (ce *certExpiry) seen(addr string, cs tls.ConnectionState) {
	if len(cs.PeerCertificates) == 0 {
		return
	}
	var ca time.Time // the latest-lasting verified chain's authorities
	for _, chain := range cs.VerifiedChains {
		var end time.Time
		for _, x := range chain[1:] {
			end = earliest(end, x.NotAfter)
		}
		if end.After(ca) {
			ca = end
		}
	}
	ce.mu.Lock()
	defer ce.mu.Unlock()
	ce.servers[addr] = cs.PeerCertificates[0].NotAfter
	if ca.IsZero() {
		delete(ce.cas, addr)
	} else {
		ce.cas[addr] = ca
	}
}

// earliest returns the earlier of a (zero: none) and b.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

// Describe implements prometheus.Collector.
func (ce *certExpiry) Describe(ch chan<- *prometheus.Desc) { ch <- ce.desc }

// Collect implements prometheus.Collector.
func (ce *certExpiry) Collect(ch chan<- prometheus.Metric) {
	ce.mu.Lock()
	values := map[string]time.Time{"client": ce.client}
	for _, t := range ce.servers {
		values["server"] = earliest(values["server"], t)
	}
	for _, t := range ce.cas {
		values["ca"] = earliest(values["ca"], t)
	}
	ce.mu.Unlock()
	for cert, t := range values {
		if !t.IsZero() {
			ch <- prometheus.MustNewConstMetric(ce.desc, prometheus.GaugeValue, float64(t.Unix()), cert)
		}
	}
}

// certHook is the go-redis dial hook that shows each TLS handshake to a
// certExpiry.
type certHook struct{ ce *certExpiry }

// tlsConn is a TLS connection: a *tls.Conn, or a dialer's wrapper of one
// (leader/redisurl's handshakes on first use).
type tlsConn interface {
	net.Conn
	ConnectionState() tls.ConnectionState
}

// DialHook implements redis.Hook: a TLS connection's handshake is
// recorded, at the dial when the dialer handshook there (go-redis's own),
// else once the connection's first read or write completed it.
func (h certHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		tc, ok := conn.(tlsConn)
		if err != nil || !ok {
			return conn, err
		}
		if cs := tc.ConnectionState(); cs.HandshakeComplete {
			h.ce.seen(addr, cs)
			return conn, nil
		}
		return &seenOnUse{tlsConn: tc, ce: h.ce, addr: addr}, nil
	}
}

// seenOnUse records its connection's handshake with ce after the read or
// write that completed it; every other method is the connection's own.
type seenOnUse struct {
	tlsConn
	ce   *certExpiry
	addr string
	done atomic.Bool
}

func (c *seenOnUse) Read(b []byte) (int, error) {
	n, err := c.tlsConn.Read(b)
	c.check()
	return n, err
}

func (c *seenOnUse) Write(b []byte) (int, error) {
	n, err := c.tlsConn.Write(b)
	c.check()
	return n, err
}

// check records the handshake once it is complete.
func (c *seenOnUse) check() {
	if c.done.Load() {
		return
	}
	if cs := c.ConnectionState(); cs.HandshakeComplete && c.done.CompareAndSwap(false, true) {
		c.ce.seen(c.addr, cs)
	}
}

// ProcessHook implements redis.Hook (unchanged).
func (certHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// ProcessPipelineHook implements redis.Hook (unchanged).
func (certHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
