// Package dhcplease holds the lease rules the DHCPv4 (ztp/dhcp) and DHCPv6
// (ztp/dhcp6) servers share, so that both families answer alike.
package dhcplease

import "time"

// CacheThreshold: a request for a lease committed less than this share of
// the lease time ago is answered with the time that lease has left, without
// a write (as Kea's cache-threshold). Reboots, retransmissions and boot
// storms then cost no disk I/O, and the reply never promises more than is
// durable.
const CacheThreshold = 0.25

// Cached returns the remaining time of a durable lease (committed with
// expiry durable, for leaseTime) when a request at now can be answered with
// it as is: more than (1 - CacheThreshold) of leaseTime is left, in whole
// seconds. A zero durable (nothing committed) is never cached.
func Cached(durable, now time.Time, leaseTime time.Duration) (time.Duration, bool) {
	if durable.IsZero() {
		return 0, false
	}
	rest := durable.Sub(now).Truncate(time.Second)
	if rest <= time.Duration(float64(leaseTime)*(1-CacheThreshold)) {
		return 0, false
	}
	return rest, true
}
