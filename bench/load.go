package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Names the bench gives its own connections in figure 4, so the monitor
// can leave them out.
const (
	leaderClientName = "bench-leader"
	probeClientName  = "bench-probe"
)

// loadFigure measures figure 4: the commands per second one waiting
// candidate sends to Redis at steady state, with 1, 10 and 100 of them.
//
// Every (peer, followers) cell runs at the same time on redis-servers of
// its own. A MONITOR connection per server counts the commands clients
// send, by client address; the leader's and the probe's connections are
// told apart by their client names and left out.
func loadFigure(ctx context.Context, e *env) (figure, error) {
	t, err := timingFor(e.prof.ttl)
	if err != nil {
		return figure{}, err
	}
	ps := electionPeers()
	type cell struct {
		p     peer
		n     int
		addrs []string
		rates []float64
		err   error
	}
	var cells []*cell
	for _, p := range ps {
		for _, n := range e.prof.followers {
			servers, err := e.lab.startN(p.nodes)
			if err != nil {
				return figure{}, err
			}
			defer func() {
				for _, s := range servers {
					_ = s.Close()
				}
			}()
			cells = append(cells, &cell{p: p, n: n, addrs: addrsOf(servers)})
		}
	}
	var wg sync.WaitGroup
	for _, c := range cells {
		wg.Go(func() {
			c.rates, c.err = measureLoad(ctx, c.p, c.addrs, c.n, t, e.prof)
		})
	}
	wg.Wait()
	for _, c := range cells {
		if c.err != nil {
			return figure{}, fmt.Errorf("%s with %d followers: %w", c.p.name, c.n, c.err)
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "%s. One leader and N waiting candidates in one election, "+
		"each (peer, N) on redis-servers of its own, all cells at once. After a warm-up of 2 TTL, %d consecutive windows "+
		"of %s each give one run. Commands are counted on the server with `MONITOR`, by client address: every command a "+
		"follower sends counts once (a script is one command; the calls it makes inside are not counted again), "+
		"pub/sub included; the leader's connections and the bench's probe are recognised by their client names and left out. "+
		"solo's followers send one acquire when the holder's PTTL runs out and a PING that checks their idle subscription "+
		"once per TTL. (`INFO commandstats` would count every call a script makes as well, which says more about "+
		"script length than about waiting.)\n\n",
		t, e.prof.runs, e.prof.loadWindow)
	b.WriteString("| followers | peer | commands/s per follower | per RenewInterval | per RetryInterval |\n")
	b.WriteString("| --- | --- | --- | --- | --- |\n")
	soloWorst, peerBest, peerName := 0.0, 0.0, ""
	for _, n := range e.prof.followers {
		for _, c := range cells {
			if c.n != n {
				continue
			}
			s := spreadOf(c.rates)
			per := func(d time.Duration) func(float64) string {
				return func(v float64) string { return fmtRate(v * d.Seconds()) }
			}
			fmt.Fprintf(&b, "| %d | %s | %s | %s | %s |\n", n, c.p.name,
				s.format(fmtRate), s.format(per(t.renew)), s.format(per(t.retry)))
			if c.p.name == "solo" {
				soloWorst = max(soloWorst, s.med*t.renew.Seconds())
			} else if peerName == "" || s.med*t.renew.Seconds() < peerBest {
				peerBest, peerName = s.med*t.renew.Seconds(), c.p.name
			}
		}
	}
	tg := target{
		what: "a waiting candidate sends ≤ 1 command per RenewInterval (worst of the follower counts)",
		solo: fmtRate(soloWorst) + " per RenewInterval",
		peer: fmtRate(peerBest) + " per RenewInterval (" + peerName + ")",
		ok:   soloWorst <= 1,
	}
	return figure{title: "4. Redis load of a waiting candidate", body: b.String(), targets: []target{tg}}, nil
}

// measureLoad returns the commands per second per follower of each window.
func measureLoad(ctx context.Context, p peer, addrs []string, n int, t timing, prof profile) ([]float64, error) {
	mons := make([]*monitor, len(addrs))
	for i, a := range addrs {
		m, err := startMonitor(a)
		if err != nil {
			return nil, err
		}
		defer m.Close()
		mons[i] = m
	}
	lc := dialNamed(addrs, leaderClientName)
	fc := dial(addrs, nil)
	probe := dialNamed(addrs, probeClientName)
	defer lc.Close()
	defer fc.Close()
	defer probe.Close()

	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	const name = "bench-load"
	l, err := p.candidate(lc, name, "leader", t, hooks{})
	if err != nil {
		return nil, err
	}
	up := make(chan struct{})
	markUp := once(func() { close(up) })
	wg.Go(func() {
		_ = l.Run(runCtx, func(ctx context.Context) error {
			markUp()
			<-ctx.Done()
			return nil
		})
	})
	if err := waitClosed(runCtx, up, 5*t.ttl); err != nil {
		return nil, fmt.Errorf("leader: %w", err)
	}
	var takeovers atomic.Int32
	for i := range n {
		f, err := p.candidate(fc, name, fmt.Sprintf("follower-%d", i), t, hooks{})
		if err != nil {
			return nil, err
		}
		wg.Go(func() {
			_ = f.Run(runCtx, func(ctx context.Context) error {
				takeovers.Add(1)
				<-ctx.Done()
				return nil
			})
		})
	}
	if !sleepCtx(runCtx, 2*t.ttl) {
		return nil, runCtx.Err()
	}

	// followerCmds returns the commands counted so far from connections
	// that are neither the leader's nor the probe's.
	excluded := make(map[string]bool)
	followerCmds := func() (int64, error) {
		for i, c := range probe {
			list, err := c.ClientList(runCtx).Result()
			if err != nil {
				return 0, err
			}
			for line := range strings.SplitSeq(list, "\n") {
				f := clientFields(line)
				if f["name"] == leaderClientName || f["name"] == probeClientName {
					excluded[addrs[i]+"|"+f["addr"]] = true
				}
			}
		}
		var sum int64
		for i, m := range mons {
			for a, k := range m.counts() {
				if !excluded[addrs[i]+"|"+a] {
					sum += k
				}
			}
		}
		return sum, nil
	}
	s0, err := followerCmds()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	var rates []float64
	for range prof.runs {
		if !sleepCtx(runCtx, prof.loadWindow) {
			return nil, runCtx.Err()
		}
		s1, err := followerCmds()
		if err != nil {
			return nil, err
		}
		t1 := time.Now()
		rates = append(rates, float64(s1-s0)/float64(n)/t1.Sub(t0).Seconds())
		s0, t0 = s1, t1
	}
	if k := takeovers.Load(); k > 0 {
		return nil, errors.New("a follower took over: the leader lost its lease during the measurement")
	}
	for _, m := range mons {
		if err := m.Err(); err != nil {
			return nil, err
		}
	}
	return rates, nil
}

// monitor counts the commands a redis-server receives, by client address,
// through a MONITOR connection. Commands a script runs (shown as coming
// from "lua") are not counted. It owns one goroutine, the reader, which
// Close stops (by closing the connection) and waits for.
type monitor struct {
	conn net.Conn
	done chan struct{}

	mu     sync.Mutex // guards byAddr and err
	byAddr map[string]int64
	err    error
}

func startMonitor(addr string) (*monitor, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	r := bufio.NewReader(conn)
	_, err = conn.Write([]byte("MONITOR\r\n"))
	var line string
	if err == nil {
		line, err = r.ReadString('\n')
	}
	if err == nil && !strings.HasPrefix(line, "+OK") {
		err = fmt.Errorf("MONITOR on %s: %q", addr, strings.TrimSpace(line))
	}
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	m := &monitor{conn: conn, done: make(chan struct{}), byAddr: make(map[string]int64)}
	go m.read(r)
	return m, nil
}

// read parses lines like `+1700000000.123456 [0 127.0.0.1:5678] "evalsha" ...`.
func (m *monitor) read(r *bufio.Reader) {
	defer close(m.done)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			m.mu.Lock()
			if !errors.Is(err, net.ErrClosed) {
				m.err = err
			}
			m.mu.Unlock()
			return
		}
		i := strings.IndexByte(line, '[')
		j := strings.IndexByte(line, ']')
		if i < 0 || j < i {
			continue
		}
		f := strings.Fields(line[i+1 : j])
		if len(f) != 2 || f[1] == "lua" {
			continue
		}
		m.mu.Lock()
		m.byAddr[f[1]]++
		m.mu.Unlock()
	}
}

// counts returns a copy of the counts so far.
func (m *monitor) counts() map[string]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.byAddr)
}

// Err returns the reader's error, if it stopped on one.
func (m *monitor) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// Close stops the reader and waits for it.
func (m *monitor) Close() error {
	err := m.conn.Close()
	<-m.done
	return err
}

// clientFields parses one line of CLIENT LIST into its key=value fields.
func clientFields(line string) map[string]string {
	out := make(map[string]string)
	for kv := range strings.FieldsSeq(line) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			out[k] = v
		}
	}
	return out
}
