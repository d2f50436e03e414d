package dhcp6

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// metrics are the DHCPv6 server's metrics.
type metrics struct {
	packets      *prometheus.CounterVec
	dropped      *prometheus.CounterVec
	commitErrors prometheus.Counter
	sendErrors   prometheus.Counter
}

// newMetrics registers the server's metrics on reg (nil: kept, not
// exported).
func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		packets: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ztpd_dhcp6_packets_total", Help: "DHCPv6 client messages received, by message type.",
		}, []string{"type"}),
		dropped: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ztpd_dhcp6_dropped_total", Help: "DHCPv6 messages left unanswered, by reason.",
		}, []string{"reason"}),
		commitErrors: f.NewCounter(prometheus.CounterOpts{
			Name: "ztpd_dhcp6_commit_errors_total", Help: "DHCPv6 lease commits that failed (replies withheld).",
		}),
		sendErrors: f.NewCounter(prometheus.CounterOpts{
			Name: "ztpd_dhcp6_send_errors_total", Help: "DHCPv6 replies the kernel refused to send.",
		}),
	}
}
