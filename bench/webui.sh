#!/usr/bin/env bash
# webui.sh - the web console under a boot storm (testenv/webbench): a real
# `ztpd serve` (namespace wb-srv) takes N simulated SONiC switches at once
# (the bootstorm fleet in wb-cli) while Debian's chromium, headless on the
# host, keeps the devices page open through a forwarder into wb-srv.
# Measured: SSE update messages/s and device updates/s the page's
# EventSource received during the storm, the tab's peak JS heap and
# renderer RSS meanwhile (issue 16: under 300 MB), then, with the N devices
# stored, the time from navigation start to the devices table's first page
# rendered, median of 5 fresh loads (issue 16: under 1 s).
# There is no reference tool to compare against: no other ZTP server has a
# console that shows a fleet onboarding live; the figures stand alone.
# Root required (network namespaces, 10.99.0.0/16) and chromium.
# Knobs (env): N (10000) CLUSTERS (10) CONCURRENCY (256) LOADS (5)
# Last line: RESULT webui first_page_ms=<n> devices=<n> sse_msgs_per_s=<x> sse_device_updates_per_s=<x> tab_mb=<n>
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
N=${N:-10000} CLUSTERS=${CLUSTERS:-10} CONCURRENCY=${CONCURRENCY:-256} LOADS=${LOADS:-5}
[[ $EUID -eq 0 ]] || { echo "webui: must run as root (namespaces)" >&2; exit 1; }
[[ -x ${ZTPD_CHROMIUM:-/usr/bin/chromium} ]] || command -v chromium >/dev/null || { echo "webui: needs chromium (apt-get install chromium)" >&2; exit 1; }
go build -o bin/ztpd ./cmd/ztpd
go build -o bin/bootstorm ./testenv/bootstorm
go build -o bin/webbench ./testenv/webbench
bin/webbench -n "$N" -clusters "$CLUSTERS" -concurrency "$CONCURRENCY" -loads "$LOADS" -ztpd bin/ztpd -bootstorm bin/bootstorm
