#!/usr/bin/env bash
# Builds the real Kubernetes control-plane binaries (kube-apiserver,
# kube-controller-manager, kubeadm) for every version in ./versions, the
# hollow node (kubemark, with kube-scheduler) and etcd, from the Go module
# proxy, into a cache keyed by version and by the hash of the module's go.sum,
# so a warm run does nothing. Prints the cache root.
# kubemark has a module of its own (kubemark-<version>): its extra
# dependencies would change the control-plane module's go.sum and so force a
# rebuild of the control-plane entry.
#
#   testenv/k8sbin/build.sh            # build what is missing (cold: ~6 min per
#                                      # Kubernetes version on 2 cores)
#   ZTPD_K8S_CACHE=/var/cache/k8s ...  # cache elsewhere (default ~/.cache/ztpd/k8s)
#
# The tests find the binaries through the same cache (testenv/kubebin).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${ZTPD_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ztpd/k8s}
export PATH=$PATH:/usr/local/go/bin
mkdir -p "$cache"

# key NAME DIR: where the binaries of that name (a version, or
# kubemark-<version>), built from that module, live. The go.sum hash makes a
# changed module a new entry.
key() { echo "$cache/$1-$(sha256sum "$2/go.sum" | cut -c1-12)"; }

# ldflags VERSION: stamps the version, or the binaries report v0.0.0-master
# (kubeadm then refuses configs; a hollow node would register as that).
ldflags() {
  local version=$1 minor
  minor=${version#v1.}; minor=${minor%%.*}
  echo "-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1" \
    "-X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean" \
    "-X k8s.io/client-go/pkg/version.gitVersion=$version"
}

build_one() { # NAME KEYNAME DIR PACKAGES LDFLAGS
  local name=$1 version=$2 dir=$3 pkgs=$4 ldflags=$5 out
  out=$(key "$version" "$dir")
  if [ -f "$out/.complete" ]; then echo "k8sbin: $name $version cached in $out" >&2; return; fi
  echo "k8sbin: building $name $version into $out (cold: several minutes)" >&2
  local start=$SECONDS tmp="$out.tmp.$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  # shellcheck disable=SC2086
  (cd "$dir" && go build -trimpath -ldflags "$ldflags" -o "$tmp/" $pkgs)
  touch "$tmp/.complete"
  rm -rf "$out"; mv "$tmp" "$out"
  echo "k8sbin: $name $version built in $((SECONDS - start)) s" >&2
}

while read -r what version; do
  case "$what" in
  kubernetes)
    build_one kubernetes "$version" "$here/k8s-$version" \
      "k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubeadm" "$(ldflags "$version")" ;;
  kubemark)
    build_one kubemark "kubemark-$version" "$here/kubemark-$version" \
      "k8s.io/kubernetes/cmd/kubemark k8s.io/kubernetes/cmd/kube-scheduler" "$(ldflags "$version")" ;;
  etcd)
    build_one etcd "$version" "$here/etcd" "." "-s -w" ;;
  esac
done < <(grep -v '^#' "$here/versions" | grep .)

# Stable names for the newest entries: $cache/<version> (and
# $cache/kubemark-<version>) -> keyed directory.
while read -r what version; do
  name=$version
  case "$what" in
  kubernetes) d="$here/k8s-$version" ;;
  kubemark) d="$here/kubemark-$version"; name=kubemark-$version ;;
  etcd) d="$here/etcd" ;;
  *) continue ;;
  esac
  ln -sfn "$(basename "$(key "$name" "$d")")" "$cache/$name"
done < <(grep -v '^#' "$here/versions" | grep .)
echo "$cache"
