package main

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/solo-run/solo/internal/redistest"
)

// tlsACLRig is a redis-server serving TLS, with the ACL user solo (the
// documented rules, password pw), and solo's environment for it.
type tlsACLRig struct {
	srv *redistest.Server
	ca  *redistest.CA
	url string // rediss://solo:pw@127.0.0.1:TLSPORT/0
}

func newTLSACLRig(t *testing.T) *tlsACLRig {
	t.Helper()
	ca := redistest.NewCA(t, "solo-test")
	cert, key := ca.Issue(t, "server", "127.0.0.1")
	srv := redistest.StartTLS(t, redistest.TLS{CertFile: cert, KeyFile: key, CAFile: ca.File})
	r := &tlsACLRig{srv: srv, ca: ca, url: "rediss://solo:pw@" + srv.TLSAddr() + "/0"}
	applyACL(t, srv.Client(t), aclSetUser(t), "")
	return r
}

// env is testEnv for this rig, trusting its CA.
func (r *tlsACLRig) env(name, id string) []string {
	return append(testEnv(r.url, name, id), "SOLO_REDIS_TLS_CA_FILE="+r.ca.File)
}

// unauthenticated returns the connections of the TLS port that never
// logged in: user default, no command yet.
func (r *tlsACLRig) unauthenticated(t *testing.T) []string {
	t.Helper()
	list, err := r.srv.Client(t).ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range strings.Split(strings.TrimSpace(list), "\n") {
		if strings.Contains(c, " laddr="+r.srv.TLSAddr()+" ") && strings.Contains(c, " user=default ") && strings.Contains(c, " cmd=NULL ") {
			out = append(out, c)
		}
	}
	return out
}

// After a Redis freeze, solo leaves no connection on Redis that never
// logged in (user=default cmd=NULL in CLIENT LIST): neither solo run (a
// leader) nor solo status --watch, over TLS with the documented ACL user.
// Old code: the pool's dials that outlived their caller (the TLS handshake
// waits out the freeze) were parked idle without AUTH, 10 or more of them,
// for as long as the process ran.
func TestFreeze_LeavesNoUnauthenticatedConnections(t *testing.T) {
	r := newTLSACLRig(t)
	name := electionName(t)
	out := filepath.Join(t.TempDir(), "out.log")
	a := startSolo(t, append(r.env(name, "a"), "OUT="+out), append([]string{"run", "--"}, script(t, out, false)...)...)
	waitLine(t, out, 10*time.Second, func(l line) bool { return l.id == "a" && l.event == "start" })
	w := startSolo(t, r.env(name, "w"), "status", "--watch")
	waitFor(t, 10*time.Second, "the watch's first line", func() bool { return strings.Contains(w.output(), " elected ") })

	r.srv.Stop(t)
	waitFor(t, 10*time.Second, "the watch to say Redis is unreachable", func() bool { return strings.Contains(w.output(), "unreachable") })
	time.Sleep(1500 * time.Millisecond) // more calls given up on, each with its dial
	r.srv.Cont(t)
	waitFor(t, 10*time.Second, "the watch to say Redis is back", func() bool { return strings.Contains(w.output(), "reachable    (first answer") })
	waitLine(t, out, 10*time.Second, func(l line) bool { return l.event == "start" && l.term != 0 })

	// Connections that had begun as the freeze ended finish their
	// handshake and log in, or close, within a few round trips; the ones
	// of the old code stay.
	var left []string
	deadline := time.Now().Add(3 * time.Second)
	for {
		if left = r.unauthenticated(t); len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Fatalf("%d connections on Redis never logged in after the freeze:\n%s", len(left), strings.Join(left, "\n"))
	}
	for _, p := range []*proc{a, w} {
		p.signal(syscall.SIGTERM)
		if code := p.wait(20 * time.Second); code != 0 {
			t.Fatalf("exit %d:\n%s", code, p.output())
		}
	}
}
