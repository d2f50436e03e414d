#!/usr/bin/env bash
# ztp-json.sh - ztp.json renders per second under concurrent load, with p99.
#
# A fleet of DEVICES SONiC switches is seeded into a fresh data directory (as
# the DHCP server leaves them: device records with serial numbers, leases);
# ztpd serves them the bench profile (bench/profiles/bench.yaml: firmware,
# configdb-json, snmp and connectivity-check sections, templated per device).
# ztpd identifies a switch by the address it asks from (its lease), so every
# switch asks from its own leased address: testenv/cmd/ztpload (wrk cannot pick a
# source address per request) keeps one HTTP/1.1 connection per switch from
# 10.99.(100+k/250).(1+k%250), with the headers sonic-ztp sends, over CONNS
# workers, for DURATION. Every request does the full work: identify the
# switch (lease -> device record, headers checked against it), match its
# profile, render, resolve its firmware image, and record its progress
# (state + event, durably, in a group commit). Server and load generator
# share the machine's CPUs, in netns zz-zjson, where 10.99.0.0/16 is local.
#
# Two measurements: the peak rate (CONNS workers asking as fast as answers
# come back), and the latency at RATE requests/s (the workers on a fixed
# schedule; latency counted from the scheduled send time, so a stalled
# server shows in the tail). /healthz under wrk on the same listener is the
# HTTP floor.
#
# BASE_SRC=<checkout> also measures another version (e.g. the previous
# release, `git worktree add /tmp/base <commit>`) in the same run, with its
# own ztpd and seeder, for a before/after ratio.
#
# Last line: RESULT ztp_json_per_s ztpd=<peak requests/s> p99_ms=<p99 at RATE/s>
#
# Knobs (env): DEVICES=2000 CONNS=64 DURATION=20s THREADS=1 RATE=5000
#   WORK=/tmp/zz-ztpjson-bench ZTPD=<binary> (default: go build ./cmd/ztpd)
#   BASE_SRC=<checkout> (optional second version) NS=zz-zjson
set -uo pipefail
DEVICES=${DEVICES:-2000}
CONNS=${CONNS:-64}
DURATION=${DURATION:-20s}
THREADS=${THREADS:-1}
RATE=${RATE:-5000}
WORK=${WORK:-/tmp/zz-ztpjson-bench}
NS=${NS:-zz-zjson}
ADDR=10.99.0.1:18090
REPO=$(cd "$(dirname "$0")/.." && pwd)

die() { echo "ztp-json: $*" >&2; exit 1; }
log() { echo "[$(date +%T)] $*" >&2; }
[[ $EUID -eq 0 ]] || die "must run as root (network namespace)"
for t in ip wrk curl setsid; do command -v $t >/dev/null || die "missing $t"; done

SRV_PID=""
cleanup() {
  if [[ -n $SRV_PID ]]; then
    kill -TERM -- "-$SRV_PID" 2>/dev/null
    for _ in $(seq 100); do kill -0 -- "-$SRV_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$SRV_PID" 2>/dev/null; wait "$SRV_PID" 2>/dev/null
  fi
  ip netns del $NS 2>/dev/null
  return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$WORK"
export PATH=$PATH:/usr/local/go/bin
if [[ -z ${ZTPD:-} ]]; then
  ZTPD=$WORK/ztpd
  log "building ztpd"
  (cd "$REPO" && go build -trimpath -o "$ZTPD" ./cmd/ztpd) || die "go build failed"
fi
(cd "$REPO" && go build -o "$WORK/ztpseed" ./testenv/cmd/ztpseed && go build -o "$WORK/ztpload" ./testenv/cmd/ztpload) || die "go build ztpseed/ztpload failed"
cat > "$WORK/ztpd.yaml" <<CFG
advertise_addr: 10.99.0.1
http:
  addr: $ADDR
profiles: [$REPO/bench/profiles]
CFG

ip netns del $NS 2>/dev/null
ip netns add $NS || die "netns add failed"
ip -n $NS link set lo up
ip -n $NS addr add 10.99.0.1/16 dev lo || die "address"
ip -n $NS route add local 10.99.0.0/16 dev lo 2>/dev/null # every switch address is local here

# measure BIN LABEL: fresh data, start, check one switch by hand, peak, paced.
measure() {
  local bin=$1 label=$2 seed=$3
  rm -rf "$WORK/data"
  "$seed" --data-dir "$WORK/data" --devices "$DEVICES" >&2 || die "seeding failed"
  setsid ip netns exec $NS "$bin" serve --config "$WORK/ztpd.yaml" --data-dir "$WORK/data" --log-level warn \
    >"$WORK/server-$label.out" 2>&1 </dev/null &
  SRV_PID=$!
  for _ in $(seq 100); do
    ip netns exec $NS curl -sf "http://$ADDR/healthz" >/dev/null 2>&1 && break
    kill -0 $SRV_PID 2>/dev/null || { cat "$WORK/server-$label.out" >&2; die "ztpd exited"; }
    sleep 0.1
  done
  # Switch 42, from its own address: a complete ztp.json for that switch.
  local sample
  sample=$(ip netns exec $NS curl -sf --interface 10.99.100.43 -A SONiC-ZTP/0.1 -H 'SERIAL-NUMBER: BENCH000042' \
    -H 'BASE-MAC-ADDRESS: 52:54:00:00:00:2a' -H 'PRODUCT-NAME: Accton-AS7712-32X' -H 'SONiC-VERSION: SONiC.202311.1' \
    "http://$ADDR/ztp/ztp.json") || die "sample request failed ($label)"
  for want in '"01-firmware"' '"02-configdb-json"' '/ztp/config/52:54:00:00:00:2a/config_db.json' '"snmp-location": "leaf-bench000042"'; do
    grep -qF "$want" <<<"$sample" || die "sample ztp.json lacks $want: $sample"
  done
  ip netns exec $NS "$WORK/ztpload" -target "$ADDR" -devices "$DEVICES" -conns "$CONNS" -duration 3s >/dev/null || die "warm-up failed ($label)"
  log "$label: peak, $CONNS workers, $DEVICES switches, $DURATION"
  local out pout
  out=$(ip netns exec $NS "$WORK/ztpload" -target "$ADDR" -devices "$DEVICES" -conns "$CONNS" -duration "$DURATION") || die "errors under load ($label): $out"
  [[ $(sed -n 's/^CHECK //p' <<<"$out") == "errors=0 non2xx=0" ]] || die "errors under load ($label): $out"
  log "$label: paced at $RATE/s"
  pout=$(ip netns exec $NS "$WORK/ztpload" -target "$ADDR" -devices "$DEVICES" -conns "$CONNS" -duration "$DURATION" -rate "$RATE") || die "errors in the paced run ($label): $pout"
  [[ $(sed -n 's/^CHECK //p' <<<"$pout") == "errors=0 non2xx=0" ]] || die "errors in the paced run ($label): $pout"
  if [[ $label == ztpd ]]; then
    # Context: the same listener answering /healthz (no store, no rendering).
    hzout=$(ip netns exec $NS wrk -t"$THREADS" -c"$CONNS" -d5s --latency "http://$ADDR/healthz")
  fi
  kill -TERM -- "-$SRV_PID" 2>/dev/null
  for _ in $(seq 100); do kill -0 -- "-$SRV_PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- "-$SRV_PID" 2>/dev/null; wait "$SRV_PID" 2>/dev/null; SRV_PID=""
  eval "${label}_rps=$(sed -n 's/^RPS //p' <<<"$out")"
  eval "${label}_peak99=$(awk -v u="$(sed -n 's/^P99_US //p' <<<"$out")" 'BEGIN{printf "%.2f", u/1000}')"
  eval "${label}_achieved=$(sed -n 's/^RPS //p' <<<"$pout")"
  eval "${label}_p99=$(awk -v u="$(sed -n 's/^P99_US //p' <<<"$pout")" 'BEGIN{printf "%.2f", u/1000}')"
}

measure "$ZTPD" ztpd "$WORK/ztpseed"
if [[ -n ${BASE_SRC:-} ]]; then
  log "building the base version from $BASE_SRC"
  seed=./testenv/cmd/ztpseed
  [[ -d $BASE_SRC/$seed ]] || seed=./bench/ztpseed # where releases before testenv/cmd kept it
  (cd "$BASE_SRC" && go build -trimpath -o "$WORK/ztpd-base" ./cmd/ztpd && go build -o "$WORK/ztpseed-base" "$seed") || die "base build failed"
  measure "$WORK/ztpd-base" base "$WORK/ztpseed-base"
fi
hz=$(awk '/Requests\/sec/{print $2}' <<<"$hzout")
hz99=$(awk '$1=="99%"{print $2}' <<<"$hzout")
echo
echo "ztp.json over HTTP, $DEVICES switches each asking from its own address, $CONNS workers, $DURATION, $(nproc) CPUs shared"
echo "  ztpd peak: $ztpd_rps req/s, p99 $ztpd_peak99 ms; paced at $RATE/s: $ztpd_achieved req/s, p99 $ztpd_p99 ms"
if [[ -n ${BASE_SRC:-} ]]; then
  echo "  base peak: $base_rps req/s, p99 $base_peak99 ms; paced at $RATE/s: $base_achieved req/s, p99 $base_p99 ms"
  echo "  ratio ztpd/base: peak $(awk -v a="$ztpd_rps" -v b="$base_rps" 'BEGIN{printf "%.2f", a/b}'), paced p99 $(awk -v a="$ztpd_p99" -v b="$base_p99" 'BEGIN{printf "%.2f", a/b}')"
fi
echo "  (every request identifies the switch, matches and renders its profile, and records its progress)"
echo "  /healthz on the same listener (wrk): $hz req/s, p99 $hz99 (HTTP floor and this machine's noise)"
echo "RESULT ztp_json_per_s ztpd=$ztpd_rps p99_ms=$ztpd_p99"
