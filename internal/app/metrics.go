package app

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
)

// newMetricsRegistry is one App's metrics registry: every service and
// transport the App builds registers on it, so two Apps in one process
// (the in-process tests) neither share counters nor collide. The Go
// runtime's and the process's own metrics are on it too.
func newMetricsRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// metricsGatherer is what /metrics serves: the App's registry and what
// the libraries ztpd embeds register on Prometheus' global registry by
// themselves (an embedded etcd member's etcd_server_* and gRPC metrics,
// which operators and the HA lab read to find the raft leader), less the
// runtime and process metrics the App's registry has too: a name gathered
// twice fails the whole scrape. ztpd's own metrics are never global
// (TestNoGlobalMetrics).
func (a *App) metricsGatherer() prometheus.Gatherer {
	libraries := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := prometheus.DefaultGatherer.Gather()
		own, ownErr := a.Metrics.Gather()
		if ownErr != nil {
			own = nil // Gatherers reports the App registry's error itself
		}
		ours := make(map[string]bool, len(own))
		for _, mf := range own {
			ours[mf.GetName()] = true
		}
		kept := mfs[:0]
		for _, mf := range mfs {
			if !ours[mf.GetName()] {
				kept = append(kept, mf)
			}
		}
		return kept, err
	})
	return prometheus.Gatherers{a.Metrics, libraries}
}
