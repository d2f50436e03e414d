#!/usr/bin/env bash
# observed-join.sh - N SONiC switches' simulated kubelets register Nodes
# through TLS bootstrap (their ztpd client certificates, CSRs approved and
# signed by the real kube-controller-manager) against a real kube-apiserver
# whose first control plane a VM brought up from ztpd's bundle, while a
# real `ztpd serve` watches the cluster (testenv/cmd/observedjoin). Reference
# in the same run: the API server's own view (every Node Ready, from a Node
# informer) next to ztpd's (every member "joined" in GET
# /api/v1/clusters/{id}); plus CPU seconds and peak RSS of ztpd,
# kube-apiserver, kube-controller-manager and etcd.
# Root required (namespaces oj-srv / oj-cli, 10.99.0.0/16) and the binaries
# of testenv/k8sbin/build.sh (make k8s-bins).
# Knobs (env): N (500) KUBE_VERSION (newest in testenv/k8sbin/versions)
#   PROBE_INTERVAL (empty: ztpd's default api.cluster_probe_interval)
#   CONCURRENCY (64 switches onboarding at once) BOOTSTRAP_CONCURRENCY (0: kubeletsim's 16)
# Last line: RESULT observed_join nodes=<n> seconds=<s> ztpd_rss_mb=<m>
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
N=${N:-500} KUBE_VERSION=${KUBE_VERSION:-} PROBE_INTERVAL=${PROBE_INTERVAL:-}
CONCURRENCY=${CONCURRENCY:-64} BOOTSTRAP_CONCURRENCY=${BOOTSTRAP_CONCURRENCY:-0}
[[ $EUID -eq 0 ]] || { echo "observed-join: skipped: must run as root (namespaces, mount namespaces for kubeadm)" >&2; exit 1; }
go build -o bin/ztpd ./cmd/ztpd
go build -o bin/observedjoin ./testenv/cmd/observedjoin
exec bin/observedjoin -n "$N" -kubernetes "$KUBE_VERSION" -probe-interval "$PROBE_INTERVAL" \
  -concurrency "$CONCURRENCY" -bootstrap-concurrency "$BOOTSTRAP_CONCURRENCY" -ztpd bin/ztpd
