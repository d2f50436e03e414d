#!/usr/bin/env bash
# tftp-rate.sh - TFTP single-stream download throughput, ztpd against tftpd-hpa
# (and optionally dnsmasq) in one run, same file, same namespaces, same client.
#
#   netns zz-tftp-srv: zz-tsrv 10.99.45.1/24  <-veth, MTU 1500->  netns zz-tftp-cli: zz-tcli 10.99.45.2/24
#
# A SIZE_MB MiB random file is served by every server: tftpd-hpa
# (`in.tftpd -L -s DIR`) from a plain directory, ztpd from its image store
# (the file is added with `ztpd image add --kind file`, served by name, which is
# how ztpd serves images). Per server one untimed download is compared with
# the original, then RUNS timed downloads (curl --tftp-blksize $BLKSIZE to
# /dev/null, byte count checked); the median MiB/s is reported. Server and
# client are pinned to different CPUs (SERVER_CPUS, CLIENT_CPUS), as in
# ../shared/bench/tftp-rate.sh, whose method this follows.
#
# Last line: RESULT tftp_mb_per_s ztpd=<n> tftpd_hpa=<n> ratio=<ztpd/tftpd_hpa>
#
# Knobs (env): SIZE_MB=64 RUNS=5 BLKSIZE=1468 ANCHORS="tftpd-hpa" (add dnsmasq)
#   ZTPD=<binary> (default: go build ./cmd/ztpd) WORK=/tmp/zz-tftp-bench
#   SERVER_CPUS=1 CLIENT_CPUS=0 EXTRA_CLIENTS="" (e.g. "tftp-hpa atftp")
set -uo pipefail

SIZE_MB=${SIZE_MB:-64}
RUNS=${RUNS:-5}
BLKSIZE=${BLKSIZE:-1468}
ANCHORS=${ANCHORS:-tftpd-hpa}
WORK=${WORK:-/tmp/zz-tftp-bench}
SERVER_CPUS=${SERVER_CPUS-1}
CLIENT_CPUS=${CLIENT_CPUS-0}
FETCH_TIMEOUT=${FETCH_TIMEOUT:-120}
EXTRA_CLIENTS=${EXTRA_CLIENTS:-}
NS_SRV=zz-tftp-srv NS_CLI=zz-tftp-cli IF_SRV=zz-tsrv IF_CLI=zz-tcli
SRV_IP=10.99.45.1 CLI_IP=10.99.45.2
ROOT=$WORK/root FILE=bench.bin DATA=$WORK/ztpd-data
REPO=$(cd "$(dirname "$0")/.." && pwd)

die() { echo "tftp-rate: $*" >&2; exit 1; }
log() { echo "[$(date +%T)] $*" >&2; }
[[ $EUID -eq 0 ]] || die "must run as root (network namespaces)"
for t in ip curl cmp setsid ss awk taskset in.tftpd; do command -v $t >/dev/null || die "missing $t"; done

SRV_PID=""
stop_server() {
  [[ -n $SRV_PID ]] || return 0
  kill -TERM -- "-$SRV_PID" 2>/dev/null
  for _ in $(seq 50); do kill -0 -- "-$SRV_PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- "-$SRV_PID" 2>/dev/null
  wait "$SRV_PID" 2>/dev/null
  SRV_PID=""
}
ns_down() { ip netns del $NS_SRV 2>/dev/null; ip netns del $NS_CLI 2>/dev/null; return 0; }
cleanup() { stop_server; ns_down; rm -f "$WORK/verify.bin"; }
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
rm -rf "$DATA"
"$ZTPD" --data-dir "$DATA" -o json image add "$ROOT/$FILE" --kind file --name "$FILE" >/dev/null || die "image add failed"

ns_down
ip netns add $NS_SRV && ip netns add $NS_CLI || die "netns add failed"
ip link add $IF_SRV netns $NS_SRV type veth peer name $IF_CLI netns $NS_CLI || die "veth failed"
ip -n $NS_SRV addr add $SRV_IP/24 dev $IF_SRV
ip -n $NS_CLI addr add $CLI_IP/24 dev $IF_CLI
for n in $NS_SRV $NS_CLI; do ip -n $n link set lo up; done
ip -n $NS_SRV link set $IF_SRV up; ip -n $NS_CLI link set $IF_CLI up
sleep 0.5

start_server() {   # $1 command line run in the server namespace
  local pin=()
  [[ -n $SERVER_CPUS ]] && pin=(taskset -c "$SERVER_CPUS")
  setsid ip netns exec $NS_SRV "${pin[@]}" bash -c "$1" >"$WORK/server.out" 2>&1 </dev/null &
  SRV_PID=$!
  for _ in $(seq 100); do
    kill -0 $SRV_PID 2>/dev/null || { tail -5 "$WORK/server.out" >&2; return 1; }
    [[ -n $(ip netns exec $NS_SRV ss -Hlun "sport = :69") ]] && { sleep 0.2; return 0; }
    sleep 0.1
  done
  return 1
}

fetch() {   # $1 client, $2 destination; prints "bytes ms"
  local pin=() t0 t1 rc bytes
  [[ -n $CLIENT_CPUS ]] && pin=(taskset -c "$CLIENT_CPUS")
  t0=$(date +%s%N)
  case $1 in
    curl) ip netns exec $NS_CLI timeout -k 2 "$FETCH_TIMEOUT" "${pin[@]}" curl -sS --tftp-blksize "$BLKSIZE" \
            -w 'BYTES=%{size_download}\n' -o "$2" "tftp://$SRV_IP/$FILE" >"$WORK/client.out" 2>&1 ;;
    tftp-hpa) ip netns exec $NS_CLI timeout -k 2 "$FETCH_TIMEOUT" "${pin[@]}" tftp -m binary $SRV_IP -c get $FILE "$2" >"$WORK/client.out" 2>&1 ;;
    atftp) ip netns exec $NS_CLI timeout -k 2 "$FETCH_TIMEOUT" "${pin[@]}" atftp --option "blksize $BLKSIZE" -g -r $FILE -l "$2" $SRV_IP >"$WORK/client.out" 2>&1 ;;
  esac
  rc=$?
  t1=$(date +%s%N)
  if [[ $2 == /dev/null && $1 == curl ]]; then bytes=$(sed -n 's/^BYTES=//p' "$WORK/client.out")
  else bytes=$(stat -c %s "$2" 2>/dev/null || echo 0); fi
  (( rc == 0 )) || bytes=0
  echo "${bytes:-0} $(( (t1 - t0) / 1000000 ))"
}

declare -A MEDIAN
run_server() {   # $1 name, $2 command
  local name=$1 cmd=$2 bytes ms speeds="" med ok=OK
  log "$name: $cmd"
  start_server "$cmd" || { log "$name did not start"; MEDIAN[$name]=0; stop_server; return; }
  for cl in curl $EXTRA_CLIENTS; do
    local dst=$WORK/verify.bin
    rm -f "$dst"
    read -r bytes ms < <(fetch $cl "$dst")
    cmp -s "$dst" "$ROOT/$FILE" || ok="CORRUPT($cl ${bytes}B)"
    rm -f "$dst"
    [[ $cl == curl ]] || { log "  $cl: $bytes B in $ms ms, $ok"; continue; }
    for (( r = 1; r <= RUNS; r++ )); do
      read -r bytes ms < <(fetch curl /dev/null)
      if [[ $bytes == "$SIZE" && $ms -gt 0 ]]; then
        speeds+="$(awk -v b="$bytes" -v ms="$ms" 'BEGIN{printf "%.1f", b/1048576/(ms/1000)}') "
      else speeds+="fail "; ok="SHORT(${bytes}B)"; fi
    done
  done
  med=$(echo $speeds | tr ' ' '\n' | grep -v fail | sort -n | awk '{a[NR]=$1} END{if (NR) print a[int((NR+1)/2)]; else print 0}')
  MEDIAN[$name]=$med
  printf '%-10s %-28s %8s  %s\n' "$name" "${speeds% }" "$med" "$ok" >> "$WORK/table"
  stop_server
}

: > "$WORK/table"
for a in $ANCHORS; do
  case $a in
    tftpd-hpa) run_server tftpd-hpa "exec in.tftpd -L -s $ROOT -a $SRV_IP:69" ;;
    dnsmasq) run_server dnsmasq "exec dnsmasq --keep-in-foreground --conf-file=/dev/null --pid-file= --port=0 --enable-tftp --tftp-root=$ROOT --interface=$IF_SRV --bind-interfaces" ;;
  esac
done
run_server ztpd "exec $ZTPD serve --data-dir $DATA --http-addr 127.0.0.1:0 --tftp --tftp-addr $SRV_IP:69 --log-level warn"

echo
echo "TFTP single-stream download, $SIZE_MB MiB random file over a veth (MTU 1500) between netns,"
echo "curl --tftp-blksize $BLKSIZE, $RUNS runs; server cpus=${SERVER_CPUS:-any} client cpus=${CLIENT_CPUS:-any}; MiB/s"
printf '%-10s %-28s %8s  %s\n' server "runs" median check
cat "$WORK/table"
z=${MEDIAN[ztpd]:-0} h=${MEDIAN[tftpd-hpa]:-0}
ratio=$(awk -v z="$z" -v h="$h" 'BEGIN{ if (h > 0) printf "%.2f", z/h; else print "n/a" }')
echo "RESULT tftp_mb_per_s ztpd=$z tftpd_hpa=$h ratio=$ratio"
