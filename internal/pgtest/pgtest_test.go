package pgtest_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/solo-run/solo/internal/pgtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestStart(t *testing.T) {
	s := pgtest.Start(t)
	db := s.DB(t)
	var v string
	if err := db.QueryRowContext(t.Context(), "SHOW server_version").Scan(&v); err != nil {
		t.Fatalf("query: %v", err)
	}
	var addr string
	if err := db.QueryRowContext(t.Context(), "SELECT host(inet_server_addr())").Scan(&addr); err != nil {
		t.Fatalf("query: %v", err)
	}
	if addr != "127.0.0.1" {
		t.Errorf("server address = %q, want 127.0.0.1", addr)
	}
	t.Logf("postgres %s on port %d", v, s.Port())
}

func TestStart_Two(t *testing.T) {
	a, b := pgtest.Start(t), pgtest.Start(t)
	if a.DSN() == b.DSN() {
		t.Fatalf("two servers share DSN %s", a.DSN())
	}
	for _, s := range []*pgtest.Server{a, b} {
		if err := s.DB(t).PingContext(t.Context()); err != nil {
			t.Fatalf("ping %s: %v", s.DSN(), err)
		}
	}
}
