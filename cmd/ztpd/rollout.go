package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/core"
)

func init() { register(newRolloutCmd) }

// rolloutView is a rollout as the API answers it, with its cluster's name
// beside the ID for -o json.
type rolloutView struct {
	client.Rollout
	ClusterName string `json:"cluster_name,omitempty"`
}

// nodeName is how tables name the node: its Node, else its device.
func nodeName(n client.RolloutNode) string {
	if n.NodeName != "" {
		return n.NodeName
	}
	return n.Device
}

// rolloutPhases orders the phases progress lines count.
var rolloutPhases = []string{core.NodeDone, core.NodeSkipped, core.NodeRolledBack, core.NodeFailed, core.NodeWithdrawn, core.NodeCordoned,
	core.NodeDrained, core.NodeAgent, core.NodeWaiting, core.NodeRollingBack, core.NodePending}

// progress is "2/5 done: 2 done, 1 agent, 2 pending".
func (r rolloutView) progress() string {
	finished := r.Counts[core.NodeDone] + r.Counts[core.NodeSkipped] + r.Counts[core.NodeRolledBack]
	var parts []string
	for _, p := range rolloutPhases {
		if n := r.Counts[p]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, p))
		}
	}
	return fmt.Sprintf("%d/%d done: %s", finished, len(r.Nodes), strings.Join(parts, ", "))
}

func newRolloutCmd(opts *rootOptions) *cobra.Command {
	f := &apiFlags{}
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "Start, follow, pause, resume and abort rollouts over a cluster's nodes",
		Long: `A rollout operates a cluster's nodes a few at a time: a SONiC image upgrade
(kind image), a Kubernetes upgrade (kind kubernetes; "ztpd cluster upgrade"
starts one too), or taking nodes out (kind remove). Control planes go first, one
by one, then workers, --max-unavailable at once. Each node is cordoned and
drained (PodDisruptionBudgets hold), its agent runs the operation between the
operator's hooks, ztpd waits for the Node Ready at the target and uncordons it.
A failed node stops the rollout with the reason; "rollout show" says which node
and why. One rollout runs per cluster at a time. A rollout survives a restart of
ztpd: it carries on from where it was, an operation already handed to an agent
awaited, not handed again (in a group, the leader takes over the rollouts of an
appliance that is gone). Starting, pausing, resuming and aborting need an admin
key (or the admin socket).`,
		Example: `  ztpd rollout plan --cluster fabric-1 --kind image --target sonic-202411.bin --max-unavailable 2 --canary 1
  ztpd rollout start --cluster fabric-1 --kind image --target sonic-202411.bin --max-unavailable 2
  ztpd rollout approve ro-20260301T101500-abcdefghij
  ztpd rollout list --cluster fabric-1
  ztpd rollout watch ro-20260301T101500-abcdefghij
  ztpd rollout pause ro-20260301T101500-abcdefghij`,
	}
	addAPIFlags(cmd, f)
	cmd.AddCommand(newRolloutListCmd(opts, f), newRolloutShowCmd(opts, f), newRolloutStartCmd(opts, f),
		newRolloutControlCmd(opts, f, "pause"), newRolloutControlCmd(opts, f, "resume"), newRolloutControlCmd(opts, f, "abort"),
		newRolloutControlCmd(opts, f, "approve"), newRolloutWatchCmd(opts, f), newRolloutPlanCmd(opts, f),
		newRolloutRollbackCmd(opts, f))
	return cmd
}

func newRolloutRollbackCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	var yes, watch bool
	cmd := &cobra.Command{
		Use:   "rollback NODE",
		Short: "Take one node back to what it ran before its last upgrade (admin key)",
		Long: `Take one node back to what its agent recorded before the last image or
Kubernetes rollout that upgraded it: a switch sets its previous image as the
default, reboots into it, restores its config checkpoint and rejoins; a worker
gets its previous kubelet and kubeadm back and must be Ready at its previous
version. The node is uncordoned once Ready. NODE is the device (MAC or serial)
or its Node name. This is the one-command rollback of a rollout started with
--rollback manual (the default), where a failed node is left as the failure
left it. The rollback runs on in ztpd; the command prints the rollout with the
node rolling back, --watch follows the rollout's record until the node has
ended. A node still underway in a running rollout, or another rollout running
on its cluster, is refused; a switch whose previous image is gone stops with
that reason and is never rebooted.`,
		Example: `  ztpd rollout rollback leaf-7
  ztpd rollout rollback 52:54:00:00:00:07 --yes --watch
  ztpd rollout rollback worker-3 -o json`,
		Args: oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := confirm(cmd, "roll back "+args[0]+" to its image or Kubernetes version before its last upgrade (a switch reboots)", yes); err != nil {
				return err
			}
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			var r rolloutView
			if err := c.REST("POST", "/api/v1/devices/"+url.PathEscape(args[0])+"/rollback", nil, map[string]string{}, &r); err != nil {
				return err
			}
			if !watch {
				return printRollout(opts, c, r)
			}
			return watchNodeRollback(cmd.Context(), opts, c, r.ID, args[0], os.Stdout)
		},
	}
	addYesFlag(cmd, &yes)
	cmd.Flags().BoolVar(&watch, "watch", false, "follow the node until its rollback has ended (exit status 1 when it failed)")
	return cmd
}

// watchNodeRollback polls the rollout until node (device or Node name) is
// rolled-back or failed, printing each change of its phase.
func watchNodeRollback(ctx context.Context, opts *rootOptions, c *apiClient, id, node string, w io.Writer) error {
	last := ""
	for {
		var r rolloutView
		if err := c.REST("GET", rolloutPath(id), nil, nil, &r); err != nil {
			return err
		}
		for _, n := range r.Nodes {
			if n.Device != node && n.NodeName != node {
				continue
			}
			if line := n.Phase + ": " + n.Reason; line != last && opts.output != "json" {
				fmt.Fprintf(w, "%s %s\n", nodeName(n), line)
				last = line
			}
			switch n.Phase {
			case core.NodeRolledBack:
				if opts.output == "json" {
					return printRollout(opts, c, r)
				}
				return nil
			case core.NodeFailed:
				if opts.output == "json" {
					printRollout(opts, c, r)
				}
				return fmt.Errorf("rollback of %s failed: %s", node, n.Reason)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func rolloutPath(id string) string { return "/api/v1/rollouts/" + url.PathEscape(id) }

func newRolloutListCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	var cluster, state string
	var limit int
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List rollouts, newest first, with their progress",
		Example: `  ztpd rollout list
  ztpd rollout list --cluster fabric-1 --state running
  ztpd rollout list -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			clusterID, err := visClusterRef(c, cluster)
			if err != nil {
				return err
			}
			list, err := client.All[rolloutView](c.Client, "/api/v1/rollouts", url.Values{"cluster": {clusterID}, "state": {state}}, limit)
			if err != nil {
				return err
			}
			names := visClusterNames(c)
			for i := range list {
				list[i].ClusterName = names[list[i].Cluster]
			}
			return printResult(opts, os.Stdout, list, func(tw *tabwriter.Writer) {
				row(tw, "ID", "CLUSTER", "KIND", "TARGET", "STATE", "PROGRESS", "STARTED", "BY")
				for _, r := range list {
					row(tw, r.ID, dash(names.cluster(r.Cluster)), r.Kind, dash(r.Target), r.State, r.progress(), ago(r.Created), dash(r.CreatedBy))
				}
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cluster, "cluster", "", "only this cluster's rollouts (name or ID)")
	fl.StringVar(&state, "state", "", "only rollouts in this state: running, paused, aborted, failed or succeeded")
	fl.IntVar(&limit, "limit", 0, "at most this many rollouts (0: all)")
	return cmd
}

func newRolloutShowCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "Show a rollout: its state, progress and every node's phase and reason",
		Example: `  ztpd rollout show ro-20260301T101500-abcdefghij
  ztpd rollout show ro-20260301T101500-abcdefghij -o json`,
		Args: oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			var r rolloutView
			if err := c.REST("GET", rolloutPath(args[0]), nil, nil, &r); err != nil {
				return err
			}
			return printRollout(opts, c, r)
		},
	}
}

// printRollout prints one rollout: -o json its record, else its facts and
// a table of its nodes.
func printRollout(opts *rootOptions, c *apiClient, r rolloutView) error {
	names := visClusterNames(c)
	r.ClusterName = names[r.Cluster]
	return printResult(opts, os.Stdout, r, func(tw *tabwriter.Writer) {
		row(tw, "id", r.ID)
		cluster := r.Cluster
		if r.ClusterName != "" && r.ClusterName != r.Cluster {
			cluster = r.ClusterName + " (" + r.Cluster + ")"
		}
		row(tw, "cluster", dash(cluster))
		kind := string(r.Kind)
		if r.Mode != "" {
			kind += " (devices stay " + string(r.Mode) + ")"
		}
		row(tw, "kind", kind)
		if r.Target != "" {
			row(tw, "target", r.Target)
		}
		state := string(r.State)
		if r.Reason != "" {
			state += ": " + r.Reason
		}
		row(tw, "state", state)
		row(tw, "progress", r.progress())
		row(tw, "at once", fmt.Sprintf("%d (control planes one by one)", r.MaxUnavailable))
		row(tw, "timeouts", fmt.Sprintf("drain %s, agent step %s", r.DrainTimeout, r.StepTimeout))
		if r.Canary != nil {
			canary := fmt.Sprintf("the first %d node(s)", r.Canary.Count)
			if len(r.Canary.Selector) > 0 {
				canary = "nodes labelled " + joinMap(r.Canary.Selector)
			}
			row(tw, "canary", canary)
		}
		if g := r.GateStatus; g != nil {
			gate := g.Phase
			if r.Gate != nil && r.Gate.Mode == "auto" {
				gate = "auto, soak " + dash(r.Gate.Soak) + ": " + gate
			}
			if g.Reason != "" {
				gate += " (" + g.Reason + ")"
			}
			row(tw, "gate", gate)
			for _, c := range g.Checks {
				ok := "ok"
				if !c.OK {
					ok = "FAILED"
				}
				row(tw, "  "+c.Name, ok+": "+c.Detail+" at "+clock(c.Checked))
			}
		}
		if r.Fingerprint != "" {
			row(tw, "plan", r.Fingerprint)
		}
		if len(r.Hooks) > 0 {
			hooks := joinMap(r.Hooks)
			if r.ContinueOnHookFailure {
				hooks += " (a failed hook leaves its device failed and cordoned; the rollout goes on)"
			}
			row(tw, "hooks", hooks)
		}
		row(tw, "started", fmt.Sprintf("%s by %s", visWhen(r.Created), dash(r.CreatedBy)))
		if !r.Finished.IsZero() {
			row(tw, "finished", visWhen(r.Finished))
		}
		tw.Flush()
		fmt.Fprintln(tw)
		row(tw, "NODE", "DEVICE", "ROLE", "PHASE", "STARTED", "FINISHED", "REASON")
		for _, n := range r.Nodes {
			row(tw, nodeName(n), n.Device, dash(n.Role), n.Phase, clock(n.Started), clock(n.Finished), dash(n.Reason))
		}
	})
}

// rolloutSpecFlags are the flags "rollout plan" and "rollout start"
// share: what the rollout is.
type rolloutSpecFlags struct {
	cluster, kind, target, mode string
	devices, hooks, selector    []string
	maxUnavailable              int
	drain, step                 time.Duration
	continueOnHook              bool
	canary                      int
	canarySelector              []string
	gate, gateURL, gateScript   string
	soak, gateTimeout           time.Duration
	rollback, onFailure         string
	nodeTimeout                 time.Duration
}

func (sf *rolloutSpecFlags) bind(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&sf.cluster, "cluster", "", "cluster name or ID (required but for an image rollout over standalone --devices)")
	fl.StringVar(&sf.kind, "kind", "", "image, kubernetes or remove (required)")
	fl.StringVar(&sf.target, "target", "", "image: image store name or sha256; kubernetes: registered version (v1.37.2)")
	fl.StringSliceVar(&sf.devices, "devices", nil, "only these devices: MAC addresses or serials, comma-separated (default: every member)")
	fl.StringArrayVar(&sf.selector, "selector", nil, "LABEL=VALUE: only devices with this label (repeatable; all must match): e.g. one SONiC image per hwsku")
	fl.StringVar(&sf.mode, "mode", "", "remove only: standalone keeps the devices managed, standalone")
	fl.IntVar(&sf.maxUnavailable, "max-unavailable", 1, "workers operated at once (control planes always one by one)")
	fl.StringArrayVar(&sf.hooks, "hook", nil, "PHASE=IMAGE hook: pre_upgrade, pre_leave, post_join or post_upgrade (repeatable)")
	fl.BoolVar(&sf.continueOnHook, "continue-on-hook-failure", false, "go on past a device whose hook failed (it stays failed and cordoned)")
	fl.DurationVar(&sf.drain, "drain-timeout", 5*time.Minute, "how long a node's drain may take")
	fl.DurationVar(&sf.step, "step-timeout", 15*time.Minute, "how long each agent step may take")
	fl.IntVar(&sf.canary, "canary", 0, "do the first N nodes first, then the gate")
	fl.StringArrayVar(&sf.canarySelector, "canary-selector", nil, "LABEL=VALUE: the canary is the nodes with this label (repeatable; control planes still go first)")
	fl.StringVar(&sf.gate, "gate", "", "after the canary: manual (wait for \"ztpd rollout approve\"; the default) or auto (the checks for --soak)")
	fl.DurationVar(&sf.soak, "soak", 0, "gate auto: how long every check must keep passing")
	fl.StringVar(&sf.gateURL, "gate-url", "", "gate auto: an operator check URL that must answer 2xx within --gate-timeout")
	fl.StringVar(&sf.gateScript, "gate-script", "", "gate auto: a script in the appliance's rollout.gate_scripts directory that must exit 0")
	fl.DurationVar(&sf.gateTimeout, "gate-timeout", 10*time.Second, "bound of each operator check (URL or script)")
	fl.StringVar(&sf.rollback, "rollback", "", "auto: a node whose upgrade failed is rolled back by its agent; manual (default): left for ztpd rollout rollback")
	fl.StringVar(&sf.onFailure, "on-failure", "", "stop (default) or continue past rolled-back nodes")
	fl.DurationVar(&sf.nodeTimeout, "node-timeout", 0, "how long a node may take to be Ready after its agent's operation (default: the step timeout)")
	_ = cmd.MarkFlagRequired("kind")
}

// body is the start request the flags say; only what was given, the
// server defaults the rest.
func (sf *rolloutSpecFlags) body(cmd *cobra.Command) (client.RolloutStart, error) {
	switch sf.kind {
	case "image", "kubernetes", "remove":
	default:
		return client.RolloutStart{}, fmt.Errorf("--kind %q: use image, kubernetes or remove", sf.kind)
	}
	hookMap, err := keyValues("--hook", "PHASE=IMAGE", sf.hooks)
	if err != nil {
		return client.RolloutStart{}, err
	}
	body := client.RolloutStart{Kind: sf.kind, Cluster: sf.cluster, Target: sf.target, Mode: sf.mode,
		Hooks: hookMap, ContinueOnHookFailure: sf.continueOnHook}
	fl := cmd.Flags()
	if len(sf.devices) > 0 {
		body.Devices = sf.devices
	}
	if len(sf.selector) > 0 {
		sel, err := keyValues("--selector", "LABEL=VALUE", sf.selector)
		if err != nil {
			return body, err
		}
		body.Selector = sel
	}
	if fl.Changed("max-unavailable") {
		body.MaxUnavailable = sf.maxUnavailable
	}
	if fl.Changed("drain-timeout") {
		body.DrainTimeout = sf.drain.String()
	}
	if fl.Changed("step-timeout") {
		body.StepTimeout = sf.step.String()
	}
	if sf.canary > 0 || len(sf.canarySelector) > 0 {
		body.Canary = &client.RolloutCanary{Count: sf.canary}
		if len(sf.canarySelector) > 0 {
			sel, err := keyValues("--canary-selector", "LABEL=VALUE", sf.canarySelector)
			if err != nil {
				return body, err
			}
			body.Canary.Selector = sel
		}
	} else if fl.Changed("canary") {
		return body, fmt.Errorf("--canary %d: give 1 or more nodes", sf.canary)
	}
	if sf.gate != "" || sf.gateURL != "" || sf.gateScript != "" || fl.Changed("soak") {
		body.Gate = &client.RolloutGate{Mode: sf.gate, URL: sf.gateURL, Script: sf.gateScript}
		if fl.Changed("soak") {
			body.Gate.Soak = sf.soak.String()
		}
		if fl.Changed("gate-timeout") {
			body.Gate.Timeout = sf.gateTimeout.String()
		}
	}
	if fl.Changed("node-timeout") {
		body.NodeTimeout = sf.nodeTimeout.String()
	}
	body.Rollback, body.OnFailure = sf.rollback, sf.onFailure
	return body, nil
}

func newRolloutPlanCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	var sf rolloutSpecFlags
	cmd := &cobra.Command{
		Use:   "plan --cluster NAME --kind image|kubernetes|remove [--target T] [flags]",
		Short: "Show what a rollout would do, without doing it (admin key)",
		Long: `Show exactly what "ztpd rollout start" with the same flags would do now: the
batches in order (each control plane alone, then workers --max-unavailable at
once, the canary's first), every node with its current and target version or
image, the nodes left alone and why (already at the target, manualupgrade, not
selected), each node's hooks and steps, the PodDisruptionBudgets that would
block its drain right now (read from the cluster), and the estimated duration
from the node times measured in earlier rollouts of the kind.

A Kubernetes upgrade that would break the version skew rules (a kubelet newer
than an API server, or more than three minor versions older; a control plane
upgraded more than one minor version at once; a downgrade) is refused here as
at the start. The plan ends with its fingerprint: start with
--plan-fingerprint FP to have the start refused if the cluster changed since.`,
		Example: `  ztpd rollout plan --cluster edge-1 --kind kubernetes --target v1.37.2 --max-unavailable 2 --canary 2 --gate auto --soak 10m
  ztpd rollout plan --cluster fabric-1 --kind image --target sonic-202411.bin -o json | jq .batches
  ztpd rollout start --cluster edge-1 --kind kubernetes --target v1.37.2 --plan-fingerprint 3f2a9c0d1e4b5a6f`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			body, err := sf.body(cmd)
			if err != nil {
				return err
			}
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			if err := needsServer(opts, c, "a rollout plan"); err != nil {
				return err
			}
			var p client.RolloutPlan
			if err := c.REST("POST", "/api/v1/rollouts", url.Values{"dry_run": {"true"}}, body, &p); err != nil {
				return err
			}
			if opts.output == "json" {
				return printResult(opts, os.Stdout, p, nil)
			}
			printPlan(os.Stdout, p, visClusterNames(c).cluster(p.Cluster))
			return nil
		},
	}
	sf.bind(cmd)
	return cmd
}

// printPlan writes a plan as text: the batches in order, the skipped
// nodes, the estimate and the fingerprint.
func printPlan(w io.Writer, p client.RolloutPlan, cluster string) {
	what := p.Kind
	if p.Target != "" {
		what += " to " + p.Target
	}
	fmt.Fprintf(w, "Plan: %s on %s, %d at a time (control planes one by one)\n", what, dash(cluster), p.MaxUnavailable)
	if p.Canary != nil {
		c := fmt.Sprintf("the first %d node(s)", p.Canary.Count)
		if len(p.Canary.Selector) > 0 {
			c = "nodes labelled " + joinMap(p.Canary.Selector)
		}
		gate := "wait for ztpd rollout approve"
		if g := p.Gate; g != nil && g.Mode == "auto" {
			gate = "gate auto: Nodes Ready, no new crash loops, post hooks exit 0"
			if g.URL != "" {
				gate += ", " + g.URL + " answers 2xx"
			}
			if g.Script != "" {
				gate += ", " + g.Script + " exits 0"
			}
			gate += " for " + dash(g.Soak)
		}
		fmt.Fprintf(w, "Canary: %s, then %s\n", c, gate)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	gatePrinted := false
	for i, b := range p.Batches {
		if !b.Canary && !gatePrinted && p.Canary != nil {
			tw.Flush()
			fmt.Fprintln(w, "  -- gate --")
			gatePrinted = true
		}
		label := fmt.Sprintf("%d", i+1)
		if b.Canary {
			label += " canary"
		}
		for j, n := range b.Nodes {
			if j > 0 {
				label = ""
			}
			extra := strings.Join(n.Steps, ", ")
			row(tw, "  batch "+label, nodeNameOf(n), dash(n.Role), dash(n.Current)+" -> "+dash(n.Target), extra)
			for _, bl := range n.Blocks {
				row(tw, "", "", "", "", fmt.Sprintf("! drain blocked now: pod %s by PodDisruptionBudget %s (allows %d)", bl.Pod, bl.Budget, bl.AllowedDisruptions))
			}
		}
	}
	if len(p.Batches) == 0 {
		row(tw, "  (no node to do)")
	}
	tw.Flush()
	if len(p.Skipped) > 0 {
		fmt.Fprintln(w, "Skipped:")
		for _, n := range p.Skipped {
			row(tw, "  "+nodeNameOf(n), dash(n.Role), dash(n.Current), n.Skip)
		}
		tw.Flush()
	}
	est := "unknown (" + p.EstimateBasis + ")"
	if p.EstimateSeconds > 0 {
		est = p.Estimate + " (" + p.EstimateBasis + ")"
	}
	fmt.Fprintf(w, "Estimated duration: %s\n", est)
	for _, warn := range p.Warnings {
		fmt.Fprintf(w, "Warning: %s\n", warn)
	}
	fmt.Fprintf(w, "Fingerprint: %s (start with --plan-fingerprint %s to refuse a changed cluster)\n", p.Fingerprint, p.Fingerprint)
}

func nodeNameOf(n client.PlanNode) string {
	if n.NodeName != "" {
		return n.NodeName
	}
	return n.Device
}

func newRolloutStartCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	var sf rolloutSpecFlags
	var fingerprint string
	var watch bool
	cmd := &cobra.Command{
		Use:   "start --cluster NAME --kind image|kubernetes|remove [--target T] [flags]",
		Short: "Start a rollout over a cluster's nodes (admin key)",
		Long: `Start a rollout. --kind image installs the SONiC image --target (an image
store name or sha256) on each switch: a cluster member is drained, leaves,
installs, reboots and rejoins; a standalone switch (--devices without
--cluster) runs the hooks and the image only. --kind kubernetes upgrades each
node to the registered version --target. --kind remove takes the nodes out of
the cluster (--mode standalone keeps switches managed, standalone).

Without --devices every member of the cluster takes part. Hooks (--hook
PHASE=IMAGE, repeatable) are image store entries the agent runs at pre_upgrade,
pre_leave, post_join or post_upgrade; a failed hook stops the rollout unless
--continue-on-hook-failure, which leaves that device failed and cordoned and
goes on. The command prints the rollout as it started; --watch follows it to
the end like "ztpd rollout watch".

--canary N (or --canary-selector) does those nodes first; then the rollout
waits for "ztpd rollout approve ID" (--gate manual), or with --gate auto goes
on only when every canary Node is Ready, no new pod crash loops on them, their
post hooks exited 0 and the --gate-url or --gate-script check passes, for
--soak; a failing check stops the rollout before the other nodes. See what a
start would do first with "ztpd rollout plan" and pass its --plan-fingerprint.

--rollback auto (image and kubernetes) has a node whose upgrade failed (a step
of its agent's operation, the reboot, the rejoin, a post_upgrade hook, or its
Node not Ready within --node-timeout) taken back by its agent to the image and
config, or kubelet and kubeadm, recorded before the upgrade; the node is
uncordoned once Ready there and shown rolled-back with the reason. Control
planes are left to kubeadm's own rollback. --on-failure continue goes on past
rolled-back nodes (default stop). --rollback manual (default) leaves a failed
node as it is, for "ztpd rollout rollback NODE".`,
		Example: `  ztpd rollout start --cluster fabric-1 --kind image --target sonic-202411.bin
  ztpd rollout start --cluster fabric-1 --kind image --target sonic-202411.bin --max-unavailable 3 \
      --hook pre_upgrade=snapshot-bgp.sh --hook post_upgrade=check-bgp.sh --watch
  ztpd rollout start --kind image --target sonic-202411.bin --devices 52:54:00:00:00:01,52:54:00:00:00:02
  ztpd rollout start --cluster fabric-1 --kind image --target sonic-as7712.bin --selector ztpd.io/hwsku=as7712
  ztpd rollout start --cluster edge-1 --kind kubernetes --target v1.37.2 --drain-timeout 10m
  ztpd rollout start --cluster edge-1 --kind kubernetes --target v1.37.2 --canary 2 --gate auto --soak 10m \
      --gate-url https://monitor.example/ready --plan-fingerprint 3f2a9c0d1e4b5a6f
  ztpd rollout start --cluster fabric-1 --kind image --target sonic-202411.bin --hook post_upgrade=check-bgp.sh \
      --rollback auto --on-failure continue --node-timeout 10m
  ztpd rollout start --cluster fabric-1 --kind remove --devices leaf-7-serial --mode standalone`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			body, err := sf.body(cmd)
			if err != nil {
				return err
			}
			body.PlanFingerprint = fingerprint
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			if err := needsServer(opts, c, "a rollout"); err != nil {
				return err
			}
			var r rolloutView
			if err := c.REST("POST", "/api/v1/rollouts", nil, body, &r); err != nil {
				return err
			}
			if watch {
				return watchRollout(cmd.Context(), opts, c, r.ID, time.Second, os.Stdout)
			}
			if opts.output != "json" {
				fmt.Fprintf(os.Stderr, "rollout %s started; follow it with: ztpd rollout watch %s\n", r.ID, r.ID)
			}
			return printRollout(opts, c, r)
		},
	}
	sf.bind(cmd)
	fl := cmd.Flags()
	fl.StringVar(&fingerprint, "plan-fingerprint", "", "refuse the start unless the plan now has this fingerprint (from ztpd rollout plan)")
	fl.BoolVar(&watch, "watch", false, "follow the rollout until it ends (exit status as ztpd rollout watch)")
	return cmd
}

func newRolloutControlCmd(opts *rootOptions, f *apiFlags, op string) *cobra.Command {
	short := map[string]string{
		"pause":   "Pause a running rollout: no node starts, nodes underway finish (admin key)",
		"resume":  "Resume a paused rollout (admin key)",
		"abort":   "Abort a rollout: no node starts, operations not yet started are withdrawn (admin key)",
		"approve": "Approve a rollout waiting at its gate after the canary: it goes on (admin key)",
	}[op]
	var yes bool
	cmd := &cobra.Command{
		Use:     op + " ID",
		Short:   short,
		Example: fmt.Sprintf("  ztpd rollout %s ro-20260301T101500-abcdefghij", op),
		Args:    oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			if op == "abort" {
				what := "abort rollout " + args[0] + ": it cannot be resumed, and nodes underway are left as they are (cordoned ones stay cordoned)"
				if err := confirm(cmd, what, yes); err != nil {
					return err
				}
			}
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			var r rolloutView
			if err := c.REST("POST", rolloutPath(args[0])+"/"+op, nil, map[string]string{}, &r); err != nil {
				return err
			}
			return printRollout(opts, c, r)
		},
	}
	if op == "abort" {
		cmd.Long = `Abort a rollout: no node starts; operations handed to agents that have not
started them are withdrawn; nodes underway finish their current phase and are
left as they are (cordoned ones stay cordoned: uncordon them with kubectl once
checked). An aborted rollout cannot be resumed; start a new one, which skips
nodes already at the target.`
		addYesFlag(cmd, &yes)
	}
	return cmd
}

func newRolloutWatchCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	var every time.Duration
	cmd := &cobra.Command{
		Use:   "watch ID",
		Short: "Follow a rollout: a line per node phase change; exit 0 when it succeeds, 1 when it fails or is aborted",
		Long: `Follow a rollout until it ends, asking every --interval: one line each time a
node changes phase (pending, cordoned, drained, agent, waiting, done, failed,
skipped, withdrawn) and each time the rollout changes state. The exit status is
0 when it succeeded and 1 when it failed or was aborted, so scripts can wait on
it. With -o json every line is a JSON object. Ctrl-C stops watching (the
rollout goes on).`,
		Example: `  ztpd rollout watch ro-20260301T101500-abcdefghij
  ztpd rollout watch ro-20260301T101500-abcdefghij -o json | jq .`,
		Args: oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			if every <= 0 {
				return fmt.Errorf("--interval %s: give a positive duration", every)
			}
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			return watchRollout(cmd.Context(), opts, c, args[0], every, os.Stdout)
		},
	}
	cmd.Flags().DurationVar(&every, "interval", time.Second, "how often to ask")
	return cmd
}

// rolloutChange is one line of "rollout watch -o json": a node's new
// phase, or (node empty) the rollout's new state.
type rolloutChange struct {
	Time     time.Time      `json:"time"`
	Rollout  string         `json:"rollout"`
	Device   string         `json:"device,omitempty"`
	NodeName string         `json:"node_name,omitempty"`
	Role     string         `json:"role,omitempty"`
	Phase    string         `json:"phase,omitempty"`
	State    string         `json:"state,omitempty"`
	Reason   string         `json:"reason,omitempty"`
	Counts   map[string]int `json:"counts,omitempty"`
}

// watchRollout polls a rollout every interval and prints what changed,
// until it ends: nil when it succeeded, an error when it failed or was
// aborted (or watching stopped).
func watchRollout(ctx context.Context, opts *rootOptions, c *apiClient, id string, every time.Duration, w io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	enc := json.NewEncoder(w)
	emit := func(ch rolloutChange) {
		if opts.output == "json" {
			_ = enc.Encode(ch)
			return
		}
		ts := ch.Time.Local().Format("15:04:05")
		if ch.Device == "" {
			line := fmt.Sprintf("%s  rollout %s %s", ts, ch.Rollout, ch.State)
			if ch.Reason != "" {
				line += ": " + ch.Reason
			}
			fmt.Fprintln(w, line)
			return
		}
		name, device := ch.NodeName, ch.Device
		if name == "" { // a standalone switch: no Node
			name, device = ch.Device, "-"
		}
		line := fmt.Sprintf("%s  %-20s %-17s %-13s %-9s", ts, name, device, dash(ch.Role), ch.Phase)
		if ch.Reason != "" {
			line += "  " + ch.Reason
		}
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
	phases := map[string]string{}
	state := ""
	for {
		var r rolloutView
		if err := c.REST("GET", rolloutPath(id), nil, nil, &r); err != nil {
			return err
		}
		now := time.Now()
		for _, n := range r.Nodes {
			if phases[n.Device] != n.Phase {
				phases[n.Device] = n.Phase
				emit(rolloutChange{Time: now, Rollout: r.ID, Device: n.Device, NodeName: n.NodeName, Role: n.Role, Phase: n.Phase, Reason: n.Reason})
			}
		}
		if string(r.State) != state {
			state = string(r.State)
			emit(rolloutChange{Time: now, Rollout: r.ID, State: string(r.State), Reason: r.Reason, Counts: r.Counts})
			if opts.output != "json" {
				fmt.Fprintf(w, "          progress %s\n", r.progress())
			}
		}
		switch core.RolloutState(r.State) {
		case core.RolloutSucceeded:
			return nil
		case core.RolloutFailed, core.RolloutAborted:
			msg := fmt.Sprintf("rollout %s %s", r.ID, r.State)
			if r.Reason != "" {
				msg += ": " + r.Reason
			}
			return fmt.Errorf("%s (%s; ztpd rollout show %s)", msg, r.progress(), r.ID)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped watching; rollout %s is %s and goes on (ztpd rollout show %s)", r.ID, r.State, r.ID)
		case <-time.After(every):
		}
	}
}
