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
	// Several appliances (group.go).
	blocksClaimed  prometheus.Counter
	remoteLeases   prometheus.Counter
	staleDecisions prometheus.Counter
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
		blocksClaimed: f.NewCounter(prometheus.CounterOpts{
			Name: "ztpd_dhcp6_blocks_claimed_total", Help: "IPv6 address blocks this appliance claimed (several appliances).",
		}),
		remoteLeases: f.NewCounter(prometheus.CounterOpts{
			Name: "ztpd_dhcp6_feed_leases_total", Help: "Stored IPv6 leases applied from the lease feed (other appliances' commits and this one's own).",
		}),
		staleDecisions: f.NewCounter(prometheus.CounterOpts{
			Name: "ztpd_dhcp6_stale_decisions_total",
			Help: "DHCPv6 lease decisions dropped uncommitted because the session they were made under ended (several appliances); the binding went back to what the store holds.",
		}),
	}
}
