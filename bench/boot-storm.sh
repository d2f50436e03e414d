#!/usr/bin/env bash
# boot-storm.sh - 10,000 simulated SONiC switches onboard through a real
# `ztpd serve` at once: DORA through a relay address, ztp.json,
# config_db.json, join bundle, joined report (a hint; no Kubernetes here) (testenv/cmd/bootstorm).
# Root required (network namespaces bs-srv / bs-cli, 10.99.0.0/16).
# IPV6=1: over DHCPv6 (Solicit/Advertise/Request/Reply through a relay) and
# HTTP over IPv6, namespaces bs6-srv / bs6-cli, fd99::/16.
# DEVICE_TLS=0: ztpd's device HTTPS listener off (the join and the report in
# clear), to measure what TLS costs the storm against the default.
# FLOOR=1 (the default): after ztpd's storm the same fleet runs the same
# storm against testenv/cmd/stormfloor, the least a Go server does per
# switch (the DHCP exchange, the two documents, the join's TLS handshake,
# CSR check and certificate, the report's handshake and token; it keeps
# nothing), its documents as large as ztpd's were: the floor under ztpd's
# CPU per switch on this machine, in the same run. FLOOR=0 skips it.
# Knobs (env): N (10000) CLUSTERS (10) CONCURRENCY (256) SERVER_CPUS (taskset list, empty = none) IPV6 (0) DEVICE_TLS (1) FLOOR (1)
# Last line: RESULT boot_storm devices=<n> seconds=<n> p99_ms=<n> cpu_ms=<ztpd's CPU-ms per switch> floor_cpu_ms=<the floor's, 0 when not run>
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
N=${N:-10000} CLUSTERS=${CLUSTERS:-10} CONCURRENCY=${CONCURRENCY:-256} SERVER_CPUS=${SERVER_CPUS:-} IPV6=${IPV6:-0} DEVICE_TLS=${DEVICE_TLS:-1} FLOOR=${FLOOR:-1}
[[ $EUID -eq 0 ]] || { echo "boot-storm: must run as root (namespaces)" >&2; exit 1; }
go build -o bin/ztpd ./cmd/ztpd
go build -o bin/bootstorm ./testenv/cmd/bootstorm
flags=()
[[ $IPV6 == 1 ]] && flags=(-ipv6)
[[ $DEVICE_TLS == 0 ]] && flags+=(-device-tls=false)
if [[ $FLOOR == 1 ]]; then
  go build -o bin/stormfloor ./testenv/cmd/stormfloor
  flags+=(-floor bin/stormfloor)
fi
bin/bootstorm "${flags[@]}" -n "$N" -clusters "$CLUSTERS" -concurrency "$CONCURRENCY" -ztpd bin/ztpd -server-cpus "$SERVER_CPUS"
