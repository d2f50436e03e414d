#!/usr/bin/env bash
# appliance.sh - one ztpd appliance of a group on embedded etcd, for bench/ha.sh
# (its default ZTPD_HA_CMD) and by hand. It writes the appliance's
# configuration in the default settings but for what a group needs, makes the
# group's CA, this appliance's certificate (IP SAN) and the shared at-rest key
# once in SHARED (the first appliance to get there makes them, under a lock),
# then execs ztpd serve in the foreground.
#
#   appliance.sh NAME IP MEMBERS DIR IFACE POOL_START POOL_END [LEASE_TIME]
#     MEMBERS  name=ip,name=ip,... every appliance in order (the first creates the store)
#   env: ZTPD_BIN (default bin/ztpd), SHARED (default DIR/..), SESSION_TTL (5s), LOG_LEVEL (warn)
set -euo pipefail
name=$1 ip=$2 members=$3 dir=$4 iface=$5 pool_start=$6 pool_end=$7 lease=${8:-3600}
here=$(cd "$(dirname "$0")" && pwd)
bin=${ZTPD_BIN:-$here/../../bin/ztpd}
shared=${SHARED:-$(dirname "$dir")/shared}
mkdir -p "$dir" "$shared"

# The group's CA and the at-rest key, once.
(
  flock 9
  if [[ ! -f $shared/ca.pem ]]; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
      -subj "/CN=ztpd appliances" -keyout "$shared/ca.key" -out "$shared/ca.pem" 2>/dev/null
    head -c 32 /dev/urandom > "$shared/secret.key"
    chmod 600 "$shared/ca.key" "$shared/secret.key"
  fi
) 9>"$shared/.lock"

# This appliance's certificate: server and client, its address as SAN.
if [[ ! -f $dir/cert.pem ]]; then
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$name" \
    -keyout "$dir/key.pem" -out "$dir/cert.csr" 2>/dev/null
  printf 'subjectAltName=IP:%s,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' "$ip" > "$dir/cert.ext"
  openssl x509 -req -in "$dir/cert.csr" -CA "$shared/ca.pem" -CAkey "$shared/ca.key" -CAcreateserial \
    -days 3650 -extfile "$dir/cert.ext" -out "$dir/cert.pem" 2>/dev/null
  chmod 600 "$dir/key.pem"
fi
[[ -f $dir/secret.key ]] || install -m 600 "$shared/secret.key" "$dir/secret.key"

{
  printf 'data_dir: %s\nkey_file: %s\nadvertise_addr: %s\n' "$dir/data" "$dir/secret.key" "$ip"
  printf 'dhcp:\n  lease_time: %ss\nevents:\n  keep: 1000000\n' "$lease"
  printf 'store:\n  backend: etcd-embedded\n  name: %s\n  session_ttl: %s\n' "$name" "${SESSION_TTL:-5s}"
  printf '  client_url: https://127.0.0.1:2379\n  peer_addr: %s:8444\n' "$ip"
  printf '  tls: {cert_file: %s, key_file: %s, ca_file: %s}\n  peers:\n' "$dir/cert.pem" "$dir/key.pem" "$shared/ca.pem"
  IFS=, read -ra ms <<<"$members"
  for m in "${ms[@]}"; do printf '    - {name: %s, url: "https://%s:2380"}\n' "${m%%=*}" "${m#*=}"; done
} > "$dir/ztpd.yaml"

# perfdhcp relays from 10.99.0.2 (bench/ha.sh's client namespace): a declared relay.
exec "$bin" serve --config "$dir/ztpd.yaml" --log-level "${LOG_LEVEL:-warn}" \
  --dhcp-interface "$iface" --dhcp-range "$pool_start-$pool_end" --http-addr "$ip:8080" \
  --dhcp-relay "${DHCP_RELAY:-10.99.0.2}"
