#!/usr/bin/env bash
# ha.sh - DHCPv4 DORA/s and fail-over time of DHCP servers in HA:
# N ztpd appliances (ZTPD_HA_CMD, a template until ztpd's HA mode exists)
# against a Kea 2.2 HA load-balancing pair (libdhcp_lease_cmds.so + libdhcp_ha.so).
# Root required (network namespaces). Modelled on bench/dhcp-rate.sh.
#
# Topology (created and deleted by this script, only 10.99.0.0/16):
#   netns $NS_PREFIX-br  : bridge br0, one port per namespace below
#   netns $NS_PREFIX-s<i>: ha0 = server i, 10.99.0.1 (i=1), 10.99.0.3, 10.99.0.4, ... (10.99.0.<i+1>)
#   netns $NS_PREFIX-cli : ha0 = 10.99.0.2, perfdhcp (and tcpdump for the fail-over run)
# perfdhcp 2.2 always acts as a relay in DHCPv4 (it binds port 67 and puts its own
# address in giaddr); with the server argument "all" it sends every DISCOVER and
# REQUEST to 255.255.255.255, so it is a relay whose helper address is the
# link's broadcast: every server on the bridge receives every packet (what HA
# load-balancing needs; a relay with both servers as helper addresses does the
# same), and each server answers the giaddr 10.99.0.2:67 by unicast. Kea must use
# its default "raw" socket type for that: with "udp" it binds 10.99.0.1:67 and
# never sees the limited broadcast (checked: 0 OFFERs). nft counters in the client
# namespace count the replies per server (column "share%"; the Kea pair shows 50/50), and
# for kea_ha each server's pkt4-received statistic over what perfdhcp sent (column
# "seen%", 100/100: both servers receive every DISCOVER and REQUEST).
#
# Servers (ANCHORS, default "ztpd ztpd_ha kea_ha"):
#   ztpd      one ztpd on bbolt (the one-box default), in server namespace 1
#   ztpd_ha   ZTPD_N (3) appliances started from ZTPD_HA_CMD, one per server namespace;
#             by default bench/ha/appliance.sh: embedded etcd, mutual TLS, the
#             default configuration otherwise; skipped (RESULT fields NA) if set empty
#   kea_ha    two kea-dhcp4 2.2 in HA load-balancing (kea1 primary on 10.99.0.1,
#             kea2 secondary on 10.99.0.3), memfile persisted to CSV (lfc off),
#             HA timers at their defaults (heartbeat 10 s, max-response-delay 60 s,
#             max-ack-delay 10 s, max-unacked-clients 10). The pool is split in two
#             by the HA_kea1 / HA_kea2 classes as ISC's load-balancing example does
#             (one shared pool makes both servers offer the same addresses: 1 % NAKs).
#             Peers talk over HTTP: Debian packages no kea-ctrl-agent here, so
#             Kea 2.2's HA+MT mode is used: DHCP multi-threading on (KEA_THREADS)
#             and the hook's "multi-threading": {"enable-multi-threading": true,
#             "http-dedicated-listener": true}, a listener inside kea-dhcp4 on
#             http://<ip>:8000/ (HA_PORT). Without DHCP multi-threading Kea 2.2
#             turns HA+MT off (one INFO line) and the peer URLs would need a control agent.
#             A rung starts only when both answer ha-heartbeat with "load-balancing"
#             (curl to that listener; 20-40 s after start with the default timers).
#             KEA_THREADS=2 is the best of 1/2/4 here (at 1500/s: 1 drops 63 %, 4 drops 2 %).
#   kea       one kea-dhcp4, single-threaded, raw socket, whole pool (context; the raw
#             socket the broadcast needs makes it slower than dhcp-rate.sh's udp Kea)
#   kea-mt    one kea-dhcp4 with the same multi-threading as the HA pair (context:
#             separates the cost of MT from the cost of HA)
#
# Ladder: for every rate of LADDER a FRESH set of servers (empty lease stores) is
# started, perfdhcp offers that many DORA/s for DURATION s, the set is stopped.
# Pass = < DROP_PCT % of DISCOVERs without ACK and perfdhcp really sent the load
# (else "/CLI-LTD"). A failed rung is retried RETRY_FAIL times; after the first
# failure REFINE bisection steps narrow the limit.
#
# Fail-over (FAILOVER=1, for kea_ha and ztpd_ha): a fresh set, tcpdump records
# every reply to 10.99.0.2 in the client namespace, perfdhcp offers FO_RATE DORA/s
# over FO_CLIENTS clients; after FO_WARMUP s server FO_VICTIM (1 = 10.99.0.1) is
# killed with SIGKILL (its whole process group). From the pcap (tcpdump -r):
#   dead clients = chaddrs the victim ACKed; t_last = the victim's last ACK;
#   t_first = first ACK from a survivor for a dead client after t_last;
#   failover_s = t_first - t_last.
# The run ends FO_AFTER s after t_first, or FO_TIMEOUT s after the kill (then
# failover_s=NA and the table says "no take-over within FO_TIMEOUT s").
# Kea's load-balancing partner-down needs the partner silent for max-response-delay
# AND more than max-unacked-clients clients of the partner's scope whose "secs"
# field exceeds max-ack-delay. perfdhcp sends secs=0 unless told: it is run with
# -Y FO_WARMUP -y <run length>, so from the kill on every DISCOVER carries secs =
# seconds since the kill + 1 (a fleet whose clients keep retrying since the outage
# began; perfdhcp's own knob made for HA tests). Kea's HA state changes on the
# survivor are printed with their offset from the kill. With Kea's defaults the
# take-over comes at the first heartbeat after max-response-delay (60 s) since the
# last good heartbeat, so expect 50-70 s depending on where the kill falls in the 10 s cycle.
#
# ztpd plug-in (filled in by the ztpd HA work; nothing of ztpd is run until set):
#   ZTPD_HA_CMD='exec /path/ztpd serve --data-dir {dir}/data --dhcp-interface {iface} \
#       --cluster-name {name} --cluster-ip {ip} --cluster-peers {peers} ...'
#     run with bash -c once per appliance i=1..ZTPD_N, inside namespace s<i>, in its own
#     process group (kill -9 of that group is the fail-over), stdout/stderr to {dir}/server.out,
#     pinned with SERVER_CPUS. Must stay in the foreground and serve DHCP on {iface}
#     (ready when UDP port READY_PORT is bound in that namespace).
#   ZTPD_HA_READY='curl -sf http://{ip}:8080/api/v1/... | grep -q ...' (optional)
#     run with bash -c inside each appliance's namespace every 0.5 s until all N exit 0
#     (HA_READY_TIMEOUT s); use it to wait for the cluster (etcd quorum, leader).
#   ZTPD_HA_STORM_CMD='...' the boot storm, run once with bash -c; its output must contain
#     storm_s=<seconds> (last one wins; NA allowed), which becomes RESULT's storm_s, and may
#     contain storm_kill_s=<seconds> (RESULT's storm_kill_s). With ZTPD_HA_STORM_SET=1 it runs
#     in the client namespace against a fresh, ready set. Placeholders as below; {servers} = all IPs.
#     Default (empty disables): bin/hastorm (testenv/cmd/hastorm, built here), which
#     builds its own group (ZTPD_HA_STORM_SET=0: run in the root namespace, no set started):
#     ZTPD_N appliances on embedded etcd (mutual TLS, session_ttl 3s), each in its own
#     namespace hastorm<pid>{a,k}-a<i> on a bridge, the fleet behind a relay broadcasting to
#     all of them; STORM_N (10000) SONiC switches of testenv/cmd/bootstorm (DORA, ztp.json,
#     config_db.json, join bundle, joined report; a failed one starts over after 1 s, its
#     DHCP gives up after 4 tries, 2+4+8+16 s) onboard twice on a fresh group: every
#     appliance alive (storm_s), then with the etcd leader SIGKILLed once a third are
#     through (storm_kill_s). A run is NA unless every switch onboarded, no address was
#     ACKed to two clients (tcpdump of every reply) and the store holds every switch's
#     lease and issued bundle; what failed is printed in the report.
#     STORM_ONE=1 (default) also runs testenv/cmd/bootstorm (one ztpd on bbolt, bench/boot-storm.sh)
#     with the same STORM_N: RESULT's storm_one_s, the single-box reference.
#     STORM_CLUSTERS (10) STORM_CONCURRENCY (256) as bootstorm's; STORM_SERVER_CPUS and
#     STORM_FLEET_CPUS pin the appliances / the fleet (default: none, as bench/boot-storm.sh).
#   Placeholders (also exported as HA_NAME HA_INDEX HA_N HA_IP HA_PEERS HA_MEMBERS
#   HA_DIR SRV_IFACE SRV_PREFIX SRV_CIDR POOL_START POOL_END RELAY_IP):
#     {name} ztpd<i>   {index} i   {n} ZTPD_N   {ip} 10.99.0.x   {dir} empty per-appliance dir
#     {peers} the other appliances' IPs, comma-separated   {members} name=ip,... of all N
#     {servers} all N IPs, comma-separated   {iface} ha0   {prefix} 16   {cidr} ip/16
#     {pool_start} 10.99.1.0   {pool_end} 10.99.254.254   {relay_ip} 10.99.0.2 (giaddr)
#   Every DISCOVER/REQUEST reaches every appliance (relayed, giaddr 10.99.0.2, sent to
#   255.255.255.255); replies go to 10.99.0.2:67. How the appliances share the pool
#   and the clients is ztpd's design.
#
# Pinning (2 cores): perfdhcp on CLIENT_CPUS (0), every server process of a set on
# SERVER_CPUS (1): the HA pair (or the N appliances) shares one core, the same budget
# the single server gets in dhcp-rate.sh. SERVER_CPUS= CLIENT_CPUS= disables pinning.
#
# Output: a table, the fail-over summary, and the last line
#   RESULT ha dora_per_s=<ztpd_ha> kea_ha=<n> ratio=<ztpd_ha/kea_ha> failover_s=<ztpd_ha> storm_s=<ztpd_ha> storm_kill_s=<ztpd_ha> storm_one_s=<ztpd> kea_failover_s=<s> [kea=<n>] [kea_mt=<n>] [ztpd_bolt=<n>]
# DORA figures are the highest offered rate that passed; anything not measured is NA.
#
# Knobs (env): ANCHORS LADDER DURATION(<=10) CLIENTS DROP_PCT REFINE RETRY_FAIL STOP_ON_FAIL
#   CLIENT_CPUS SERVER_CPUS PERF_THREADS LEASE_TIME KEA_THREADS KEA_QUEUE HA_PORT
#   FAILOVER FO_RATE FO_CLIENTS FO_WARMUP FO_TIMEOUT FO_AFTER FO_VICTIM
#   ZTPD_HA_CMD ZTPD_HA_READY ZTPD_HA_STORM_CMD ZTPD_HA_STORM_SET ZTPD_N
#   STORM_N STORM_CLUSTERS STORM_CONCURRENCY STORM_SERVER_CPUS STORM_FLEET_CPUS STORM_ONE
#   WORK KEEP_RUNS READY_TIMEOUT HA_READY_TIMEOUT READY_PORT NS_PREFIX
set -uo pipefail

ANCHORS=${ANCHORS-"ztpd ztpd_ha kea_ha"}
LADDER=${LADDER:-"250 500 1000 2000 3000 4000 6000 8000 12000 16000"}
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
KEA_THREADS=${KEA_THREADS:-2}
KEA_QUEUE=${KEA_QUEUE:-64}
HA_PORT=${HA_PORT:-8000}
FAILOVER=${FAILOVER:-1}
FO_RATE=${FO_RATE:-200}
FO_CLIENTS=${FO_CLIENTS:-1000}
FO_WARMUP=${FO_WARMUP:-15}
FO_TIMEOUT=${FO_TIMEOUT:-150}
FO_AFTER=${FO_AFTER:-5}
FO_VICTIM=${FO_VICTIM:-1}
# Default: ztpd's own appliances on embedded etcd (bench/ha/appliance.sh), each
# ready once /healthz says it answers DHCP buckets.
HERE=$(cd "$(dirname "$0")" && pwd)
ZTPD_HA_CMD=${ZTPD_HA_CMD-"exec $HERE/ha/appliance.sh {name} {ip} {members} {dir} {iface} {pool_start} {pool_end} $LEASE_TIME"}
ZTPD_HA_READY=${ZTPD_HA_READY-'curl -sf http://{ip}:8080/healthz | grep -q "\"buckets\":[1-9]"'}
STORM_N=${STORM_N:-10000}
STORM_CLUSTERS=${STORM_CLUSTERS:-10}
STORM_CONCURRENCY=${STORM_CONCURRENCY:-256}
STORM_SERVER_CPUS=${STORM_SERVER_CPUS:-}
STORM_FLEET_CPUS=${STORM_FLEET_CPUS:-}
STORM_ONE=${STORM_ONE:-1}
if [[ -z ${ZTPD_HA_STORM_CMD+set} ]]; then  # unset: hastorm (set empty: no storm)
  ZTPD_HA_STORM_CMD="exec $HERE/../bin/hastorm -n $STORM_N -clusters $STORM_CLUSTERS -concurrency $STORM_CONCURRENCY \
    -appliances {n} -ztpd ${ZTPD_BIN:-$HERE/../bin/ztpd} -work {dir}/hastorm -server-cpus '$STORM_SERVER_CPUS' -fleet-cpus '$STORM_FLEET_CPUS'"
  ZTPD_HA_STORM_SET=${ZTPD_HA_STORM_SET:-0}
fi
ZTPD_HA_STORM_SET=${ZTPD_HA_STORM_SET:-1}
ZTPD_N=${ZTPD_N:-3}
WORK=${WORK:-/tmp/ztpd-bench/ha}
KEEP_RUNS=${KEEP_RUNS:-0}
READY_TIMEOUT=${READY_TIMEOUT:-15}
HA_READY_TIMEOUT=${HA_READY_TIMEOUT:-90}
READY_PORT=${READY_PORT:-67}
NS_PREFIX=${NS_PREFIX:-zd-ha}

NS_BR=$NS_PREFIX-br NS_CLI=$NS_PREFIX-cli IF=ha0
CLI_IP=10.99.0.2 PREFIX=16 NET=10.99.0.0
POOL_START=10.99.1.0 POOL_END=10.99.254.254
KEA_POOL1="10.99.1.0 - 10.99.127.255" KEA_POOL2="10.99.128.0 - 10.99.254.254"
KEA_HOOKS=${KEA_HOOKS:-/usr/lib/x86_64-linux-gnu/kea/hooks}

die() { echo "ha: $*" >&2; exit 1; }
log() { echo "[$(date +%T)] $*" >&2; }
[[ $EUID -eq 0 ]] || die "must run as root (namespaces)"
(( DURATION >= 1 && DURATION <= 10 )) || die "DURATION must be 1..10 s"
(( ZTPD_N >= 1 && ZTPD_N <= 200 )) || die "ZTPD_N must be 1..200"
for t in ip perfdhcp timeout setsid ss awk curl jq nft; do command -v $t >/dev/null || die "missing $t"; done
# ztpd's binary: bin/ztpd, built when missing (ZTPD_BIN overrides)
if [[ " $ANCHORS " == *" ztpd"* && -z ${ZTPD_BIN:-} && ! -x $HERE/../bin/ztpd ]]; then
  (cd "$HERE/.." && PATH=$PATH:/usr/local/go/bin go build -o bin/ztpd ./cmd/ztpd) || die "go build failed"
fi
[[ -n $CLIENT_CPUS || -n $SERVER_CPUS ]] && { command -v taskset >/dev/null || die "missing taskset"; }
[[ $FAILOVER == 1 ]] && { command -v tcpdump >/dev/null || die "missing tcpdump (FAILOVER=0 skips the fail-over run)"; }

srv_ip() { if (( $1 == 1 )); then echo 10.99.0.1; else echo "10.99.0.$(( $1 + 1 ))"; fi; }
srv_ns() { echo "$NS_PREFIX-s$1"; }
set_size() {                 # servers in the set of anchor $1
  case $1 in kea_ha) echo 2 ;; ztpd_ha) echo "$ZTPD_N" ;; kea|kea-mt|ztpd) echo 1 ;; *) die "unknown anchor $1" ;; esac
}

# what runs: ztpd_ha only with a template
RUN=()
for a in $ANCHORS; do
  set_size "$a" >/dev/null
  if [[ $a == ztpd_ha && -z $ZTPD_HA_CMD ]]; then
    log "ztpd_ha skipped: ZTPD_HA_CMD is empty (ztpd's HA mode not plugged in); its RESULT fields are NA"
    continue
  fi
  [[ $a == kea* ]] && { command -v kea-dhcp4 >/dev/null || die "kea-dhcp4 not installed"; }
  [[ $a == kea_ha ]] && for h in libdhcp_lease_cmds.so libdhcp_ha.so; do
    [[ -f $KEA_HOOKS/$h ]] || die "$KEA_HOOKS/$h missing (Debian's kea-dhcp4-server ships it)"; done
  RUN+=("$a")
done
(( ${#RUN[@]} > 0 )) || die "nothing to run (ANCHORS=$ANCHORS)"
NMAX=1; for a in "${RUN[@]}"; do n=$(set_size "$a"); (( n > NMAX )) && NMAX=$n; done

mkdir -p "$WORK"
PGFILE=$WORK/.pgids          # process groups we started (for stale cleanup)
SET_PGIDS=() SET_NAMES=() AUX_PGIDS=()

# ---------- process helpers (everything is tracked by PID/PGID) ----------
pg_start_time() { awk '{sub(/.*\) /,""); print $20}' "/proc/$1/stat" 2>/dev/null; }
track_pg() {                 # record $1 (a setsid'ed leader) for stale cleanup
  local k
  echo "$1 $(pg_start_time "$1")" >> "$PGFILE"
  for k in $(seq 50); do     # setsid runs a moment after the fork
    [[ $(awk '{sub(/.*\) /,""); print $3}' "/proc/$1/stat" 2>/dev/null) == "$1" ]] && return 0
    kill -0 "$1" 2>/dev/null || return 0
    sleep 0.02
  done
  log "warning: pid $1 is not a group leader; cleanup may miss children"
}
stop_pg() {                  # $1 = pgid (== pid of the setsid'ed leader we started)
  local pg=$1
  [[ -n $pg ]] || return 0
  if kill -0 -- "-$pg" 2>/dev/null; then
    kill -TERM -- "-$pg" 2>/dev/null
    for _ in $(seq 50); do kill -0 -- "-$pg" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pg" 2>/dev/null
  fi
  wait "$pg" 2>/dev/null
  sed -i "/^$pg /d" "$PGFILE" 2>/dev/null
  return 0
}
stale_cleanup() {            # groups left over by an earlier, killed run of this script
  [[ -f $PGFILE ]] || return 0
  local pg start
  while read -r pg start; do
    [[ -n $pg ]] || continue
    if [[ -r /proc/$pg/stat ]] && [[ $(pg_start_time "$pg") == "$start" ]]; then
      log "killing stale process group $pg from a previous run"
      kill -KILL -- "-$pg" 2>/dev/null
    fi
  done < "$PGFILE"
  : > "$PGFILE"
}
pg_ticks() {                 # utime+stime (+children) in clock ticks, summed over the groups given
  local pgs=" $* "
  awk -v pgs="$pgs" '{sub(/.*\) /,""); if (index(pgs, " " $3 " ")) t+=$12+$13+$14+$15} END{print t+0}' \
    /proc/[0-9]*/stat 2>/dev/null
}
pg_hwm_kb() {                # sum over the groups given of the max VmHWM in each group
  local p pg v tot=0 m
  for pg in "$@"; do
    m=0
    for p in /proc/[0-9]*; do
      [[ $(awk '{sub(/.*\) /,""); print $3}' "$p/stat" 2>/dev/null) == "$pg" ]] || continue
      v=$(awk '/^VmHWM:/{print $2}' "$p/status" 2>/dev/null); v=${v:-0}
      (( v > m )) && m=$v
    done
    tot=$(( tot + m ))
  done
  echo $tot
}
stop_set() {
  local pg; for pg in "${SET_PGIDS[@]}"; do stop_pg "$pg"; done
  SET_PGIDS=() SET_NAMES=()
}
stop_aux() {
  local pg; for pg in "${AUX_PGIDS[@]}"; do stop_pg "$pg"; done
  AUX_PGIDS=()
}

# ---------- namespaces: a bridge joining NMAX server namespaces and the client ----------
ns_down() {
  local i; for (( i = 1; i <= NMAX; i++ )); do ip netns del "$(srv_ns $i)" 2>/dev/null; done
  ip netns del $NS_CLI 2>/dev/null; ip netns del $NS_BR 2>/dev/null; return 0
}
ns_attach() {                # $1 netns, $2 ip, $3 bridge port name
  ip netns add "$1" || die "netns add $1 failed"
  ip link add $IF netns "$1" type veth peer name "$3" netns $NS_BR || die "veth for $1 failed"
  ip -n $NS_BR link set "$3" master br0 up
  ip -n "$1" addr add "$2/$PREFIX" dev $IF
  ip -n "$1" link set lo up; ip -n "$1" link set $IF up
}
ns_up() {
  ns_down
  ip netns add $NS_BR || die "netns add failed"
  ip -n $NS_BR link set lo up
  ip -n $NS_BR link add br0 type bridge stp_state 0 forward_delay 0 || die "bridge failed"
  ip -n $NS_BR link set br0 up
  local i ns; for (( i = 1; i <= NMAX; i++ )); do ns_attach "$(srv_ns $i)" "$(srv_ip $i)" "p-s$i"; done
  ns_attach $NS_CLI $CLI_IP p-cli
  # replies per server, counted where they arrive
  { echo "table ip zdha {"; echo "chain in {"; echo "type filter hook input priority 0; policy accept;"
    for (( i = 1; i <= NMAX; i++ )); do echo "ip saddr $(srv_ip $i) udp sport 67 counter"; done
    echo "}"; echo "}"; } | ip netns exec $NS_CLI nft -f - || die "nft counters failed"
  for i in $(seq 50); do
    ip -n $NS_CLI -o link show dev $IF | grep -q 'state UP' &&
      ip -n "$(srv_ns $NMAX)" -o link show dev $IF | grep -q 'state UP' && return 0
    sleep 0.1
  done
  die "links did not come up"
}
reply_counts() {             # replies received from servers 1..$1, space-separated
  local out; out=$(ip netns exec $NS_CLI nft list chain ip zdha in 2>/dev/null)
  local i c r=(); for (( i = 1; i <= $1; i++ )); do
    c=$(awk -v ip="$(srv_ip $i)" '$3==ip {for (k=1;k<=NF;k++) if ($k=="packets") print $(k+1)}' <<< "$out")
    r+=("${c:-0}"); done
  echo "${r[*]}"
}
cleanup() {
  stop_aux; stop_set
  ns_down
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------- server sets ----------
kea_conf() {                 # $1 dir, $2 mode (single|mt|ha), $3 this server name (ha)
  local mt='"multi-threading": { "enable-multi-threading": false },' hooks='' pools
  pools="{ \"pool\": \"$POOL_START - $POOL_END\" }"
  [[ $2 != single ]] && mt="\"multi-threading\": { \"enable-multi-threading\": true, \"thread-pool-size\": $KEA_THREADS, \"packet-queue-size\": $KEA_QUEUE },"
  if [[ $2 == ha ]]; then
    pools="{ \"pool\": \"$KEA_POOL1\", \"client-class\": \"HA_kea1\" },
                   { \"pool\": \"$KEA_POOL2\", \"client-class\": \"HA_kea2\" }"
    hooks="\"hooks-libraries\": [
      { \"library\": \"$KEA_HOOKS/libdhcp_lease_cmds.so\" },
      { \"library\": \"$KEA_HOOKS/libdhcp_ha.so\", \"parameters\": { \"high-availability\": [ {
          \"this-server-name\": \"$3\", \"mode\": \"load-balancing\",
          \"multi-threading\": { \"enable-multi-threading\": true, \"http-dedicated-listener\": true },
          \"peers\": [
            { \"name\": \"kea1\", \"url\": \"http://$(srv_ip 1):$HA_PORT/\", \"role\": \"primary\" },
            { \"name\": \"kea2\", \"url\": \"http://$(srv_ip 2):$HA_PORT/\", \"role\": \"secondary\" } ] } ] } } ],"
  fi
  cat > "$1/kea-dhcp4.json" <<EOF
{
  "Dhcp4": {
    "interfaces-config": { "interfaces": [ "$IF" ], "dhcp-socket-type": "raw" },
    "control-socket": { "socket-type": "unix", "socket-name": "$1/kea.sock" },
    "lease-database": { "type": "memfile", "persist": true,
                        "name": "$1/kea-leases4.csv", "lfc-interval": 0 },
    $mt
    $hooks
    "valid-lifetime": $LEASE_TIME,
    "renew-timer": $(( LEASE_TIME / 4 )),
    "rebind-timer": $(( LEASE_TIME / 2 )),
    "subnet4": [ { "id": 1, "subnet": "$NET/$PREFIX",
                   "pools": [ $pools ] } ],
    "loggers": [ { "name": "kea-dhcp4", "severity": "WARN",
                   "output_options": [ { "output": "$1/kea.log" } ] },
                 { "name": "kea-dhcp4.ha-hooks", "severity": "INFO",
                   "output_options": [ { "output": "$1/kea.log" } ] } ]
  }
}
EOF
}
subst() {                    # $1 template, $2 index, $3 n, $4 dir
  local c=$1 i=$2 n=$3 ip peers="" members="" servers="" k
  ip=$(srv_ip "$i")
  for (( k = 1; k <= n; k++ )); do
    servers+="${servers:+,}$(srv_ip $k)"; members+="${members:+,}ztpd$k=$(srv_ip $k)"
    (( k != i )) && peers+="${peers:+,}$(srv_ip $k)"
  done
  c=${c//\{name\}/ztpd$i}; c=${c//\{index\}/$i}; c=${c//\{n\}/$n}; c=${c//\{ip\}/$ip}
  c=${c//\{peers\}/$peers}; c=${c//\{members\}/$members}; c=${c//\{servers\}/$servers}
  c=${c//\{dir\}/$4}; c=${c//\{iface\}/$IF}; c=${c//\{prefix\}/$PREFIX}; c=${c//\{cidr\}/$ip/$PREFIX}
  c=${c//\{pool_start\}/$POOL_START}; c=${c//\{pool_end\}/$POOL_END}; c=${c//\{relay_ip\}/$CLI_IP}
  echo "$c"
}
member_env() {               # env assignments for member $1 of $2 in dir $3
  local i=$1 n=$2 ip peers="" members="" k
  ip=$(srv_ip "$i")
  for (( k = 1; k <= n; k++ )); do
    members+="${members:+,}ztpd$k=$(srv_ip $k)"; (( k != i )) && peers+="${peers:+,}$(srv_ip $k)"
  done
  echo "HA_NAME=ztpd$i HA_INDEX=$i HA_N=$n HA_IP=$ip HA_PEERS=$peers HA_MEMBERS=$members HA_DIR=$3" \
       "SRV_IFACE=$IF SRV_IP=$ip SRV_PREFIX=$PREFIX SRV_CIDR=$ip/$PREFIX SRV_DIR=$3" \
       "POOL_START=$POOL_START POOL_END=$POOL_END RELAY_IP=$CLI_IP KEA_PIDFILE_DIR=$3 KEA_LOCKFILE_DIR=$3"
}
start_member() {             # $1 index, $2 n, $3 dir, $4 command ; appends to SET_PGIDS
  local i=$1 pin=() ns; ns=$(srv_ns "$i")
  [[ -n $SERVER_CPUS ]] && pin=(taskset -c "$SERVER_CPUS")
  echo "$4" > "$3/cmd"
  # ip netns exec / env / taskset / bash "exec" all exec in place, and setsid does not
  # fork (we are not a group leader), so $! is the server and leads its own group.
  # shellcheck disable=SC2046
  setsid ip netns exec "$ns" env $(member_env "$i" "$2" "$3") "${pin[@]}" bash -c "$4" \
    >"$3/server.out" 2>&1 </dev/null &
  SET_PGIDS+=("$!"); track_pg "$!"
}
ha_state() {                 # $1 index -> HA state of the Kea at server $1 (via its HA listener)
  ip netns exec "$(srv_ns "$1")" curl -s -m 2 -X POST -H 'Content-Type: application/json' \
    -d '{"command": "ha-heartbeat", "service": ["dhcp4"]}' "http://$(srv_ip "$1"):$HA_PORT/" 2>/dev/null |
    jq -r '.[0].arguments.state // empty' 2>/dev/null
}
wait_ready() {               # $1 anchor, $2 run dir ; all members bind READY_PORT, then HA readiness
  local a=$1 dir=$2 n=${#SET_PGIDS[@]} i k ok s
  for (( k = 0; k < READY_TIMEOUT * 10; k++ )); do
    ok=1
    for (( i = 1; i <= n; i++ )); do
      kill -0 "${SET_PGIDS[i-1]}" 2>/dev/null ||
        { log "${SET_NAMES[i-1]} exited early:"; tail -5 "$dir/${SET_NAMES[i-1]}/server.out" >&2; return 1; }
      [[ -n $(ip netns exec "$(srv_ns $i)" ss -Hlun "sport = :$READY_PORT" 2>/dev/null) ]] || ok=0
    done
    (( ok )) && break
    sleep 0.1
  done
  (( ok )) || { log "$a: not every server listens on udp/$READY_PORT after ${READY_TIMEOUT}s"; return 1; }
  local t0=$SECONDS st
  case $a in
    kea_ha)
      while (( SECONDS - t0 < HA_READY_TIMEOUT )); do
        ok=1 st=""
        for (( i = 1; i <= n; i++ )); do
          kill -0 "${SET_PGIDS[i-1]}" 2>/dev/null || { log "${SET_NAMES[i-1]} died while waiting for HA"; return 1; }
          s=$(ha_state $i); st+=" ${SET_NAMES[i-1]}=${s:-?}"; [[ $s == load-balancing ]] || ok=0
        done
        (( ok )) && { log "  HA ready after $(( SECONDS - t0 ))s:$st"; return 0; }
        sleep 1
      done
      log "$a: not in load-balancing after ${HA_READY_TIMEOUT}s:$st"; return 1 ;;
    ztpd_ha)
      [[ -z $ZTPD_HA_READY ]] && { sleep 0.3; return 0; }
      while (( SECONDS - t0 < HA_READY_TIMEOUT )); do
        ok=1
        for (( i = 1; i <= n; i++ )); do
          kill -0 "${SET_PGIDS[i-1]}" 2>/dev/null || { log "${SET_NAMES[i-1]} died while waiting for ZTPD_HA_READY"; return 1; }
          # shellcheck disable=SC2046
          ip netns exec "$(srv_ns $i)" env $(member_env "$i" "$n" "$dir/${SET_NAMES[i-1]}") \
            timeout 5 bash -c "$(subst "$ZTPD_HA_READY" "$i" "$n" "$dir/${SET_NAMES[i-1]}")" \
            >/dev/null 2>&1 </dev/null || { ok=0; break; }
        done
        (( ok )) && { log "  ZTPD_HA_READY true on all $n after $(( SECONDS - t0 ))s"; return 0; }
        sleep 0.5
      done
      log "$a: ZTPD_HA_READY not true on all $n after ${HA_READY_TIMEOUT}s"; return 1 ;;
    *) sleep 0.3; return 0 ;;
  esac
}
start_set() {                # $1 anchor, $2 run dir (fresh) ; sets SET_PGIDS/SET_NAMES
  local a=$1 dir=$2 n i name d
  n=$(set_size "$a")
  for (( i = 1; i <= n; i++ )); do
    case $a in
      kea_ha) name=kea$i ;; ztpd_ha) name=ztpd$i ;; *) name=$a ;;
    esac
    d="$dir/$name"; mkdir -p "$d"; SET_NAMES+=("$name")
    case $a in
      kea_ha) kea_conf "$d" ha "$name"; start_member "$i" "$n" "$d" "exec kea-dhcp4 -c $d/kea-dhcp4.json" ;;
      kea)    kea_conf "$d" single;     start_member "$i" "$n" "$d" "exec kea-dhcp4 -c $d/kea-dhcp4.json" ;;
      kea-mt) kea_conf "$d" mt;         start_member "$i" "$n" "$d" "exec kea-dhcp4 -c $d/kea-dhcp4.json" ;;
      ztpd_ha) start_member "$i" "$n" "$d" "$(subst "$ZTPD_HA_CMD" "$i" "$n" "$d")" ;;
      ztpd)   # one box: bbolt, the default configuration but for the DHCP range
        printf 'dhcp:\n  lease_time: %ss\nevents:\n  keep: 1000000\n' "$LEASE_TIME" > "$d/ztpd.yaml"
        start_member "$i" "$n" "$d" "exec ${ZTPD_BIN:-$HERE/../bin/ztpd} serve --config $d/ztpd.yaml --data-dir $d/data --log-level warn \
          --dhcp-interface ha0 --dhcp-range 10.99.1.0-10.99.254.254 --dhcp-relay $CLI_IP --http-addr $(srv_ip 1):8080 --advertise-addr $(srv_ip 1)" ;;
    esac
  done
  wait_ready "$a" "$dir"
}

# ---------- ladder ----------
RESULTS=$WORK/results.tsv
: > "$RESULTS"
row() { printf '%s\n' "$*" | tr ' ' '\t' >> "$RESULTS"; }
# one rung: $1 anchor, $2 rate -> appends a row, returns 0 on PASS
run_rung() {
  local a=$1 rate=$2 dir="$WORK/run-$1-$2" pin=() n
  rm -rf "$dir"; mkdir -p "$dir"
  n=$(set_size "$a")
  if ! start_set "$a" "$dir"; then
    row "$a $rate 0 0 0 100 - - - - - - - - NOSTART"
    stop_set; [[ $KEEP_RUNS == 1 ]] || rm -rf "$dir"; return 1
  fi
  [[ -n $CLIENT_CPUS ]] && pin=(taskset -c "$CLIENT_CPUS")
  local t0 c0; t0=$(pg_ticks "${SET_PGIDS[@]}"); c0=$(reply_counts "$n")
  log "$a: offering $rate DORA/s for ${DURATION}s"
  ip netns exec $NS_CLI timeout -k 2 $(( DURATION + 15 )) "${pin[@]}" \
     perfdhcp -4 -g "$PERF_THREADS" -l $CLI_IP -r "$rate" -p "$DURATION" -n $(( rate * DURATION )) \
     -R "$CLIENTS" -d 1 -W 1000000 all > "$dir/perfdhcp.out" 2>&1
  local prc=$? alive=1 pg
  for pg in "${SET_PGIDS[@]}"; do kill -0 "$pg" 2>/dev/null || alive=0; done
  local t1 hwm c1 share; t1=$(pg_ticks "${SET_PGIDS[@]}"); hwm=$(pg_hwm_kb "${SET_PGIDS[@]}"); c1=$(reply_counts "$n")
  share=$(awk -v a="$c0" -v b="$c1" 'BEGIN{n=split(a,x," "); split(b,y," "); for(i=1;i<=n;i++){d[i]=y[i]-x[i]; t+=d[i]}
    for(i=1;i<=n;i++) s=s (i>1?"/":"") (t>0?sprintf("%.0f",100*d[i]/t):"-"); print s}')
  # Kea HA: packets each server received (its pkt4-received statistic), to be divided by
  # the DISCOVERs + REQUESTs perfdhcp sent: ~100 % each when every server sees every packet
  local recv="" i v
  if [[ $a == kea_ha ]]; then
    for (( i = 1; i <= n; i++ )); do
      v=$(ip netns exec "$(srv_ns $i)" curl -s -m 2 -X POST -H 'Content-Type: application/json' \
          -d '{"command": "statistic-get", "arguments": {"name": "pkt4-received"}, "service": ["dhcp4"]}' \
          "http://$(srv_ip $i):$HA_PORT/" 2>/dev/null | jq -r '.[0].arguments["pkt4-received"][0][0] // empty' 2>/dev/null)
      recv+="${recv:+ }${v:--1}"
    done
  fi
  if [[ $a == ztpd_ha ]]; then # each appliance's metrics after the rung, for diagnosis
    for (( i = 1; i <= n; i++ )); do
      ip netns exec "$(srv_ns $i)" curl -s -m 2 "http://$(srv_ip $i):8080/metrics" > "$dir/${SET_NAMES[i-1]}.metrics" 2>/dev/null
    done
  fi
  stop_set
  local out hz; hz=$(getconf CLK_TCK)
  out=$(awk -v rate="$rate" -v dur="$DURATION" -v thr="$DROP_PCT" -v alive=$alive -v prc=$prc \
            -v cpu=$(( t1 - t0 )) -v hz="$hz" -v hwm="$hwm" -v name="$a" -v share="$share" -v kearecv="$recv" '
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
      seen = "-"; tot = so + sent["RA"]
      if (kearecv != "" && tot > 0) { seen = ""; m = split(kearecv, r, " ")
        for (i = 1; i <= m; i++) seen = seen (i > 1 ? "/" : "") (r[i] < 0 ? "?" : sprintf("%.0f", 100 * r[i] / tot)) }
      printf "%s\t%d\t%d\t%d\t%.0f\t%.2f\t%s\t%s\t%s\t%s\t%.0f\t%.1f\t%s\t%s\t%s\n", name, rate, so, ack, ack/dur, drop,
        (avg["DO"]==""?"-":avg["DO"]), (mx["DO"]==""?"-":mx["DO"]), (avg["RA"]==""?"-":avg["RA"]), (mx["RA"]==""?"-":mx["RA"]),
        100*cpu/hz/dur, hwm/1024, share, seen, v
    }' "$dir/perfdhcp.out")
  echo "$out" >> "$RESULTS"
  log "  -> $(echo "$out" | awk -F'\t' '{printf "%s DORA/s, drop %s%%, replies per server %s %%, packets seen per server %s %%, %s", $5, $6, $13, $14, $15}')"
  [[ $KEEP_RUNS == 1 ]] || rm -rf "$dir"
  [[ $(echo "$out" | cut -f15) == PASS ]]
}
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
run_ladder() {               # $1 anchor
  local a=$1 rate pass=0 fail=0 i mid
  for rate in $LADDER; do
    if try_rung "$a" "$rate"; then pass=$rate
    else fail=$rate; [[ $STOP_ON_FAIL == 1 ]] && break; fi
  done
  if (( fail > pass && pass > 0 )); then
    for (( i = 0; i < REFINE; i++ )); do
      mid=$(( (pass + fail) / 2 / 50 * 50 ))
      (( mid > pass && mid < fail )) || break
      if try_rung "$a" "$mid"; then pass=$mid; else fail=$mid; fi
    done
  fi
}

# ---------- fail-over ----------
FO_RESULTS=$WORK/failover.tsv
: > "$FO_RESULTS"
acks_from_pcap() {           # $1 pcap -> "epoch src_ip chaddr" per ACK
  tcpdump -r "$1" -tt -n -v 2>/dev/null | awk '
    function flush() { if (typ == "ACK" && src != "") print ts, src, mac; typ = ""; src = ""; mac = "" }
    /^[0-9]+\.[0-9]+ IP / { flush(); ts = $1; next }
    /BOOTP\/DHCP, Reply/ { split($1, a, "."); src = a[1] "." a[2] "." a[3] "." a[4] }
    /Client-Ethernet-Address/ { mac = $2 }
    /DHCP-Message \(53\)/ { typ = $NF }
    END { flush() }'
}
fo_analyse() {               # $1 acks file, $2 victim ip, $3 t_kill -> key=value line
  awk -v vip="$2" -v tk="$3" '
    NR == FNR { if ($2 == vip) { dead[$3] = 1; if ($1 > tl) tl = $1 }; next }
    {
      if ($2 != vip && $1 > tk) {
        if (($3 in dead) && $1 > tl) { if (tf == "") tf = $1; tko++ }
        else { own++; if (lo != "" && $1 - lo > gap) gap = $1 - lo; lo = $1 }
      }
      if ($1 < tk && $1 >= tk - 5) pre++
    }
    END {
      nd = 0; for (m in dead) nd++
      if (lo != "" && tf != "" && tf - lo > gap) gap = tf - lo
      printf "dead_clients=%d t_last=%s t_first=%s failover_s=%s last_vs_kill_s=%s pre_acks_per_s=%.0f own_acks=%d own_gap_s=%.2f takeover_acks=%d\n",
        nd, (tl == "" ? "NA" : tl), (tf == "" ? "NA" : tf),
        (tf == "" || tl == "" ? "NA" : sprintf("%.2f", tf - tl)), (tl == "" ? "NA" : sprintf("%.2f", tl - tk)),
        pre / 5, own, gap, tko
    }' "$1" "$1"
}
fo_timeline() {              # $1 acks file, $2 victim ip, $3 t_kill, $4 bucket s, $5 t_end -> ACKs per bucket around the kill
  awk -v vip="$2" -v tk="$3" -v b="$4" -v te="$5" '
    BEGIN { mx = int((te - tk + 2 * b) / b) }
    NR == FNR { if ($2 == vip) dead[$3] = 1; next }
    $1 >= tk - 2 * b { k = int(($1 - tk + 2 * b) / b); if (k > mx) mx = k
      if ($2 == vip) v[k]++; else if ($3 in dead) t[k]++; else o[k]++ }
    END {
      printf "    t-kill(s) victim  survivor-own  survivor-takeover\n"
      for (k = 0; k <= mx; k++) printf "    %+8d %7d %13d %18d\n", (k - 2) * b, v[k], o[k], t[k]
    }' "$1" "$1"
}
kea_transitions() {          # $1 kea.log, $2 t_kill -> HA events after the kill, offset from the kill
  # state changes and the first/last of each repeated failure message (with its count)
  grep -h -E 'HA_(STATE_TRANSITION|COMMUNICATION_INTERRUPTED|HEARTBEAT_COMMUNICATIONS_FAILED|LEASE_UPDATE_COMMUNICATIONS_FAILED|TERMINATED|LOCAL_DHCP_(EN|DIS)ABLE)\b' "$1" 2>/dev/null |
  awk '{id = $5; n[id]++; if (id == "HA_STATE_TRANSITION" || n[id] == 1) { print; next } last[id] = $0 }
       END { for (id in last) print last[id] " [" n[id] " times]" }' | sort |
  while read -r d t _ _ rest; do
    local e; e=$(date -d "$d $t" +%s.%N 2>/dev/null) || continue
    awk -v e="$e" -v tk="$2" -v r="$rest" 'BEGIN{ if (e >= tk) printf "    %+7.2fs %s\n", e - tk, substr(r, 1, 140) }'
  done
}
run_failover() {             # $1 anchor
  local a=$1 dir="$WORK/failover-$1" n pin=() i
  rm -rf "$dir"; mkdir -p "$dir"
  n=$(set_size "$a")
  (( FO_VICTIM >= 1 && FO_VICTIM <= n )) || die "FO_VICTIM=$FO_VICTIM outside 1..$n"
  local vip; vip=$(srv_ip "$FO_VICTIM")
  if ! start_set "$a" "$dir"; then
    printf '%s\tNOSTART\n' "$a" >> "$FO_RESULTS"; stop_set; return 1
  fi
  setsid ip netns exec $NS_CLI tcpdump -i $IF -n -s 400 -U -w "$dir/replies.pcap" \
    "udp and dst port 67 and dst host $CLI_IP" > "$dir/tcpdump.err" 2>&1 < /dev/null &
  local tpg=$!; AUX_PGIDS+=("$tpg"); track_pg "$tpg"
  for i in $(seq 50); do grep -q 'listening on' "$dir/tcpdump.err" 2>/dev/null && break; sleep 0.1; done
  [[ -n $CLIENT_CPUS ]] && pin=(taskset -c "$CLIENT_CPUS")
  local total=$(( FO_WARMUP + FO_TIMEOUT + FO_AFTER + 10 ))
  # -Y/-y: from FO_WARMUP s on, every DISCOVER carries secs = s since then + 1
  setsid ip netns exec $NS_CLI "${pin[@]}" perfdhcp -4 -g single -l $CLI_IP -r "$FO_RATE" -p "$total" \
    -R "$FO_CLIENTS" -d 1 -W 1000000 -Y "$FO_WARMUP" -y "$total" all > "$dir/perfdhcp.out" 2>&1 < /dev/null &
  local ppg=$!; AUX_PGIDS+=("$ppg"); track_pg "$ppg"
  log "$a: fail-over: $FO_RATE DORA/s over $FO_CLIENTS clients; SIGKILL ${SET_NAMES[FO_VICTIM-1]} ($vip) in ${FO_WARMUP}s; timeout ${FO_TIMEOUT}s"
  sleep "$FO_WARMUP"
  local tk; tk=$(date +%s.%N)
  { kill -KILL -- "-${SET_PGIDS[FO_VICTIM-1]}"; wait "${SET_PGIDS[FO_VICTIM-1]}"; } 2>/dev/null
  log "  killed ${SET_NAMES[FO_VICTIM-1]} at $(date -d "@$tk" +%T.%3N)"
  local res tf now
  while :; do
    sleep 2
    now=$(date +%s.%N)
    acks_from_pcap "$dir/replies.pcap" > "$dir/acks.txt"
    res=$(fo_analyse "$dir/acks.txt" "$vip" "$tk")
    tf=$(sed -n 's/.* t_first=\([^ ]*\).*/\1/p' <<< "$res")
    if [[ $tf != NA ]] && awk -v n="$now" -v t="$tf" -v a="$FO_AFTER" 'BEGIN{exit !(n - t >= a)}'; then break; fi
    awk -v n="$now" -v t="$tk" -v m="$FO_TIMEOUT" 'BEGIN{exit !(n - t >= m)}' && break
    kill -0 "$ppg" 2>/dev/null || { log "  perfdhcp ended early"; break; }
  done
  kill -INT -- "-$ppg" 2>/dev/null
  for i in $(seq 50); do kill -0 "$ppg" 2>/dev/null || break; sleep 0.1; done
  stop_pg "$ppg"; local te; te=$(date +%s.%N); sleep 0.5; stop_pg "$tpg"; AUX_PGIDS=()
  acks_from_pcap "$dir/replies.pcap" > "$dir/acks.txt"
  res=$(fo_analyse "$dir/acks.txt" "$vip" "$tk")
  log "  -> $res"
  {
    printf '%s\tvictim=%s(%s)\t%s\n' "$a" "${SET_NAMES[FO_VICTIM-1]}" "$vip" "$res"
  } >> "$FO_RESULTS"
  {
    echo "$a: SIGKILL of ${SET_NAMES[FO_VICTIM-1]} ($vip) at t=0, $FO_RATE DORA/s offered over $FO_CLIENTS clients"
    echo "$res" | fold -s -w 106 | sed 's/^/  /'
    [[ $res == *"t_first=NA"* ]] && echo "  no take-over within FO_TIMEOUT=${FO_TIMEOUT}s after the kill"
    echo "  ACKs per 5 s (pcap of every reply to $CLI_IP):"
    fo_timeline "$dir/acks.txt" "$vip" "$tk" 5 "$te"
    if [[ $a == kea_ha ]]; then
      for (( i = 1; i <= n; i++ )); do
        (( i == FO_VICTIM )) && continue
        echo "  ${SET_NAMES[i-1]} HA state changes (kea.log):"
        kea_transitions "$dir/${SET_NAMES[i-1]}/kea.log" "$tk"
      done
    fi
  } > "$dir/summary.txt"
  stop_set
  [[ $KEEP_RUNS == 1 ]] || rm -f "$dir/replies.pcap"
  cat "$dir/summary.txt" >&2
  return 0
}

# ---------- storm (ztpd hook only) ----------
STORM_S=NA STORM_KILL_S=NA STORM_ONE_S=NA
run_storm() {
  local dir="$WORK/storm" n out pin=()
  rm -rf "$dir"; mkdir -p "$dir"; n=$(set_size ztpd_ha)
  if [[ $ZTPD_HA_STORM_CMD == "exec $HERE/../bin/hastorm "* ]]; then
    (cd "$HERE/.." && PATH=$PATH:/usr/local/go/bin go build -o bin/hastorm ./testenv/cmd/hastorm) ||
      { log "storm: go build of testenv/cmd/hastorm failed"; return 1; }
  fi
  if [[ $ZTPD_HA_STORM_SET == 1 ]]; then
    start_set ztpd_ha "$dir" || { log "storm: ztpd_ha did not start"; stop_set; return 1; }
    [[ -n $CLIENT_CPUS ]] && pin=(taskset -c "$CLIENT_CPUS")
    log "ztpd_ha: ZTPD_HA_STORM_CMD"
    # shellcheck disable=SC2046
    ip netns exec $NS_CLI env $(member_env 1 "$n" "$dir") "${pin[@]}" \
      bash -c "$(subst "$ZTPD_HA_STORM_CMD" 1 "$n" "$dir")" > "$dir/storm.out" 2>&1 < /dev/null
    stop_set
  else
    log "ztpd_ha: ZTPD_HA_STORM_CMD ($STORM_N switches; the command builds its own appliances): $dir/storm.out"
    bash -c "$(subst "$ZTPD_HA_STORM_CMD" 1 "$n" "$dir")" > "$dir/storm.out" 2>&1 < /dev/null ||
      log "storm: ZTPD_HA_STORM_CMD exited $? (see $dir/storm.out)"
  fi
  [[ $KEEP_RUNS == 1 ]] || rm -rf "$dir/hastorm"
  out=$(grep -oE '\<storm_s=([0-9.]+|NA)' "$dir/storm.out" | tail -1 | cut -d= -f2)
  if [[ -n $out ]]; then STORM_S=$out; else log "storm: no storm_s=<x> in $dir/storm.out"; tail -5 "$dir/storm.out" >&2; fi
  out=$(grep -oE '\<storm_kill_s=([0-9.]+|NA)' "$dir/storm.out" | tail -1 | cut -d= -f2)
  [[ -n $out ]] && STORM_KILL_S=$out
  [[ $STORM_ONE == 1 ]] || return 0
  # the single-box reference: one ztpd on bbolt, the same fleet (bench/boot-storm.sh)
  (cd "$HERE/.." && PATH=$PATH:/usr/local/go/bin go build -o bin/bootstorm ./testenv/cmd/bootstorm) ||
    { log "storm: go build of testenv/cmd/bootstorm failed"; return 1; }
  log "ztpd: boot storm of $STORM_N switches through one ztpd on bbolt (testenv/cmd/bootstorm): $dir/bootstorm.out"
  if "$HERE/../bin/bootstorm" -n "$STORM_N" -clusters "$STORM_CLUSTERS" -concurrency "$STORM_CONCURRENCY" \
      -ztpd "${ZTPD_BIN:-$HERE/../bin/ztpd}" -server-cpus "$STORM_SERVER_CPUS" -fleet-cpus "$STORM_FLEET_CPUS" \
      > "$dir/bootstorm.out" 2>&1 < /dev/null; then
    STORM_ONE_S=$(sed -n 's/^RESULT boot_storm .* seconds=\([0-9.]*\).*/\1/p' "$dir/bootstorm.out" | tail -1)
    STORM_ONE_S=${STORM_ONE_S:-NA}
  else
    log "storm: bootstorm failed (storm_one_s=NA):"; tail -5 "$dir/bootstorm.out" >&2
  fi
}

# ---------- main ----------
stale_cleanup
ns_up
log "namespaces up: bridge $NS_BR, servers $(for (( i = 1; i <= NMAX; i++ )); do printf '%s ' "$(srv_ip $i)"; done)client $CLI_IP;" \
    "running: ${RUN[*]}; ladder: $LADDER; ${DURATION}s/rung"
for a in "${RUN[@]}"; do run_ladder "$a"; done
if [[ $FAILOVER == 1 ]]; then
  for a in "${RUN[@]}"; do [[ $a == kea_ha || $a == ztpd_ha ]] && run_failover "$a"; done
fi
[[ -n $ZTPD_HA_STORM_CMD && " ${RUN[*]} " == *" ztpd_ha "* ]] && run_storm

# ---------- report ----------
echo
echo "DHCPv4 DORA ladder (perfdhcp as a relay broadcasting to every server on a bridge, ${DURATION}s/rung, -R $CLIENTS clients," \
     "fresh servers per rung, pass: <${DROP_PCT}% DISCOVERs without ACK; client cpus=${CLIENT_CPUS:-any}, all server processes on cpus=${SERVER_CPUS:-any};" \
     "kea_ha: HA+MT, $KEA_THREADS DHCP threads per server)"
awk -F'\t' 'BEGIN{printf "%-8s %7s %8s %8s %8s %7s %15s %15s %5s %6s %-9s %-8s %s\n","servers","offered","sent-DO","acked","DORA/s","drop%","DO avg/max ms","RA avg/max ms","cpu%","rssMB","share%","seen%","verdict"}
  {printf "%-8s %7s %8s %8s %8s %7s %15s %15s %5s %6s %-9s %-8s %s\n",$1,$2,$3,$4,$5,$6,$7"/"$8,$9"/"$10,$11,$12,$13,$14,$15}' "$RESULTS"
echo "(cpu% and rssMB: all server processes of the set together; share%: replies (OFFER+ACK) per server, in server order;"
echo " seen%: kea_ha only, each server's pkt4-received over the DISCOVERs+REQUESTs sent, ~100 when every server sees every packet)"
echo
echo "Best sustained rate (highest offered rate that PASSed):"
awk -F'\t' '{if (!($1 in seen)) order[++n]=$1; seen[$1]=1; if ($15=="PASS" && $2+0>best[$1]+0) {best[$1]=$2; row[$1]=$0}}
  END{for (k=1; k<=n; k++) { s=order[k]; if (s in row) { split(row[s],f,"\t");
        printf "  %-8s %6d/s offered -> %6d DORA/s, drop %s%%, RA avg/max %s/%s ms, server cpu %s%%, share %s%%\n", s, f[2], f[5], f[6], f[9], f[10], f[11], f[13] }
      else printf "  %-8s no passing rung (below the lowest rate tried)\n", s } }' "$RESULTS"
echo "(rows: $RESULTS)"
if [[ -s $FO_RESULTS ]]; then
  echo
  echo "Fail-over (SIGKILL of server $FO_VICTIM under $FO_RATE DORA/s; failover_s = victim's last ACK -> first survivor ACK for a client the victim had ACKed):"
  for a in "${RUN[@]}"; do [[ -f $WORK/failover-$a/summary.txt ]] && cat "$WORK/failover-$a/summary.txt"; done
  echo "(rows: $FO_RESULTS)"
fi
if [[ -s $WORK/storm/storm.out ]]; then
  echo
  echo "Boot storm ($STORM_N SONiC switches; storm_s: every appliance alive, storm_kill_s: the etcd leader SIGKILLed a third through;"
  echo " storm_one_s: one ztpd on bbolt; output: $WORK/storm/storm.out, bootstorm.out):"
  grep -E '^hastorm:|^  \[|^RESULT' "$WORK/storm/storm.out" | grep -v 'failed attempt' | sed 's/^/  /'
  grep -E '^devices|^elapsed|^ztpd CPU|^RESULT' "$WORK/storm/bootstorm.out" 2>/dev/null | sed 's/^/  one ztpd: /'
fi
best() {                     # highest passing rate of $1, NA when not run or nothing passed
  awk -F'\t' -v s="$1" '$1==s {run=1} $1==s && $15=="PASS" && $2+0>b {b=$2+0} END{if (run && b>0) print b; else print "NA"}' "$RESULTS"
}
fo_val() { awk -F'\t' -v s="$1" '$1==s {n=split($3,w," "); for (i=1;i<=n;i++) if (w[i] ~ /^failover_s=/) {sub(/^failover_s=/,"",w[i]); v=w[i]}} END{print (v==""?"NA":v)}' "$FO_RESULTS"; }
z=$(best ztpd_ha) k=$(best kea_ha)
ratio=$(awk -v z="$z" -v k="$k" 'BEGIN{ if (z!="NA" && k!="NA" && k>0) printf "%.2f", z/k; else print "NA" }')
extra=""
[[ " ${RUN[*]} " == *" kea "* ]] && extra+=" kea=$(best kea)"
[[ " ${RUN[*]} " == *" kea-mt "* ]] && extra+=" kea_mt=$(best kea-mt)"
[[ " ${RUN[*]} " == *" ztpd "* ]] && extra+=" ztpd_bolt=$(best ztpd)"
echo
echo "RESULT ha dora_per_s=$z kea_ha=$k ratio=$ratio failover_s=$(fo_val ztpd_ha) storm_s=$STORM_S storm_kill_s=$STORM_KILL_S storm_one_s=$STORM_ONE_S kea_failover_s=$(fo_val kea_ha)$extra"
