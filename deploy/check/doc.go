// Package check tests the deployment files under deploy/: the Prometheus
// alert rules (with promtool), the Grafana dashboard's and the rules'
// queries (parsed as PromQL, every series name checked against a live
// scrape of solo run) and the Kubernetes manifests (decoded strictly into
// the API types). TestDashboardPicture draws the dashboard's main panels
// over a real failover into docs/img/dashboard-failover.svg (only with
// DASHBOARD_PICTURE=FILE; see docs/operations.md).
//
// It is a module of its own so that its dependencies (Prometheus, the
// Kubernetes API) never reach the library's users. Run it from this
// directory:
//
//	cd deploy/check && go test -race -count=1 ./...
//
// The tests start the tools they need (redis-server, promtool, prometheus,
// the solo binary built from the repository). A missing tool skips its
// test, or fails it when CI=true or SOLO_REQUIRE_TOOLS=1.
package check
