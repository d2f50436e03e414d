#!/usr/bin/env bash
# scale.sh - how ztpd's cost grows with the fleet: per fleet size,
# a real `ztpd serve` with durable state takes the boot storm of
# testenv/cmd/bootstorm's fleet (peak RSS, CPU s per device, store bytes per
# device), renews every lease at T1 (each switch unicasts a RENEWING
# DHCPREQUEST from its address, the fleet spread uniformly over RENEW_WINDOW;
# acked, NAKed, dropped, p50/p99 REQUEST->ACK, and the check that the store
# holds every renewal; T1 is compressed: the lease is LEASE_TIME and the fleet
# renews once its leases are past ztpd's lease cache, a quarter of it, instead
# of at 30 min of a 1h lease), is restarted on its data (the renewed leases
# must be there) with EVENTS device events in the store,
# answers listKubernetesClusters, GET /api/v1/devices?state=&limit=100 and
# GET /api/v1/events?device= under wrk, and is backed up (testenv/cmd/scalebench).
# Root required (namespaces sc-srv / sc-cli, 10.99.0.0/16: at most 65,278
# devices fit its pool; a larger size storms 65,278 and writes the rest into
# the store as copies of the storm's records, see testenv/cmd/scalebench/extend.go).
# IPV6=1: the same over IPv6 (namespaces sc6-srv / sc6-cli, fd99::/16): the
# storm's leases and renewals by DHCPv6 (Solicit/Advertise/Request/Reply and
# Renew through a relay, as dhclient -6 does), each switch's HTTP from its
# address in a /64 pool, which holds every size: 100,000 are all stormed.
# Long (~40 min for the default sizes): not part of `make bench`.
# Knobs (env): SIZES ("10000 30000 100000") EVENTS (1000000) CONCURRENCY (256)
#   DURATION (wrk, 10s) CONNS (32) PROFILES (dir for ztpd's CPU profile of each storm)
#   LEASE_TIME (6m: the renewals start LEASE_TIME/4 after each storm) RENEW_WINDOW (60s) IPV6 (0)
# Per size: a "size" line, an "api" line and a "renewals" line.
# Last lines: growth vs the smallest size, then
#   RESULT scale devices=<n> storm_s=<s> p99_ms=<ms> rss_mb=<m> api_p99_ms=<ms> restart_s=<s> ... family=<ipv4|ipv6>
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
SIZES=${SIZES:-10000 30000 100000} EVENTS=${EVENTS:-1000000} CONCURRENCY=${CONCURRENCY:-256}
DURATION=${DURATION:-10s} CONNS=${CONNS:-32} PROFILES=${PROFILES:-}
LEASE_TIME=${LEASE_TIME:-6m} RENEW_WINDOW=${RENEW_WINDOW:-60s} IPV6=${IPV6:-0}
[[ $EUID -eq 0 ]] || { echo "scale: must run as root (namespaces)" >&2; exit 1; }
command -v wrk >/dev/null || { echo "scale: wrk is not installed (apt-get install wrk)" >&2; exit 1; }
go build -o bin/ztpd ./cmd/ztpd
go build -o bin/bootstorm ./testenv/cmd/bootstorm
go build -o bin/scalebench ./testenv/cmd/scalebench
[ -z "$PROFILES" ] || mkdir -p "$PROFILES"
family=()
[[ $IPV6 == 1 ]] && family=(-ipv6)
bin/scalebench "${family[@]}" -sizes "$SIZES" -events "$EVENTS" -concurrency "$CONCURRENCY" -duration "$DURATION" -conns "$CONNS" \
	-lease-time "$LEASE_TIME" -renew-window "$RENEW_WINDOW" -ztpd bin/ztpd -bootstorm bin/bootstorm -cpuprofile-dir "$PROFILES"
