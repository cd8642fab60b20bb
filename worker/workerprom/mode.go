package workerprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/solo-run/solo/worker"
)

// newWorkerMode returns solo_worker_mode{election,mode}: 1 for the mode
// this instance's Worker of the election runs in (worker.WithMode: elect,
// standby, always). The alert SoloElectionNoLeader reads it: an election
// run in mode always has no leader by design, its jobs run all the same.
func newWorkerMode() *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "solo_worker_mode",
		Help: "1 for the mode (elect, standby, always) this instance's worker of the election runs in."},
		[]string{"election", "mode"})
}

// WorkerMode implements worker.Metrics: it sets solo_worker_mode of
// election to 1 for mode, and removes the election's series of any other
// mode (a Worker built again in another mode in the same process).
func (m *Metrics) WorkerMode(election string, mode worker.Mode) {
	if m == nil {
		return
	}
	for _, other := range []worker.Mode{worker.ModeElect, worker.ModeStandby, worker.ModeAlways} {
		if other != mode {
			m.workerMode.DeleteLabelValues(election, string(other))
		}
	}
	m.workerMode.WithLabelValues(election, string(mode)).Set(1)
}
