package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TLS is the TLS setup of a server started by StartTLS: PEM files, as
// CA.Issue writes them.
type TLS struct {
	CertFile, KeyFile string // the server's certificate and key
	CAFile            string // the authorities that verify client certificates
	// AuthClients requires clients to present a certificate signed by
	// CAFile (redis-server --tls-auth-clients yes); false lets them connect
	// without one.
	AuthClients bool
}

// StartTLS is Start with a TLS port as well (redis-server --tls-port): TLSAddr
// serves TLS with c's files. The plain port (Addr, Client) stays open on
// loopback for the readiness probe and for tests that inspect the server.
func StartTLS(t testing.TB, c TLS, args ...string) *Server {
	t.Helper()
	auth := "no"
	if c.AuthClients {
		auth = "yes"
	}
	extra := append([]string{
		"--tls-cert-file", c.CertFile, "--tls-key-file", c.KeyFile,
		"--tls-ca-cert-file", c.CAFile, "--tls-auth-clients", auth,
	}, args...)
	return start(t, modePlain, extra, func(s *Server) error {
		p, err := freePort()
		s.tlsPort = p
		return err
	})
}

// TLSSetup is a test's TLS world, made by StartTLSWithCA: a CA, a
// redis-server serving TLS with a certificate the CA signed for 127.0.0.1
// (CertFile), and a client certificate and key the CA signed.
type TLSSetup struct {
	CA                    *CA
	Server                *Server
	CertFile              string
	ClientCert, ClientKey string
}

// StartTLSWithCA makes a CA, issues a server and a client certificate
// and starts a redis-server serving TLS with the server's, requiring
// client certificates when authClients is true.
func StartTLSWithCA(t testing.TB, authClients bool) TLSSetup {
	t.Helper()
	ca := NewCA(t, "solo-test")
	cert, key := ca.Issue(t, "server", "127.0.0.1")
	clientCert, clientKey := ca.Issue(t, "client")
	srv := StartTLS(t, TLS{CertFile: cert, KeyFile: key, CAFile: ca.File, AuthClients: authClients})
	return TLSSetup{CA: ca, Server: srv, CertFile: cert, ClientCert: clientCert, ClientKey: clientKey}
}

// TLSAddr returns the server's TLS address, "127.0.0.1:port", or "" for a
// server not started by StartTLS.
func (s *Server) TLSAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tlsPort == 0 {
		return ""
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.tlsPort))
}

// CA is a certificate authority made for one test; its files live in the
// test's temporary directory.
type CA struct {
	// File is the CA certificate, PEM.
	File string

	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewCA creates a self-signed certificate authority named name, valid for a
// day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("create CA %s: %v", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ca := &CA{File: filepath.Join(dir, name+"-ca.pem"), dir: dir, cert: cert, key: key}
	writePEM(t, ca.File, "CERTIFICATE", der)
	return ca
}

// Issue writes a certificate named name signed by ca, with its key, and
// returns the two files. hosts are its DNS names and IP addresses; the
// certificate serves both as a server's and as a client's.
func (ca *CA) Issue(t testing.TB, name string, hosts ...string) (certFile, keyFile string) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("issue %s: %v", name, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(ca.dir, name+".pem"), filepath.Join(ca.dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "PRIVATE KEY", keyDER)
	return certFile, keyFile
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// NotAfter returns the expiry (notAfter) of the first certificate in the
// PEM file certFile, as CA.Issue and NewCA write them.
func NotAfter(t testing.TB, certFile string) time.Time {
	t.Helper()
	b, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s: no PEM block", certFile)
	}
	x, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatalf("%s: %v", certFile, err)
	}
	return x.NotAfter
}
