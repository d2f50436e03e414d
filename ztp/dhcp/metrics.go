package dhcp

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	packetsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "ztpd_dhcp_packets_total", Help: "DHCPv4 requests received, by message type.",
	}, []string{"type"})
	repliesTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "ztpd_dhcp_replies_total", Help: "DHCPv4 replies sent, by message type.",
	}, []string{"type"})
	droppedTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "ztpd_dhcp_dropped_total", Help: "DHCPv4 packets dropped without a reply, by reason.",
	}, []string{"reason"})
	exhaustedTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "ztpd_dhcp_pool_exhausted_total", Help: "DISCOVERs left unanswered because the subnet had no free address.",
	}, []string{"subnet"})
	poolSize = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ztpd_dhcp_pool_addresses", Help: "Dynamic addresses in the subnet's pools.",
	}, []string{"subnet"})
	poolUsed = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ztpd_dhcp_pool_used_addresses", Help: "Pool addresses leased, offered or quarantined.",
	}, []string{"subnet"})
	poolUtilization = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ztpd_dhcp_pool_utilization_ratio", Help: "Used share of the subnet's pool addresses (0..1).",
	}, []string{"subnet"})
	commitSeconds = promauto.NewHistogram(prometheus.HistogramOpts{
		Name:    "ztpd_dhcp_lease_commit_seconds",
		Help:    "Time from an ACK decision until its lease is durable and the ACK may leave.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
	})
	commitBatch = promauto.NewHistogram(prometheus.HistogramOpts{
		Name:    "ztpd_dhcp_commit_batch_acks",
		Help:    "ACKs released by one durable commit.",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048},
	})
	commitErrors = promauto.NewCounter(prometheus.CounterOpts{
		Name: "ztpd_dhcp_commit_errors_total", Help: "Failed lease commits (their ACKs were not sent).",
	})
	clientIDInUse = promauto.NewCounter(prometheus.CounterOpts{
		Name: "ztpd_dhcp_client_id_in_use_total",
		Help: "Requests whose client id another hardware address holds a live lease under; served by their own hardware address instead.",
	})
	factsRefused = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "ztpd_dhcp_facts_refused_total",
		Help: "Device facts from DHCP options not stored: outside the allowed characters, or contradicting the record.",
	}, []string{"fact"})
)

// Counters indexed by message type, resolved once so the hot path does no
// label lookups.
var (
	packetsByType [9]prometheus.Counter
	repliesByType [9]prometheus.Counter
)

// Drop reasons.
var (
	dropMalformed  = droppedTotal.WithLabelValues("malformed")
	dropNoType     = droppedTotal.WithLabelValues("no_message_type")
	dropNoSubnet   = droppedTotal.WithLabelValues("no_subnet")
	dropNotOurs    = droppedTotal.WithLabelValues("other_server")
	dropUnknown    = droppedTotal.WithLabelValues("unknown_client")
	dropExhausted  = droppedTotal.WithLabelValues("pool_exhausted")
	dropBacklog    = droppedTotal.WithLabelValues("commit_backlog")
	dropCommit     = droppedTotal.WithLabelValues("commit_failed")
	dropSendFailed = droppedTotal.WithLabelValues("send_failed")
	dropStale      = droppedTotal.WithLabelValues("superseded")
	// giaddr set by a sender not declared under dhcp.relays (or not with
	// that giaddr, or on another interface)
	dropUntrustedRelay = droppedTotal.WithLabelValues("untrusted_relay")
	// option 82 or 118 in a packet without giaddr: only relays add them
	dropClientRelayInfo = droppedTotal.WithLabelValues("relay_info_from_client")
	// another appliance's bucket (several appliances, loadbalance.go)
	dropNotMine = droppedTotal.WithLabelValues("other_appliance")
)

// Several appliances (loadbalance.go).
var (
	blocksClaimed = promauto.NewCounter(prometheus.CounterOpts{Name: "ztpd_dhcp_blocks_claimed_total",
		Help: "Address blocks this appliance claimed to allocate from (several appliances)."})
	remoteLeases = promauto.NewCounter(prometheus.CounterOpts{Name: "ztpd_dhcp_feed_leases_total",
		Help: "Stored leases applied from the lease feed (other appliances' commits and this one's own)."})
	staleDecisions = promauto.NewCounter(prometheus.CounterOpts{Name: "ztpd_dhcp_stale_decisions_dropped_total",
		Help: "Lease decisions dropped uncommitted because the session they were made under ended (several appliances); the binding went back to what the store holds."})
)

func init() {
	for t := range packetsByType {
		packetsByType[t] = packetsTotal.WithLabelValues(msgName(uint8(t)))
		repliesByType[t] = repliesTotal.WithLabelValues(msgName(uint8(t)))
	}
}

func countPacket(t uint8) {
	if int(t) < len(packetsByType) {
		packetsByType[t].Inc()
	} else {
		packetsTotal.WithLabelValues("other").Inc()
	}
}
