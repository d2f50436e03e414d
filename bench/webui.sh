#!/usr/bin/env bash
# webui.sh - the web console under a boot storm (testenv/cmd/webbench): a real
# `ztpd serve` (namespace wb-srv) takes N simulated SONiC switches at once
# (the bootstorm fleet in wb-cli) while Debian's chromium, headless on the
# host, keeps the devices page open through a forwarder into wb-srv.
# Measured: SSE update messages/s and device updates/s the page's
# EventSource received during the storm, the tab's peak JS heap and
# renderer RSS meanwhile (the target: under 300 MB), then, with the N devices
# stored, the time from navigation start to the devices table's first page
# rendered, median of LOADS fresh loads (the target: under 1 s).
# Reference, in the same run: the identical storm (fresh ztpd, same config,
# clusters and fleet) with no browser at all (webbench -page=false). Each of
# ROUNDS rounds runs the page-less storm first, then the one with the page;
# storm_ratio = storm_s / storm_ref_s is what the open console costs
# onboarding (the storm's time is the fleet's own clock). There is no other
# tool to compare against: no other ZTP server has a console that shows a
# fleet onboarding live.
# Every figure on the last line is the median over the rounds (with an even
# count, the mean of the middle two); storm_ratio is the ratio of the
# medians. Per-round figures are printed as `round <i>:` lines.
# Root required (network namespaces, 10.99.0.0/16) and chromium.
# Knobs (env): N (10000) CLUSTERS (10) CONCURRENCY (256) LOADS (5) ROUNDS (2)
# Last line: RESULT webui first_page_ms=<n> devices=<n> sse_msgs_per_s=<x> sse_device_updates_per_s=<x> tab_mb=<n> storm_s=<x> storm_ref_s=<x> storm_ratio=<x> p99_ms=<x> p99_ref_ms=<x>
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
N=${N:-10000} CLUSTERS=${CLUSTERS:-10} CONCURRENCY=${CONCURRENCY:-256} LOADS=${LOADS:-5} ROUNDS=${ROUNDS:-2}
[[ $EUID -eq 0 ]] || { echo "webui: must run as root (namespaces)" >&2; exit 1; }
[[ -x ${ZTPD_CHROMIUM:-/usr/bin/chromium} ]] || command -v chromium >/dev/null || { echo "webui: needs chromium (apt-get install chromium)" >&2; exit 1; }
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "webui: ROUNDS must be a positive integer" >&2; exit 1; }
go build -o bin/ztpd ./cmd/ztpd
go build -o bin/bootstorm ./testenv/cmd/bootstorm
go build -o bin/webbench ./testenv/cmd/webbench
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# field <name> <RESULT line>: the value of name=... on the line.
field() { tr ' ' '\n' <<<"$2" | sed -n "s/^$1=//p"; }
# median <values...>
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

declare -A vals
keys=(first_page_ms devices sse_msgs_per_s sse_device_updates_per_s tab_mb storm_s p99_ms storm_ref_s p99_ref_ms)
for ((r = 1; r <= ROUNDS; r++)); do
	echo "== round $r/$ROUNDS: the storm without a browser (reference)"
	bin/webbench -page=false -n "$N" -clusters "$CLUSTERS" -concurrency "$CONCURRENCY" -ztpd bin/ztpd -bootstorm bin/bootstorm | tee "$out"
	ref=$(grep '^RESULT webui_ref ' "$out" | tail -1)
	echo "== round $r/$ROUNDS: the storm with the devices page open"
	bin/webbench -n "$N" -clusters "$CLUSTERS" -concurrency "$CONCURRENCY" -loads "$LOADS" -ztpd bin/ztpd -bootstorm bin/bootstorm | tee "$out"
	page=$(grep '^RESULT webui ' "$out" | tail -1)
	for k in first_page_ms devices sse_msgs_per_s sse_device_updates_per_s tab_mb storm_s p99_ms; do
		vals[$k]+=" $(field "$k" "$page")"
	done
	vals[storm_ref_s]+=" $(field storm_s "$ref")"
	vals[p99_ref_ms]+=" $(field p99_ms "$ref")"
	s=$(field storm_s "$page") sr=$(field storm_s "$ref")
	echo "round $r: storm_s=$s storm_ref_s=$sr storm_ratio=$(awk -v a="$s" -v b="$sr" 'BEGIN {printf "%.2f", a/b}')" \
		"p99_ms=$(field p99_ms "$page") p99_ref_ms=$(field p99_ms "$ref") first_page_ms=$(field first_page_ms "$page")" \
		"sse_msgs_per_s=$(field sse_msgs_per_s "$page") sse_device_updates_per_s=$(field sse_device_updates_per_s "$page") tab_mb=$(field tab_mb "$page")"
done

declare -A med
for k in "${keys[@]}"; do
	# shellcheck disable=SC2086 # the values are a space-separated list
	med[$k]=$(median ${vals[$k]})
done
ratio=$(awk -v a="${med[storm_s]}" -v b="${med[storm_ref_s]}" 'BEGIN {printf "%.2f", a/b}')
echo "RESULT webui first_page_ms=${med[first_page_ms]} devices=${med[devices]} sse_msgs_per_s=${med[sse_msgs_per_s]}" \
	"sse_device_updates_per_s=${med[sse_device_updates_per_s]} tab_mb=${med[tab_mb]} storm_s=${med[storm_s]}" \
	"storm_ref_s=${med[storm_ref_s]} storm_ratio=$ratio p99_ms=${med[p99_ms]} p99_ref_ms=${med[p99_ref_ms]}"
