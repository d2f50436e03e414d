package content

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// metrics are content serving's metrics, registered on the registry the
// Service is given.
type metrics struct {
	refused *prometheus.CounterVec
	waits   *prometheus.CounterVec
}

// newMetrics registers the metrics on reg (nil: kept, not exported).
func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		refused: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ztpd_ztp_refused_total",
			Help: "ZTP content requests refused, by document and reason (no-holder, mismatch, bad-fact, no-profile, forbidden).",
		}, []string{"what", "reason"}),
		waits: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ztpd_ztp_waiting_total",
			Help: "ZTP content requests answered with a wait (503, Retry-After), by document.",
		}, []string{"what"}),
	}
}
