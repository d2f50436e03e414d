package kubewatch

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// nodeCounts is one cluster's contribution to ztpd_kubewatch_nodes.
type nodeCounts struct{ ready, notReady, unknown int }

// publish moves the gauge from what was published before to now.
func (now nodeCounts) publish(before nodeCounts, nodesObserved *prometheus.GaugeVec) {
	if d := now.ready - before.ready; d != 0 {
		nodesObserved.WithLabelValues("ready").Add(float64(d))
	}
	if d := now.notReady - before.notReady; d != 0 {
		nodesObserved.WithLabelValues("not_ready").Add(float64(d))
	}
	if d := now.unknown - before.unknown; d != 0 {
		nodesObserved.WithLabelValues("unknown").Add(float64(d))
	}
}

// metrics are the package's metrics, registered on the registry its
// owner is given.
type metrics struct {
	clustersWatched *prometheus.GaugeVec
	nodesObserved   *prometheus.GaugeVec
	errorsTotal     *prometheus.CounterVec
	labelPatches    prometheus.Counter
}

// newMetrics registers the metrics on reg (nil: kept, not exported).
func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		clustersWatched: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ztpd_kubewatch_clusters", Help: "Clusters watched, by whether their API server answered the last probe (reachable, unreachable).",
		}, []string{"state"}),
		nodesObserved: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ztpd_kubewatch_nodes", Help: "Nodes in the watched clusters, by Ready condition (ready, not_ready, unknown).",
		}, []string{"state"}),
		errorsTotal: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ztpd_kubewatch_errors_total", Help: "Errors watching clusters, by kind (probe, watch, connect, credentials, patch, label, targets).",
		}, []string{"kind"}),
		labelPatches: f.NewCounter(prometheus.CounterOpts{
			Name: "ztpd_kubewatch_label_patches_total", Help: "Node label patches applied.",
		}),
	}
}
