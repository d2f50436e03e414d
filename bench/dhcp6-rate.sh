#!/usr/bin/env bash
# dhcp6-rate.sh - DHCPv6 Solicit-Advertise-Request-Reply throughput of ztpd and ISC
# Kea's kea-dhcp6, side by side in one run, leases persisted by both, perfdhcp -6 as
# the client. `make bench-dhcp6` runs it (root required).
#
# The same ladder, drop rule and report as bench/dhcp-rate.sh (DHCPv4): for every
# rate of LADDER a FRESH server (empty lease store) is started, perfdhcp offers that
# many SARR exchanges/s for DURATION s (count also bounded with -n), the server is
# stopped. A rung passes when < DROP_PCT % of Solicits got no Reply and perfdhcp
# really managed to send the offered load. After the first failure REFINE bisection
# steps narrow the limit. The server's CPU is measured over each rung and reported
# per exchange. The last line is
#   RESULT dhcp6 ztpd=<n> kea=<n> ratio=<x> ztpd_cpu_us=<u> kea_cpu_us=<u> cpu_ratio=<y>
#          floor_go_us=<f> floor_c_us=<c>
# where <n> is the highest offered rate that passed, <u> the server's CPU time per
# exchange (microseconds) on that rung, and cpu_ratio kea's CPU per exchange over
# ztpd's (above 1: ztpd spends less CPU per exchange), and <f>, <c> the socket floors'
# CPU per exchange at ztpd's limit rate (FLOORS below; 0 when not run).
#
# Topology (created and deleted by this script), DAD off in both namespaces:
#   netns $NS_SRV: veth-srv fd99:0:0:1::1/64   <-veth->   netns $NS_CLI: veth-cli (link-local)
# perfdhcp -6 runs in $NS_CLI on veth-cli (Solicits to ff02::1:2 from its link-local).
#
# Servers (ANCHORS, default "ztpd kea"):
#   ztpd   ztpd serve with an IPv6 subnet, leases group-committed and fsynced to its
#          bbolt store before each Reply (ZTPD_BIN, default bin/ztpd; built when
#          missing); perfdhcp does not ask for Rapid Commit, so each exchange is 4 messages
#   kea    kea-dhcp6 (Debian kea-dhcp6-server), memfile persisted to CSV, lfc disabled,
#          single-threaded
#
# Other knobs (env): LADDER DURATION(<=15) CLIENTS DROP_PCT REFINE RETRY_FAIL STOP_ON_FAIL
#   CLIENT_CPUS SERVER_CPUS (taskset lists; empty = no pinning) PERF_THREADS
#   LEASE_TIME WORK KEEP_RUNS READY_TIMEOUT ZTPD_BIN NS_PREFIX
#   FLOORS (1, the default: after the ladders, the two socket floors answer one rung at
#   ztpd's limit rate: testenv/cmd/dhcp6floor, a stateless Go responder reading through
#   Go's network poller as ztpd does, and bench/floor/dhcp6floor.c, the same in C; they
#   keep nothing, so they say what the packets alone cost: RESULT's floor_go_us and
#   floor_c_us; FLOORS=0 skips them; ANCHORS="floor floor-c" runs their own ladders)
#   PROFILE_DIR (ztpd's CPU profile of each rung's DURATION: ztpd-<rate>.pprof, for
#   `go tool pprof -top -cum`; the pprof listener on [::1]:6060 inside $NS_SRV)
set -uo pipefail

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
WORK=${WORK:-/tmp/ztpd-bench/dhcp6}
KEEP_RUNS=${KEEP_RUNS:-0}
READY_TIMEOUT=${READY_TIMEOUT:-10}
READY_PORT=547
ANCHORS=${ANCHORS-"ztpd kea"}
FLOORS=${FLOORS:-1}
ZTPD_BIN=${ZTPD_BIN:-}
NS_PREFIX=${NS_PREFIX:-zd-dhcp6}
PROFILE_DIR=${PROFILE_DIR:-}

NS_SRV=$NS_PREFIX-srv NS_CLI=$NS_PREFIX-cli
IF_SRV=veth-srv IF_CLI=veth-cli
SRV_IP=fd99:0:0:1::1 PREFIX=64 NET=fd99:0:0:1::
POOL_START=fd99:0:0:1::1:0 POOL_END=fd99:0:0:1::ff:ffff

die() { echo "dhcp6-rate: $*" >&2; exit 1; }
log() { echo "[$(date +%T)] $*" >&2; }
[[ $EUID -eq 0 ]] || die "must run as root (namespaces)"
(( DURATION >= 1 && DURATION <= 15 )) || die "DURATION must be 1..15 s"
for t in ip perfdhcp timeout setsid ss awk sysctl; do command -v $t >/dev/null || die "missing $t"; done
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
  local n i
  for n in $NS_SRV $NS_CLI; do
    ip netns exec $n sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0 || die "sysctl failed"
    ip -n $n link set lo up
  done
  ip link add $IF_SRV netns $NS_SRV type veth peer name $IF_CLI netns $NS_CLI || die "veth failed"
  ip -n $NS_SRV addr add $SRV_IP/$PREFIX dev $IF_SRV
  ip -n $NS_SRV link set $IF_SRV up; ip -n $NS_CLI link set $IF_CLI up
  for i in $(seq 100); do
    ip -n $NS_CLI -6 -o addr show dev $IF_CLI scope link | grep -v tentative | grep -q fe80 &&
    ip -n $NS_SRV -6 -o addr show dev $IF_SRV scope link | grep -v tentative | grep -q fe80 && return 0
    sleep 0.1
  done
  die "veth link-local addresses did not come up"
}
cleanup() {
  [[ -n $SRV_PGID ]] && stop_pg "$SRV_PGID"
  SRV_PGID=""
  ns_down
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------- servers: print a command template; may write config into $2 ----------
kea_conf() {                 # $1 dir
  cat > "$1/kea-dhcp6.json" <<EOF
{
  "Dhcp6": {
    "interfaces-config": { "interfaces": [ "$IF_SRV" ] },
    "lease-database": { "type": "memfile", "persist": true,
                        "name": "$1/kea-leases6.csv", "lfc-interval": 0 },
    "multi-threading": { "enable-multi-threading": false },
    "server-id": { "type": "LLT", "persist": false },
    "preferred-lifetime": $LEASE_TIME,
    "valid-lifetime": $LEASE_TIME,
    "renew-timer": $(( LEASE_TIME / 2 )),
    "rebind-timer": $(( LEASE_TIME * 4 / 5 )),
    "subnet6": [ { "id": 1, "subnet": "$NET/$PREFIX", "interface": "$IF_SRV",
                   "pools": [ { "pool": "$POOL_START - $POOL_END" } ] } ],
    "loggers": [ { "name": "kea-dhcp6", "severity": "WARN",
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
floor_bin() {                # the socket floor (testenv/cmd/dhcp6floor), built into $WORK
  local top; top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  command -v go >/dev/null || PATH=$PATH:/usr/local/go/bin
  (cd "$top" && go build -o "$WORK/dhcp6floor" ./testenv/cmd/dhcp6floor) || die "go build of the floor failed"
  echo "$WORK/dhcp6floor"
}
server_cmd() {               # $1 name, $2 run dir -> the command; writes its configuration into $2
  case $1 in
    ztpd)
      cat > "$2/ztpd.yaml" <<EOF
advertise_addr: "$SRV_IP"
http:
  addr: "[$SRV_IP]:8080"
events:
  keep: 1000000
dhcp:
  interfaces: [$IF_SRV]
  lease_time: ${LEASE_TIME}s
  subnets:
    - name: bench6
      subnet: $NET/$PREFIX
      interface: $IF_SRV
      pools: ["$POOL_START-$POOL_END"]
      rapid_commit: false
EOF
      [[ -n $PROFILE_DIR ]] && echo 'debug: {pprof_addr: "[::1]:6060"}' >> "$2/ztpd.yaml"
      echo "exec $ZTPD_BIN serve --config $2/ztpd.yaml --data-dir $2/data --log-level warn" ;;
    floor)
      echo "exec $FLOOR_BIN -i $IF_SRV -prefix $NET" ;;
    floor-c)
      echo "exec $FLOOR_C_BIN $IF_SRV $NET" ;;
    kea)
      command -v kea-dhcp6 >/dev/null || die "kea-dhcp6 not installed (apt-get install kea-dhcp6-server)"
      kea_conf "$2"
      echo "exec kea-dhcp6 -c $2/kea-dhcp6.json" ;;
    *) die "unknown server $1" ;;
  esac
}

start_server() {             # $1 command, $2 dir ; sets SRV_PGID
  local cmd=$1 dir=$2 pin=() i
  [[ -n $SERVER_CPUS ]] && pin=(taskset -c "$SERVER_CPUS")
  # ip netns exec / env / taskset / bash "exec" all exec in place, and setsid does not
  # fork (we are not a group leader), so $! is the server and leads its own group.
  setsid ip netns exec $NS_SRV env KEA_PIDFILE_DIR="$dir" KEA_LOCKFILE_DIR="$dir" \
      "${pin[@]}" bash -c "$cmd" >"$dir/server.out" 2>&1 </dev/null &
  SRV_PGID=$!
  echo "$SRV_PGID $(awk '{sub(/.*\) /,""); print $20}' /proc/$SRV_PGID/stat 2>/dev/null)" >> "$PGFILE"
  for i in $(seq $(( READY_TIMEOUT * 10 ))); do
    kill -0 $SRV_PGID 2>/dev/null || { log "server exited early:"; tail -5 "$dir/server.out" >&2; return 1; }
    [[ -n $(ip netns exec $NS_SRV ss -Hlun "sport = :$READY_PORT" 2>/dev/null) ]] && { sleep 0.3; return 0; }
    sleep 0.1
  done
  log "server not listening on udp/$READY_PORT after ${READY_TIMEOUT}s"; tail -5 "$dir/server.out" >&2
  return 1
}

RESULTS=$WORK/results.tsv
: > "$RESULTS"
# one rung: $1 name, $2 rate -> appends a row, returns 0 on PASS
run_rung() {
  local name=$1 rate=$2 dir="$WORK/run-$1-$2" pin=() out
  rm -rf "$dir"; mkdir -p "$dir"
  local cmd; cmd=$(server_cmd "$name" "$dir") || exit 1
  echo "$cmd" > "$dir/cmd"
  if ! start_server "$cmd" "$dir"; then
    printf '%s\t%s\t0\t0\t0\t100\t-\t-\t-\t-\t-\t-\tNOSTART\t-\n' "$name" "$rate" >> "$RESULTS"
    stop_pg "$SRV_PGID"; SRV_PGID=""; return 1
  fi
  [[ -n $CLIENT_CPUS ]] && pin=(taskset -c "$CLIENT_CPUS")
  local t0; t0=$(pg_ticks $SRV_PGID)
  log "$name: offering $rate SARR/s for ${DURATION}s"
  local prof=""
  if [[ -n $PROFILE_DIR && $name == ztpd ]]; then
    mkdir -p "$PROFILE_DIR"
    ip netns exec $NS_SRV curl -s -o "$PROFILE_DIR/ztpd-$rate.pprof" "http://[::1]:6060/debug/pprof/profile?seconds=$DURATION" &
    prof=$!
  fi
  ip netns exec $NS_CLI timeout -k 2 $(( DURATION + 15 )) "${pin[@]}" \
     perfdhcp -6 -g "$PERF_THREADS" -l $IF_CLI -r "$rate" -p "$DURATION" -n $(( rate * DURATION )) \
     -R "$CLIENTS" -d 1 -W 1000000 > "$dir/perfdhcp.out" 2>&1
  local prc=$? alive=1
  [[ -n $prof ]] && wait $prof
  kill -0 $SRV_PGID 2>/dev/null || alive=0
  local t1 hwm; t1=$(pg_ticks $SRV_PGID); hwm=$(pg_hwm_kb $SRV_PGID)
  stop_pg "$SRV_PGID"; SRV_PGID=""
  local hz; hz=$(getconf CLK_TCK)
  out=$(awk -v rate="$rate" -v dur="$DURATION" -v thr="$DROP_PCT" -v alive=$alive -v prc=$prc \
            -v cpu=$(( t1 - t0 )) -v hz="$hz" -v hwm="$hwm" -v name="$name" '
    /Statistics for: SOLICIT-ADVERTISE/ {s="SA"} /Statistics for: REQUEST-REPLY/ {s="RR"}
    /^sent packets:/ {sent[s]=$3} /^received packets:/ {recv[s]=$3}
    /^avg delay:/ {avg[s]=$3} /^max delay:/ {mx[s]=$3}
    END {
      so=sent["SA"]+0; rep=recv["RR"]+0
      drop = so>0 ? 100*(1-rep/so) : 100
      v = (drop < thr) ? "PASS" : "FAIL"
      if (so < 0.97*rate*dur) v = v "/CLI-LTD"      # perfdhcp could not offer the load
      if (!alive) v = "DIED"
      if (so==0 && prc>=124) v = "TIMEOUT"
      us = rep>0 ? 1e6*cpu/hz/rep : 0
      printf "%s\t%d\t%d\t%d\t%.0f\t%.2f\t%s\t%s\t%s\t%s\t%.0f\t%.1f\t%s\t%.0f\n", name, rate, so, rep, rep/dur, drop,
        (avg["SA"]==""?"-":avg["SA"]), (mx["SA"]==""?"-":mx["SA"]), (avg["RR"]==""?"-":avg["RR"]), (mx["RR"]==""?"-":mx["RR"]),
        100*cpu/hz/dur, hwm/1024, v, us
    }' "$dir/perfdhcp.out")
  echo "$out" >> "$RESULTS"
  log "  -> $(echo "$out" | awk -F'\t' '{printf "%s SARR/s, drop %s%%, %s us CPU per exchange, %s", $5, $6, $14, $13}')"
  [[ $KEEP_RUNS == 1 ]] || rm -rf "$dir"
  [[ $(echo "$out" | cut -f13) == PASS ]]
}

# a server's highest passing rate, and its CPU per exchange on the rung at $2
best() { awk -F'\t' -v s="$1" '$1==s && $13=="PASS" && $2+0>b {b=$2+0} END{print b+0}' "$RESULTS"; }
cpu_at() { awk -F'\t' -v s="$1" -v r="$2" '$1==s && $2==r && $13=="PASS" {u=$14} END{print u+0}' "$RESULTS"; }

# a failed rung is re-run RETRY_FAIL times (VM noise produces spurious failures,
# never spurious passes); superseded rows keep their verdict with " (retried)"
try_rung() {
  local k
  run_rung "$@" && return 0
  for (( k = 0; k < RETRY_FAIL; k++ )); do
    sed -i '$ s/$/ (retried)/' "$RESULTS"; log "  retrying rate $2"
    run_rung "$@" && return 0
  done
  return 1
}

run_server() {               # $1 name
  local name=$1 rate pass=0 fail=0 i mid
  for rate in $LADDER; do
    if try_rung "$name" "$rate"; then pass=$rate
    else fail=$rate; [[ $STOP_ON_FAIL == 1 ]] && break; fi
  done
  # bisection between the highest pass and the first failure above it
  if (( fail > pass && pass > 0 )); then
    for (( i = 0; i < REFINE; i++ )); do
      mid=$(( (pass + fail) / 2 / 50 * 50 ))
      (( mid > pass && mid < fail )) || break
      if try_rung "$name" "$mid"; then pass=$mid; else fail=$mid; fi
    done
  fi
}

stale_cleanup
if [[ " $ANCHORS " == *" ztpd "* ]]; then ZTPD_BIN=$(ztpd_bin) || exit 1; fi
FLOOR_NAMES=""
[[ $FLOORS == 1 ]] && FLOOR_NAMES="floor floor-c"
if [[ " $ANCHORS $FLOOR_NAMES " == *" floor "* ]]; then FLOOR_BIN=$(floor_bin) || exit 1; fi
if [[ " $ANCHORS $FLOOR_NAMES " == *" floor-c "* ]]; then
  command -v cc >/dev/null || die "the C floor needs a C compiler (cc; FLOORS=0 runs without the floors)"
  FLOOR_C_BIN=$WORK/dhcp6floor-c
  cc -O2 -Wall -o "$FLOOR_C_BIN" "$(dirname "${BASH_SOURCE[0]}")/floor/dhcp6floor.c" || die "cc of the C floor failed"
fi
ns_up
log "namespaces up: $NS_SRV($IF_SRV $SRV_IP/$PREFIX) <-> $NS_CLI($IF_CLI); ladder: $LADDER; ${DURATION}s/rung"
for a in $ANCHORS; do run_server "$a"; done
# The floors answer at ztpd's limit rate, the rung its CPU per exchange is
# reported at, so the three figures are taken under the same load.
floor_rate=$(best ztpd)
if [[ -n $FLOOR_NAMES ]] && (( floor_rate > 0 )); then
  for a in $FLOOR_NAMES; do run_rung "$a" "$floor_rate"; done
fi

# ---------- report ----------
echo
echo "DHCPv6 SARR ladder (perfdhcp -6 on $IF_CLI, ${DURATION}s/rung, -R $CLIENTS clients, fresh server per rung," \
     "pass: <${DROP_PCT}% Solicits without Reply; client cpus=${CLIENT_CPUS:-any} server cpus=${SERVER_CPUS:-any})"
awk -F'\t' 'BEGIN{printf "%-6s %7s %8s %8s %8s %7s %15s %15s %5s %6s %7s %s\n","server","offered","sent-SA","replied","SARR/s","drop%","SA avg/max ms","RR avg/max ms","cpu%","rssMB","us/exch","verdict"}
  {printf "%-6s %7s %8s %8s %8s %7s %15s %15s %5s %6s %7s %s\n",$1,$2,$3,$4,$5,$6,$7"/"$8,$9"/"$10,$11,$12,$14,$13}' "$RESULTS"
echo "(rows: $RESULTS)"
z=$(best ztpd) k=$(best kea)
zu=$(cpu_at ztpd "$z") ku=$(cpu_at kea "$k")
ratio=$(awk -v z="$z" -v k="$k" 'BEGIN{ if (k>0) printf "%.2f", z/k; else print "n/a" }')
cratio=$(awk -v z="$zu" -v k="$ku" 'BEGIN{ if (z>0 && k>0) printf "%.2f", k/z; else print "n/a" }')
fg=$(cpu_at floor "$z") fc=$(cpu_at floor-c "$z")
echo "RESULT dhcp6 ztpd=$z kea=$k ratio=$ratio ztpd_cpu_us=$zu kea_cpu_us=$ku cpu_ratio=$cratio floor_go_us=$fg floor_c_us=$fc"
