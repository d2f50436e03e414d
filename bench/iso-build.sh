#!/usr/bin/env bash
# iso-build.sh - `ztpd iso build` side by side with genisoimage, xorriso and a
# plain copy, on a ~851 MiB tree shaped like a CloudStack Kubernetes binaries ISO.
#
# Tree ($TREE, generated once, random data, kept for reuse):
#   cni/cni-plugins-amd64.tgz 50M  cri-tools/crictl-linux-amd64.tar.gz 20M
#   k8s/{kubeadm 50M,kubelet 80M,kubectl 50M}  kubelet.service 10-kubeadm.conf
#   network.yaml dashboard.yaml (text)  docker/<image>:<tag>.tar x8 = 600M
#
# Commands, same tree, same run, interleaved (one run of each, then the next
# round) so machine noise hits all of them alike:
#   ztpd         ztpd iso build --bom <tree's BOM> --from-dir TREE -O OUT
#                (writes each file, reads it back from the image and compares it with
#                what was written, sha256s every file and the whole image as read back)
#   ztpd-pinned  the same with every sha256 pinned in the BOM (each file's sha256
#                is also checked against its pin); shown in the table, not in RESULT
#   genisoimage  genisoimage -o OUT -J -R -l -V CDROM TREE
#   xorriso      xorriso -as mkisofs -o OUT -J -R -l -V CDROM TREE
#   copy         cp -r TREE OUT (the floor: just moving the bytes)
# Median wall seconds, median CPU seconds and peak RSS (GNU time) per command.
#
# Two durability modes, both run by default (MODES):
#   pagecache  nobody fsyncs (ztpd --no-fsync): like the reference figures
#              (genisoimage 0.84 s, xorriso 1.95 s, cp -r 0.20 s on this machine type).
#   durable    every output is on disk when the command ends: the references
#              are followed by `sync OUT` (fsync of the output), ztpd fsyncs itself.
# The last line is the pagecache RESULT; the durable one is printed just before.
#
# Knobs (env): RUNS=5 WARMUP=1 TREE WORK REGEN=1 MODES="pagecache durable"
#   ZTPD=/path/to/ztpd (default: go build ./cmd/ztpd into WORK) KEEP_OUT=1
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BASE=${TMPDIR:-/tmp}/ztpd-bench
TREE=${TREE:-$BASE/cks-tree}
WORK=${WORK:-$BASE/iso}
OUTDIR=$WORK/out
RUNS=${RUNS:-5}
WARMUP=${WARMUP:-1}
REGEN=${REGEN:-0}
MODES=${MODES:-pagecache durable}
KEEP_OUT=${KEEP_OUT:-0}
ZTPD=${ZTPD:-}

die() { echo "iso-build: $*" >&2; exit 1; }
log() { echo "[$(date +%T)] $*" >&2; }
for t in /usr/bin/time genisoimage xorriso jq sha256sum; do
  command -v "$t" >/dev/null || die "need $t (apt-get install time genisoimage xorriso jq)"
done
[[ $TREE == /* && $OUTDIR == /* ]] || die "TREE and WORK must be absolute"
[[ $OUTDIR != "$TREE"* ]] || die "WORK must not be inside TREE"

CHILD=""
cleanup() {
  [[ -n $CHILD ]] && kill -TERM -- "-$CHILD" 2>/dev/null && wait "$CHILD" 2>/dev/null
  [[ $KEEP_OUT == 1 ]] || rm -rf "$OUTDIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------- tree ----------------
SPEC="cni/cni-plugins-amd64.tgz 50
cri-tools/crictl-linux-amd64.tar.gz 20
k8s/kubeadm 50
k8s/kubelet 80
k8s/kubectl 50
docker/kube-apiserver:v1.30.0.tar 112
docker/kube-controller-manager:v1.30.0.tar 107
docker/kube-scheduler:v1.30.0.tar 58
docker/kube-proxy:v1.30.0.tar 80
docker/etcd:3.5.12-0.tar 140
docker/coredns:v1.11.1.tar 58
docker/pause:3.9.tar 1
docker/kubernetesui-dashboard:v2.7.0.tar 44
kubelet.service 0
10-kubeadm.conf 0
network.yaml 0
dashboard.yaml 0"

text_file() {
  case $1 in
    kubelet.service) printf '%s\n' '[Unit]' 'Description=kubelet: The Kubernetes Node Agent' \
      'Documentation=https://kubernetes.io/docs/' 'Wants=network-online.target' 'After=network-online.target' '' \
      '[Service]' 'ExecStart=/opt/bin/kubelet' 'Restart=always' 'StartLimitInterval=0' 'RestartSec=10' '' \
      '[Install]' 'WantedBy=multi-user.target' ;;
    10-kubeadm.conf) printf '%s\n' '[Service]' \
      'Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"' \
      'Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"' \
      'EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env' 'EnvironmentFile=-/etc/default/kubelet' 'ExecStart=' \
      'ExecStart=/opt/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS' ;;
    network.yaml|dashboard.yaml)      # manifest-looking YAML, ~220 KiB / ~5 KiB
      local n=1200 i; [[ $1 == dashboard.yaml ]] && n=40
      for (( i = 0; i < n; i++ )); do
        printf -- '---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s-%05d\n  namespace: kube-system\ndata:\n  key: "value-%05d"\n' "${1%.yaml}" "$i" "$i"
      done ;;
  esac
}

make_tree() {
  local path mib f made=0
  [[ $REGEN == 1 ]] && rm -rf "$TREE"
  while read -r path mib; do
    f=$TREE/$path
    mkdir -p "$(dirname "$f")"
    if (( mib > 0 )); then
      [[ $(stat -c %s "$f" 2>/dev/null) == $(( mib << 20 )) ]] && continue
      head -c $(( mib << 20 )) /dev/urandom > "$f.part" && mv "$f.part" "$f" || die "cannot write $f"
    else
      [[ -s $f ]] && continue
      text_file "$path" > "$f"
    fi
    made=$(( made + 1 ))
  done <<< "$SPEC"
  find "$TREE" -type d -exec chmod 0755 {} + ; find "$TREE" -type f -exec chmod 0644 {} +
  (( made )) && log "generated $made file(s) under $TREE" || log "reusing $TREE"
}

# The tree's bill of materials: every file as a local artifact, binaries 0755.
# bench-bom.yaml pins nothing (from-dir files are trusted and compared byte for
# byte with the image); bench-bom-pinned.yaml pins every sha256 like a
# production BOM (the image is checked against the pins).
make_bom() {
  local i=0 p mode sum
  { echo "kubernetesVersion: 1.30.0"; echo "arches: [amd64]"; echo "artifacts:"; } | tee "$WORK/bench-bom.yaml" > "$WORK/bench-bom-pinned.yaml"
  while read -r p _; do
    i=$(( i + 1 )); mode=0644; [[ $p == k8s/* ]] && mode=0755
    sum=$(sha256sum "$TREE/$p" | cut -d' ' -f1)
    printf '  - {name: a%02d, path: "%s", mode: "%s"}\n' "$i" "$p" "$mode" >> "$WORK/bench-bom.yaml"
    printf '  - {name: a%02d, path: "%s", mode: "%s", sha256: %s}\n' "$i" "$p" "$mode" "$sum" >> "$WORK/bench-bom-pinned.yaml"
  done <<< "$SPEC"
}

# ---------------- timing ----------------
# bench MODE NAME CMD KIND ROUND: one timed (or warm-up, ROUND <= 0) run
bench_one() {
  local mode=$1 name=$2 tmpl=$3 kind=$4 round=$5 out cmd t0 t1 rc
  out=$OUTDIR/$name.$( [[ $kind == dir ]] && echo d || echo iso )
  rm -rf "$out"; sync
  cmd=${tmpl//\{tree\}/$TREE}; cmd=${cmd//\{out\}/$out}
  t0=$(date +%s%N)
  setsid /usr/bin/time -v -o "$OUTDIR/$name.time" bash -c "$cmd" > "$OUTDIR/$name.log" 2>&1 < /dev/null &
  CHILD=$!; wait $CHILD; rc=$?; CHILD=""
  t1=$(date +%s%N)
  (( rc == 0 )) || { log "$mode $name round $round failed (rc=$rc): $(tail -3 "$OUTDIR/$name.log" | tr '\n' ' ')"; echo "$mode $name FAIL" >> "$RESULTS"; return; }
  local w rss cpu
  w=$(awk -v d=$(( t1 - t0 )) 'BEGIN{printf "%.3f", d/1e9}')
  rss=$(awk '/Maximum resident set size/{printf "%.1f", $NF/1024}' "$OUTDIR/$name.time")
  cpu=$(awk '/User time|System time/{t+=$NF} END{printf "%.2f", t}' "$OUTDIR/$name.time")
  log "$mode $name round $round: $w s, cpu $cpu s, rss $rss MB$( (( round <= 0 )) && echo ' (warm-up)')"
  (( round <= 0 )) && return
  echo "$mode $name $w $cpu $rss" >> "$RESULTS"
  if [[ $name == ztpd* ]]; then   # keep what ztpd reported, to check it below
    jq -r '[.sha256, .size, .timings.structure_s, .timings.data_s, .timings.verify_s, .timings.sync_s] | @tsv' \
      "$OUTDIR/$name.log" >> "$WORK/ztpd-$mode.tsv" 2>/dev/null || log "ztpd output is not JSON"
    [[ $name == ztpd ]] && ISO_CHECK[$mode]=$out
  elif [[ $kind == iso ]]; then
    ISO_CHECK["$mode-$name"]=$out
  fi
}

median() { sort -n | awk '{a[NR]=$1} END{if (NR) print a[int((NR+1)/2)]; else print "nan"}'; }

check_iso() {   # name file -> "files n/N, ':' names n/N"
  local nf rr
  nf=$(xorriso -indev "$2" -find / -type f 2>/dev/null | wc -l)
  rr=$(xorriso -indev "$2" -find /docker -name '*:*' -type f 2>/dev/null | wc -l)
  echo "files $nf/$NFILES, RR ':' names $rr/$NCOLON$( [[ $nf == "$NFILES" && $rr == "$NCOLON" ]] || echo ' MISMATCH')"
}

mkdir -p "$WORK" "$OUTDIR" || die "cannot create $WORK"
make_tree
make_bom
NFILES=$(find "$TREE" -type f | wc -l)
NCOLON=$(find "$TREE/docker" -type f -name '*:*' | wc -l)
TREE_MIB=$(du -sm "$TREE" | cut -f1)
if [[ -z $ZTPD ]]; then
  ZTPD=$WORK/ztpd
  log "building ztpd"
  (cd "$ROOT" && go build -trimpath -o "$ZTPD" ./cmd/ztpd) || die "go build failed"
fi
log "tree: $TREE_MIB MiB, $NFILES files; warming the page cache"
find "$TREE" -type f -print0 | xargs -0 cat > /dev/null

RESULTS=$WORK/results.txt
: > "$RESULTS"
declare -A ISO_CHECK CHECK WALL RSS
for mode in $MODES; do
  : > "$WORK/ztpd-$mode.tsv"
  case $mode in
    pagecache) zflags=--no-fsync; sync_ref="" ;;
    durable)   zflags="";        sync_ref=" && sync {out}" ;;
    *) die "unknown mode $mode" ;;
  esac
  names=(ztpd ztpd-pinned genisoimage xorriso copy)
  tmpls=("$ZTPD iso build --bom $WORK/bench-bom.yaml --from-dir {tree} -O {out} -o json $zflags"
         "$ZTPD iso build --bom $WORK/bench-bom-pinned.yaml --from-dir {tree} -O {out} -o json $zflags"
         "genisoimage -quiet -o {out} -J -R -l -V CDROM {tree}$sync_ref"
         "xorriso -as mkisofs -quiet -o {out} -J -R -l -V CDROM {tree}$sync_ref"
         "cp -r {tree} {out}$( [[ $mode == durable ]] && echo ' && find {out} -type f -exec sync {} +')")
  kinds=(iso iso iso iso dir)
  for (( r = 1 - WARMUP; r <= RUNS; r++ )); do
    for i in "${!names[@]}"; do
      bench_one "$mode" "${names[$i]}" "${tmpls[$i]}" "${kinds[$i]}" "$r"
    done
  done
  # Output checks (untimed): file list and names with ':' from the last round.
  for n in ztpd genisoimage xorriso; do
    f=${ISO_CHECK[$mode]:-}; [[ $n != ztpd ]] && f=${ISO_CHECK[$mode-$n]:-}
    [[ -n $f && -f $f ]] && CHECK["$mode-$n"]=$(check_iso "$n" "$f") || CHECK["$mode-$n"]="-"
  done 2>/dev/null
  f=${ISO_CHECK[$mode]:-}
  if [[ -n $f && -f $f ]]; then
    real=$(sha256sum "$f" | cut -d' ' -f1)
    sums=$(cut -f1 "$WORK/ztpd-$mode.tsv" | sort -u)
    if [[ $sums == "$real" ]]; then
      CHECK["$mode-ztpd"]+=", sha256 reported = sha256sum, identical in all $(wc -l < "$WORK/ztpd-$mode.tsv") runs"
    else
      CHECK["$mode-ztpd"]+=", SHA256 MISMATCH or not reproducible ($sums vs $real)"
    fi
  fi
done

echo
echo "ISO build of $TREE ($TREE_MIB MiB, $NFILES files), $RUNS rounds (+$WARMUP warm-up), commands interleaved, warm page cache"
for mode in $MODES; do
  echo
  case $mode in
    pagecache) echo "mode pagecache: no fsync anywhere (ztpd --no-fsync), as the reference figures" ;;
    durable)   echo "mode durable: output on disk at exit (references + 'sync OUT'; ztpd fsyncs itself)" ;;
  esac
  printf '%-12s %-34s %7s %7s %7s %9s  %s\n' command "wall s per round" median "MiB/s" "cpu s" "peak RSS" check
  for n in ztpd ztpd-pinned genisoimage xorriso copy; do
    walls=$(awk -v m="$mode" -v n="$n" '$1==m && $2==n && $3!="FAIL"{printf "%s ", $3}' "$RESULTS")
    med=$(tr ' ' '\n' <<< "$walls" | grep . | median)
    cpu=$(awk -v m="$mode" -v n="$n" '$1==m && $2==n && $3!="FAIL"{print $4}' "$RESULTS" | median)
    rss=$(awk -v m="$mode" -v n="$n" '$1==m && $2==n && $3!="FAIL"{print $5}' "$RESULTS" | sort -n | tail -1)
    fails=$(awk -v m="$mode" -v n="$n" '$1==m && $2==n && $3=="FAIL"' "$RESULTS" | wc -l)
    WALL[$mode-$n]=$med
    printf '%-12s %-34s %7s %7.0f %7s %8sM  %s%s\n' "$n" "${walls% }" "$med" \
      "$(awk -v a="$TREE_MIB" -v b="$med" 'BEGIN{print (b>0)?a/b:0}')" "$cpu" "${rss:-?}" "${CHECK[$mode-$n]:--}" \
      "$( (( fails )) && echo " ($fails FAILED)")"
    [[ $n == ztpd ]] && RSS[$mode]=${rss:-nan}
  done
  if [[ -s $WORK/ztpd-$mode.tsv ]]; then
    awk -F'\t' '{s+=$3; d+=$4; v+=$5; y+=$6; n++} END{if (n) printf "ztpd phases (mean of %d, from -o json): structure %.3f s, data copy done %.3f s, verified %.3f s, fsync+rename %.3f s\n", n, s/n, d/n, v/n, y/n}' "$WORK/ztpd-$mode.tsv"
  fi
done
result_line() {  # $1 tag $2 mode
  local m=$2
  awk -v tag="$1" -v z="${WALL[$m-ztpd]}" -v g="${WALL[$m-genisoimage]}" -v x="${WALL[$m-xorriso]}" \
      -v c="${WALL[$m-copy]}" -v r="${RSS[$m]:-nan}" 'BEGIN{
    printf "%s iso_build_s ztpd=%s genisoimage=%s xorriso=%s copy=%s ratio_vs_genisoimage=%s ztpd_rss_mb=%s\n",
      tag, z, g, x, c, (g > 0 && z != "nan") ? sprintf("%.2f", z / g) : "nan", r }'
}
# The floor for any build that hashes every byte twice (each file, and the
# whole image, as ztpd must): this CPU's sha256 rate (openssl, 1 MiB blocks)
# over twice the tree, plus the copy's CPU, spread over every core.
if [[ " $MODES " == *" pagecache "* ]] && command -v openssl >/dev/null; then
  sha_kbs=$(openssl speed -evp sha256 -bytes 1048576 -seconds 2 2>/dev/null | awk '/^sha256/{print $NF}' | tr -d k)
  copy_cpu=$(awk '$1=="pagecache" && $2=="copy" && $3!="FAIL"{print $4}' "$RESULTS" | median)
  awk -v kbs="${sha_kbs:-0}" -v mib="$TREE_MIB" -v c="$copy_cpu" -v n="$(nproc)" -v g="${WALL[pagecache-genisoimage]}" 'BEGIN{
    if (kbs <= 0 || g <= 0) exit
    sha = 2 * mib * 1048576 / (kbs * 1000); fl = (sha + c) / n
    printf "\nfloor with two sha256 passes: sha256 at %.2f GB/s (openssl) = %.2f s CPU, + copy %.2f s CPU, over %d cores = %.2f s wall = %.2f x genisoimage (goal 0.8)\n", kbs/1e6, sha, c, n, fl, fl/g }'
fi
echo
[[ " $MODES " == *" durable "* ]] && result_line RESULT_DURABLE durable
[[ " $MODES " == *" pagecache "* ]] && result_line RESULT pagecache
