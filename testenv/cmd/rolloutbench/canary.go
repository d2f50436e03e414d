package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/rollout"
)

// canaryConfig is the canary gate run: the first -canary nodes, then the
// gate auto checks (every canary Node Ready at the target, the post hooks'
// exit status) for -soak before the others.
type canaryConfig struct {
	nodes int
	soak  time.Duration
}

var canaryFlags canaryConfig

func init() {
	flag.IntVar(&canaryFlags.nodes, "canary", 0, "the first N nodes are a canary behind a gate auto (0: none)")
	flag.DurationVar(&canaryFlags.soak, "soak", time.Minute, "with -canary: the gate's soak time (real world; scaled)")
}

// withCanary adds the canary and its gate to the rollout's spec and the
// gate's check interval to the engine's options (scaled, as every time).
func withCanary(c config, spec *rollout.Spec, opts *rollout.Options) {
	if canaryFlags.nodes <= 0 {
		return
	}
	spec.Canary = core.RolloutCanary{Count: canaryFlags.nodes}
	spec.Gate = core.RolloutGate{Mode: core.GateAuto, Soak: core.Duration(c.scaled(canaryFlags.soak))}
	opts.GateInterval = c.scaled(rollout.DefaultGateInterval)
}

// canaryFloor is the floor of a rollout with a canary: the control planes
// one at a time, the canary's workers at the parallelism, the soak, then
// the other workers at the parallelism.
func canaryFloor(c config, r core.Rollout, total func(node string) time.Duration) (floor time.Duration, ok bool) {
	if canaryFlags.nodes <= 0 {
		return 0, false
	}
	var cp, canary, rest time.Duration
	nCanary, nRest := 0, 0
	for _, n := range r.Nodes {
		switch {
		case n.Role == "control-plane":
			cp += total(n.NodeName)
		case n.Canary:
			canary += total(n.NodeName)
			nCanary++
		default:
			rest += total(n.NodeName)
			nRest++
		}
	}
	floor = cp + c.scaled(canaryFlags.soak)
	if nCanary > 0 {
		floor += canary / time.Duration(min(c.maxUnavailable, nCanary))
	}
	if nRest > 0 {
		floor += rest / time.Duration(min(c.maxUnavailable, nRest))
	}
	return floor, true
}

// canaryReport prints the gate's outcome.
func canaryReport(r core.Rollout) {
	if canaryFlags.nodes <= 0 || r.GateStatus == nil {
		return
	}
	g := r.GateStatus
	fmt.Printf("canary: %d node(s), gate auto, soak %s: %s (%s), checks %d\n", canaryFlags.nodes, time.Duration(r.Gate.Soak), g.Phase, g.Reason, len(g.Checks))
}
