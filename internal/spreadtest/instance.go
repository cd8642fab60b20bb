//go:build linux

// Package spreadtest demonstrates worker.Spread with real processes and an
// outside witness: the test binary is re-executed as instances of one
// worker group (SOLO_SPREADTEST_INSTANCE set), each running N pull jobs
// under a Spread against a real redis-server. Every job run reports its
// start and stop on CLOCK_MONOTONIC (one clock for every process of a
// host) on the instance's stdout; the test reads them, kills, stops and
// starts instances, and computes from the reports alone the loads, the
// overlaps (one job running on two instances at once), the moves and how
// much of the time each job ran.
package spreadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
)

// InstanceEnv turns the test binary into an instance; its value is the JSON
// of an InstanceConfig.
const InstanceEnv = "SOLO_SPREADTEST_INSTANCE"

// InstanceConfig is what an instance process is told by the rig.
type InstanceConfig struct {
	ID    string        `json:"id"`
	Redis string        `json:"redis"`
	Group string        `json:"group"`
	Jobs  int           `json:"jobs"`
	TTL   time.Duration `json:"ttl"`
}

// Event is one line an instance writes on stdout.
type Event struct {
	Kind string `json:"k"` // ready, start, stop; reaped is the rig's
	Inst string `json:"i"`
	Job  int    `json:"j"`
	Term uint64 `json:"term,omitempty"`
	Mono int64  `json:"t"`
}

// Mono returns CLOCK_MONOTONIC in nanoseconds.
func Mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // cannot fail on Linux with a valid clock id
	}
	return ts.Nano()
}

// JobName is the name of job i.
func JobName(i int) string { return fmt.Sprintf("j%03d", i) }

// InstanceMain is the main of an instance process: it runs until SIGTERM
// (graceful: leave, drain, release) or SIGKILL, and returns the exit code.
func InstanceMain() int {
	var cfg InstanceConfig
	if err := json.Unmarshal([]byte(os.Getenv(InstanceEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "spreadtest instance:", err)
		return 2
	}
	log, _ := zap.NewDevelopment()
	defer func() { _ = log.Sync() }()
	client := redis.NewClient(&redis.Options{
		Addr: cfg.Redis, ContextTimeoutEnabled: true,
		DialTimeout: cfg.TTL / 4, ReadTimeout: cfg.TTL / 4, WriteTimeout: cfg.TTL / 4,
	})
	defer client.Close()
	var mu sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	emit := func(ev Event) {
		ev.Inst = cfg.ID
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(ev)
	}
	s, err := worker.NewSpread(client, leader.Config{Name: cfg.Group, ID: cfg.ID, TTL: cfg.TTL}, worker.SpreadConfig{},
		worker.WithLogger(log.WithOptions(zap.IncreaseLevel(zap.InfoLevel))))
	if err != nil {
		fmt.Fprintln(os.Stderr, "spreadtest instance:", err)
		return 2
	}
	for i := range cfg.Jobs {
		err := s.Pull(JobName(i), func(ctx context.Context) error {
			term, _ := leader.TermFrom(ctx)
			emit(Event{Kind: "start", Job: i, Term: term, Mono: Mono()})
			<-ctx.Done()
			emit(Event{Kind: "stop", Job: i, Term: term, Mono: Mono()})
			return nil
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "spreadtest instance:", err)
			return 2
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	emit(Event{Kind: "ready", Mono: Mono()})
	if err := s.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "spreadtest instance: run:", err)
		return 1
	}
	return 0
}
