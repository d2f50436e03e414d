package rollout

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// metrics are the package's metrics, registered on the registry its
// owner is given.
type metrics struct {
	rolloutsEnded   *prometheus.CounterVec
	rolloutsRunning prometheus.Gauge
	rolloutsResumed *prometheus.CounterVec
	nodesEnded      *prometheus.CounterVec
	nodeSeconds     *prometheus.HistogramVec
}

// newMetrics registers the metrics on reg (nil: kept, not exported).
func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		rolloutsEnded: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ztpd_rollouts_total", Help: "Rollouts ended, by kind and final state.",
		}, []string{"kind", "state"}),
		rolloutsRunning: f.NewGauge(prometheus.GaugeOpts{
			Name: "ztpd_rollouts_running", Help: "Rollouts running (or paused) in this process.",
		}),
		rolloutsResumed: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ztpd_rollouts_resumed_total", Help: "Unfinished rollouts taken up by this process, by how: restart (its own, after a restart) or adopted (a gone appliance's).",
		}, []string{"how"}),
		nodesEnded: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ztpd_rollout_nodes_total", Help: "Rollout nodes finished, by kind and phase (done, skipped, failed, withdrawn).",
		}, []string{"kind", "phase"}),
		nodeSeconds: f.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ztpd_rollout_node_seconds", Help: "Time a node took in a rollout, from its start to done, by kind.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}, []string{"kind"}),
	}
}
