#!/usr/bin/env bash
# tftp-rate.sh - TFTP single-stream download throughput, ztpd against tftpd-hpa
# (and optionally dnsmasq) in one run: same file, same namespaces, same clients.
#
#   netns zt-tftp-bsrv: ztbsrv 10.99.61.1,.3,.4,.5/24 <-veth, MTU 1500-> netns zt-tftp-bcli: ztbcli 10.99.61.2/24
#
# Every server listens at once on its own address (tftpd-hpa .1, ztpd .4 in
# its default mode (a port per transfer), ztpd .3 in single-port mode,
# dnsmasq .5 when ANCHORS has it), all pinned to the same CPU (SERVER_CPUS);
# the client is pinned to another (CLIENT_CPUS). Runs are interleaved round
# by round, so load from elsewhere on the machine hits every server alike.
# ztpd runs its default configuration (tftp.window: 8 is the largest
# windowsize it grants, to clients that ask).
#
# Two measurements, reported separately:
#   lock-step  curl --tftp-blksize $BLKSIZE. curl never negotiates windowsize
#              (RFC 7440), so every server answers it block by block, ACK by
#              ACK (RFC 1350): tftpd-hpa always does; ztpd does for any
#              client that does not ask for a window.
#   window     atftp --option "blksize $BLKSIZE" --option "windowsize $WINDOW"
#              (atftp 0.8 negotiates windowsize). ztpd grants it and sends
#              $WINDOW blocks per ACK; tftpd-hpa 5.2 has no windowsize and
#              ignores the option, so its figure is lock-step with the same
#              client: the reference a device would get from it.
#
# A SIZE_MB MiB random file is served by every server: tftpd-hpa
# (`in.tftpd -L -s DIR`) from a plain directory; ztpd from its image store (the
# file is added with `ztpd image add --kind file` and served by name, which is
# how ztpd serves images). Per server and client one untimed download is
# compared with the original; then RUNS timed downloads per server and client
# (to /dev/null; curl's byte count checked, atftp's exit status); the median
# MiB/s is reported.
#
# Last line:
#   RESULT tftp_mb_per_s ztpd=<n> tftpd_hpa=<n> ratio=<n> ztpd_window=<n> tftpd_hpa_atftp=<n> window_ratio=<n>
# ztpd/tftpd_hpa/ratio: lock-step, ztpd's default mode (tftp.single_port:
# false); ztpd_window: the same server with the windowsize client, against
# tftpd-hpa with that client. Single-port figures are printed above it.
#
# Knobs (env): SIZE_MB=64 RUNS=7 BLKSIZE=1468 WINDOW=8 ANCHORS="tftpd-hpa" (add
#   dnsmasq) ZTPD=<binary> (default: go build ./cmd/ztpd) WORK=/tmp/zt-tftp-bench
#   SERVER_CPUS=1 CLIENT_CPUS=0
set -uo pipefail

SIZE_MB=${SIZE_MB:-64}
RUNS=${RUNS:-7}
BLKSIZE=${BLKSIZE:-1468}
WINDOW=${WINDOW:-8}
ANCHORS=${ANCHORS:-tftpd-hpa}
WORK=${WORK:-/tmp/zt-tftp-bench}
SERVER_CPUS=${SERVER_CPUS-1}
CLIENT_CPUS=${CLIENT_CPUS-0}
FETCH_TIMEOUT=${FETCH_TIMEOUT:-120}
NS_SRV=zt-tftp-bsrv NS_CLI=zt-tftp-bcli IF_SRV=ztbsrv IF_CLI=ztbcli
NET=10.99.61 CLI_IP=10.99.61.2
ROOT=$WORK/root FILE=bench.bin
REPO=$(cd "$(dirname "$0")/.." && pwd)

die() { echo "tftp-rate: $*" >&2; exit 1; }
log() { echo "[$(date +%T)] $*" >&2; }
[[ $EUID -eq 0 ]] || die "must run as root (network namespaces)"
for t in ip curl atftp cmp setsid ss awk taskset in.tftpd; do command -v $t >/dev/null || die "missing $t"; done
grep -qa windowsize "$(command -v atftp)" || die "this atftp cannot negotiate windowsize (needs atftp >= 0.8)"

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

fetch() {   # $1 client (curl|atftp), $2 server address, $3 destination; prints "bytes ms"
  local pin=() t0 t1 rc bytes
  [[ -n $CLIENT_CPUS ]] && pin=(taskset -c "$CLIENT_CPUS")
  t0=$(date +%s%N)
  case $1 in
    curl) ip netns exec $NS_CLI timeout -k 2 "$FETCH_TIMEOUT" "${pin[@]}" curl -sS --tftp-blksize "$BLKSIZE" \
            -w 'BYTES=%{size_download}\n' -o "$3" "tftp://$2/$FILE" >"$WORK/client.out" 2>&1 ;;
    atftp) ip netns exec $NS_CLI timeout -k 2 "$FETCH_TIMEOUT" "${pin[@]}" atftp --option "blksize $BLKSIZE" \
            --option "windowsize $WINDOW" -g -r "$FILE" -l "$3" "$2" >"$WORK/client.out" 2>&1 ;;
  esac
  rc=$?
  t1=$(date +%s%N)
  case $1 in
    curl) bytes=$(sed -n 's/^BYTES=//p' "$WORK/client.out") ;;
    atftp) bytes=$SIZE; [[ $3 == /dev/null ]] || bytes=$(stat -c %s "$3" 2>/dev/null || echo 0) ;;
  esac
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

# Cases: <client>/<server>; curl is lock-step everywhere, atftp asks for a window.
CASES=()
for c in curl atftp; do for s in "${SERVERS[@]}"; do CASES+=("$c/$s"); done; done
for k in "${CASES[@]}"; do
  rm -f "$WORK/verify.bin"
  read -r bytes ms < <(fetch "${k%%/*}" "${ADDR[${k#*/}]}" "$WORK/verify.bin")
  if cmp -s "$WORK/verify.bin" "$ROOT/$FILE"; then CHECK[$k]=OK; else CHECK[$k]="CORRUPT(${bytes}B)"; fi
  SPEEDS[$k]=""
done
rm -f "$WORK/verify.bin"
log "$RUNS interleaved rounds over: ${CASES[*]}"
n=${#CASES[@]}
for (( r = 0; r < RUNS; r++ )); do
  for (( i = 0; i < n; i++ )); do
    k=${CASES[$(( (i + r) % n ))]}
    read -r bytes ms < <(fetch "${k%%/*}" "${ADDR[${k#*/}]}" /dev/null)
    if [[ $bytes == "$SIZE" && $ms -gt 0 ]]; then
      SPEEDS[$k]+="$(awk -v b="$bytes" -v ms="$ms" 'BEGIN{printf "%.1f", b/1048576/(ms/1000)}') "
    else SPEEDS[$k]+="fail "; CHECK[$k]="SHORT(${bytes}B)"; fi
  done
done

median() { echo $1 | tr ' ' '\n' | grep -v fail | sort -n | awk '{a[NR]=$1} END{if (NR) print a[int((NR+1)/2)]; else print 0}'; }
declare -A MED
echo
echo "TFTP single-stream download, $SIZE_MB MiB random file over a veth (MTU 1500) between netns,"
echo "blksize $BLKSIZE, $RUNS interleaved runs; server cpus=${SERVER_CPUS:-any} client cpus=${CLIENT_CPUS:-any}; MiB/s"
for c in curl atftp; do
  case $c in
    curl) echo "lock-step (RFC 1350): curl --tftp-blksize $BLKSIZE, no windowsize option" ;;
    atftp) echo "window (RFC 7440): atftp --option \"windowsize $WINDOW\" (tftpd-hpa ignores it: lock-step with this client)" ;;
  esac
  printf '  %-15s %-50s %7s  %s\n' server runs median check
  for s in "${SERVERS[@]}"; do
    k=$c/$s
    MED[$k]=$(median "${SPEEDS[$k]}")
    printf '  %-15s %-50s %7s  %s\n' "$s" "${SPEEDS[$k]% }" "${MED[$k]}" "${CHECK[$k]}"
  done
done
echo "(ztpd = the default, a port per transfer; ztpd-singleport = tftp.single_port: true)"
ratio() { awk -v z="$1" -v h="$2" 'BEGIN{ if (h > 0) printf "%.2f", z/h; else print "n/a" }'; }
z=${MED[curl/ztpd]:-0} h=${MED[curl/tftpd-hpa]:-0}
zw=${MED[atftp/ztpd]:-0} hw=${MED[atftp/tftpd-hpa]:-0}
for k in "${CASES[@]}"; do [[ ${CHECK[$k]} == OK ]] || { z=0; zw=0; }; done
echo "ztpd_single_port lock-step=${MED[curl/ztpd-singleport]:-0} ($(ratio "${MED[curl/ztpd-singleport]:-0}" "$h") x) window=${MED[atftp/ztpd-singleport]:-0} ($(ratio "${MED[atftp/ztpd-singleport]:-0}" "$hw") x)"
echo "RESULT tftp_mb_per_s ztpd=$z tftpd_hpa=$h ratio=$(ratio "$z" "$h") ztpd_window=$zw tftpd_hpa_atftp=$hw window_ratio=$(ratio "$zw" "$hw")"
