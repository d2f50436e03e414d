package devices

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// metrics are the package's metrics, registered on the registry the
// Service is given.
type metrics struct {
	queued          prometheus.Gauge
	recordErrors    prometheus.Counter
	eventsDropped   prometheus.Counter
	eventsPruned    *prometheus.CounterVec
	factConflicts   *prometheus.CounterVec
	devicesPruned   *prometheus.CounterVec
	stateLogDropped prometheus.Counter
}

// newMetrics registers the metrics on reg (nil: kept, not exported).
func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		queued: f.NewGauge(prometheus.GaugeOpts{
			Name: "ztpd_device_records_queued", Help: "Device and event records waiting for their group commit.",
		}),
		recordErrors: f.NewCounter(prometheus.CounterOpts{
			Name: "ztpd_device_record_errors_total", Help: "Device and event records that could not be stored and were dropped.",
		}),
		eventsDropped: f.NewCounter(prometheus.CounterOpts{
			Name: "ztpd_device_events_dropped_total", Help: "Events dropped because too many were waiting (the store failing for long).",
		}),
		eventsPruned: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ztpd_events_pruned_total", Help: "Events deleted by retention, by stream (device, audit).",
		}, []string{"stream"}),
		factConflicts: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ztpd_device_fact_conflicts_total",
			Help: "Device statements that contradicted the device's record and were not applied, by fact (kind, serial, product, platform, base_mac).",
		}, []string{"fact"}),
		devicesPruned: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ztpd_devices_pruned_total",
			Help: "Device records deleted by retention because they never got past a released or expired lease, by reason (expired: unseen for devices.unleased_expiry; cap: beyond devices.max_unleased, oldest first).",
		}, []string{"reason"}),
		stateLogDropped: f.NewCounter(prometheus.CounterOpts{
			Name: "ztpd_device_state_log_dropped_total",
			Help: "Device state changes not logged because the log could not keep up.",
		}),
	}
}
