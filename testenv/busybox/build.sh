#!/usr/bin/env bash
# Builds busybox with its DHCPv6 client (udhcpc6), a real peer of the
# DHCPv6 server's tests: Debian packages busybox without that applet. The
# source is Debian's (the busybox source package's upstream tarball, its
# SHA-256 pinned as the package's signed .dsc lists it); the configuration
# is busybox's allnoconfig with udhcpc, udhcpc6 and its RFC options (DNS,
# FQDN, NTP, boot file URL) on. Cached by version and configuration, so a
# warm run does nothing. Prints the binary's path.
#
#   testenv/busybox/build.sh                  # cold: ~1 min on 2 cores
#   ZTPD_PEER_CACHE=/var/cache/ztpd ...       # cache elsewhere (default ~/.cache/ztpd)
#
# The tests find the binary through the same cache (testenv/busybox).
set -euo pipefail
version=1.35.0
sha256=faeeb244c35a348a334f4a59e44626ee870fb07b6884d68c10ae8bc19f83a694
url=http://deb.debian.org/debian/pool/main/b/busybox/busybox_${version}.orig.tar.bz2
options=(BUSYBOX SHOW_USAGE FEATURE_IPV6 UDHCPC UDHCPC6 FEATURE_UDHCPC6_RFC3646 FEATURE_UDHCPC6_RFC4704
         FEATURE_UDHCPC6_RFC4833 FEATURE_UDHCPC6_RFC5970)
cache=${ZTPD_PEER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ztpd}/busybox
key=$version-$(printf '%s\n' "${options[@]}" | sha256sum | cut -c1-12)
out=$cache/$key
if [ -f "$out/.complete" ]; then
  echo "busybox: $key cached in $out" >&2
  ln -sfn "$key" "$cache/udhcpc6"
  echo "$cache/udhcpc6/busybox"
  exit 0
fi
for tool in curl bzip2 make gcc; do
  command -v "$tool" >/dev/null || { echo "busybox: $tool is needed to build busybox" >&2; exit 1; }
done
echo "busybox: building $key into $out" >&2
start=$SECONDS
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
curl -fsS --retry 3 -o "$tmp/src.tar.bz2" "$url"
echo "$sha256  $tmp/src.tar.bz2" | sha256sum -c --quiet - || { echo "busybox: $url does not match its pinned SHA-256" >&2; exit 1; }
mkdir "$tmp/src"
tar xjf "$tmp/src.tar.bz2" -C "$tmp/src" --strip-components=1
(
  cd "$tmp/src"
  make allnoconfig >/dev/null
  for o in "${options[@]}"; do
    sed -i "s/^# CONFIG_$o is not set\$/CONFIG_$o=y/" .config
  done
  { yes "" || true; } | make oldconfig >/dev/null
  for o in "${options[@]}"; do
    grep -q "^CONFIG_$o=y\$" .config || { echo "busybox: CONFIG_$o did not stay on" >&2; exit 1; }
  done
  make -j"$(nproc)" busybox >build.log 2>&1 || { tail -20 build.log >&2; exit 1; }
  ./busybox --list | grep -qx udhcpc6 || { echo "busybox: the build has no udhcpc6" >&2; exit 1; }
)
mkdir -p "$cache"
rm -rf "$out.tmp"; mkdir "$out.tmp"
cp "$tmp/src/busybox" "$out.tmp/busybox"
touch "$out.tmp/.complete"
rm -rf "$out"; mv "$out.tmp" "$out"
ln -sfn "$key" "$cache/udhcpc6"
echo "busybox: $key built in $((SECONDS - start)) s" >&2
echo "$cache/udhcpc6/busybox"
