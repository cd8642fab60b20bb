package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/redistest"
)

// sentinelEvents records the events one sentinel publishes (+switch-master,
// +promoted-slave, …) with their time, for the test's log.
type sentinelEvents struct {
	mu     sync.Mutex
	lines  []string
	origin time.Time
}

// watchSentinel records the events of the sentinel at addr until the test
// ends, with their time since origin.
func watchSentinel(t *testing.T, addr string, origin time.Time) *sentinelEvents {
	t.Helper()
	ev := &sentinelEvents{origin: origin}
	c := redis.NewSentinelClient(&redis.Options{Addr: addr})
	ps := c.PSubscribe(context.Background(), "*")
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range ps.Channel() {
			if m.Channel == "__sentinel__:hello" {
				continue
			}
			ev.mu.Lock()
			ev.lines = append(ev.lines, fmt.Sprintf("%8.3fs %s %s %s", time.Since(origin).Seconds(), addr, m.Channel, m.Payload))
			ev.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ps.Close()
		<-done
		_ = c.Close()
	})
	return ev
}

func (e *sentinelEvents) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return strings.Join(e.lines, "\n")
}

// TestSentinelFailover_Manifest runs three `solo run` instances with
// deploy/kubernetes's own settings (its ConfigMap's config.yaml and its
// environment; a Sentinel URL, as its Secret offers) against a Sentinel
// group of a master, two replicas and three sentinels, with the witness
// program writing each run's start and end, through
//
//   - a planned failover (SENTINEL FAILOVER);
//   - a planned failover while the one sentinel the leader's client
//     listens to is frozen (SIGSTOP), as when its pod is rescheduled: the
//     leader's client cannot learn of the new master, and keeps renewing
//     on the old one, which the sentinels leave a master for a while;
//   - an unplanned failover: the master frozen until the sentinels
//     promoted a replica, then resumed (a master again, with the old lease
//     and its old connections, until the sentinels turn it into a replica).
//
// A replica moved to the new master waits 7s before its full resync
// (Redis's default diskless delay is 5s, and a real transfer takes its
// time), so a planned failover ends (+switch-master from its leading
// sentinel) about 9s after the promotion. No two runs overlap; the time
// no program ran is logged for each failover (docs/operations.md quotes
// it).
//
// Old code (under a Sentinel URL: min_replicas 0, renew_interval ttl/3):
// with its sentinel frozen, the leader renews on the old master while its
// lease runs out on the new one, where a follower takes it:
// "overlap: pod1 (term …) started …s before pod0 (term …) exited".
func TestSentinelFailover_Manifest(t *testing.T) {
	configYAML, _, menv := readManifest(t)
	s := redistest.StartSentinelWith(t, "solo-manifest", redistest.SentinelOptions{Replicas: 2})
	ctx := context.Background()
	for _, srv := range append(s.Replicas(), s.Primary()) {
		if err := srv.Client(t).ConfigSet(ctx, "repl-diskless-sync-delay", "7").Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, addr := range s.SentinelAddrs() {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr})
		err := sc.Set(ctx, s.MasterName(), "failover-timeout", "15000").Err()
		_ = sc.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	origin := time.Now()
	sentinels := s.Sentinels()
	lead, leaders := sentinels[0], sentinels[1] // leaders: the sentinel of the leader's client
	events := watchSentinel(t, lead.Addr(), origin)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(configYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "witness.log")
	argv := script(t, out, false)
	running := func() (witnessRun, bool) {
		for _, r := range witnessRuns(t, out) {
			if !r.start.IsZero() && r.end.IsZero() {
				return r, true
			}
		}
		return witnessRun{}, false
	}
	var procs []*proc
	for i, id := range []string{"pod0", "pod1", "pod2"} {
		addrs := []string{lead.Addr(), sentinels[2].Addr()}
		if i == 0 {
			addrs = []string{leaders.Addr()}
		}
		env := append(os.Environ(), menv...)
		// Later values win: the file, URL and ID the manifest takes from
		// its volume, Secret and pod name; no HTTP port (three on one host).
		env = append(env, "SOLO_CONFIG="+cfgPath, "SOLO_ELECTION_ID="+id, "SOLO_HTTP_ADDR=", "OUT="+out,
			"SOLO_REDIS_URL=redis+sentinel://"+strings.Join(addrs, ",")+"/"+s.MasterName()+"/0")
		p := startSolo(t, env, append([]string{"run", "--"}, argv...)...)
		procs = append(procs, p)
		if i == 0 {
			waitFor(t, 30*time.Second, "pod0 to lead", func() bool { _, ok := running(); return ok })
		}
		waitFor(t, 10*time.Second, id+" to start", func() bool { return strings.Contains(p.output(), `"solo running"`) })
		if o := p.output(); strings.Contains(o, "unsafe election settings") {
			t.Fatalf("%s warns about its settings:\n%s", id, o)
		}
	}
	since := func(at time.Time) string { return fmt.Sprintf("%.3fs", at.Sub(origin).Seconds()) }
	// failover runs do and logs the time no program ran from its start
	// until a program ran again.
	failover := func(what string, do func()) {
		t.Helper()
		// Settled: a sentinel that has not heard of the last failover's
		// epoch turns a freshly promoted replica back into a replica.
		time.Sleep(10 * time.Second)
		r, ok := running()
		if !ok {
			t.Fatalf("%s: no program runs", what)
		}
		began := time.Now()
		t.Logf("%s %s under %s term %d", since(began), what, r.id, r.term)
		do()
		waitFor(t, 60*time.Second, "a program to run after "+what, func() bool {
			r, ok := running()
			return ok && (r.start.After(began) || time.Since(began) > 20*time.Second)
		})
		var gap time.Duration
		var end time.Time
		for _, r := range witnessRuns(t, out) {
			switch {
			case !r.end.IsZero() && r.end.After(began) && end.IsZero():
				end = r.end
			case !end.IsZero() && r.start.After(end):
				gap = r.start.Sub(end)
			}
		}
		t.Logf("%s %s: no program ran for %s", since(time.Now()), what, gap)
	}
	switches := func() int { return strings.Count(events.String(), "+switch-master") }
	admin := redis.NewSentinelClient(&redis.Options{Addr: lead.Addr(), MaxRetries: -1})
	defer admin.Close()
	planned := func() {
		n := switches()
		waitFor(t, 20*time.Second, "SENTINEL FAILOVER to be accepted", func() bool { return admin.Failover(ctx, s.MasterName()).Err() == nil })
		waitFor(t, 30*time.Second, "the failover to end", func() bool { return switches() > n })
	}
	failover("planned failover", planned)
	failover("planned failover, the leader's sentinel frozen", func() {
		leaders.Stop(t)
		planned()
		time.Sleep(8 * time.Second)
		leaders.Cont(t)
	})
	failover("unplanned failover (master frozen)", func() {
		addr, err := admin.GetMasterAddrByName(ctx, s.MasterName()).Result()
		if err != nil {
			t.Fatal(err)
		}
		var master *redistest.Server
		for _, srv := range append(s.Replicas(), s.Primary()) {
			if srv.Addr() == addr[0]+":"+addr[1] {
				master = srv
			}
		}
		if master == nil {
			t.Fatalf("master %v is not one of the group's servers", addr)
		}
		n := switches()
		master.Stop(t)
		waitFor(t, 30*time.Second, "the sentinels to promote a replica", func() bool { return switches() > n })
		time.Sleep(time.Second)
		master.Cont(t)
	})
	time.Sleep(5 * time.Second)
	for _, p := range procs {
		p.signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		p.wait(20 * time.Second)
	}
	for _, r := range witnessRuns(t, out) {
		t.Logf("run %s term %d: %s – %s", r.id, r.term, since(r.start), since(r.end))
	}
	t.Logf("events of the sentinel leading the failovers:\n%s", events)
	checkNoOverlap(t, out, false)
}
