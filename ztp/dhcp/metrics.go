package dhcp

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// metrics are the DHCP server's metrics.
type metrics struct {
	packetsTotal    *prometheus.CounterVec
	repliesTotal    *prometheus.CounterVec
	droppedTotal    *prometheus.CounterVec
	exhaustedTotal  *prometheus.CounterVec
	poolSize        *prometheus.GaugeVec
	poolUsed        *prometheus.GaugeVec
	poolUtilization *prometheus.GaugeVec
	commitSeconds   prometheus.Histogram
	commitBatch     prometheus.Histogram
	commitErrors    prometheus.Counter
	clientIDInUse   prometheus.Counter
	factsRefused    *prometheus.CounterVec

	// Counters indexed by message type, resolved once so the hot path
	// does no label lookups.
	packetsByType [9]prometheus.Counter
	repliesByType [9]prometheus.Counter

	// Drop reasons.
	dropMalformed  prometheus.Counter
	dropNoType     prometheus.Counter
	dropNoSubnet   prometheus.Counter
	dropNotOurs    prometheus.Counter
	dropUnknown    prometheus.Counter
	dropExhausted  prometheus.Counter
	dropBacklog    prometheus.Counter
	dropCommit     prometheus.Counter
	dropSendFailed prometheus.Counter
	dropStale      prometheus.Counter
	// giaddr set by a sender not declared under dhcp.relays (or not with
	// that giaddr, or on another interface)
	dropUntrustedRelay prometheus.Counter
	// option 82 or 118 in a packet without giaddr: only relays add them
	dropClientRelayInfo prometheus.Counter
	// another appliance's bucket (several appliances, loadbalance.go)
	dropNotMine prometheus.Counter

	// Several appliances (loadbalance.go).
	blocksClaimed  prometheus.Counter
	remoteLeases   prometheus.Counter
	staleDecisions prometheus.Counter
}

// newMetrics registers the server's metrics on reg (nil: kept, not
// exported).
func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	m := &metrics{}
	m.packetsTotal = f.NewCounterVec(prometheus.CounterOpts{
		Name: "ztpd_dhcp_packets_total", Help: "DHCPv4 requests received, by message type.",
	}, []string{"type"})
	m.repliesTotal = f.NewCounterVec(prometheus.CounterOpts{
		Name: "ztpd_dhcp_replies_total", Help: "DHCPv4 replies sent, by message type.",
	}, []string{"type"})
	m.droppedTotal = f.NewCounterVec(prometheus.CounterOpts{
		Name: "ztpd_dhcp_dropped_total", Help: "DHCPv4 packets dropped without a reply, by reason.",
	}, []string{"reason"})
	m.exhaustedTotal = f.NewCounterVec(prometheus.CounterOpts{
		Name: "ztpd_dhcp_pool_exhausted_total", Help: "DISCOVERs left unanswered because the subnet had no free address.",
	}, []string{"subnet"})
	m.poolSize = f.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ztpd_dhcp_pool_addresses", Help: "Dynamic addresses in the subnet's pools.",
	}, []string{"subnet"})
	m.poolUsed = f.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ztpd_dhcp_pool_used_addresses", Help: "Pool addresses leased, offered or quarantined.",
	}, []string{"subnet"})
	m.poolUtilization = f.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ztpd_dhcp_pool_utilization_ratio", Help: "Used share of the subnet's pool addresses (0..1).",
	}, []string{"subnet"})
	m.commitSeconds = f.NewHistogram(prometheus.HistogramOpts{
		Name:    "ztpd_dhcp_lease_commit_seconds",
		Help:    "Time from an ACK decision until its lease is durable and the ACK may leave.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
	})
	m.commitBatch = f.NewHistogram(prometheus.HistogramOpts{
		Name:    "ztpd_dhcp_commit_batch_acks",
		Help:    "ACKs released by one durable commit.",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048},
	})
	m.commitErrors = f.NewCounter(prometheus.CounterOpts{
		Name: "ztpd_dhcp_commit_errors_total", Help: "Failed lease commits (their ACKs were not sent).",
	})
	m.clientIDInUse = f.NewCounter(prometheus.CounterOpts{
		Name: "ztpd_dhcp_client_id_in_use_total",
		Help: "Requests whose client id another hardware address holds a live lease under; served by their own hardware address instead.",
	})
	m.factsRefused = f.NewCounterVec(prometheus.CounterOpts{
		Name: "ztpd_dhcp_facts_refused_total",
		Help: "Device facts from DHCP options not stored: outside the allowed characters, or contradicting the record.",
	}, []string{"fact"})
	m.blocksClaimed = f.NewCounter(prometheus.CounterOpts{Name: "ztpd_dhcp_blocks_claimed_total",
		Help: "Address blocks this appliance claimed to allocate from (several appliances)."})
	m.remoteLeases = f.NewCounter(prometheus.CounterOpts{Name: "ztpd_dhcp_feed_leases_total",
		Help: "Stored leases applied from the lease feed (other appliances' commits and this one's own)."})
	m.staleDecisions = f.NewCounter(prometheus.CounterOpts{Name: "ztpd_dhcp_stale_decisions_dropped_total",
		Help: "Lease decisions dropped uncommitted because the session they were made under ended (several appliances); the binding went back to what the store holds."})

	for t := range m.packetsByType {
		m.packetsByType[t] = m.packetsTotal.WithLabelValues(msgName(uint8(t)))
		m.repliesByType[t] = m.repliesTotal.WithLabelValues(msgName(uint8(t)))
	}
	d := m.droppedTotal
	m.dropMalformed = d.WithLabelValues("malformed")
	m.dropNoType = d.WithLabelValues("no_message_type")
	m.dropNoSubnet = d.WithLabelValues("no_subnet")
	m.dropNotOurs = d.WithLabelValues("other_server")
	m.dropUnknown = d.WithLabelValues("unknown_client")
	m.dropExhausted = d.WithLabelValues("pool_exhausted")
	m.dropBacklog = d.WithLabelValues("commit_backlog")
	m.dropCommit = d.WithLabelValues("commit_failed")
	m.dropSendFailed = d.WithLabelValues("send_failed")
	m.dropStale = d.WithLabelValues("superseded")
	m.dropUntrustedRelay = d.WithLabelValues("untrusted_relay")
	m.dropClientRelayInfo = d.WithLabelValues("relay_info_from_client")
	m.dropNotMine = d.WithLabelValues("other_appliance")
	return m
}

func (m *metrics) countPacket(t uint8) {
	if int(t) < len(m.packetsByType) {
		m.packetsByType[t].Inc()
	} else {
		m.packetsTotal.WithLabelValues("other").Inc()
	}
}
