// Package workerprom exports solo's metrics to Prometheus: Metrics
// implements worker.Metrics (worker.WithMetrics) and gives each election's
// leader.Metrics (Metrics.Elector, for leader.WithMetrics); Handler adds
// /metrics to a worker's HTTP handler. Package worker does not depend on
// Prometheus: only the applications that import this package do.
package workerprom
