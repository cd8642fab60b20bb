package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/leader"
)

const (
	// failoverLimit is the target for solo's crash failover p99, measured
	// from the lease's expiry on the server.
	failoverLimit = 50 * time.Millisecond
	// childEnv carries a childSpec into a re-executed bench binary.
	childEnv = "SOLO_BENCH_CHILD"
	// childLifetime bounds a child that nobody kills.
	childLifetime = 2 * time.Minute
)

// childSpec tells a child process which election to lead.
type childSpec struct {
	Peer  string        `json:"peer"`
	Addrs []string      `json:"addrs"`
	Name  string        `json:"name"`
	TTL   time.Duration `json:"ttl"`
}

// failoverFigure measures figure 3: a leader in a child process is killed
// with SIGKILL; measured from the lease's expiry on the server to the
// start of the waiting candidate's leader function.
func failoverFigure(ctx context.Context, e *env) (figure, error) {
	t, err := timingFor(e.prof.ttl)
	if err != nil {
		return figure{}, err
	}
	ps := electionPeers()
	followers := make([]clients, len(ps))
	probes := make([]clients, len(ps))
	for i, p := range ps {
		addrs := addrsOf(e.nodes[:p.nodes])
		followers[i], probes[i] = dial(addrs, nil), dial(addrs, nil)
		defer followers[i].Close()
		defer probes[i].Close()
	}
	runs := make(map[string][]trialRun)
	nonce := randomToken()
	for r := range e.prof.runs {
		for i, p := range ps {
			res, err := runTrials(ctx, e.prof.failoverTrials, e.prof.parallel, func(ctx context.Context, k int) (time.Duration, error) {
				name := fmt.Sprintf("bench-failover-%s-%s-%d-%d", nonce, p.name, r, k)
				return failoverTrial(ctx, e.self, p, followers[i], probes[i], t, name, t.retry)
			})
			if err != nil {
				return figure{}, fmt.Errorf("%s: %w", p.name, err)
			}
			runs[p.name] = append(runs[p.name], res)
		}
		e.logf("  failover run %d/%d", r+1, e.prof.runs)
	}
	table, tg := latencyTable(ps, runs, failoverLimit, fmt.Sprintf("crash failover p99 < 50 ms after the server-side expiry (TTL %s)", t.ttl))

	// solo alone at its default TTL, where the follower's jitter is largest
	// (min(TTL/100, 20 ms)). Every trial runs at once: they mostly wait.
	def, err := timingFor(leader.DefaultTTL)
	if err != nil {
		return figure{}, err
	}
	solo := ps[0]
	n := e.prof.runs * e.prof.failoverTrials
	all, err := runTrials(ctx, n, n, func(ctx context.Context, k int) (time.Duration, error) {
		name := fmt.Sprintf("bench-failover-%s-default-%d", nonce, k)
		return failoverTrial(ctx, e.self, solo, followers[0], probes[0], def, name, 100*time.Millisecond)
	})
	if err != nil {
		return figure{}, fmt.Errorf("solo at TTL %s: %w", def.ttl, err)
	}
	defRuns := map[string][]trialRun{solo.name: splitRun(all, e.prof.runs)}
	defTable, defTarget := latencyTable(ps[:1], defRuns, failoverLimit,
		fmt.Sprintf("crash failover p99 < 50 ms after the server-side expiry (solo alone, default TTL %s)", def.ttl))

	var b strings.Builder
	fmt.Fprintf(&b, "%s, %d trials per run, %d at a time on distinct elections. "+
		"The leader is this binary re-executed as a child process that campaigns and renews like any candidate of its "+
		"peer. Once it leads, a candidate in the bench process starts waiting, at a random phase of RetryInterval; after RetryInterval plus a uniform random "+
		"part of RenewInterval (so the kill falls anywhere between two renewals) the child gets SIGKILL and is reaped. "+
		"The server-side expiry is then read as send time + `PTTL` (with `GET` in the same `MULTI`, to check the lease is "+
		"still the child's); for redsync-3 it is the second of the three nodes' expiries, when the quorum frees up. "+
		"Measured from that expiry to the start of the waiting candidate's leader function. `PTTL` has millisecond "+
		"resolution and the send time precedes the server's clock reading, so the expiry is read up to about 1 ms early "+
		"and the figures are that much pessimistic.\n\n",
		t, e.prof.failoverTrials, e.prof.parallel)
	b.WriteString(table)
	fmt.Fprintf(&b, "\nsolo alone at its default %s, where its follower's jitter is largest: %d trials, "+
		"all at once, split into %d runs; the follower waits 100 ms before the kill phase starts.\n\n",
		def, n, e.prof.runs)
	b.WriteString(defTable)
	b.WriteString("\nsolo's follower does not poll faster to get this: it sleeps until the holder's PTTL runs out " +
		"(plus up to min(TTL/100, 20 ms) of jitter) and tries once; figure 4 counts what its waiting costs.\n")
	return figure{title: "3. Crash failover", body: b.String(), targets: []target{tg, defTarget}}, nil
}

// failoverTrial runs one crash failover in election name. The follower
// starts at a random phase within settle and waits settle plus a random
// part of RenewInterval before the leader is killed.
func failoverTrial(ctx context.Context, self string, p peer, fc, probe clients, t timing, name string, settle time.Duration) (time.Duration, error) {
	spec, err := json.Marshal(childSpec{Peer: p.name, Addrs: addrsOfClients(probe), Name: name, TTL: t.ttl})
	if err != nil {
		return 0, err
	}
	child, err := startChild(self, string(spec))
	if err != nil {
		return 0, err
	}
	defer child.kill()
	if err := child.waitLeading(ctx, 5*t.ttl); err != nil {
		return 0, fmt.Errorf("child leader: %w", err)
	}
	key := p.leaseKey(name)
	held, err := probe[0].Get(ctx, key).Result()
	if err != nil {
		return 0, fmt.Errorf("read child's lease: %w", err)
	}

	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	// Start the follower at a random phase relative to the leader's
	// renewals, or a polling follower's attempts would fall at the same
	// offset from the expiry in every trial.
	if !sleepCtx(runCtx, randDuration(settle)) {
		return 0, runCtx.Err()
	}
	f, err := p.candidate(fc, name, "follower", t, hooks{})
	if err != nil {
		return 0, err
	}
	up := make(chan time.Time, 1)
	wg.Go(func() {
		_ = f.Run(runCtx, func(ctx context.Context) error {
			select {
			case up <- time.Now():
			default:
			}
			<-ctx.Done()
			return nil
		})
	})
	if !sleepCtx(runCtx, settle+randDuration(t.renew)) {
		return 0, runCtx.Err()
	}
	if err := child.kill(); err != nil {
		return 0, err
	}
	expiry, err := serverExpiry(ctx, probe, key, held)
	if err != nil {
		return 0, err
	}
	timer := time.NewTimer(2 * t.ttl)
	defer timer.Stop()
	select {
	case started := <-up:
		return started.Sub(expiry), nil
	case <-timer.C:
		return 0, errors.New("no new leader within 2 TTL after the expiry")
	case <-runCtx.Done():
		return 0, runCtx.Err()
	}
}

// serverExpiry reads when the lease held expires on the servers: send time
// + PTTL, the quorum's (median) expiry when there are several nodes. It
// returns errSkip when the lease is no longer the child's.
func serverExpiry(ctx context.Context, probe clients, key, held string) (time.Time, error) {
	type reply struct {
		sent time.Time
		get  *redis.StringCmd
		pttl *redis.DurationCmd
	}
	replies := make([]reply, len(probe))
	var wg sync.WaitGroup
	errs := make([]error, len(probe))
	for i, c := range probe {
		wg.Go(func() {
			r := &replies[i]
			r.sent = time.Now()
			_, errs[i] = c.TxPipelined(ctx, func(p redis.Pipeliner) error {
				r.get = p.Get(ctx, key)
				r.pttl = p.PTTL(ctx, key)
				return nil
			})
		})
	}
	wg.Wait()
	var exp []time.Time
	for i, r := range replies {
		if errs[i] != nil && !errors.Is(errs[i], redis.Nil) {
			return time.Time{}, errs[i]
		}
		if v, _ := r.get.Result(); v != held {
			return time.Time{}, fmt.Errorf("%w: lease gone or changed before PTTL was read", errSkip)
		}
		d, err := r.pttl.Result()
		if err != nil || d <= 0 {
			return time.Time{}, fmt.Errorf("%w: lease has no TTL left when read (%v)", errSkip, d)
		}
		exp = append(exp, r.sent.Add(d))
	}
	slices.SortFunc(exp, func(a, b time.Time) int { return a.Compare(b) })
	return exp[len(exp)/2], nil
}

// child is a bench binary leading an election until killed. It owns two
// goroutines: the reaper (closes reaped) and the reader of the child's
// stdout (closes lines); kill stops and waits for both.
type child struct {
	cmd     *exec.Cmd
	out     *os.File
	lines   chan string
	reaped  chan struct{}
	killErr error
	once    sync.Once
}

func startChild(self, spec string) (*child, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), childEnv+"="+spec)
	cmd.Stdout = w
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	_ = w.Close()
	if err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("start child: %w", err)
	}
	c := &child{cmd: cmd, out: r, lines: make(chan string, 1), reaped: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(c.reaped)
	}()
	go func() {
		// Ends when the pipe closes with the child's death.
		s := bufio.NewScanner(r)
		if s.Scan() {
			c.lines <- s.Text()
		}
		close(c.lines)
	}()
	return c, nil
}

// waitLeading waits for the child's "leading" line.
func (c *child) waitLeading(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case line, ok := <-c.lines:
		if !ok || line != "leading" {
			return fmt.Errorf("child exited or said %q", line)
		}
		return nil
	case <-t.C:
		return fmt.Errorf("not leading within %s", d)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// kill sends SIGKILL and waits until the child is reaped; later calls
// return the first call's result.
func (c *child) kill() error {
	c.once.Do(func() {
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
		t := time.NewTimer(exitTimeout)
		defer t.Stop()
		select {
		case <-c.reaped:
		case <-t.C:
			c.killErr = errors.New("child still running after SIGKILL")
		}
		// The pipe's write end died with the child; closing ours as well
		// ends the reader even if a grandchild kept it open.
		_ = c.out.Close()
		for range c.lines {
		}
	})
	return c.killErr
}

// runChild is the child's main: lead the election spec names, say
// "leading" on stdout once, and keep renewing until killed (or
// childLifetime passes). It returns the exit code.
func runChild(spec string) int {
	var s childSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, "bench child:", err)
		return 2
	}
	p, ok := peerByName(s.Peer)
	if !ok {
		fmt.Fprintln(os.Stderr, "bench child: unknown peer", s.Peer)
		return 2
	}
	t, err := timingFor(s.TTL)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench child:", err)
		return 2
	}
	cs := dial(s.Addrs, nil)
	defer cs.Close()
	cand, err := p.candidate(cs, s.Name, "child", t, hooks{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench child:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), childLifetime)
	defer cancel()
	say := once(func() { fmt.Println("leading") })
	if err := cand.Run(ctx, func(ctx context.Context) error {
		say()
		<-ctx.Done()
		return nil
	}); err != nil {
		fmt.Fprintln(os.Stderr, "bench child:", err)
		return 1
	}
	return 0
}

func addrsOfClients(cs clients) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Options().Addr
	}
	return out
}
