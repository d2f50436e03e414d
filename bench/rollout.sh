#!/usr/bin/env bash
# rollout.sh - a rolling Kubernetes upgrade of a simulated cluster:
# the real rollout engine, desired-state owner and bbolt store
# (testenv/cmd/rolloutbench) upgrade NODES nodes (1 control plane, the rest
# workers) MAX_UNAVAILABLE at a time; simulated NodeOps take the per-node
# step times (cordon 50ms, drain 2s, agent kubeadm upgrade 5s, Node Ready 1s
# after the kubelet restart, each ±20% per node) and NODES simulated agents
# that behave as ztpd-agent under its timer: a run every 60s + 0..30s (the
# agent's real default), and, while ztpd's document says poll_seconds 5 (the
# rollout's nodes; 1 for the ones in flight or next to start), polls at
# that pace + 0..a tenth, past the minute, until the document says 60s
# again (its node is done). Every time is multiplied by
# SCALE (0.1: ten times faster than real). Reports the wall time against the
# floor (the control plane's steps + the workers' steps / MAX_UNAVAILABLE),
# wall/floor and the engine's overhead per node, (wall - floor) x
# parallelism / nodes. Fails only when a node does not end done, Ready,
# uncordoned and at the target (or maxUnavailable was exceeded), never on a
# time. No root needed.
# A second run has a canary: the first CANARY nodes, then the gate auto
# (every canary Node Ready at the target, their post hooks' exit status)
# for SOAK before the others; its floor adds the soak and runs the canary's
# workers and the others apart. A third has FAIL_PCT of the workers fail
# their kubelet restart, rolled back by their agents (rollback auto,
# on_failure continue): it also reports the time from a failure to its node
# rolled back, Ready at the old version and uncordoned, and such a node
# must end so.
# Knobs (env): NODES (200) MAX_UNAVAILABLE (10) SCALE (0.1) ARGS (more
#   rolloutbench flags, e.g. "-poll 2s -drain 30s"; "-fast-poll 0
#   -next-poll 0": the rollout's nodes poll no faster than the others;
#   "-next-poll 0": all of them at the fast pace) CANARY (10; 0: no
#   canary run) SOAK (60s, real world, scaled) FAIL_PCT (5; 0: no failing run)
# Last line: RESULT rollout nodes=<n> seconds=<s> floor_s=<f>
#   [canary_seconds=<s> canary_floor_s=<f>] [failing_seconds=<s>
#   failing_floor_s=<f> rollback_p50_s=<s> rollback_max_s=<s>]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
NODES=${NODES:-200} MAX_UNAVAILABLE=${MAX_UNAVAILABLE:-10} SCALE=${SCALE:-0.1} ARGS=${ARGS:-}
CANARY=${CANARY:-10} SOAK=${SOAK:-60s} FAIL_PCT=${FAIL_PCT:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/rolloutbench" ./testenv/cmd/rolloutbench
# shellcheck disable=SC2086 # ARGS is a list of flags
"$tmp/rolloutbench" -nodes "$NODES" -max-unavailable "$MAX_UNAVAILABLE" -scale "$SCALE" $ARGS | tee "$tmp/plain"
result=$(grep '^RESULT rollout ' "$tmp/plain" | tail -1)
field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p" <<<"$2"; }
if [ "$CANARY" -gt 0 ]; then
	echo
	echo "== with a canary of $CANARY node(s), gate auto, soak $SOAK (scaled by $SCALE)"
	# shellcheck disable=SC2086
	"$tmp/rolloutbench" -nodes "$NODES" -max-unavailable "$MAX_UNAVAILABLE" -scale "$SCALE" -canary "$CANARY" -soak "$SOAK" $ARGS | tee "$tmp/canary"
	c=$(grep '^RESULT rollout ' "$tmp/canary" | tail -1)
	result="$result canary_seconds=$(field seconds "$c") canary_floor_s=$(field floor_s "$c")"
fi
if [ "$FAIL_PCT" != 0 ]; then
	echo
	echo "== with $FAIL_PCT % of the workers failing and rolled back (rollback auto, on_failure continue)"
	# shellcheck disable=SC2086
	"$tmp/rolloutbench" -nodes "$NODES" -max-unavailable "$MAX_UNAVAILABLE" -scale "$SCALE" -fail-pct "$FAIL_PCT" $ARGS | tee "$tmp/fail"
	f=$(grep '^RESULT rollout ' "$tmp/fail" | tail -1)
	rb=$(grep '^rollback figures: ' "$tmp/fail" | tail -1)
	result="$result failing_seconds=$(field seconds "$f") failing_floor_s=$(field floor_s "$f") rollback_p50_s=$(field rollback_p50_s "$rb") rollback_max_s=$(field rollback_max_s "$rb")"
fi
echo "$result"
