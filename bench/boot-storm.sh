#!/usr/bin/env bash
# boot-storm.sh - 10,000 simulated SONiC switches onboard through a real
# `ztpd serve` at once: DORA through a relay address, ztp.json,
# config_db.json, join bundle, joined report (a hint; no Kubernetes here) (testenv/cmd/bootstorm).
# Root required (network namespaces bs-srv / bs-cli, 10.99.0.0/16).
# IPV6=1: over DHCPv6 (Solicit/Advertise/Request/Reply through a relay) and
# HTTP over IPv6, namespaces bs6-srv / bs6-cli, fd99::/16.
# DEVICE_TLS=0: ztpd's device HTTPS listener off (the join and the report in
# clear), to measure what TLS costs the storm against the default.
# Knobs (env): N (10000) CLUSTERS (10) CONCURRENCY (256) SERVER_CPUS (taskset list, empty = none) IPV6 (0) DEVICE_TLS (1)
# Last line: RESULT boot_storm devices=<n> seconds=<n> p99_ms=<n>
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
N=${N:-10000} CLUSTERS=${CLUSTERS:-10} CONCURRENCY=${CONCURRENCY:-256} SERVER_CPUS=${SERVER_CPUS:-} IPV6=${IPV6:-0} DEVICE_TLS=${DEVICE_TLS:-1}
[[ $EUID -eq 0 ]] || { echo "boot-storm: must run as root (namespaces)" >&2; exit 1; }
go build -o bin/ztpd ./cmd/ztpd
go build -o bin/bootstorm ./testenv/cmd/bootstorm
flags=()
[[ $IPV6 == 1 ]] && flags=(-ipv6)
[[ $DEVICE_TLS == 0 ]] && flags+=(-device-tls=false)
bin/bootstorm "${flags[@]}" -n "$N" -clusters "$CLUSTERS" -concurrency "$CONCURRENCY" -ztpd bin/ztpd -server-cpus "$SERVER_CPUS"
