#!/usr/bin/env bash
# http-images.sh - image download throughput over HTTP: ztpd's /images/<name>
# (http.ServeContent over the stored file, sendfile on the TCP connection)
# against busybox httpd serving the same file, in one run.
#
#   netns zz-himg-s: zz-hs 10.99.44.1/24 <-veth-> netns zz-himg-c: zz-hc 10.99.44.2/24
#
# One untimed download per server is checked with sha256; then RUNS timed
# curl downloads per server to /dev/null, interleaved; median MiB/s.
# Server pinned to SERVER_CPUS, client to CLIENT_CPUS.
#
# Last line: RESULT http_image_mb_per_s ztpd=<n> busybox=<n> ratio=<x>
#
# Knobs (env): SIZE_MB=512 RUNS=5 ZTPD=<binary> WORK=/tmp/zz-http-bench SERVER_CPUS=1 CLIENT_CPUS=0
set -uo pipefail
SIZE_MB=${SIZE_MB:-512}
RUNS=${RUNS:-5}
WORK=${WORK:-/tmp/zz-http-bench}
SERVER_CPUS=${SERVER_CPUS-1}
CLIENT_CPUS=${CLIENT_CPUS-0}
NS_S=zz-himg-s NS_C=zz-himg-c SRV=10.99.44.1 CLI=10.99.44.2
FILE=image.bin
REPO=$(cd "$(dirname "$0")/.." && pwd)

die() { echo "http-images: $*" >&2; exit 1; }
log() { echo "[$(date +%T)] $*" >&2; }
[[ $EUID -eq 0 ]] || die "must run as root (network namespaces)"
for t in ip curl busybox setsid taskset sha256sum; do command -v $t >/dev/null || die "missing $t"; done

PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM -- "-$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 -- "-$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$p" 2>/dev/null; wait "$p" 2>/dev/null
  done
  ip netns del $NS_S 2>/dev/null; ip netns del $NS_C 2>/dev/null
  return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$WORK/www"
if [[ $(stat -c %s "$WORK/www/$FILE" 2>/dev/null) != $(( SIZE_MB << 20 )) ]]; then
  log "creating $SIZE_MB MiB random file"
  head -c $(( SIZE_MB << 20 )) /dev/urandom > "$WORK/www/$FILE" || die "cannot create the file"
fi
SHA=$(sha256sum "$WORK/www/$FILE" | cut -d' ' -f1)
if [[ -z ${ZTPD:-} ]]; then
  export PATH=$PATH:/usr/local/go/bin
  ZTPD=$WORK/ztpd
  log "building ztpd"
  (cd "$REPO" && go build -trimpath -o "$ZTPD" ./cmd/ztpd) || die "go build failed"
fi
rm -rf "$WORK/data"
"$ZTPD" --data-dir "$WORK/data" -o json image add "$WORK/www/$FILE" --kind file --name "$FILE" >/dev/null || die "image add failed"

ip netns del $NS_S 2>/dev/null; ip netns del $NS_C 2>/dev/null
ip netns add $NS_S && ip netns add $NS_C || die "netns add failed"
ip link add zz-hs netns $NS_S type veth peer name zz-hc netns $NS_C || die "veth failed"
ip -n $NS_S addr add $SRV/24 dev zz-hs; ip -n $NS_C addr add $CLI/24 dev zz-hc
for n in $NS_S $NS_C; do ip -n $n link set lo up; done
ip -n $NS_S link set zz-hs up; ip -n $NS_C link set zz-hc up
sleep 0.5

spin=(); [[ -n $SERVER_CPUS ]] && spin=(taskset -c "$SERVER_CPUS")
cpin=(); [[ -n $CLIENT_CPUS ]] && cpin=(taskset -c "$CLIENT_CPUS")
setsid ip netns exec $NS_S "${spin[@]}" busybox httpd -f -p $SRV:8081 -h "$WORK/www" >"$WORK/busybox.out" 2>&1 </dev/null &
PIDS+=($!)
setsid ip netns exec $NS_S "${spin[@]}" "$ZTPD" serve --data-dir "$WORK/data" --http-addr $SRV:8080 --log-level warn >"$WORK/ztpd.out" 2>&1 </dev/null &
PIDS+=($!)
declare -A URL=([ztpd]="http://$SRV:8080/images/$FILE" [busybox]="http://$SRV:8081/$FILE")
for s in ztpd busybox; do
  for _ in $(seq 100); do ip netns exec $NS_C curl -s -o /dev/null -r 0-0 "${URL[$s]}" && break; sleep 0.1; done
  got=$(ip netns exec $NS_C curl -sf "${URL[$s]}" | sha256sum | cut -d' ' -f1)
  [[ $got == "$SHA" ]] || die "$s served different content"
done
declare -A SPEEDS=([ztpd]="" [busybox]="")
order=(ztpd busybox)
for (( r = 0; r < RUNS; r++ )); do
  for (( i = 0; i < 2; i++ )); do
    s=${order[$(( (i + r) % 2 ))]}
    bps=$(ip netns exec $NS_C "${cpin[@]}" curl -sf -o /dev/null -w '%{speed_download}' "${URL[$s]}") || bps=0
    SPEEDS[$s]+="$(awk -v b="$bps" 'BEGIN{printf "%.0f", b/1048576}') "
  done
done
median() { echo $1 | tr ' ' '\n' | sort -n | awk '{a[NR]=$1} END{if (NR) print a[int((NR+1)/2)]; else print 0}'; }
z=$(median "${SPEEDS[ztpd]}") b=$(median "${SPEEDS[busybox]}")
echo
echo "HTTP download of a $SIZE_MB MiB image over a veth between netns, curl, $RUNS interleaved runs, MiB/s"
printf '%-8s %-40s %7s\n' server runs median ztpd "${SPEEDS[ztpd]% }" "$z" busybox "${SPEEDS[busybox]% }" "$b"
echo "RESULT http_image_mb_per_s ztpd=$z busybox=$b ratio=$(awk -v z="$z" -v b="$b" 'BEGIN{if (b > 0) printf "%.2f", z/b; else print "n/a"}')"
