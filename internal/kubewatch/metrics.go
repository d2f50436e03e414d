package kubewatch

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	clustersWatched = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ztpd_kubewatch_clusters", Help: "Clusters watched, by whether their API server answered the last probe (reachable, unreachable).",
	}, []string{"state"})
	nodesObserved = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ztpd_kubewatch_nodes", Help: "Nodes in the watched clusters, by Ready condition (ready, not_ready, unknown).",
	}, []string{"state"})
	errorsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "ztpd_kubewatch_errors_total", Help: "Errors watching clusters, by kind (probe, watch, connect, credentials, patch, label, targets).",
	}, []string{"kind"})
	labelPatches = promauto.NewCounter(prometheus.CounterOpts{
		Name: "ztpd_kubewatch_label_patches_total", Help: "Node label patches applied.",
	})
)

// nodeCounts is one cluster's contribution to ztpd_kubewatch_nodes.
type nodeCounts struct{ ready, notReady, unknown int }

// publish moves the gauge from what was published before to now.
func (now nodeCounts) publish(before nodeCounts) {
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
