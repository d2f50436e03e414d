package app

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
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
