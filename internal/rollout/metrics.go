package rollout

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	rolloutsEnded = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "ztpd_rollouts_total", Help: "Rollouts ended, by kind and final state.",
	}, []string{"kind", "state"})
	rolloutsRunning = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "ztpd_rollouts_running", Help: "Rollouts running (or paused) in this process.",
	})
	nodesEnded = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "ztpd_rollout_nodes_total", Help: "Rollout nodes finished, by kind and phase (done, skipped, failed, withdrawn).",
	}, []string{"kind", "phase"})
	nodeSeconds = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name: "ztpd_rollout_node_seconds", Help: "Time a node took in a rollout, from its start to done, by kind.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 14),
	}, []string{"kind"})
)
