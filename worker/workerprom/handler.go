package workerprom

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler returns next (worker.Handler, Spread.Handler) with GET /metrics
// added, served from g; with a nil g it returns next.
func Handler(next http.Handler, g prometheus.Gatherer) http.Handler {
	if g == nil {
		return next
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.Handle("/", next)
	return mux
}
