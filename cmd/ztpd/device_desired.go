package main

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/core"
)

// "ztpd device desired": what the operator wants a device's agent to run
// (day-2 operations), through GET and PUT /api/v1/devices/{id}/desired.

// desiredView is a device's desired state as the API answers it, with its
// cluster's name beside the ID for -o json.
type desiredView struct {
	client.Desired
	ClusterName string `json:"cluster_name,omitempty"`
}

// desiredResult is what "device desired set" prints with -o json: the new
// state and the rollout a change of mode started.
type desiredResult struct {
	Desired desiredView  `json:"desired"`
	Rollout *rolloutView `json:"rollout,omitempty"`
}

func newDeviceDesiredCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "desired",
		Short: "Show and change what a device should run (mode, cluster, image, Kubernetes version, labels, hooks)",
		Long: `A device's desired state is what the operator wants it to run: cluster or
standalone mode, its cluster and role, the SONiC image, the Kubernetes version,
its labels and the hook scripts its agent runs around an operation. The device's
agent (installed with its join bundle) polls it and converges; "desired get"
also shows the operation its agent was handed last, step by step, and when the
agent was last heard from.

A profile's desired: block gives its devices defaults; what is set on a device
wins, field by field (labels and hooks key by key), and a target cleared on the
device falls back to the profile's. "desired get" shows the effective values
and which come from the profile.

Switching a cluster member to standalone, or a standalone switch back into a
cluster, is work on the device: "desired set --mode" starts a rollout (remove
or join) that changes the mode once the device has done it. Follow it with
"ztpd rollout watch ID".`,
		Example: `  ztpd device desired get 52:54:00:12:34:56
  ztpd device desired set leaf-1-serial --image sonic-202411.bin --hook pre_upgrade=snapshot-bgp.sh
  ztpd device desired set 52:54:00:12:34:56 --mode standalone
  ztpd device desired set 52:54:00:12:34:56 --mode cluster --cluster edge-1`,
	}
	cmd.AddCommand(newDesiredGetCmd(opts, f), newDesiredSetCmd(opts, f))
	return cmd
}

func newDesiredGetCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "get MAC|SERIAL",
		Short: "Show a device's desired state, its agent's last operation and last contact",
		Example: `  ztpd device desired get 52:54:00:12:34:56
  ztpd device desired get SN1234 -o json`,
		Args: oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			var d desiredView
			if err := c.REST("GET", desiredPath(args[0]), nil, nil, &d); err != nil {
				return err
			}
			d.ClusterName = visClusterNames(c)[d.Cluster]
			return printResult(opts, os.Stdout, d, func(tw *tabwriter.Writer) { desiredRows(tw, d) })
		},
	}
}

func desiredPath(ref string) string { return "/api/v1/devices/" + url.PathEscape(ref) + "/desired" }

func newDesiredSetCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	var mode, cluster, role, image, kubeVersion string
	var labels, hooks []string
	var clearLabels, clearHooks bool
	cmd := &cobra.Command{
		Use:   "set MAC|SERIAL [flags]",
		Short: "Change a device's desired state (admin key); a change of mode starts a rollout",
		Long: `Change what a device should run. Only the flags given change; an empty value
(--image "") clears a target. --label and --hook add to (or replace keys of) the
labels and hooks the device has; --clear-labels and --clear-hooks start from
none, so "--clear-labels --label rack=7" leaves exactly rack=7.

--mode standalone on a cluster member, and --mode cluster --cluster NAME on a
standalone switch, start a rollout (remove or join) that changes the mode once
the device has done it; the command prints the rollout, and
"ztpd rollout watch ID" follows it. A cluster with a rollout underway refuses
the switch, and nothing changes. Hooks name image store entries (ztpd image
add --kind file) run at pre_upgrade, pre_leave, post_join or post_upgrade.`,
		Example: `  ztpd device desired set 52:54:00:12:34:56 --image sonic-202411.bin
  ztpd device desired set 52:54:00:12:34:56 --kubernetes-version v1.37.2 --label rack=7 --label row=b
  ztpd device desired set 52:54:00:12:34:56 --hook pre_upgrade=snapshot-bgp.sh --hook post_upgrade=check-bgp.sh
  ztpd device desired set 52:54:00:12:34:56 --clear-hooks --image ""
  ztpd device desired set 52:54:00:12:34:56 --mode standalone
  ztpd device desired set 52:54:00:12:34:56 --mode cluster --cluster edge-1 --role worker`,
		Args: oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			fl := cmd.Flags()
			var body client.DesiredChange
			targets := false // a flag of a target was given
			for flag, field := range map[string]*client.Optional[string]{"cluster": &body.Cluster, "role": &body.Role,
				"image": &body.Image, "kubernetes-version": &body.KubernetesVersion} {
				if fl.Changed(flag) {
					v, _ := fl.GetString(flag)
					*field, targets = client.Some(v), true
				}
			}
			if fl.Changed("mode") {
				switch mode {
				case "", "cluster", "standalone":
				default:
					return fmt.Errorf("--mode %q: use cluster or standalone", mode)
				}
				body.Mode, targets = client.Some(core.DeviceMode(mode)), true
			}
			addLabels, err := keyValues("--label", "KEY=VALUE", labels)
			if err != nil {
				return err
			}
			addHooks, err := keyValues("--hook", "PHASE=IMAGE", hooks)
			if err != nil {
				return err
			}
			for h := range addHooks {
				if !slices.Contains(core.HookPhases, h) {
					return fmt.Errorf("--hook %s: the phase is one of %s", h, strings.Join(core.HookPhases, ", "))
				}
			}
			if !targets && addLabels == nil && addHooks == nil && !clearLabels && !clearHooks {
				return errors.New("nothing to change: give --mode, --cluster, --role, --image, --kubernetes-version, --label, --hook, --clear-labels or --clear-hooks")
			}
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			if fl.Changed("mode") {
				if err := needsServer(opts, c, "a change of mode starts a rollout, which"); err != nil {
					return err
				}
			}
			if addLabels != nil || addHooks != nil || clearLabels || clearHooks {
				// The API replaces the maps whole: start from what the
				// device has unless told to clear it; what was set on the
				// device itself, not its profile's defaults, which stay
				// defaults.
				var cur desiredView
				if err := c.REST("GET", desiredPath(args[0]), nil, nil, &cur); err != nil {
					return err
				}
				if e := cur.Explicit; e != nil {
					cur.Labels, cur.Hooks = e.Labels, e.Hooks
				}
				if addLabels != nil || clearLabels {
					body.Labels = client.Some(merged(cur.Labels, addLabels, clearLabels))
				}
				if addHooks != nil || clearHooks {
					body.Hooks = client.Some(merged(cur.Hooks, addHooks, clearHooks))
				}
			}
			var res desiredResult
			if err := c.REST("PUT", desiredPath(args[0]), nil, body, &res); err != nil {
				return err
			}
			names := visClusterNames(c)
			res.Desired.ClusterName = names[res.Desired.Cluster]
			if res.Rollout != nil {
				res.Rollout.ClusterName = names[res.Rollout.Cluster]
			}
			return printResult(opts, os.Stdout, res, func(tw *tabwriter.Writer) {
				desiredRows(tw, res.Desired)
				if r := res.Rollout; r != nil {
					row(tw, "rollout", fmt.Sprintf("%s started (%s of %s): follow it with ztpd rollout watch %s", r.ID, r.Kind, names.cluster(r.Cluster), r.ID))
				}
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&mode, "mode", "", "cluster or standalone (a switch of a member or a standalone device starts a rollout)")
	fl.StringVar(&cluster, "cluster", "", "cluster name or ID (with --mode cluster: the cluster the device joins)")
	fl.StringVar(&role, "role", "", "control-plane or worker")
	fl.StringVar(&image, "image", "", "target SONiC image: image store name or sha256 (\"\" clears)")
	fl.StringVar(&kubeVersion, "kubernetes-version", "", "target Kubernetes version, e.g. v1.37.2 (\"\" clears)")
	fl.StringArrayVar(&labels, "label", nil, "KEY=VALUE label to set (repeatable)")
	fl.StringArrayVar(&hooks, "hook", nil, "PHASE=IMAGE hook to set: pre_upgrade, pre_leave, post_join or post_upgrade (repeatable)")
	fl.BoolVar(&clearLabels, "clear-labels", false, "remove every label first")
	fl.BoolVar(&clearHooks, "clear-hooks", false, "remove every hook first")
	return cmd
}

// keyValues parses repeated KEY=VALUE flags (nil when none were given).
func keyValues(flag, form string, vals []string) (map[string]string, error) {
	if len(vals) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, v := range vals {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%s %q: want %s", flag, v, form)
		}
		out[k] = val
	}
	return out, nil
}

// merged is cur (or nothing, when clear) with add over it.
func merged(cur, add map[string]string, clear bool) map[string]string {
	out := map[string]string{}
	if !clear {
		maps.Copy(out, cur)
	}
	maps.Copy(out, add)
	return out
}

// needsServer refuses, through the admin socket with no server running,
// what starts a rollout: the rollout would run inside this command and be
// cut off when it exits.
func needsServer(opts *rootOptions, c *apiClient, what string) error {
	if !c.Local {
		return nil
	}
	cfg, err := loadConfig(opts)
	if err != nil {
		return err
	}
	if !serverRunning(cfg.DataDir) {
		return fmt.Errorf("%s needs the running ztpd: no server runs on %s (start it: ztpd serve, or systemctl start ztpd)", what, cfg.DataDir)
	}
	return nil
}

func desiredRows(tw *tabwriter.Writer, d desiredView) {
	row(tw, "device", d.Device)
	row(tw, "mode", dash(string(d.Mode)))
	cluster := d.Cluster
	if d.ClusterName != "" && d.ClusterName != d.Cluster {
		cluster = d.ClusterName + " (" + d.Cluster + ")"
	}
	row(tw, "cluster", dash(cluster))
	row(tw, "role", dash(d.Role))
	row(tw, "image", dash(d.Image))
	row(tw, "kubernetes", dash(d.KubernetesVersion))
	row(tw, "labels", dash(joinMap(d.Labels)))
	row(tw, "hooks", dash(joinMap(d.Hooks)))
	if d.Profile != "" {
		row(tw, "profile", fmt.Sprintf("%s gives defaults: %s", d.Profile, dash(strings.Join(inherited(d), ", "))))
	}
	if d.Generation == 0 {
		row(tw, "generation", "0 (never set)")
	} else {
		row(tw, "generation", fmt.Sprintf("%d, %s by %s", d.Generation, visWhen(d.UpdatedAt), dash(d.UpdatedBy)))
	}
	if a := d.Agent; a != nil {
		row(tw, "agent", fmt.Sprintf("last seen %s from %s (boot %s, agent %s)", visWhen(a.LastSeen), dash(a.IP), dash(a.BootID), dash(a.Version)))
	} else {
		row(tw, "agent", "never heard from")
	}
	op := d.Operation
	if op == nil {
		row(tw, "operation", "none")
		return
	}
	what := fmt.Sprintf("%s (%s) %s", op.ID, op.Kind, op.State)
	if op.Rollout != "" {
		what += ", rollout " + op.Rollout
	}
	if op.Reason != "" {
		what += ": " + op.Reason
	}
	row(tw, "operation", what)
	tw.Flush()
	fmt.Fprintf(tw, "  %s\n", strings.Join([]string{"STEP", "ACTION", "STATE", "EXIT", "ATTEMPTS", "STARTED", "FINISHED"}, "\t"))
	for _, st := range op.Steps {
		exit := "-"
		if st.State == core.StepSucceeded || st.State == core.StepFailed {
			exit = fmt.Sprint(st.ExitCode)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%d\t%s\t%s\n", st.Name, st.Action, st.State, exit, st.Attempts, clock(st.Started), clock(st.Finished))
	}
	tw.Flush()
	for _, st := range op.Steps {
		if st.State == core.StepFailed && st.Output != "" {
			fmt.Fprintf(tw, "  output of %s (tail):\n", st.Name)
			for _, line := range tailLines(st.Output, 10) {
				fmt.Fprintf(tw, "    %s\n", line)
			}
		}
	}
}

// inherited names the targets a device has from its profile's defaults,
// not from what was set on it: mode, image, kubernetes, and labels and
// hooks by key.
func inherited(d desiredView) []string {
	e := d.Explicit
	if e == nil {
		return nil
	}
	var out []string
	for _, f := range []struct{ name, eff, set string }{{"mode", string(d.Mode), string(e.Mode)}, {"image", d.Image, e.Image},
		{"kubernetes", d.KubernetesVersion, e.KubernetesVersion}} {
		if f.eff != "" && f.set == "" {
			out = append(out, f.name)
		}
	}
	for _, m := range []struct {
		name     string
		eff, set map[string]string
	}{{"label", d.Labels, e.Labels}, {"hook", d.Hooks, e.Hooks}} {
		for _, k := range slices.Sorted(maps.Keys(m.eff)) {
			if _, ok := m.set[k]; !ok {
				out = append(out, m.name+" "+k)
			}
		}
	}
	return out
}

// joinMap is k=v pairs in key order.
func joinMap(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ", ")
}

// clock is a time of day for step and node tables ("-" for none).
func clock(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("15:04:05")
}

// tailLines is the last n lines of s.
func tailLines(s string, n int) []string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}
