// Command fxapp is a small service built with fx: workerfx.Module runs its jobs
// (one pull job, one cron job) on exactly one of its instances, and serves
// /livez, /readyz, /leader and /metrics.
//
// The application owns its configuration: flags, whose defaults come from
// SOLO_REDIS_URL, SOLO_HTTP_ADDR and SOLO_ELECTION_TTL when set. It hands
// the election's tunables to workerfx.Module as a leader.Config.
package main

import (
	"errors"
	"flag"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/redisurl"
	"github.com/solo-run/solo/worker/workerfx"
)

// stopTimeout bounds fx's OnStop hooks. workerfx.Module's hook waits for the
// jobs to drain and the lease to be released, at most the election's
// ShutdownTimeout (default: the TTL, 10s), so this must be above that plus
// a second; raise it when you raise the TTL.
const stopTimeout = 30 * time.Second

// Flags are the command-line flags.
type Flags struct {
	RedisURL       string
	HTTPAddr       string
	TTL            time.Duration
	ReportSchedule string
}

func main() {
	var f Flags
	flag.StringVar(&f.RedisURL, "redis", envOr("SOLO_REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis URL ($SOLO_REDIS_URL)")
	flag.StringVar(&f.HTTPAddr, "http", envOr("SOLO_HTTP_ADDR", "127.0.0.1:8080"), "status and metrics address ($SOLO_HTTP_ADDR)")
	ttl, err := time.ParseDuration(envOr("SOLO_ELECTION_TTL", "10s"))
	if err != nil {
		_, _ = os.Stderr.WriteString("fxapp: SOLO_ELECTION_TTL: " + err.Error() + "\n")
		os.Exit(2)
	}
	flag.DurationVar(&f.TTL, "ttl", ttl, "lease duration ($SOLO_ELECTION_TTL)")
	flag.StringVar(&f.ReportSchedule, "report-schedule", "@every 2s", "cron spec of the report job, such as \"0 3 * * *\"")
	flag.Parse()

	fx.New(
		fx.Supply(f),
		fx.Provide(
			newLogger,
			newRedisClient,
			newRegistry,
		),
		workerfx.Module(leader.Config{Name: "fxapp", TTL: f.TTL}, workerfx.WithHTTP(f.HTTPAddr)),
		fx.Provide(
			workerfx.AsJob(NewConsumeOrders),
			workerfx.AsJob(NewNightlyReport),
		),
		fx.WithLogger(newFxLogger),
		fx.StopTimeout(stopTimeout),
	).Run()
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// newLogger builds a production zap logger.
func newLogger(lc fx.Lifecycle) (*zap.Logger, error) {
	zc := zap.NewProductionConfig()
	zc.EncoderConfig.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	log, err := zc.Build()
	if err != nil {
		return nil, err
	}
	lc.Append(fx.StopHook(func() { _ = log.Sync() }))
	return log, nil
}

// newFxLogger sends fx's own events to zap, at debug level: they are noisy.
func newFxLogger(log *zap.Logger) fxevent.Logger {
	l := &fxevent.ZapLogger{Logger: log.Named("fx")}
	l.UseLogLevel(zapcore.DebugLevel)
	return l
}

// newRedisClient connects to -redis; the worker module consumes the client
// but never creates or closes it.
func newRedisClient(lc fx.Lifecycle, f Flags) (redis.UniversalClient, error) {
	client, err := redisurl.NewClient(f.RedisURL)
	if err != nil {
		return nil, err
	}
	// Appended before the worker's hook, so it runs after the worker has
	// released the lease.
	lc.Append(fx.StopHook(client.Close))
	return client, nil
}

// newRegistry is the Prometheus registry behind /metrics: solo's metrics plus
// the Go runtime's and the process's.
func newRegistry() (prometheus.Registerer, prometheus.Gatherer, error) {
	reg := prometheus.NewRegistry()
	err := errors.Join(
		reg.Register(collectors.NewGoCollector()),
		reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})),
	)
	return reg, reg, err
}
