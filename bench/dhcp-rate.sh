#!/usr/bin/env bash
# dhcp-rate.sh - DHCPv4 DORA throughput of ztpd, ISC Kea and dnsmasq, side by side,
# perfdhcp acting as a relay. `make bench-dhcp` runs it (root required).
#
# Based on the reference tooling's dhcp-rate.sh; this copy is self-contained and adds
# ztpd as a built-in server and the RESULT line.
#
# Topology (created and deleted by this script):
#   netns $NS_SRV: veth-srv 10.99.0.1/16   <-veth->   netns $NS_CLI: veth-cli 10.99.0.2/16
# perfdhcp runs in $NS_CLI with "-l 10.99.0.2", so every packet is relayed
# (giaddr 10.99.0.2) to 10.99.0.1:67 and replies come back to 10.99.0.2:67.
#
# For every rate of LADDER a FRESH server (empty lease store) is started, perfdhcp
# offers that many DORA exchanges/s for DURATION s (count also bounded with -n),
# the server is stopped. A rung passes when < DROP_PCT % of DISCOVERs got no ACK
# and perfdhcp really managed to send the offered load. After the first failure
# REFINE bisection steps narrow the limit. A table is printed at the end, and the
# last line is
#   RESULT dhcp_dora_per_s ztpd=<n> kea=<n> dnsmasq=<n> ratio_vs_kea=<x>
# where <n> is the highest offered rate that passed.
#
# Built-in servers (ANCHORS, default "ztpd kea dnsmasq"):
#   ztpd        ztpd serve, leases group-committed and fsynced to its bbolt store
#               before each ACK (ZTPD_BIN, default bin/ztpd; built when missing)
#   kea         kea-dhcp4, memfile persisted to CSV, lfc disabled, single-threaded
#   kea-mt      kea with multi-threading (pair with SERVER_CPUS=0,1 to be meaningful)
#   dnsmasq     dnsmasq --no-ping --quiet-dhcp, lease file on disk
#   dnsmasq-ro  same but --leasefile-ro (no lease persistence; diagnostic)
#   ztpd-plan   ztpd with a generated cabling plan of PLAN_SIZE (10000) positions behind
#               the relay 10.99.0.2 (circuit ids port-0..): every relayed request is
#               looked up in it
#
# MODE=positions (`make bench-dhcp-positions`): the cabling plan's cost on the DHCP
# hot path. ANCHORS="ztpd ztpd-plan", perfdhcp adds option 82 with circuit id
# RELAY_CIRCUIT ("unplanned-port": in no position, so both servers do the same
# allocation and the plan costs only its lookup) to every packet of both, and the
# last line is
#   RESULT dhcp_positions_dora_per_s ztpd=<n> ztpd_plan<PLAN_SIZE>=<n> ratio=<plan/none>
#
# Another server in the same table:
#   SERVER_NAME=x SERVER_CMD='/opt/x --iface {iface} --addr {ip} --leases {dir}/leases' bench/dhcp-rate.sh
# SERVER_CMD is run with bash -c "..." (own process group) inside $NS_SRV, must stay in the
# foreground and bind UDP port 67 (READY_PORT). Placeholders: {iface} {ip}
# {prefix} {cidr} {dir} {pool_start} {pool_end} {relay_ip}; the same values are
# exported as SRV_IFACE SRV_IP SRV_PREFIX SRV_CIDR SRV_DIR POOL_START POOL_END RELAY_IP.
# The subnet to serve is 10.99.0.0/16, relay/giaddr 10.99.0.2, pool 10.99.1.0-10.99.200.254.
#
# Other knobs (env): LADDER DURATION(<=15) CLIENTS DROP_PCT REFINE RETRY_FAIL STOP_ON_FAIL
#   CLIENT_CPUS SERVER_CPUS (taskset lists; empty = no pinning) PERF_THREADS
#   LEASE_TIME WORK KEEP_RUNS READY_TIMEOUT READY_PORT ZTPD_BIN NS_PREFIX
#   MODE PLAN_SIZE RELAY_CIRCUIT (option 82 circuit id perfdhcp adds; empty = none)
set -uo pipefail

MODE=${MODE:-}
PLAN_SIZE=${PLAN_SIZE:-10000}
RELAY_CIRCUIT=${RELAY_CIRCUIT:-}
if [[ $MODE == positions ]]; then
  ANCHORS=${ANCHORS-"ztpd ztpd-plan"}
  RELAY_CIRCUIT=${RELAY_CIRCUIT:-unplanned-port}
  LADDER=${LADDER:-"1000 2000 3000 4000 5000 6000 8000 10000 12000 16000"}
  REFINE=${REFINE:-4}
fi
LADDER=${LADDER:-"100 250 500 1000 2000 4000 8000 12000 16000 20000 24000 32000"}
DURATION=${DURATION:-10}
CLIENTS=${CLIENTS:-50000}
DROP_PCT=${DROP_PCT:-1}
REFINE=${REFINE:-2}
RETRY_FAIL=${RETRY_FAIL:-1}
STOP_ON_FAIL=${STOP_ON_FAIL:-1}
CLIENT_CPUS=${CLIENT_CPUS-0}
SERVER_CPUS=${SERVER_CPUS-1}
PERF_THREADS=${PERF_THREADS:-single}
LEASE_TIME=${LEASE_TIME:-3600}
WORK=${WORK:-/tmp/ztpd-bench/dhcp}
KEEP_RUNS=${KEEP_RUNS:-0}
READY_TIMEOUT=${READY_TIMEOUT:-10}
READY_PORT=${READY_PORT:-67}
SERVER_CMD=${SERVER_CMD:-}
SERVER_NAME=${SERVER_NAME:-custom}
ANCHORS=${ANCHORS-"ztpd kea dnsmasq"}
ZTPD_BIN=${ZTPD_BIN:-}
NS_PREFIX=${NS_PREFIX:-zd-dhcp}

NS_SRV=$NS_PREFIX-srv NS_CLI=$NS_PREFIX-cli
IF_SRV=veth-srv IF_CLI=veth-cli
SRV_IP=10.99.0.1 CLI_IP=10.99.0.2 PREFIX=16 NET=10.99.0.0
POOL_START=10.99.1.0 POOL_END=10.99.200.254

die() { echo "dhcp-rate: $*" >&2; exit 1; }
log() { echo "[$(date +%T)] $*" >&2; }
[[ $EUID -eq 0 ]] || die "must run as root (namespaces)"
(( DURATION >= 1 && DURATION <= 15 )) || die "DURATION must be 1..15 s"
for t in ip perfdhcp timeout setsid ss awk; do command -v $t >/dev/null || die "missing $t"; done
[[ -n $CLIENT_CPUS || -n $SERVER_CPUS ]] && { command -v taskset >/dev/null || die "missing taskset"; }

mkdir -p "$WORK"
PGFILE=$WORK/.pgids          # process groups we started (for stale cleanup)
SRV_PGID=""

# ---------- process helpers (everything is tracked by PID/PGID) ----------
stop_pg() {                  # $1 = pgid (== pid of the setsid'ed leader we started)
  local pg=$1
  kill -0 -- "-$pg" 2>/dev/null || { wait "$pg" 2>/dev/null; return 0; }
  kill -TERM -- "-$pg" 2>/dev/null
  for _ in $(seq 50); do kill -0 -- "-$pg" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- "-$pg" 2>/dev/null
  wait "$pg" 2>/dev/null
  sed -i "/^$pg /d" "$PGFILE" 2>/dev/null
  return 0
}
stale_cleanup() {            # groups left over by an earlier, killed run of this script
  [[ -f $PGFILE ]] || return 0
  local pg start
  while read -r pg start; do
    [[ -n $pg ]] || continue
    # only if it is still the same process (same start time) we recorded
    if [[ -r /proc/$pg/stat ]] && [[ $(awk '{sub(/.*\) /,""); print $20}' /proc/$pg/stat) == "$start" ]]; then
      log "killing stale process group $pg from a previous run"
      kill -KILL -- "-$pg" 2>/dev/null
    fi
  done < "$PGFILE"
  : > "$PGFILE"
}
pg_ticks() {                 # utime+stime (clock ticks) summed over process group $1
  # cat, not awk's own file list: mawk gives up (printing nothing) when a
  # process exits between the glob and its read, as they do on a busy host
  cat /proc/[0-9]*/stat 2>/dev/null | awk -v pg="$1" '{sub(/.*\) /,""); if ($3==pg) t+=$12+$13+$14+$15} END{print t+0}'
}
pg_hwm_kb() {                # max VmHWM over process group $1
  local p m=0 v
  for p in /proc/[0-9]*; do
    [[ $(awk '{sub(/.*\) /,""); print $3}' "$p/stat" 2>/dev/null) == "$1" ]] || continue
    v=$(awk '/^VmHWM:/{print $2}' "$p/status" 2>/dev/null); v=${v:-0}
    (( v > m )) && m=$v
  done
  echo $m
}

# ---------- namespaces ----------
ns_down() { ip netns del $NS_SRV 2>/dev/null; ip netns del $NS_CLI 2>/dev/null; return 0; }
ns_up() {
  ns_down
  ip netns add $NS_SRV && ip netns add $NS_CLI || die "netns add failed"
  ip link add $IF_SRV netns $NS_SRV type veth peer name $IF_CLI netns $NS_CLI || die "veth failed"
  ip -n $NS_SRV addr add $SRV_IP/$PREFIX dev $IF_SRV
  ip -n $NS_CLI addr add $CLI_IP/$PREFIX dev $IF_CLI
  for n in $NS_SRV $NS_CLI; do ip -n $n link set lo up; done
  ip -n $NS_SRV link set $IF_SRV up; ip -n $NS_CLI link set $IF_CLI up
  local i; for i in $(seq 50); do
    ip -n $NS_SRV -o link show dev $IF_SRV | grep -q 'state UP' &&
    ip -n $NS_CLI -o link show dev $IF_CLI | grep -q 'state UP' && return 0; sleep 0.1; done
  die "veth link did not come up"
}
cleanup() {
  [[ -n $SRV_PGID ]] && stop_pg "$SRV_PGID"
  SRV_PGID=""
  ns_down
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------- anchors: print a command template; may write config into $1 ----------
kea_conf() {                 # $1 dir, $2 mt(0|1)
  local mt='"multi-threading": { "enable-multi-threading": false },'
  [[ $2 == 1 ]] && mt='"multi-threading": { "enable-multi-threading": true, "thread-pool-size": 2, "packet-queue-size": 64 },'
  cat > "$1/kea-dhcp4.json" <<EOF
{
  "Dhcp4": {
    "interfaces-config": { "interfaces": [ "$IF_SRV" ], "dhcp-socket-type": "udp" },
    "lease-database": { "type": "memfile", "persist": true,
                        "name": "$1/kea-leases4.csv", "lfc-interval": 0 },
    $mt
    "valid-lifetime": $LEASE_TIME,
    "renew-timer": $(( LEASE_TIME / 4 )),
    "rebind-timer": $(( LEASE_TIME / 2 )),
    "subnet4": [ { "id": 1, "subnet": "$NET/$PREFIX",
                   "pools": [ { "pool": "$POOL_START - $POOL_END" } ] } ],
    "loggers": [ { "name": "kea-dhcp4", "severity": "WARN",
                   "output_options": [ { "output": "$1/kea.log" } ] } ]
  }
}
EOF
}
ztpd_bin() {                 # the ztpd binary: ZTPD_BIN, bin/ztpd, or built into $WORK
  local top; top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  if [[ -z $ZTPD_BIN ]]; then
    ZTPD_BIN=$top/bin/ztpd
    if [[ ! -x $ZTPD_BIN ]]; then
      command -v go >/dev/null || PATH=$PATH:/usr/local/go/bin
      log "building ztpd into $WORK/ztpd"
      (cd "$top" && go build -o "$WORK/ztpd" ./cmd/ztpd) || die "go build failed"
      ZTPD_BIN=$WORK/ztpd
    fi
  fi
  [[ -x $ZTPD_BIN ]] || die "ztpd binary $ZTPD_BIN not found"
  echo "$ZTPD_BIN"
}
anchor_cmd() {               # $1 name, $2 run dir -> echo template
  case $1 in
    ztpd|ztpd-plan)
      local bin; bin=$(ztpd_bin) || exit 1
      printf 'dhcp:\n  lease_time: %ss\nevents:\n  keep: 1000000\n' "$LEASE_TIME" > "$2/ztpd.yaml"
      if [[ $1 == ztpd-plan ]]; then
        awk -v n="$PLAN_SIZE" -v relay="$CLI_IP" 'BEGIN{print "name,relay,circuit_id,rack,port";
          for (i = 0; i < n; i++) printf "pos-%d,%s,port-%d,%d,port-%d\n", i, relay, i, int(i/48), i%48}' > "$2/plan.csv"
        printf 'positions: [%s/plan.csv]\n' "$2" >> "$2/ztpd.yaml"
      fi
      echo "exec $bin serve --config {dir}/ztpd.yaml --data-dir {dir}/data --log-level warn" \
           "--dhcp-interface {iface} --dhcp-range {pool_start}-{pool_end} --dhcp-relay $CLI_IP --http-addr {ip}:8080" ;;
    dnsmasq|dnsmasq-ro)
      command -v dnsmasq >/dev/null || die "dnsmasq not installed"
      local lf="--dhcp-leasefile={dir}/dnsmasq.leases"; [[ $1 == dnsmasq-ro ]] && lf="--leasefile-ro"
      echo "dnsmasq --keep-in-foreground --conf-file=/dev/null --pid-file= --port=0 --no-ping --quiet-dhcp" \
           "--log-facility={dir}/dnsmasq.log --interface={iface} --bind-interfaces" \
           "--dhcp-range={pool_start},{pool_end},255.255.0.0,$LEASE_TIME $lf --dhcp-lease-max=100000" ;;
    kea|kea-mt)
      command -v kea-dhcp4 >/dev/null || die "kea-dhcp4 not installed"
      kea_conf "$2" "$([[ $1 == kea-mt ]] && echo 1 || echo 0)"
      echo "kea-dhcp4 -c {dir}/kea-dhcp4.json" ;;
    *) die "unknown anchor $1" ;;
  esac
}
subst() {                    # $1 template, $2 dir
  local c=$1
  c=${c//\{iface\}/$IF_SRV}; c=${c//\{ip\}/$SRV_IP}; c=${c//\{prefix\}/$PREFIX}
  c=${c//\{cidr\}/$SRV_IP/$PREFIX}; c=${c//\{dir\}/$2}; c=${c//\{relay_ip\}/$CLI_IP}
  c=${c//\{pool_start\}/$POOL_START}; c=${c//\{pool_end\}/$POOL_END}
  echo "$c"
}

start_server() {             # $1 command (substituted), $2 dir ; sets SRV_PGID
  local cmd=$1 dir=$2 pin=() i
  [[ -n $SERVER_CPUS ]] && pin=(taskset -c "$SERVER_CPUS")
  # ip netns exec / env / taskset / bash "exec" all exec in place, and setsid does not
  # fork (we are not a group leader), so $! is the server and leads its own group.
  setsid ip netns exec $NS_SRV env SRV_IFACE=$IF_SRV SRV_IP=$SRV_IP SRV_PREFIX=$PREFIX \
      SRV_CIDR=$SRV_IP/$PREFIX SRV_DIR="$dir" POOL_START=$POOL_START POOL_END=$POOL_END \
      RELAY_IP=$CLI_IP KEA_PIDFILE_DIR="$dir" KEA_LOCKFILE_DIR="$dir" \
      "${pin[@]}" bash -c "$cmd" >"$dir/server.out" 2>&1 </dev/null &
  SRV_PGID=$!
  echo "$SRV_PGID $(awk '{sub(/.*\) /,""); print $20}' /proc/$SRV_PGID/stat 2>/dev/null)" >> "$PGFILE"
  [[ $(awk '{sub(/.*\) /,""); print $3}' /proc/$SRV_PGID/stat 2>/dev/null) == "$SRV_PGID" ]] ||
    log "warning: server pid $SRV_PGID is not a group leader; cleanup may miss children"
  for i in $(seq $(( READY_TIMEOUT * 10 ))); do
    kill -0 $SRV_PGID 2>/dev/null || { log "server exited early:"; tail -5 "$dir/server.out" >&2; return 1; }
    [[ -n $(ip netns exec $NS_SRV ss -Hlun "sport = :$READY_PORT" 2>/dev/null) ]] && { sleep 0.3; return 0; }
    sleep 0.1
  done
  log "server not listening on udp/$READY_PORT after ${READY_TIMEOUT}s"; tail -5 "$dir/server.out" >&2
  return 1
}

# option 82 with one circuit-id sub-option, when RELAY_CIRCUIT is set
OPT82=()
if [[ -n $RELAY_CIRCUIT ]]; then
  (( ${#RELAY_CIRCUIT} <= 253 )) || die "RELAY_CIRCUIT longer than option 82 carries"
  OPT82=(-o "82,$(printf '01%02x' ${#RELAY_CIRCUIT})$(printf '%s' "$RELAY_CIRCUIT" | od -An -tx1 | tr -d ' \n')")
fi

RESULTS=$WORK/results.tsv
: > "$RESULTS"
# one rung: $1 name, $2 template, $3 rate -> appends a row, returns 0 on PASS
run_rung() {
  local name=$1 tmpl=$2 rate=$3 dir="$WORK/run-$1-$3" pin=() out
  rm -rf "$dir"; mkdir -p "$dir"
  [[ -z $tmpl ]] && { tmpl=$(anchor_cmd "$name" "$dir") || exit 1; }
  local cmd; cmd=$(subst "$tmpl" "$dir"); echo "$cmd" > "$dir/cmd"
  if ! start_server "$cmd" "$dir"; then
    printf '%s\t%s\t0\t0\t0\t100\t-\t-\t-\t-\t-\t-\tNOSTART\n' "$name" "$rate" >> "$RESULTS"
    stop_pg "$SRV_PGID"; SRV_PGID=""; return 1
  fi
  [[ -n $CLIENT_CPUS ]] && pin=(taskset -c "$CLIENT_CPUS")
  local t0; t0=$(pg_ticks $SRV_PGID)
  log "$name: offering $rate DORA/s for ${DURATION}s"
  ip netns exec $NS_CLI timeout -k 2 $(( DURATION + 15 )) "${pin[@]}" \
     perfdhcp -4 -g "$PERF_THREADS" -l $CLI_IP -r "$rate" -p "$DURATION" -n $(( rate * DURATION )) \
     -R "$CLIENTS" -d 1 -W 1000000 "${OPT82[@]}" $SRV_IP > "$dir/perfdhcp.out" 2>&1
  local prc=$? alive=1
  kill -0 $SRV_PGID 2>/dev/null || alive=0
  local t1 hwm; t1=$(pg_ticks $SRV_PGID); hwm=$(pg_hwm_kb $SRV_PGID)
  stop_pg "$SRV_PGID"; SRV_PGID=""
  local hz; hz=$(getconf CLK_TCK)
  out=$(awk -v rate="$rate" -v dur="$DURATION" -v thr="$DROP_PCT" -v alive=$alive -v prc=$prc \
            -v cpu=$(( t1 - t0 )) -v hz="$hz" -v hwm="$hwm" -v name="$name" '
    /Statistics for: DISCOVER-OFFER/ {s="DO"} /Statistics for: REQUEST-ACK/ {s="RA"}
    /^sent packets:/ {sent[s]=$3} /^received packets:/ {recv[s]=$3}
    /^avg delay:/ {avg[s]=$3} /^max delay:/ {mx[s]=$3}
    END {
      so=sent["DO"]+0; ack=recv["RA"]+0
      drop = so>0 ? 100*(1-ack/so) : 100
      v = (drop < thr) ? "PASS" : "FAIL"
      if (so < 0.97*rate*dur) v = v "/CLI-LTD"      # perfdhcp could not offer the load
      if (!alive) v = "DIED"
      if (so==0 && prc>=124) v = "TIMEOUT"
      printf "%s\t%d\t%d\t%d\t%.0f\t%.2f\t%s\t%s\t%s\t%s\t%.0f\t%.1f\t%s\n", name, rate, so, ack, ack/dur, drop,
        (avg["DO"]==""?"-":avg["DO"]), (mx["DO"]==""?"-":mx["DO"]), (avg["RA"]==""?"-":avg["RA"]), (mx["RA"]==""?"-":mx["RA"]),
        100*cpu/hz/dur, hwm/1024, v
    }' "$dir/perfdhcp.out")
  echo "$out" >> "$RESULTS"
  log "  -> $(echo "$out" | awk -F'\t' '{printf "%s DORA/s, drop %s%%, %s", $5, $6, $13}')"
  [[ $KEEP_RUNS == 1 ]] || rm -rf "$dir"
  [[ $(echo "$out" | cut -f13) == PASS ]]
}

# a failed rung is re-run RETRY_FAIL times (VM noise produces spurious failures,
# never spurious passes); superseded rows keep their verdict with " (retried)"
try_rung() {
  local k
  run_rung "$@" && return 0
  for (( k = 0; k < RETRY_FAIL; k++ )); do
    sed -i '$ s/$/ (retried)/' "$RESULTS"; log "  retrying rate $3"
    run_rung "$@" && return 0
  done
  return 1
}

run_server() {               # $1 name, $2 template ("" for anchors)
  local name=$1 tmpl=$2 rate pass=0 fail=0 i mid
  for rate in $LADDER; do
    if try_rung "$name" "$tmpl" "$rate"; then pass=$rate
    else fail=$rate; [[ $STOP_ON_FAIL == 1 ]] && break; fi
  done
  # bisection between the highest pass and the first failure above it
  if (( fail > pass && pass > 0 )); then
    for (( i = 0; i < REFINE; i++ )); do
      mid=$(( (pass + fail) / 2 / 50 * 50 ))
      (( mid > pass && mid < fail )) || break
      if try_rung "$name" "$tmpl" "$mid"; then pass=$mid; else fail=$mid; fi
    done
  fi
}

stale_cleanup
if [[ " $ANCHORS " == *" ztpd "* ]]; then ZTPD_BIN=$(ztpd_bin) || exit 1; fi
ns_up
log "namespaces up: $NS_SRV($IF_SRV $SRV_IP/$PREFIX) <-> $NS_CLI($IF_CLI $CLI_IP); ladder: $LADDER; ${DURATION}s/rung"
for a in $ANCHORS; do run_server "$a" ""; done
[[ -n $SERVER_CMD ]] && run_server "$SERVER_NAME" "$SERVER_CMD"

# ---------- report ----------
echo
echo "DHCPv4 DORA ladder (perfdhcp relay mode -l $CLI_IP, ${DURATION}s/rung, -R $CLIENTS clients, fresh server per rung," \
     "pass: <${DROP_PCT}% DISCOVERs without ACK; client cpus=${CLIENT_CPUS:-any} server cpus=${SERVER_CPUS:-any})"
awk -F'\t' 'BEGIN{printf "%-11s %7s %8s %8s %8s %7s %15s %15s %5s %6s %s\n","server","offered","sent-DO","acked","DORA/s","drop%","DO avg/max ms","RA avg/max ms","cpu%","rssMB","verdict"}
  {printf "%-11s %7s %8s %8s %8s %7s %15s %15s %5s %6s %s\n",$1,$2,$3,$4,$5,$6,$7"/"$8,$9"/"$10,$11,$12,$13}' "$RESULTS"
echo
echo "Best sustained rate (highest offered rate that PASSed):"
awk -F'\t' '{if (!($1 in seen)) order[++n]=$1; seen[$1]=1; if ($13=="PASS" && $2+0>best[$1]+0) {best[$1]=$2; row[$1]=$0}}
  END{for (k=1; k<=n; k++) { s=order[k]; if (s in row) { split(row[s],f,"\t");
        printf "  %-11s %6d/s offered -> %6d DORA/s, drop %s%%, RA avg/max %s/%s ms, server cpu %s%%\n", s, f[2], f[5], f[6], f[9], f[10], f[11] }
      else printf "  %-11s no passing rung (below the lowest rate tried)\n", s } }' "$RESULTS"
echo "(rows: $RESULTS)"
best() { awk -F'\t' -v s="$1" '$1==s && $13=="PASS" && $2+0>b {b=$2+0} END{print b+0}' "$RESULTS"; }
z=$(best ztpd) k=$(best kea) d=$(best dnsmasq)
ratio=$(awk -v z="$z" -v k="$k" 'BEGIN{ if (k>0) printf "%.2f", z/k; else print "n/a" }')
if [[ $MODE == positions ]]; then
  p=$(best ztpd-plan)
  ratio=$(awk -v z="$z" -v p="$p" 'BEGIN{ if (z>0) printf "%.3f", p/z; else print "n/a" }')
  echo "(option 82 circuit id \"$RELAY_CIRCUIT\" on every packet of both; the plan: $PLAN_SIZE positions behind relay $CLI_IP)"
  echo "RESULT dhcp_positions_dora_per_s ztpd=$z ztpd_plan$PLAN_SIZE=$p ratio=$ratio"
  exit 0
fi
echo "RESULT dhcp_dora_per_s ztpd=$z kea=$k dnsmasq=$d ratio_vs_kea=$ratio"
