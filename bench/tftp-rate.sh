#!/usr/bin/env bash
# tftp-rate.sh - TFTP single-stream download throughput, ztpd against tftpd-hpa
# (and optionally dnsmasq) in one run: same file, same namespaces, same client.
#
#   netns zz-tftp-srv: zz-tsrv 10.99.45.1,.3,.4,.5/24 <-veth, MTU 1500-> netns zz-tftp-cli: zz-tcli 10.99.45.2/24
#
# Every server listens at once on its own address (tftpd-hpa .1, ztpd .4 in
# its default mode (a port per transfer), ztpd .3 in single-port mode,
# dnsmasq .5 when ANCHORS has it), all pinned to the same CPU (SERVER_CPUS); the client
# is pinned to another (CLIENT_CPUS). Runs are interleaved round by round, so
# load from elsewhere on the machine hits every server alike.
#
# A SIZE_MB MiB random file is served by every server: tftpd-hpa
# (`in.tftpd -L -s DIR`) from a plain directory; ztpd from its image store (the
# file is added with `ztpd image add --kind file` and served by name, which is
# how ztpd serves images). Per server one untimed download is compared with
# the original; then RUNS timed downloads per server (curl --tftp-blksize
# $BLKSIZE to /dev/null, byte count checked); the median MiB/s is reported.
#
# Last line: RESULT tftp_mb_per_s ztpd=<n> tftpd_hpa=<n> ratio=<ztpd/tftpd_hpa>
# where ztpd is the default configuration (tftp.single_port: false); the
# single-port mode's median is printed on the line before.
#
# Knobs (env): SIZE_MB=64 RUNS=7 BLKSIZE=1468 ANCHORS="tftpd-hpa" (add dnsmasq)
#   ZTPD=<binary> (default: go build ./cmd/ztpd) WORK=/tmp/zz-tftp-bench
#   SERVER_CPUS=1 CLIENT_CPUS=0
set -uo pipefail

SIZE_MB=${SIZE_MB:-64}
RUNS=${RUNS:-7}
BLKSIZE=${BLKSIZE:-1468}
ANCHORS=${ANCHORS:-tftpd-hpa}
WORK=${WORK:-/tmp/zz-tftp-bench}
SERVER_CPUS=${SERVER_CPUS-1}
CLIENT_CPUS=${CLIENT_CPUS-0}
FETCH_TIMEOUT=${FETCH_TIMEOUT:-120}
NS_SRV=zz-tftp-srv NS_CLI=zz-tftp-cli IF_SRV=zz-tsrv IF_CLI=zz-tcli
NET=10.99.45 CLI_IP=10.99.45.2
ROOT=$WORK/root FILE=bench.bin
REPO=$(cd "$(dirname "$0")/.." && pwd)

die() { echo "tftp-rate: $*" >&2; exit 1; }
log() { echo "[$(date +%T)] $*" >&2; }
[[ $EUID -eq 0 ]] || die "must run as root (network namespaces)"
for t in ip curl cmp setsid ss awk taskset in.tftpd; do command -v $t >/dev/null || die "missing $t"; done

PIDS=()
stop_servers() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM -- "-$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 -- "-$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$p" 2>/dev/null; wait "$p" 2>/dev/null
  done
  PIDS=()
}
ns_down() { ip netns del $NS_SRV 2>/dev/null; ip netns del $NS_CLI 2>/dev/null; return 0; }
cleanup() { stop_servers; ns_down; rm -f "$WORK/verify.bin"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$ROOT"; chmod 755 "$WORK" "$ROOT"
if [[ $(stat -c %s "$ROOT/$FILE" 2>/dev/null) != $(( SIZE_MB << 20 )) ]]; then
  log "creating $SIZE_MB MiB random file"
  head -c $(( SIZE_MB << 20 )) /dev/urandom > "$ROOT/$FILE" || die "cannot create test file"
fi
chmod 644 "$ROOT/$FILE"
SIZE=$(( SIZE_MB << 20 ))

if [[ -z ${ZTPD:-} ]]; then
  export PATH=$PATH:/usr/local/go/bin
  ZTPD=$WORK/ztpd
  log "building ztpd"
  (cd "$REPO" && go build -trimpath -o "$ZTPD" ./cmd/ztpd) || die "go build failed"
fi
for d in sp mp; do
  rm -rf "$WORK/data-$d"
  "$ZTPD" --data-dir "$WORK/data-$d" -o json image add "$ROOT/$FILE" --kind file --name "$FILE" >/dev/null || die "image add failed"
done
printf 'tftp:\n  single_port: true\n' > "$WORK/sp.yaml"
printf 'tftp:\n  single_port: false\n' > "$WORK/mp.yaml"

ns_down
ip netns add $NS_SRV && ip netns add $NS_CLI || die "netns add failed"
ip link add $IF_SRV netns $NS_SRV type veth peer name $IF_CLI netns $NS_CLI || die "veth failed"
for h in 1 3 4 5; do ip -n $NS_SRV addr add $NET.$h/24 dev $IF_SRV; done
ip -n $NS_CLI addr add $CLI_IP/24 dev $IF_CLI
for n in $NS_SRV $NS_CLI; do ip -n $n link set lo up; done
ip -n $NS_SRV link set $IF_SRV up; ip -n $NS_CLI link set $IF_CLI up
sleep 0.5

start_server() {   # $1 name, $2 address, $3 command line run in the server namespace
  local pin=()
  [[ -n $SERVER_CPUS ]] && pin=(taskset -c "$SERVER_CPUS")
  log "$1 on $2: $3"
  setsid ip netns exec $NS_SRV "${pin[@]}" bash -c "$3" >"$WORK/$1.out" 2>&1 </dev/null &
  PIDS+=($!)
  for _ in $(seq 100); do
    [[ -n $(ip netns exec $NS_SRV ss -Hlun "src $2 and sport = :69") ]] && return 0
    sleep 0.1
  done
  tail -5 "$WORK/$1.out" >&2
  die "$1 did not start"
}

fetch() {   # $1 server address, $2 destination; prints "bytes ms"
  local pin=() t0 t1 rc bytes
  [[ -n $CLIENT_CPUS ]] && pin=(taskset -c "$CLIENT_CPUS")
  t0=$(date +%s%N)
  ip netns exec $NS_CLI timeout -k 2 "$FETCH_TIMEOUT" "${pin[@]}" curl -sS --tftp-blksize "$BLKSIZE" \
    -w 'BYTES=%{size_download}\n' -o "$2" "tftp://$1/$FILE" >"$WORK/client.out" 2>&1
  rc=$?
  t1=$(date +%s%N)
  bytes=$(sed -n 's/^BYTES=//p' "$WORK/client.out")
  (( rc == 0 )) || bytes=0
  echo "${bytes:-0} $(( (t1 - t0) / 1000000 ))"
}

declare -A ADDR SPEEDS CHECK
SERVERS=()
for a in $ANCHORS; do
  case $a in
    tftpd-hpa) ADDR[$a]=$NET.1; start_server $a $NET.1 "exec in.tftpd -L -s $ROOT -a $NET.1:69" ;;
    dnsmasq) ADDR[$a]=$NET.5; start_server $a $NET.5 "exec dnsmasq --keep-in-foreground --conf-file=/dev/null --pid-file= --port=0 --enable-tftp --tftp-root=$ROOT --listen-address=$NET.5 --bind-interfaces" ;;
    *) die "unknown anchor $a" ;;
  esac
  SERVERS+=($a)
done
ADDR[ztpd]=$NET.4
start_server ztpd $NET.4 "exec $ZTPD serve --config $WORK/mp.yaml --data-dir $WORK/data-mp --http-addr 127.0.0.1:18082 --tftp --tftp-addr $NET.4:69 --log-level warn"
ADDR[ztpd-singleport]=$NET.3
start_server ztpd-singleport $NET.3 "exec $ZTPD serve --config $WORK/sp.yaml --data-dir $WORK/data-sp --http-addr 127.0.0.1:18081 --tftp --tftp-addr $NET.3:69 --log-level warn"
SERVERS+=(ztpd ztpd-singleport)
sleep 0.3

for s in "${SERVERS[@]}"; do
  rm -f "$WORK/verify.bin"
  read -r bytes ms < <(fetch ${ADDR[$s]} "$WORK/verify.bin")
  if cmp -s "$WORK/verify.bin" "$ROOT/$FILE"; then CHECK[$s]=OK; else CHECK[$s]="CORRUPT(${bytes}B)"; fi
  SPEEDS[$s]=""
done
rm -f "$WORK/verify.bin"
log "$RUNS interleaved rounds over: ${SERVERS[*]}"
n=${#SERVERS[@]}
for (( r = 0; r < RUNS; r++ )); do
  for (( i = 0; i < n; i++ )); do
    s=${SERVERS[$(( (i + r) % n ))]}
    read -r bytes ms < <(fetch ${ADDR[$s]} /dev/null)
    if [[ $bytes == "$SIZE" && $ms -gt 0 ]]; then
      SPEEDS[$s]+="$(awk -v b="$bytes" -v ms="$ms" 'BEGIN{printf "%.1f", b/1048576/(ms/1000)}') "
    else SPEEDS[$s]+="fail "; CHECK[$s]="SHORT(${bytes}B)"; fi
  done
done

median() { echo $1 | tr ' ' '\n' | grep -v fail | sort -n | awk '{a[NR]=$1} END{if (NR) print a[int((NR+1)/2)]; else print 0}'; }
echo
echo "TFTP single-stream download, $SIZE_MB MiB random file over a veth (MTU 1500) between netns,"
echo "curl --tftp-blksize $BLKSIZE, $RUNS interleaved runs; server cpus=${SERVER_CPUS:-any} client cpus=${CLIENT_CPUS:-any}; MiB/s"
printf '%-15s %-50s %7s  %s\n' server runs median check
declare -A MED
for s in "${SERVERS[@]}"; do
  MED[$s]=$(median "${SPEEDS[$s]}")
  printf '%-15s %-50s %7s  %s\n' "$s" "${SPEEDS[$s]% }" "${MED[$s]}" "${CHECK[$s]}"
done
echo "(ztpd = the default, a port per transfer; ztpd-singleport = tftp.single_port: true)"
z=${MED[ztpd]:-0} h=${MED[tftpd-hpa]:-0}
for s in "${SERVERS[@]}"; do [[ ${CHECK[$s]} == OK ]] || z=0; done
ratio=$(awk -v z="$z" -v h="$h" 'BEGIN{ if (h > 0) printf "%.2f", z/h; else print "n/a" }')
echo "ztpd_single_port=${MED[ztpd-singleport]:-0}"
echo "RESULT tftp_mb_per_s ztpd=$z tftpd_hpa=$h ratio=$ratio"
