// Command fxapp is a small service built with fx: worker.Module runs its jobs
// (one pull job, one cron job) on exactly one of its instances, and serves
// /livez, /readyz, /leader and /metrics.
//
// Configuration comes from a YAML file (-config, the format of solo's
// config.yaml) or, without one, from built-in defaults; SOLO_* environment
// variables override either (SOLO_REDIS_URL, SOLO_HTTP_ADDR,
// SOLO_ELECTION_TTL, …).
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

	"github.com/solo-run/solo/leader/redisurl"
	"github.com/solo-run/solo/worker"
)

// stopTimeout bounds fx's OnStop hooks. worker.Module's hook waits for the
// jobs to drain and the lease to be released, at most
// election.shutdown_timeout (default: the TTL, 10s), so this must be above
// that plus a second; raise it when you raise the TTL.
const stopTimeout = 30 * time.Second

// defaults is the configuration used without -config: the keys of solo's
// config.yaml that this program needs, everything else at its default.
const defaults = `
redis:
  url: redis://127.0.0.1:6379/0
election:
  name: fxapp
http:
  addr: 127.0.0.1:8080
`

// Flags are the command-line flags.
type Flags struct {
	ConfigPath     string
	ReportSchedule string
}

func main() {
	var f Flags
	flag.StringVar(&f.ConfigPath, "config", "", "YAML configuration file (default: built-in defaults); SOLO_* variables override it")
	flag.StringVar(&f.ReportSchedule, "report-schedule", "@every 2s", "cron spec of the report job, such as \"0 3 * * *\"")
	flag.Parse()

	fx.New(
		fx.Supply(f),
		fx.Provide(
			loadConfig,
			newLogger,
			newRedisClient,
			newRegistry,
		),
		worker.Module,
		fx.Provide(
			worker.AsJob(NewConsumeOrders),
			worker.AsJob(NewNightlyReport),
		),
		fx.WithLogger(newFxLogger),
		fx.StopTimeout(stopTimeout),
	).Run()
}

// loadConfig reads -config, or the built-in defaults, and applies the SOLO_*
// environment variables.
func loadConfig(f Flags) (worker.Config, error) {
	if f.ConfigPath != "" {
		return worker.Load(f.ConfigPath, os.Environ())
	}
	return worker.Parse([]byte(defaults), os.Environ())
}

// newLogger builds the zap logger that log.level and log.dev describe.
func newLogger(lc fx.Lifecycle, cfg worker.Config) (*zap.Logger, error) {
	zc := zap.NewProductionConfig()
	if cfg.Log.Dev {
		zc = zap.NewDevelopmentConfig()
	}
	zc.EncoderConfig.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	level, err := zapcore.ParseLevel(cfg.Log.Level)
	if err != nil {
		return nil, err
	}
	zc.Level = zap.NewAtomicLevelAt(level)
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

// newRedisClient connects to redis.url; the worker module consumes the client
// but never creates or closes it.
func newRedisClient(lc fx.Lifecycle, cfg worker.Config) (redis.UniversalClient, error) {
	if cfg.Redis.URL == "" {
		return nil, errors.New("redis.url is empty: set it in the file or SOLO_REDIS_URL")
	}
	client, err := redisurl.NewClient(cfg.Redis.URL)
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
