package rest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/api/caller"
	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/desired"
	"github.com/ztpd/ztpd/internal/httpserve"
	"github.com/ztpd/ztpd/internal/rollout"
	"github.com/ztpd/ztpd/internal/semver"
)

// Day-2 operations: devices' desired states and rollouts over
// clusters' nodes. Reads follow the devices' and clusters' tenancy (a user
// key sees its account's); every write is admin only.

func (s *Door) routeDayOps(g *gin.RouterGroup) {
	if s.desired != nil {
		g.GET("/devices/:id/desired", s.getDesired)
		g.PUT("/devices/:id/desired", requireAdmin, s.putDesired)
	}
	if s.rollouts != nil {
		g.GET("/rollouts", s.listRollouts)
		g.POST("/rollouts", requireAdmin, s.startRollout)
		g.GET("/rollouts/:id", s.getRollout)
		g.POST("/rollouts/:id/pause", requireAdmin, s.controlRollout)
		g.POST("/rollouts/:id/resume", requireAdmin, s.controlRollout)
		g.POST("/rollouts/:id/abort", requireAdmin, s.controlRollout)
		g.POST("/rollouts/:id/approve", requireAdmin, s.approveRollout)
	}
}

// restDesiredOfLayers is a device's effective desired state, with the
// profile that gives it defaults and what was set on the device.
func restDesiredOfLayers(l desired.Layers) client.Desired {
	out := restDesiredOf(l.Effective)
	if l.Profile != "" {
		out.Profile = l.Profile
		e := l.Explicit
		out.Explicit = &client.DesiredSet{Mode: e.Mode, Image: e.Image, KubernetesVersion: e.KubernetesVersion,
			Labels: copyMap(e.Labels), Hooks: copyMap(e.Hooks)}
	}
	return out
}

// shownStepArgs are the step arguments an operator sees: what a step works
// towards. Others (a join's enrollment, URLs with credentials a later step
// kind may carry) stay between ztpd and the agent.
var shownStepArgs = []string{"version", "phase", "image", "sha256", "timeout"}

func restDesiredOf(d core.DesiredState) client.Desired {
	out := client.Desired{Device: d.Device, Mode: d.Mode, Cluster: d.Cluster, Role: d.Role, Image: d.Image,
		KubernetesVersion: d.KubernetesVersion, Labels: copyMap(d.Labels), Hooks: copyMap(d.Hooks),
		Generation: d.Generation, UpdatedAt: d.UpdatedAt, UpdatedBy: d.UpdatedBy}
	if op := d.Operation; op != nil {
		ro := &client.Operation{ID: op.ID, Kind: op.Kind, Rollout: op.Rollout, State: op.State, Reason: op.Reason,
			Created: op.Created, Finished: op.Finished, Steps: []client.Step{}}
		for _, st := range op.Steps {
			rs := client.Step{Name: st.Name, Action: st.Action, State: st.State, ExitCode: st.ExitCode, Output: st.Output,
				Started: st.Started, Finished: st.Finished, Attempts: st.Attempts}
			for _, k := range shownStepArgs {
				if v, ok := st.Args[k]; ok {
					if rs.Args == nil {
						rs.Args = map[string]string{}
					}
					rs.Args[k] = v
				}
			}
			ro.Steps = append(ro.Steps, rs)
		}
		out.Operation = ro
	}
	if a := d.Agent; !a.LastSeen.IsZero() {
		out.Agent = &client.Agent{LastSeen: a.LastSeen, IP: a.IP, BootID: a.BootID, Version: a.Version}
	}
	return out
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func restRolloutOf(r core.Rollout) client.Rollout {
	out := client.Rollout{ID: r.ID, Cluster: r.Cluster, Kind: r.Kind, State: r.State, Reason: r.Reason, Target: r.Target,
		TargetID: r.TargetID, Mode: r.Mode, MaxUnavailable: r.MaxUnavailable,
		DrainTimeout: time.Duration(r.DrainTimeout).String(), StepTimeout: time.Duration(r.StepTimeout).String(),
		Hooks: copyMap(r.Hooks), Selector: r.Selector, ContinueOnHookFailure: r.ContinueOnHookFailure, Job: r.Job, CreatedBy: r.CreatedBy,
		Created: r.Created, UpdatedAt: r.UpdatedAt, Finished: r.Finished,
		Nodes: make([]client.RolloutNode, 0, len(r.Nodes)), Counts: map[string]int{},
		Canary: restCanaryOf(r.Canary), Gate: restGateOf(r.Gate), GateStatus: restGateStatusOf(r.GateStatus), Fingerprint: r.Fingerprint}
	for _, n := range r.Nodes {
		out.Nodes = append(out.Nodes, client.RolloutNode{Device: n.Device, NodeName: n.NodeName, Role: n.Role, Phase: n.Phase,
			Reason: n.Reason, Operation: n.Operation, Cordoned: n.Cordoned, Canary: n.Canary, Started: n.Started, Finished: n.Finished})
		out.Counts[n.Phase]++
	}
	return out
}

// deviceFor resolves a device reference (MAC in any notation or serial)
// the caller may see; ok is false when the answer was already written.
func (s *Door) deviceFor(c *gin.Context, ref string) (core.Device, bool) {
	d, err := s.lookupDevice(callerOf(c), ref)
	if errors.Is(err, core.ErrNotFound) {
		Refuse(c, core.KindNotFound, "device "+ref+" not found")
		return d, false
	}
	if err != nil {
		s.restFail(c, err)
		return d, false
	}
	return d, true
}

func (s *Door) getDesired(c *gin.Context) {
	d, ok := s.deviceFor(c, c.Param("id"))
	if !ok {
		return
	}
	l, err := s.desired.Layers(d.ID)
	if err != nil {
		s.restFail(c, err)
		return
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, restDesiredOfLayers(l))
}

// changedString is a string field of a desired change: nil when left
// out, "" when cleared.
func changedString(o client.Optional[string]) *string {
	if !o.Set {
		return nil
	}
	v := o.Value
	return &v
}

// changedMap is a map field of a desired change: nil when left out,
// empty (cleared) when null or {}.
func changedMap(o client.Optional[map[string]string]) map[string]string {
	if !o.Set {
		return nil
	}
	if o.Value == nil {
		return map[string]string{}
	}
	return o.Value
}

// putDesired changes a device's desired state. Switching a member to
// standalone, or a standalone device back into a cluster, is not a change
// of record but work on the device: it starts a rollout (remove or join)
// that sets the mode when the device has done it, and answers 202.
func (s *Door) putDesired(c *gin.Context) {
	var req client.DesiredChange
	if !bindBody(c, &req) {
		return
	}
	d, ok := s.deviceFor(c, c.Param("id"))
	if !ok {
		return
	}
	ctx, by := c.Request.Context(), caller.AccountName(credOf(c))
	mode := req.Mode.Value
	switch mode {
	case "", core.ModeCluster, core.ModeStandalone:
	default:
		Refuse(c, core.KindInvalid, fmt.Sprintf("mode %q: want cluster or standalone", mode))
		return
	}
	if req.Mode.Set && mode == core.ModeStandalone && req.Cluster.Value != "" {
		Refuse(c, core.KindInvalid, "a standalone device names no cluster: leave cluster out")
		return
	}
	ch := desired.Change{Cluster: changedString(req.Cluster), Role: changedString(req.Role), Image: changedString(req.Image),
		KubernetesVersion: changedString(req.KubernetesVersion), Labels: changedMap(req.Labels), Hooks: changedMap(req.Hooks)}
	if req.Mode.Set {
		ch.Mode = &mode
	}
	spec, err := s.modeSwitch(callerOf(c), d.ID, req, &ch)
	if err != nil {
		s.restFail(c, err)
		return
	}
	if spec != nil {
		spec.By = by
		if err := s.rolloutBusy(spec.Cluster); err != nil {
			s.restFail(c, err)
			return
		}
	}
	if spec == nil || changes(ch) {
		if _, err = s.desired.Set(ctx, by, d.ID, ch); err != nil {
			s.restFail(c, err)
			return
		}
	}
	var out client.DesiredChanged
	status := http.StatusOK
	if spec != nil {
		r, err := s.rollouts.Start(ctx, *spec)
		if err != nil {
			s.restFail(c, err)
			return
		}
		rv := restRolloutOf(r)
		out.Rollout, status = &rv, http.StatusAccepted
		c.Header("Location", Path+"rollouts/"+r.ID)
	}
	l, err := s.desired.Layers(d.ID)
	if err != nil {
		s.restFail(c, err)
		return
	}
	out.Desired = restDesiredOfLayers(l)
	httpserve.WriteJSON(c.Writer, status, out)
}

// modeSwitch says which rollout a change of mode needs (nil: none) and
// takes the mode and cluster out of ch when the rollout sets them.
func (s *Door) modeSwitch(caller core.Caller, device string, req client.DesiredChange, ch *desired.Change) (*rollout.Spec, error) {
	// The mode the device has now, its profile's default included.
	cur, err := s.desired.Get(device)
	if err != nil {
		return nil, err
	}
	member, target, err := s.rollouts.Placement(caller, device, req.Cluster.Value)
	if err != nil {
		return nil, err
	}
	mode := req.Mode.Value
	switch {
	case member != nil && target.ID != "" && target.ID != member.Cluster:
		return nil, core.Errorf(core.KindState, "device %s is a member of cluster %s: switch it to standalone first, then to cluster mode in %s",
			device, member.Cluster, req.Cluster.Value)
	case !req.Mode.Set:
		return nil, nil
	case mode == core.ModeStandalone && member != nil:
		ch.Mode, ch.Cluster = nil, nil
		return &rollout.Spec{Kind: core.RolloutRemove, Cluster: member.Cluster, Devices: []string{device}, Mode: core.ModeStandalone}, nil
	case mode == core.ModeCluster && member == nil && cur.Mode == core.ModeStandalone:
		if target.ID == "" {
			return nil, core.Errorf(core.KindInvalid, "switching %s to cluster mode needs the cluster it joins", device)
		}
		ch.Mode, ch.Cluster = nil, nil
		return &rollout.Spec{Kind: core.RolloutJoin, Cluster: target.ID, Devices: []string{device}}, nil
	}
	return nil, nil
}

// changes reports whether ch changes anything.
func changes(ch desired.Change) bool {
	return ch.Mode != nil || ch.Cluster != nil || ch.Role != nil || ch.Image != nil || ch.KubernetesVersion != nil ||
		ch.Labels != nil || ch.Hooks != nil
}

// rolloutBusy refuses what the engine would: a second rollout over a
// cluster while one is not ended. Checked before a desired change is
// recorded, so a refused mode switch changes nothing.
func (s *Door) rolloutBusy(cluster string) error {
	var err error
	lerr := s.rollouts.List(func(r core.Rollout) bool {
		if cluster != "" && r.Cluster == cluster && !r.State.Ended() {
			err = core.Errorf(core.KindState, "rollout %s (%s) is %s on cluster %s; pause, resume or abort it first", r.ID, r.Kind, r.State, cluster)
			return false
		}
		return true
	})
	if lerr != nil {
		return lerr
	}
	return err
}

var rolloutStates = []core.RolloutState{core.RolloutRunning, core.RolloutPaused, core.RolloutAborted, core.RolloutFailed, core.RolloutSucceeded}

// listRollouts pages rollouts newest first; the cursor is the last ID a
// page showed.
func (s *Door) listRollouts(c *gin.Context) {
	limit, after, ok := listParams(c)
	if !ok {
		return
	}
	cluster, state := c.Query("cluster"), c.Query("state")
	if state != "" && !slices.Contains(rolloutStates, core.RolloutState(state)) {
		Refuse(c, core.KindInvalid, fmt.Sprintf("state %q: want running, paused, aborted, failed or succeeded", state))
		return
	}
	if cluster != "" {
		cluster = s.rollouts.ClusterID(callerOf(c), cluster)
	}
	out := client.Page[client.Rollout]{Items: []client.Rollout{}}
	skipping := after != ""
	var last string
	err := s.rollouts.ListFor(callerOf(c), func(r core.Rollout) bool {
		if skipping {
			skipping = r.ID != after
			return true
		}
		if (cluster != "" && r.Cluster != cluster) || (state != "" && string(r.State) != state) {
			return true
		}
		if len(out.Items) == limit {
			out.NextCursor = cursorOf(last)
			return false
		}
		out.Items = append(out.Items, restRolloutOf(r))
		last = r.ID
		return true
	})
	if err != nil {
		s.restFail(c, err)
		return
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, out)
}

// rolloutFor is the rollout id the caller may see; ok is false when the
// answer was already written.
func (s *Door) rolloutFor(c *gin.Context, id string) (core.Rollout, bool) {
	r, err := s.rollouts.GetFor(callerOf(c), id)
	if err != nil {
		s.restFail(c, err)
		return r, false
	}
	return r, true
}

func (s *Door) getRollout(c *gin.Context) {
	r, ok := s.rolloutFor(c, c.Param("id"))
	if !ok {
		return
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, restRolloutOf(r))
}

func (s *Door) startRollout(c *gin.Context) {
	var req client.RolloutStart
	if !bindBody(c, &req) {
		return
	}
	spec, err := s.rolloutSpec(c.Request.Context(), callerOf(c), req)
	if err != nil {
		s.restFail(c, err)
		return
	}
	switch c.Query("dry_run") {
	case "", "false":
	case "true":
		s.planRollout(c, spec)
		return
	default:
		Refuse(c, core.KindInvalid, "dry_run: want true or false")
		return
	}
	spec.By = caller.AccountName(credOf(c))
	r, err := s.rollouts.Start(c.Request.Context(), spec)
	if err != nil {
		s.restFail(c, err)
		return
	}
	c.Header("Location", Path+"rollouts/"+r.ID)
	httpserve.WriteJSON(c.Writer, http.StatusAccepted, restRolloutOf(r))
}

// rolloutSpec checks a start request and resolves what it names: the
// cluster and devices to their IDs, the target to the version tag or the
// image, the hooks to stored images.
func (s *Door) rolloutSpec(ctx context.Context, caller core.Caller, req client.RolloutStart) (rollout.Spec, error) {
	spec := rollout.Spec{Kind: core.RolloutKind(req.Kind), MaxUnavailable: req.MaxUnavailable, Hooks: req.Hooks,
		ContinueOnHookFailure: req.ContinueOnHookFailure, Mode: core.DeviceMode(req.Mode), Selector: req.Selector}
	invalid := func(format string, args ...any) (rollout.Spec, error) {
		return spec, core.Errorf(core.KindInvalid, format, args...)
	}
	if err := gateSpec(&spec, req); err != nil {
		return spec, err
	}
	switch spec.Kind {
	case core.RolloutImage, core.RolloutKubernetes, core.RolloutRemove:
	case core.RolloutJoin:
		return invalid("kind join: switch a standalone device to cluster mode with PUT %sdevices/{id}/desired", Path)
	default:
		return invalid("kind %q: want image, kubernetes or remove", req.Kind)
	}
	if req.Cluster == "" && spec.Kind != core.RolloutImage {
		return invalid("a %s rollout names its cluster", spec.Kind)
	}
	if req.Cluster == "" && len(req.Devices) == 0 {
		return invalid("an image rollout names a cluster or devices")
	}
	switch {
	case spec.Kind == core.RolloutRemove && req.Target != "":
		return invalid("a remove rollout has no target")
	case spec.Kind != core.RolloutRemove && req.Target == "":
		return invalid("a %s rollout needs a target (the %s)", spec.Kind, map[core.RolloutKind]string{
			core.RolloutImage: "SONiC image, by image store name or sha256", core.RolloutKubernetes: "Kubernetes version"}[spec.Kind])
	case spec.Mode != "" && (spec.Kind != core.RolloutRemove || spec.Mode != core.ModeStandalone):
		return invalid("mode %q: only a remove rollout takes a mode, and only standalone", req.Mode)
	case req.MaxUnavailable < 0:
		return invalid("max_unavailable must be 0 (one at a time) or more")
	}
	for _, d := range []struct {
		name, v string
		to      *time.Duration
	}{{"drain_timeout", req.DrainTimeout, &spec.DrainTimeout}, {"step_timeout", req.StepTimeout, &spec.StepTimeout}} {
		if d.v == "" {
			continue
		}
		v, err := time.ParseDuration(d.v)
		if err != nil || v <= 0 {
			return invalid("%s %q: want a positive duration such as 5m or 15m", d.name, d.v)
		}
		*d.to = v
	}
	if spec.Kind == core.RolloutKubernetes {
		v, err := s.kubeVersion(ctx, req.Target)
		if err != nil {
			return spec, err
		}
		spec.Target, spec.TargetID = v.tag, v.id
	}
	err := s.rollouts.Resolve(caller, &spec, req.Cluster, req.Target)
	if err != nil {
		return spec, err
	}
	seen := map[string]bool{}
	for _, ref := range req.Devices {
		d, err := s.lookupDevice(caller, ref)
		if errors.Is(err, core.ErrNotFound) {
			return invalid("device %s not found", ref)
		}
		if err != nil {
			return spec, err
		}
		if !seen[d.ID] {
			seen[d.ID] = true
			spec.Devices = append(spec.Devices, d.ID)
		}
	}
	return spec, nil
}

type kubeVersionRef struct{ tag, id string }

// kubeVersion finds a registered Kubernetes version by ID, name or
// semantic version (with or without the v).
func (s *Door) kubeVersion(ctx context.Context, ref string) (kubeVersionRef, error) {
	v, err := s.clusters.GetVersion(ctx, ref)
	if core.KindOf(err) == core.KindNotFound {
		if sv, perr := semver.Parse(ref); perr == nil {
			v, err = s.clusters.GetVersion(ctx, sv.Tag())
		}
	}
	if core.KindOf(err) == core.KindNotFound {
		return kubeVersionRef{}, core.Errorf(core.KindInvalid, "Kubernetes version %q is not registered (see GET %sversions)", ref, Path)
	}
	if err != nil {
		return kubeVersionRef{}, err
	}
	sv, err := semver.Parse(v.SemVer)
	if err != nil {
		return kubeVersionRef{}, core.Errorf(core.KindInvalid, "Kubernetes version %s: %v", v.Name, err)
	}
	return kubeVersionRef{tag: sv.Tag(), id: v.ID}, nil
}

// controlRollout serves POST /rollouts/{id}/{pause,resume,abort}.
func (s *Door) controlRollout(c *gin.Context) {
	id, by := c.Param("id"), caller.AccountName(credOf(c))
	if _, ok := s.rolloutFor(c, id); !ok {
		return
	}
	var r core.Rollout
	var err error
	switch op := c.FullPath()[strings.LastIndexByte(c.FullPath(), '/')+1:]; op {
	case "pause":
		r, err = s.rollouts.Pause(id, by)
	case "resume":
		r, err = s.rollouts.Resume(id, by)
	case "abort":
		r, err = s.rollouts.Abort(id, by)
	}
	if err != nil {
		s.restFail(c, err)
		return
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, restRolloutOf(r))
}
