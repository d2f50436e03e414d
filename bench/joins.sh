#!/usr/bin/env bash
# Join bundles issued and durably recorded per second.
#
# Runs the joiner's Go benchmark on a real bbolt file in a temp directory:
# 64 devices join at once; each join checks its enrollment secret, admits the
# device, records token, membership, device and event, commits with fsync
# (group commit), and renders the bundle. Side by side in the same run:
#   kubeadm-vm                  CloudStack VM bundles (cloud-config + kubeadm JoinConfiguration)
#   kubeadm-vm-no-group-commit  the same with one fsynced commit per join (baseline)
#   sonic-rsa-ca / sonic-ecdsa-ca  SONiC switch bundles (the switch's CSR checked, a client certificate signed per switch)
# cpu-us/join is CPU per join, which other load on a shared machine does not distort.
#
# Usage: bench/joins.sh            (JOINS=20000 by default)
#        JOINS=50000 bench/joins.sh
# Last line: RESULT joins_per_s ztpd=<n>
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
JOINS=${JOINS:-20000}
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)   cpus: $(nproc)   joins per variant: $JOINS"
out=$(go test -run '^$' -bench 'BenchmarkJoin' -benchtime "${JOINS}x" -count 1 ./joiner/ 2>&1) || { echo "$out"; exit 1; }
printf '%-32s %12s %14s\n' variant joins/s cpu-us/join
echo "$out" | awk '/^BenchmarkJoin\// {
  name=$1; sub(/^BenchmarkJoin\//, "", name); sub(/-[0-9]+$/, "", name)
  js=""; cpu=""
  for (i=2;i<=NF;i++) { if ($(i+1)=="joins/s") js=$i; if ($(i+1)=="cpu-us/join") cpu=$i }
  printf "%-32s %12.0f %14.0f\n", name, js, cpu
}'
ztpd=$(echo "$out" | awk '/^BenchmarkJoin\/kubeadm-vm-[0-9]+ / { for (i=2;i<=NF;i++) if ($(i+1)=="joins/s") printf "%.0f", $i }')
base=$(echo "$out" | awk '/^BenchmarkJoin\/kubeadm-vm-no-group-commit-[0-9]+ / { for (i=2;i<=NF;i++) if ($(i+1)=="joins/s") printf "%.0f", $i }')
echo "group commit vs one commit per join: $(awk -v a="$ztpd" -v b="$base" 'BEGIN { printf "%.1fx", a/b }')"
echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"
echo "RESULT joins_per_s ztpd=$ztpd"
