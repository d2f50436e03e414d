#!/usr/bin/env bash
# API benchmark: listKubernetesClusters (CloudStack API) and GET /api/v1/devices
# (REST, one page) with 10,000 devices in the store, under wrk; /healthz on the
# same listener is the floor (the least any request can cost there). No
# CloudStack management server can run on this machine, so there is no
# external reference tool; the floor ratio is reported instead.
#
# Usage: bench/api.sh   (env: DEVICES=10000 CLUSTERS=10 MEMBERS=20 DURATION=20s
#                        CONNS=32 THREADS=2 PORT=18480 BIN=bin/ztpd)
# Last line: RESULT api_p99_ms devices=<p99 ms> clusters=<p99 ms> rps_devices=<req/s>
set -euo pipefail
cd "$(dirname "$0")/.."

DEVICES=${DEVICES:-10000}
CLUSTERS=${CLUSTERS:-10}
MEMBERS=${MEMBERS:-20}
DURATION=${DURATION:-20s}
CONNS=${CONNS:-32}
THREADS=${THREADS:-2}
PORT=${PORT:-18480}
BIN=${BIN:-bin/ztpd}
GO=${GO:-go}

command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)" >&2; exit 1; }
WORK=$(mktemp -d /tmp/ztpd-bench-api.XXXXXX)
SERVER_PID=
cleanup() {
	if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
	rm -rf "$WORK"
}
trap cleanup EXIT

if [ ! -x "$BIN" ] || [ -n "${REBUILD:-}" ]; then
	$GO build -trimpath -o "$BIN" ./cmd/ztpd
fi
$GO build -o "$WORK/apiseed" ./testenv/cmd/apiseed

echo "seeding $DEVICES devices, $CLUSTERS clusters x $MEMBERS members ..." >&2
eval "$("$WORK/apiseed" -data-dir "$WORK/data" -devices "$DEVICES" -clusters "$CLUSTERS" -members "$MEMBERS")"

# Pin the server to CPU 1 and wrk to CPU 0 when there are two CPUs, like the
# reference benchmarks, so client and server do not fight for one core.
PIN_SERVER=() PIN_CLIENT=()
if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then PIN_SERVER=(taskset -c 1) PIN_CLIENT=(taskset -c 0); fi
"${PIN_SERVER[@]}" "$BIN" serve --data-dir "$WORK/data" --http-addr "127.0.0.1:$PORT" --log-level warn >"$WORK/serve.out" 2>"$WORK/serve.err" &
SERVER_PID=$!
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done
BASE="http://127.0.0.1:$PORT"

# Sanity: the signed requests are accepted and return what we measure.
curl -fs "$BASE/client/api?$CS_QUERY" | grep -q "\"count\":$CLUSTERS" || { echo "listKubernetesClusters check failed" >&2; exit 1; }
curl -fs -H "Authorization: $REST_AUTH" "$BASE/api/v1/devices?$DEVICES_QUERY" | grep -q next_cursor || { echo "devices check failed" >&2; exit 1; }

run() { # name url [header]
	local name=$1 url=$2 hdr=${3:-}
	local out
	if [ -n "$hdr" ]; then
		out=$("${PIN_CLIENT[@]}" wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -H "Authorization: $hdr" "$url")
	else
		out=$("${PIN_CLIENT[@]}" wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency "$url")
	fi
	echo "$out" >"$WORK/wrk-$name.txt"
	local rps p99 non2xx
	rps=$(awk '/^Requests\/sec:/ {printf "%d", $2}' <<<"$out")
	p99=$(awk '$1=="99%" {v=$2; if (v ~ /us$/) {sub("us","",v); v/=1000} else if (v ~ /ms$/) {sub("ms","",v)} else if (v ~ /s$/) {sub("s","",v); v*=1000}; printf "%.2f", v}' <<<"$out")
	non2xx=$(awk '/Non-2xx/ {print $5}' <<<"$out")
	[ -z "$non2xx" ] || { echo "$name: $non2xx non-2xx answers" >&2; exit 1; }
	echo "$name $rps $p99"
}

echo "wrk -t$THREADS -c$CONNS -d$DURATION --latency; $DEVICES devices, $CLUSTERS clusters x $MEMBERS members" >&2
read -r _ H_RPS H_P99 < <(run healthz "$BASE/healthz")
read -r _ C_RPS C_P99 < <(run clusters "$BASE/client/api?$CS_QUERY")
read -r _ D_RPS D_P99 < <(run devices "$BASE/api/v1/devices?$DEVICES_QUERY" "$REST_AUTH")
SIZE_C=$(curl -fs "$BASE/client/api?$CS_QUERY" | wc -c)
SIZE_D=$(curl -fs -H "Authorization: $REST_AUTH" "$BASE/api/v1/devices?$DEVICES_QUERY" | wc -c)

printf '%-44s %10s %9s %9s %10s\n' "endpoint" "req/s" "p99 ms" "bytes" "vs floor"
printf '%-44s %10s %9s %9s %10s\n' "GET /healthz (floor, same listener)" "$H_RPS" "$H_P99" "-" "1.00"
printf '%-44s %10s %9s %9s %10s\n' "listKubernetesClusters (signed, CloudStack)" "$C_RPS" "$C_P99" "$SIZE_C" "$(awk -v a="$C_RPS" -v b="$H_RPS" 'BEGIN{printf "%.2f", a/b}')"
printf '%-44s %10s %9s %9s %10s\n' "GET /api/v1/devices?limit=100 (signed)" "$D_RPS" "$D_P99" "$SIZE_D" "$(awk -v a="$D_RPS" -v b="$H_RPS" 'BEGIN{printf "%.2f", a/b}')"
# How the answers were made: rendered afresh, or shared from the response
# cache (exact per store generation; see api/bodycache.go).
CACHE=$(curl -fs "$BASE/metrics" | awk '/^ztpd_api_response_cache_total/ {gsub(/.*result="|"}/, "", $1); printf "%s=%d ", $1, $2}')
echo "response cache: ${CACHE:-none}"
echo "goal: p99 < 20 ms"
echo "RESULT api_p99_ms devices=$D_P99 clusters=$C_P99 rps_devices=$D_RPS"
