package core

import "time"

// RolloutCanary names the nodes a rollout does first, before its gate:
// the first Count nodes of its order, or the nodes whose labels include
// all of Selector (nodes ordered before them, control planes, go first
// and are part of the canary too).
type RolloutCanary struct {
	Count    int               `json:"count,omitempty"`
	Selector map[string]string `json:"selector,omitempty"`
}

// IsZero reports whether no canary is named.
func (c RolloutCanary) IsZero() bool { return c.Count == 0 && len(c.Selector) == 0 }

// Gate modes: what opens the gate after the canary.
const (
	GateManual = "manual" // an operator's approval
	GateAuto   = "auto"   // the health checks passing for the soak time
)

// RolloutGate is what lets a rollout go on past its canary.
type RolloutGate struct {
	Mode string `json:"mode,omitempty"` // manual (default with a canary) or auto
	// Soak is how long every check must keep passing (auto).
	Soak Duration `json:"soak,omitempty"`
	// URL, when set, is an operator check: a GET that must answer 2xx
	// within Timeout.
	URL string `json:"url,omitempty"`
	// Script, when set, is an operator check: a script in the appliance's
	// gate script directory that must exit 0 within Timeout.
	Script  string   `json:"script,omitempty"`
	Timeout Duration `json:"timeout,omitempty"`
}

// Gate phases.
const (
	GateWaiting  = "waiting"  // the canary is underway
	GateApproval = "approval" // the canary is done: waiting for an operator
	GateSoaking  = "soaking"  // the checks run until the soak time passed
	GatePassed   = "passed"   // the checks held for the soak time
	GateApproved = "approved" // an operator approved
	GateFailed   = "failed"   // a check failed: the rollout stopped
)

// GateStatus is where a rollout's gate is, with its checks' last results.
type GateStatus struct {
	Phase  string      `json:"phase"`
	Reason string      `json:"reason,omitempty"`
	Since  time.Time   `json:"since,omitzero"`
	Until  time.Time   `json:"until,omitzero"` // soaking: when it passes if the checks hold
	By     string      `json:"by,omitempty"`   // approved: who
	Checks []GateCheck `json:"checks,omitempty"`
}

// Open reports whether the gate lets the rest of the rollout go.
func (g *GateStatus) Open() bool {
	return g == nil || g.Phase == GatePassed || g.Phase == GateApproved
}

// GateCheck is one health check of a gate and its last result.
type GateCheck struct {
	Name    string    `json:"name"` // nodes-ready, no-crashloops, post-hooks, url, script
	OK      bool      `json:"ok"`
	Detail  string    `json:"detail,omitempty"`
	Checked time.Time `json:"checked"`
}
