package workerprom

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/solo-run/solo/internal/version"
)

// registerBuildInfo registers, on reg, solo_build_info{version,protocol,
// goversion} = 1: which solo this process runs (internal/version), so a
// dashboard or an alert can tell the versions and protocols of a rolling
// upgrade apart. Registered again on the same reg, it is shared.
func registerBuildInfo(reg prometheus.Registerer) error {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "solo_build_info",
		Help: "1, labelled with this process's solo version (v1.2.3, a pseudo-version, or (devel)), the election protocol it speaks and the Go release that built it.",
	}, []string{"version", "protocol", "goversion"})
	if err := register(reg, &g); err != nil {
		return err
	}
	v := version.Get()
	g.WithLabelValues(v.Version, strconv.Itoa(v.Protocol), v.GoVersion).Set(1)
	return nil
}
