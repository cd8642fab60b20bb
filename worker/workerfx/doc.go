// Package workerfx wires solo's workers for go.uber.org/fx. Module runs one
// election and the jobs of its value group (AsJob) on exactly one
// instance; SpreadModule spreads the same jobs over the live instances,
// each job an election of its own. The application provides a
// redis.UniversalClient and, optionally, a *zap.Logger, a
// *prometheus.Registry (or a prometheus.Registerer and Gatherer; with
// none, solo's metrics go on a registry of the module's own, served on
// WithHTTP's /metrics), and a *fence.Guard; the election's
// tunables are the leader.Config it passes. Named lets one application run
// several elections. Packages leader and worker have no fx dependency:
// this package is the only fx wiring.
package workerfx
