package core

import (
	"fmt"
	"time"
)

// DeviceMode is whether a device runs as a member of a cluster or on its
// own (a SONiC switch whose features are locally owned).
type DeviceMode string

const (
	ModeCluster    DeviceMode = "cluster"
	ModeStandalone DeviceMode = "standalone"
)

// Hook phases: operator scripts (images in the image store) the agent runs
// around a device's operation.
const (
	HookPreUpgrade  = "pre_upgrade"
	HookPostUpgrade = "post_upgrade"
	HookPreLeave    = "pre_leave"
	HookPostJoin    = "post_join"
)

// HookPhases is every hook phase, in the order an image upgrade meets them.
var HookPhases = []string{HookPreUpgrade, HookPreLeave, HookPostJoin, HookPostUpgrade}

// DesiredState is what the operator wants one device to run. The device's
// agent polls it and converges: the targets say what the device should end
// as, and Operation is the one piece of work (with its steps) the agent is
// asked to do now, handed out by a rollout, a mode switch or a scale-down
// once ztpd has cordoned and drained the device's Node.
type DesiredState struct {
	Device  string     `json:"device"`
	Mode    DeviceMode `json:"mode,omitempty"`
	Cluster string     `json:"cluster,omitempty"` // cluster ID, with mode cluster
	Role    string     `json:"role,omitempty"`
	// Image is the target SONiC image (an image store name or sha256).
	Image string `json:"image,omitempty"`
	// KubernetesVersion is the target kubelet version (v1.37.2).
	KubernetesVersion string            `json:"kubernetes_version,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	// Hooks maps a hook phase to the image store name of its script.
	Hooks map[string]string `json:"hooks,omitempty"`
	// Generation grows with every change an operator or ztpd makes.
	Generation uint64    `json:"generation"`
	UpdatedAt  time.Time `json:"updated_at"`
	UpdatedBy  string    `json:"updated_by,omitempty"`

	Operation *AgentOperation `json:"operation,omitempty"`
	// Agent is what the device's agent last said about itself (a hint).
	Agent AgentStatus `json:"agent,omitzero"`
}

// Operation kinds.
const (
	OpUpgradeKubernetes = "upgrade-kubernetes"
	OpUpgradeImage      = "upgrade-image"
	OpLeave             = "leave"
	OpJoin              = "join"
	// OpRollback takes a device back to what its agent recorded before
	// its last image or Kubernetes upgrade (the engine's node timeout, or
	// an operator's one-command rollback).
	OpRollback = "rollback"
)

// ActionRollback is the step that restores what the agent recorded before
// an upgrade. In a rollback operation it is the work; in any other
// operation it runs only after another step failed (automatic rollback),
// and its success ends the operation rolled-back.
const ActionRollback = "rollback"

// Operation and step states.
const (
	StepPending   = "pending"
	StepRunning   = "running"
	StepSucceeded = "succeeded"
	StepFailed    = "failed"
	OpWithdrawn   = "withdrawn"
	// OpRollingBack: a step failed and the agent runs the operation's
	// rollback step; OpRolledBack: it succeeded (Reason says what failed).
	OpRollingBack = "rolling-back"
	OpRolledBack  = "rolled-back"
)

// AgentOperation is work handed to a device's agent: steps it runs in
// order, resuming after a reboot, reporting each.
type AgentOperation struct {
	ID      string      `json:"id"`
	Kind    string      `json:"kind"`
	Rollout string      `json:"rollout,omitempty"`
	Steps   []AgentStep `json:"steps"`
	// State is pending until the agent reports, then running, and
	// succeeded or failed once every step did or one failed; withdrawn
	// when ztpd took it back (an aborted rollout); rolling-back then
	// rolled-back when a step failed and its rollback step ran.
	State    string    `json:"state"`
	Reason   string    `json:"reason,omitempty"`
	Created  time.Time `json:"created"`
	Finished time.Time `json:"finished,omitzero"`
}

// Done reports whether the operation has ended.
func (o *AgentOperation) Done() bool {
	return o.State == StepSucceeded || o.State == StepFailed || o.State == OpWithdrawn || o.State == OpRolledBack
}

// OnFailureRollback is the operation's automatic rollback step (nil when
// it has none): a rollback step in an operation that is not a rollback.
func (o *AgentOperation) OnFailureRollback() *AgentStep {
	if o.Kind == OpRollback {
		return nil
	}
	for i := range o.Steps {
		if o.Steps[i].Action == ActionRollback {
			return &o.Steps[i]
		}
	}
	return nil
}

// Step returns the step named name.
func (o *AgentOperation) Step(name string) (*AgentStep, bool) {
	for i := range o.Steps {
		if o.Steps[i].Name == name {
			return &o.Steps[i], true
		}
	}
	return nil, false
}

// AgentStep is one step of an operation and what the agent said of it.
type AgentStep struct {
	Name     string            `json:"name"`
	Action   string            `json:"action"` // hook, kubeadm-upgrade, kube-reset, sonic-install, reboot, join
	Args     map[string]string `json:"args,omitempty"`
	State    string            `json:"state"`
	ExitCode int               `json:"exit_code,omitempty"`
	// Output is the tail of the step's output as the agent reported it.
	Output   string    `json:"output,omitempty"`
	Started  time.Time `json:"started,omitzero"`
	Finished time.Time `json:"finished,omitzero"`
	// Attempts counts the agent's "running" reports: more than one means
	// the step was interrupted (a reboot, the agent killed) and resumed.
	Attempts int `json:"attempts,omitempty"`
}

// AgentStatus is a device agent's last contact.
type AgentStatus struct {
	LastSeen time.Time `json:"last_seen,omitzero"`
	IP       string    `json:"ip,omitempty"`
	BootID   string    `json:"boot_id,omitempty"`
	Version  string    `json:"version,omitempty"`
}

// RolloutKind is what a rollout does to each of its nodes.
type RolloutKind string

const (
	// RolloutKubernetes upgrades each node's Kubernetes (kubeadm).
	RolloutKubernetes RolloutKind = "kubernetes"
	// RolloutImage installs another SONiC image on each switch.
	RolloutImage RolloutKind = "image"
	// RolloutRemove takes each node out of its cluster (scale-down,
	// delete, a switch going standalone).
	RolloutRemove RolloutKind = "remove"
	// RolloutJoin brings standalone devices into a cluster through the
	// normal join path (a switch going back to cluster mode).
	RolloutJoin RolloutKind = "join"
)

// RolloutState is where a rollout is.
type RolloutState string

const (
	RolloutRunning   RolloutState = "running"
	RolloutPaused    RolloutState = "paused"
	RolloutAborted   RolloutState = "aborted"
	RolloutFailed    RolloutState = "failed"
	RolloutSucceeded RolloutState = "succeeded"
)

// Ended reports whether a rollout in state s will do nothing more.
func (s RolloutState) Ended() bool {
	return s == RolloutAborted || s == RolloutFailed || s == RolloutSucceeded
}

// Node phases within a rollout.
const (
	NodePending   = "pending"
	NodeCordoned  = "cordoned"
	NodeDrained   = "drained"
	NodeAgent     = "agent"   // the agent runs the node's operation
	NodeWaiting   = "waiting" // for the Node Ready at the target (or gone)
	NodeDone      = "done"
	NodeFailed    = "failed"
	NodeSkipped   = "skipped" // already at the target
	NodeWithdrawn = "withdrawn"
	// NodeRollingBack: the node goes back to its previous image or
	// Kubernetes; NodeRolledBack: it is back there, Ready and uncordoned
	// (Reason says what failed).
	NodeRollingBack = "rolling-back"
	NodeRolledBack  = "rolled-back"
)

// RollbackPolicy is what a rollout does with a node whose upgrade failed.
type RollbackPolicy string

const (
	// RollbackManual leaves the node as the failure left it (cordoned, on
	// the new image or version) for the operator (`ztpd rollout rollback`).
	RollbackManual RollbackPolicy = "manual"
	// RollbackAuto has the agent take the node back to what it recorded
	// before the upgrade; the node is uncordoned once Ready there.
	RollbackAuto RollbackPolicy = "auto"
)

// FailurePolicy is whether a rollout goes on past a node that failed or
// was rolled back.
type FailurePolicy string

const (
	OnFailureStop     FailurePolicy = "stop"
	OnFailureContinue FailurePolicy = "continue"
)

// Rollout is one operation over a cluster's nodes (or standalone
// switches), a few at a time: control planes first, one by one, then
// workers, MaxUnavailable at once.
type Rollout struct {
	ID string `json:"id"`
	// Appliance runs the rollout (several appliances; "" on one box).
	Appliance string       `json:"appliance,omitempty"`
	Cluster   string       `json:"cluster,omitempty"`
	Kind      RolloutKind  `json:"kind"`
	State     RolloutState `json:"state"`
	Reason    string       `json:"reason,omitempty"`
	// Target is the version (v1.37.2) or image the nodes move to;
	// TargetID the version's or image's ID.
	Target   string `json:"target,omitempty"`
	TargetID string `json:"target_id,omitempty"`
	// Mode is the mode a remove rollout leaves its devices in
	// (standalone: they stay managed; empty: they leave ztpd's care).
	Mode           DeviceMode        `json:"mode,omitempty"`
	MaxUnavailable int               `json:"max_unavailable"`
	DrainTimeout   Duration          `json:"drain_timeout"`
	StepTimeout    Duration          `json:"step_timeout"`
	Hooks          map[string]string `json:"hooks,omitempty"`
	// Selector keeps only devices with all these labels (a cluster may run
	// different SONiC images on different switches).
	Selector map[string]string `json:"selector,omitempty"`
	// ContinueOnHookFailure keeps the rollout going past a device whose
	// hook failed (that device is left failed and cordoned).
	ContinueOnHookFailure bool `json:"continue_on_hook_failure,omitempty"`
	// Canary is done first; Gate then decides whether the rest follows;
	// GateStatus is where the gate is (nil without a canary).
	Canary     RolloutCanary `json:"canary,omitzero"`
	Gate       RolloutGate   `json:"gate,omitzero"`
	GateStatus *GateStatus   `json:"gate_status,omitempty"`
	// Fingerprint is the plan's the rollout was started from.
	Fingerprint string `json:"fingerprint,omitempty"`
	// Rollback is what happens to a node whose upgrade failed (empty:
	// manual); OnFailure whether the rollout goes on past a node that was
	// rolled back (empty: stop).
	Rollback  RollbackPolicy `json:"rollback,omitempty"`
	OnFailure FailurePolicy  `json:"on_failure,omitempty"`
	// NodeTimeout bounds a node's return to Ready after its agent's
	// operation (zero: StepTimeout).
	NodeTimeout Duration      `json:"node_timeout,omitempty"`
	Job         string        `json:"job,omitempty"`
	CreatedBy   string        `json:"created_by,omitempty"`
	Nodes       []RolloutNode `json:"nodes"`
	Created     time.Time     `json:"created"`
	UpdatedAt   time.Time     `json:"updated_at"`
	Finished    time.Time     `json:"finished,omitzero"`
}

// RolloutNode is one device's progress through a rollout.
type RolloutNode struct {
	Device    string `json:"device"`
	NodeName  string `json:"node_name,omitempty"`
	Role      string `json:"role,omitempty"`
	Phase     string `json:"phase"`
	Reason    string `json:"reason,omitempty"`
	Operation string `json:"operation,omitempty"`
	Cordoned  bool   `json:"cordoned,omitempty"` // ztpd cordoned it (and uncordons it)
	Canary    bool   `json:"canary,omitempty"`   // done before the rollout's gate
	// Previous is the kubelet version the Node had before a Kubernetes
	// upgrade, or the image ztpd had set before an image upgrade (what a
	// rollback brings it and the device's desired target back to).
	Previous string    `json:"previous,omitempty"`
	Started  time.Time `json:"started,omitzero"`
	Finished time.Time `json:"finished,omitzero"`
}

// Duration is a time.Duration stored as its text ("5m0s").
type Duration time.Duration

func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("duration %q: %w", b, err)
	}
	*d = Duration(v)
	return nil
}
