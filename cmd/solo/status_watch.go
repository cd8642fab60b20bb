package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/cmd/solo/internal/config"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/redisurl"
	"github.com/solo-run/solo/worker"
)

// watchStatus prints a line for every leadership change of the elections
// (leader.Observe: the current leader first), and one when Redis stops
// answering and when it answers again, until SIGINT or SIGTERM. It first
// says, on stderr, what it watches. Each line is stamped with when the
// event happened as far as Redis tells, and ends with what that time is:
//
//	2026-05-04T10:00:00.123+02:00  orders-sync  elected   host-a-1f2e  term 1795316457433330  (term start)
//	2026-05-04T10:00:09.801+02:00  orders-sync  released  host-a-1f2e  term 1795316457433330  (seen)
//	2026-05-04T10:00:19.460+02:00  orders-sync  expired   host-b-77aa  term 1795316459801002  (lease expiry)
//	2026-05-04T10:00:20.002+02:00  redis redis://10.0.0.5:6379/0  unreachable  (seen; last answer 10:00:19.811: i/o timeout)
//	2026-05-04T10:01:24.315+02:00  redis redis://10.0.0.5:6379/0  reachable    (first answer, on Redis's clock; unreachable since 10:00:20.002, seen)
//
// term start: the acquire's time on Redis's clock, as the holder recorded
// it. lease expiry: when the lease ran out, from the TTL Redis reported at
// the last read that found it (reads come every retry_interval): when the
// read that found it gone came much later (Redis unreachable meanwhile),
// the line says "as last read at …, seen gone at …", for the holder may
// have renewed in between. seen: only when this watch saw it. For a spread
// group it also prints the group's live members at first, then each member
// that joins or leaves ("member", "joined", "left"; seen).
func watchStatus(client redis.UniversalClient, cfg config.Config, t statusTargets, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	lc := cfg.LeaderConfig()
	ttl := lc.TTL
	if ttl == 0 {
		ttl = leader.DefaultTTL
	}
	every := lc.RetryInterval
	if every == 0 {
		every = ttl / 5
	}
	w := &watcher{out: stdout, redis: redisurl.Redact(cfg.Redis.URL), every: every, group: t.group,
		seen: map[string]leaseSeen{}, lastOK: time.Now()}
	fmt.Fprintf(stderr, "solo: watching %s on %s; times are Redis's (term start, lease expiry) unless marked seen\n", t.describe(), w.redis)
	errs := make([]error, len(t.elections))
	var wg sync.WaitGroup
	wg.Go(func() { w.probe(ctx, client, cfg, t.elections) })
	for i, name := range t.elections {
		lc := cfg.LeaderConfig()
		lc.Name = name
		wg.Go(func() {
			errs[i] = leader.Observe(ctx, client, lc, func(c leader.Change) { w.change(name, c) })
			if errs[i] != nil {
				stop() // a bad name: end the whole watch
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return usageErr("election %q: %w", t.elections[i], err)
		}
	}
	return nil
}

// watcher prints status --watch's lines, one at a time.
type watcher struct {
	out   io.Writer
	redis string        // the URL, redacted
	every time.Duration // the probe's interval: retry_interval
	group string        // the spread group whose members are followed, or ""

	mu   sync.Mutex
	seen map[string]leaseSeen // per election: its holder as last read
	// Redis's reachability as the probe saw it.
	down      bool
	downSince time.Time       // first failed probe (local clock)
	lastOK    time.Time       // last answer (local clock)
	members   map[string]bool // the group's live members as last read; nil before
}

// leaseSeen is a holder as the watch last read it.
type leaseSeen struct {
	term   uint64
	id     string
	readAt time.Time // local clock
	expiry time.Time // readAt + the TTL left Redis reported; zero if unknown
}

const watchLayout = "2006-01-02T15:04:05.000Z07:00"

// change prints one change of election name.
func (w *watcher) change(name string, c leader.Change) {
	w.mu.Lock()
	defer w.mu.Unlock()
	h := c.Holder
	at, what := c.At, "seen"
	switch c.Kind {
	case leader.TransitionElected:
		if !h.Since.IsZero() {
			at, what = h.Since, "term start"
		}
		s := leaseSeen{term: h.Term, id: h.ID, readAt: c.At}
		if h.TTLLeft > 0 {
			s.expiry = c.At.Add(h.TTLLeft)
		}
		w.seen[name] = s
	case leader.TransitionExpired:
		s, ok := w.seen[name]
		if !ok || s.term != h.Term || s.id != h.ID {
			s = leaseSeen{}
		}
		delete(w.seen, name)
		if !s.expiry.IsZero() {
			at, what = s.expiry, "lease expiry"
			// The next read is due at the expiry; much later means reads
			// failed meanwhile, and the holder may have renewed after the
			// last one that succeeded.
			if c.At.Sub(s.expiry) > w.every+250*time.Millisecond {
				what = fmt.Sprintf("lease expiry as last read at %s, seen gone at %s",
					s.readAt.Format("15:04:05.000"), c.At.Format("15:04:05.000"))
			}
		}
	default: // released, resigned: a notice, as it arrived
		delete(w.seen, name)
	}
	fmt.Fprintf(w.out, "%s  %s  %-8s  %s  term %d  (%s)\n", at.Format(watchLayout), name, c.Kind, h.ID, h.Term, what)
}

// probe asks Redis for its clock, and reads each election's lease, every
// w.every until ctx ends: it reports when Redis stops answering and when it
// answers again, and keeps each holder's expiry within w.every of the last
// moment Redis answered (Observe reads the lease only once per TTL).
func (w *watcher) probe(ctx context.Context, client redis.UniversalClient, cfg config.Config, elections []string) {
	tick := time.NewTicker(w.every)
	defer tick.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, w.every)
		server, err := client.Time(rctx).Result()
		answered := time.Now()
		if err == nil {
			for _, name := range elections {
				lc := cfg.LeaderConfig()
				lc.Name = name
				v, verr := leader.LookupView(rctx, client, lc)
				if verr == nil && v.Holder != nil {
					w.alive(name, *v.Holder, time.Now())
				}
			}
			if w.group != "" {
				lc := cfg.LeaderConfig()
				lc.Name = w.group
				if ms, merr := worker.LookupMembers(rctx, client, lc); merr == nil {
					w.membership(ms, time.Now())
				}
			}
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		w.reach(err, server, answered)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// alive records a read that found election name's holder h at the local
// time at.
func (w *watcher) alive(name string, h leader.Holder, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s, ok := w.seen[name]; ok && s.term == h.Term && s.id == h.ID && at.After(s.readAt) {
		s.readAt, s.expiry = at, at.Add(h.TTLLeft)
		w.seen[name] = s
	}
}

// membership prints the members of the group that joined or left since
// the last read (the first read: every member), seen at the local time at.
func (w *watcher) membership(ms []worker.Member, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := make(map[string]bool, len(ms))
	for _, m := range ms {
		now[m.ID] = true
		switch {
		case w.members == nil:
			fmt.Fprintf(w.out, "%s  %s  %-8s  %s  (seen)\n", at.Format(watchLayout), w.group, "member", m.ID)
		case !w.members[m.ID]:
			fmt.Fprintf(w.out, "%s  %s  %-8s  %s  (seen)\n", at.Format(watchLayout), w.group, "joined", m.ID)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(w.members)) {
		if !now[id] {
			fmt.Fprintf(w.out, "%s  %s  %-8s  %s  (seen)\n", at.Format(watchLayout), w.group, "left", id)
		}
	}
	w.members = now
}

// reach prints a line when Redis's answer to the probe (err, its clock
// server, received at the local time at) changes reachability.
func (w *watcher) reach(err error, server, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case err != nil && !w.down:
		w.down, w.downSince = true, at
		fmt.Fprintf(w.out, "%s  redis %s  unreachable  (seen; last answer %s: %s)\n", at.Format(watchLayout), w.redis,
			w.lastOK.Format("15:04:05.000"), config.OneLine(shortErr(err).Error()))
	case err == nil && w.down:
		w.down = false
		fmt.Fprintf(w.out, "%s  redis %s  reachable    (first answer, on Redis's clock; unreachable since %s, seen)\n", server.Local().Format(watchLayout), w.redis,
			w.downSince.Format("15:04:05.000"))
	}
	if err == nil {
		w.lastOK = at
	}
}

// shortErr drops the context's wording from a probe's timeout.
func shortErr(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return errors.New("no answer within retry_interval")
	}
	return err
}
