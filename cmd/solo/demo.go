//go:build !solo_nodemo

package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	_ "modernc.org/sqlite"

	"github.com/solo-run/solo/cmd/solo/internal/config"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/fence"
	"github.com/solo-run/solo/leader/redisurl"
	"github.com/solo-run/solo/worker"
)

// The demo runs three candidates in this process against one Redis, each
// with a pull job that writes a row every 100ms through the SQL fencing
// guard into a SQLite file. It crashes the leader (its Redis link is cut
// and its job frozen mid-write, as a paused process would be), lets the
// lease expire and another candidate take over, thaws the frozen job so
// its stale write hits the guard, then resigns the new leader. It prints
// the timeline and checks what it shows.

const demoElection = "demo"

func demoCommand(args []string, stdout, stderr io.Writer, env []string) error {
	fs := flag.NewFlagSet("solo demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("redis", "", "use this Redis `URL` instead of an embedded one")
	embedded := fs.String("embedded", "auto", "embedded Redis: auto (redis-server if on PATH, else miniredis), redis-server or miniredis")
	verbose := fs.Bool("verbose", false, "also print the candidates' logs (stderr)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErr("demo takes no arguments, got %q", fs.Args())
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	dir, err := os.MkdirTemp("", "solo-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	redisURL, what := *url, "Redis at "+redisurl.Redact(*url)
	if redisURL == "" {
		r, err := startEmbedded(*embedded, dir)
		if err != nil {
			return err
		}
		defer r.stop()
		redisURL, what = r.url, r.what
	}
	log := zap.NewNop()
	if *verbose {
		if log, err = newLogger(config.LogConfig{Level: "info", Dev: true}, zapcore.Lock(zapcore.AddSync(stderr))); err != nil {
			return err
		}
	}
	d, err := newDemo(filepath.Join(dir, "demo.db"), stdout, log)
	if err != nil {
		return err
	}
	defer d.db.Close()
	fmt.Fprintf(stdout, "solo demo: 3 candidates (a, b, c), election %q, TTL %s, renew every %s, renew deadline %s\n",
		demoElection, demoConfig.TTL, demoConfig.RenewInterval, demoConfig.RenewDeadline)
	fmt.Fprintf(stdout, "  Redis: %s; store: SQLite through the fencing guard\n\n", what)
	return d.run(ctx, redisURL)
}

var demoConfig = leader.Config{
	Name:           demoElection,
	TTL:            2 * time.Second,
	RenewInterval:  500 * time.Millisecond,
	RenewDeadline:  1300 * time.Millisecond,
	RetryInterval:  300 * time.Millisecond,
	ResignCooldown: 2 * time.Second,
}

type demo struct {
	db    *sql.DB
	guard *fence.Guard
	out   io.Writer
	log   *zap.Logger
	start time.Time

	mu       sync.Mutex
	refused  int
	accepted map[uint64]int
	elected  chan elected
}

type elected struct {
	id   string
	term uint64
	at   time.Time
}

// candidate is one in-process instance.
type candidate struct {
	id     string
	client redis.UniversalClient
	e      *leader.Elector
	w      *worker.Worker
	cancel context.CancelFunc
	done   chan error
	// frozen makes the job stop mid-write (holding its term) until thaw
	// closes: a process paused by the scheduler, a GC or SIGSTOP.
	frozen atomic.Bool
	thaw   chan struct{}
	stale  chan error
}

func newDemo(path string, out io.Writer, log *zap.Logger) (*demo, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	g, err := fence.New(db)
	if err == nil {
		err = g.EnsureTable(ctx)
	}
	if err == nil {
		_, err = db.ExecContext(ctx, `CREATE TABLE writes (id INTEGER PRIMARY KEY AUTOINCREMENT, term INTEGER NOT NULL, instance TEXT NOT NULL)`)
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("prepare %s: %w", path, err)
	}
	return &demo{db: db, guard: g, out: out, log: log, start: time.Now(),
		accepted: map[uint64]int{}, elected: make(chan elected, 16)}, nil
}

func (d *demo) say(who, format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, "  %7.3fs  %-2s %s\n", time.Since(d.start).Seconds(), who, fmt.Sprintf(format, args...))
}

// run plays the demo against the Redis at url: three candidates, a
// crash of the leader, its stale write refused, a graceful handoff.
func (d *demo) run(ctx context.Context, url string) error {
	cands := make(map[string]*candidate)
	defer func() {
		for _, c := range cands {
			c.cancel()
			<-c.done
			_ = c.client.Close()
		}
	}()
	for _, id := range []string{"a", "b", "c"} {
		c, err := d.startCandidate(url, id)
		if err != nil {
			return err
		}
		cands[id] = c
	}
	first, err := d.waitElected(ctx, "was elected")
	if err != nil {
		return err
	}
	if err := pause(ctx, 1500*time.Millisecond); err != nil {
		return err
	}
	next, staleErr, err := d.crash(ctx, cands[first.id])
	if err != nil {
		return err
	}
	if err := pause(ctx, time.Second); err != nil {
		return err
	}
	third, err := d.handoff(ctx, cands[next.id])
	if err != nil {
		return err
	}
	if err := pause(ctx, time.Second); err != nil {
		return err
	}
	for _, c := range cands {
		c.cancel()
	}
	for id, c := range cands {
		<-c.done
		_ = c.client.Close()
		delete(cands, id)
	}
	return d.summary(first, next, third, staleErr)
}

// waitElected returns the next election, or an error naming what did not
// happen within 10s.
func (d *demo) waitElected(ctx context.Context, what string) (elected, error) {
	select {
	case ev := <-d.elected:
		return ev, nil
	case <-time.After(10 * time.Second):
		return elected{}, fmt.Errorf("demo: nobody %s within 10s", what)
	case <-ctx.Done():
		return elected{}, ctx.Err()
	}
}

// pause waits dur, or until ctx ends.
func pause(ctx context.Context, dur time.Duration) error {
	select {
	case <-time.After(dur):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// crash crashes the leader x and returns who took over, and the error the
// guard gave x's write when x woke up.
func (d *demo) crash(ctx context.Context, x *candidate) (elected, error, error) {
	// 1. Crash the leader: cut its link to Redis and freeze its job in the
	// middle of a write. Its lease is neither renewed nor released.
	crashAt := time.Now()
	x.frozen.Store(true)
	_ = x.client.Close()
	d.say(x.id, "CRASH (simulated: Redis link cut, process frozen mid-write, lease left behind)")
	next, err := d.waitElected(ctx, "took over after the crash")
	if err != nil {
		return elected{}, nil, err
	}
	d.say("", "→ failover %s after the crash: the lease expired on the server (TTL %s), %s took over",
		next.at.Sub(crashAt).Round(time.Millisecond), demoConfig.TTL, next.id)

	// 2. The frozen process wakes up believing it still leads; its write
	// carries its old term and the guard refuses it.
	close(x.thaw)
	select {
	case staleErr := <-x.stale:
		return next, staleErr, nil
	case <-time.After(5 * time.Second):
		return elected{}, nil, errors.New("demo: the thawed leader made no write")
	}
}

// handoff resigns the leader y and returns who took over.
func (d *demo) handoff(ctx context.Context, y *candidate) (elected, error) {
	resignAt := time.Now()
	d.say(y.id, "resigns (drains its job, releases, sits out one election)")
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := y.e.Resign(rctx)
	cancel()
	if err != nil {
		return elected{}, fmt.Errorf("demo: resign: %w", err)
	}
	third, err := d.waitElected(ctx, "took over after the resign")
	if err != nil {
		return elected{}, err
	}
	d.say("", "→ handoff %s after the resign request: release notice, one round trip",
		third.at.Sub(resignAt).Round(100*time.Microsecond))
	return third, nil
}

func (d *demo) startCandidate(url, id string) (*candidate, error) {
	client, err := redisurl.NewClient(url)
	if err != nil {
		return nil, err
	}
	cfg := demoConfig
	cfg.ID = id
	log := d.log.With(zap.String("candidate", id))
	e, err := leader.New(client, cfg, leader.WithLogger(log))
	if err != nil {
		return nil, err
	}
	w, err := worker.New(e, worker.WithLogger(log))
	if err != nil {
		return nil, err
	}
	c := &candidate{id: id, client: client, e: e, w: w, done: make(chan error, 1),
		thaw: make(chan struct{}), stale: make(chan error, 1)}
	if err := w.Pull("ingest", func(ctx context.Context) error { return d.ingest(ctx, c) }); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() { c.done <- w.Run(ctx) }()
	return c, nil
}

// ingest is the candidates' pull job: claim the term in the store, then
// write a row every 100ms, each write fenced by the term.
func (d *demo) ingest(ctx context.Context, c *candidate) error {
	term, _ := leader.TermFrom(ctx)
	if err := d.guard.Claim(ctx, demoElection, term, c.e.ID()); err != nil {
		return err
	}
	d.say(c.id, "elected, term %d (claimed in the store)", term)
	d.elected <- elected{id: c.id, term: term, at: time.Now()}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			d.say(c.id, "job stopped (%v)", context.Cause(ctx))
			return nil
		case <-t.C:
		}
		if c.frozen.Load() {
			<-c.thaw
			// Woken up, unaware of the time that passed: the write goes
			// out with the old term.
			err := d.write(context.Background(), c.id, c.e.ID(), term)
			if errors.Is(err, fence.ErrStaleTerm) {
				d.mu.Lock()
				d.refused++
				d.mu.Unlock()
				d.say(c.id, "wakes up, writes with term %d → REFUSED by the guard: %v", term, err)
			} else {
				d.say(c.id, "wakes up, writes with term %d → %v", term, err)
			}
			c.stale <- err
			return err
		}
		if err := d.write(ctx, c.id, c.e.ID(), term); err != nil && ctx.Err() == nil {
			return err
		}
	}
}

func (d *demo) write(ctx context.Context, id, holder string, term uint64) error {
	err := d.guard.DoTerm(ctx, demoElection, term, holder, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO writes (term, instance) VALUES (?, ?)`, int64(term), id)
		return err
	})
	if err == nil {
		d.mu.Lock()
		d.accepted[term]++
		d.mu.Unlock()
	}
	return err
}

// summary prints what the store holds and checks the demo's claims.
func (d *demo) summary(first, second, third elected, staleErr error) error {
	rows, err := d.db.Query(`SELECT term, instance, COUNT(*), MIN(id), MAX(id) FROM writes GROUP BY term, instance ORDER BY MIN(id)`)
	if err != nil {
		return err
	}
	defer rows.Close()
	fmt.Fprintf(d.out, "\nStore (rows in commit order):\n")
	var lastTerm uint64
	var lastMax int64
	ordered := true
	for rows.Next() {
		var term uint64
		var id string
		var n, lo, hi int64
		if err := rows.Scan(&term, &id, &n, &lo, &hi); err != nil {
			return err
		}
		fmt.Fprintf(d.out, "  term %d  %s  %4d rows\n", term, id, n)
		if term < lastTerm || lo < lastMax {
			ordered = false
		}
		lastTerm, lastMax = term, hi
	}
	if err := rows.Err(); err != nil {
		return err
	}
	d.mu.Lock()
	refused := d.refused
	d.mu.Unlock()
	terms := []uint64{first.term, second.term, third.term}
	fmt.Fprintf(d.out, "\nLeaders: %s (term %d) → %s (term %d) → %s (term %d)\n",
		first.id, first.term, second.id, second.term, third.id, third.term)
	fmt.Fprintf(d.out, "Stale writes refused by the guard: %d; rows from one term at a time, terms increasing: %v\n", refused, ordered)
	switch {
	case !(terms[0] < terms[1] && terms[1] < terms[2]):
		return fmt.Errorf("demo: terms did not increase: %v", terms)
	case !errors.Is(staleErr, fence.ErrStaleTerm) || refused != 1:
		return fmt.Errorf("demo: the stale write was not refused: %v", staleErr)
	case !ordered:
		return errors.New("demo: rows of different terms interleave")
	}
	fmt.Fprintln(d.out, "OK")
	return nil
}

// embedded is a Redis started for the demo.
type embedded struct {
	url  string
	what string
	stop func()
}

func startEmbedded(kind, dir string) (*embedded, error) {
	switch kind {
	case "auto":
		if _, err := exec.LookPath("redis-server"); err == nil {
			return startRedisServer(dir)
		}
		return startMiniredis()
	case "redis-server":
		return startRedisServer(dir)
	case "miniredis":
		return startMiniredis()
	}
	return nil, usageErr("--embedded %q: want auto, redis-server or miniredis", kind)
}

// startMiniredis runs miniredis. It does not expire keys on its own: a
// goroutine advances its clock in step with real time.
func startMiniredis() (*embedded, error) {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		return nil, err
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		const step = 5 * time.Millisecond
		t := time.NewTicker(step)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				m.FastForward(step)
			}
		}
	}()
	return &embedded{
		url:  "redis://" + m.Addr(),
		what: "miniredis (embedded, in this process) on " + m.Addr(),
		stop: func() { close(stop); <-done; m.Close() },
	}, nil
}

func startRedisServer(dir string) (*embedded, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	waited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(waited) }()
	stop := func() { _ = cmd.Process.Kill(); <-waited }
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(5 * time.Second); ; {
		if err := c.Ping(context.Background()).Err(); err == nil {
			break
		} else if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("redis-server on %s not ready: %w", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	version, _ := c.Info(context.Background(), "server").Result()
	return &embedded{url: "redis://" + addr, what: "redis-server " + infoValue(version, "redis_version") + " (embedded) on " + addr, stop: stop}, nil
}

func infoValue(info, key string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+":"); ok {
			return v
		}
	}
	return "?"
}
