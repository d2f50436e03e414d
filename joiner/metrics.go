package joiner

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// metrics are the joiner's metrics, registered on the registry its owner
// is given.
type metrics struct {
	bundlesIssued  *prometheus.CounterVec
	joinsWaiting   prometheus.Counter
	joinsRefused   *prometheus.CounterVec
	reports        *prometheus.CounterVec
	reportsRefused *prometheus.CounterVec
}

// newMetrics registers the metrics on reg (nil: kept, not exported).
func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		bundlesIssued: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ztpd_join_bundles_total", Help: "Join bundles issued, by join method and role.",
		}, []string{"method", "role"}),
		joinsWaiting: f.NewCounter(prometheus.CounterOpts{
			Name: "ztpd_join_waiting_total", Help: "Join requests told to wait (approval, room, no control plane yet).",
		}),
		joinsRefused: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ztpd_join_refused_total", Help: "Join requests refused, by reason.",
		}, []string{"reason"}),
		reports: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ztpd_join_reports_total", Help: "Node reports received, by state.",
		}, []string{"state"}),
		reportsRefused: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ztpd_join_reports_refused_total", Help: "Node reports refused, by reason (credential, not-holder).",
		}, []string{"reason"}),
	}
}

// refusalLogEvery is how often one address may log a refused request: a
// prober is visible without flooding the log.
const refusalLogEvery = 30 * time.Second

// refusalReason names a refused join for the metric's label.
func refusalReason(err error) string {
	for _, r := range []struct {
		err  error
		name string
	}{
		{ErrEnrollmentInvalid, "invalid"}, {ErrEnrollmentUsed, "replayed"}, {ErrEnrollmentExpired, "expired"}, {ErrEnrollmentAddress, "wrong-address"},
		{ErrRevoked, "revoked"}, {ErrBindingMismatch, "wrong-device"}, {ErrClusterUnavailable, "cluster-unavailable"},
		{ErrMemberElsewhere, "member-elsewhere"}, {ErrCSRRefused, "bad-csr"}, {ErrCSRMissing, "no-csr"}, {ErrEtcdCSRMissing, "no-csr"},
		{ErrInvalid, "bad-request"}, {ErrMoved, "moved"},
	} {
		if errors.Is(err, r.err) {
			return r.name
		}
	}
	return "error"
}
