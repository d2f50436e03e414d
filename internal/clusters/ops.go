package clusters

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// An operation is one asynchronous cluster command, as a row of CloudStack's
// state machine: the states it is accepted in and the transient state it
// enters from each, the state it reaches on success, the state a failure
// leaves, and the joiner's part. Every operation runs the same way: accept
// (validate, enter the transient state, store the job, in one transaction),
// then run (call the joiner, reach the target state, record the job).
type operation struct {
	command string // CloudStack command name
	// accept maps each state the command is accepted in to the transient
	// state it enters from there; "" accepts the command without a state
	// change (nothing for the joiner to do).
	accept map[core.ClusterState]core.ClusterState
	// refused is the error for any other state; format arguments are the
	// cluster ID ([1]) and state ([2]).
	refused string
	target  core.ClusterState // reached when the job succeeds
	// targetFrom overrides target by the transient state entered (start
	// of a Stopped cluster ends Starting, of one in Alert Running).
	targetFrom map[core.ClusterState]core.ClusterState
	fail       core.ClusterState // left when the job fails after a state change
	// atRun: the transient state is entered when the job starts, not when
	// it is accepted (create: the cluster is returned Created).
	atRun  bool
	reason string // why the state changes, for the transient state's event
	// call is the joiner's part, made with the cluster as the job changes it;
	// it may record its outcome in the job (a forced delete's abandoned
	// members).
	call func(ctx context.Context, m Membership, c core.Cluster, v core.Version, j *core.Job) error
	// failed names the step in the error of a failed call.
	failed func(j *core.Job, v core.Version) string
	// apply makes the job's changes to the cluster record.
	apply func(c *core.Cluster, j *core.Job, v core.Version)
	// done is the reason of the move to the target state.
	done func(old, cur core.Cluster, v core.Version) string
	// recordOnly stores a job accepted without a state change that still
	// changes the record (scale of a Created or Stopped cluster); without
	// it such a job succeeds at once.
	recordOnly func(tx core.Tx, c *core.Cluster) error
	plain      bool // the job's result is a plain success, not the cluster
	remove     bool // the record is deleted on success
	// beyond decides a state accept does not list: the transient state
	// to enter by a step ztpd adds to CloudStack's (see transitions), or ""
	// to refuse as refused says, or an error saying why not.
	beyond func(s *Service, tx core.Tx, c core.Cluster, j core.Job) (core.ClusterState, error)
}

// The operations. Their error texts and transitions are CloudStack's.
var (
	opCreate = &operation{
		command: "createKubernetesCluster",
		accept:  map[core.ClusterState]core.ClusterState{core.ClusterCreated: core.ClusterStarting},
		// The job ends with the cluster Starting: it is Running once ztpd's
		// watch sees its API server answer and its control-plane Nodes
		// Ready (ObserveHealth), which takes devices booting.
		target: core.ClusterStarting, fail: core.ClusterError, atRun: true, reason: "provisioning",
		call: func(ctx context.Context, m Membership, c core.Cluster, _ core.Version, _ *core.Job) error {
			return m.Provision(ctx, c)
		},
		failed: func(*core.Job, core.Version) string { return "provisioning cluster CA and tokens" },
		done: func(_ core.Cluster, c core.Cluster, _ core.Version) string {
			if c.IsExternal() {
				return "existing cluster registered; Running once its API server answers ztpd"
			}
			return "CA and join tokens provisioned; Running once its API server answers and its control planes are Ready"
		},
	}
	opScale = &operation{
		command: "scaleKubernetesCluster",
		accept: map[core.ClusterState]core.ClusterState{core.ClusterCreated: "", core.ClusterStopped: "",
			core.ClusterRunning: core.ClusterScaling},
		refused: "Kubernetes cluster ID: %[1]s is in %[2]s state",
		target:  core.ClusterRunning, fail: core.ClusterAlert,
		call: func(ctx context.Context, m Membership, c core.Cluster, _ core.Version, j *core.Job) error {
			if len(j.Params.Remove) == 0 {
				return m.Resize(ctx, c)
			}
			nr, ok := m.(NamedRemover)
			if !ok {
				return core.Errorf(core.KindUnavailable, "this appliance cannot remove named nodes")
			}
			return nr.RemoveMembers(ctx, c, j.Params.Remove)
		},
		failed: func(*core.Job, core.Version) string { return "resizing" },
		apply: func(c *core.Cluster, j *core.Job, _ core.Version) {
			if j.Params.Size > 0 {
				c.Size = j.Params.Size
			}
			if j.Params.OfferingID != "" {
				c.ServiceOfferingID = j.Params.OfferingID
			}
			if len(j.Params.NodeOfferings) > 0 {
				no := maps.Clone(c.NodeOfferings)
				if no == nil {
					no = map[string]string{}
				}
				maps.Copy(no, j.Params.NodeOfferings)
				c.NodeOfferings = no
			}
		},
		done: func(old, cur core.Cluster, _ core.Version) string {
			return fmt.Sprintf("scaled from %d to %d workers", old.Size, cur.Size)
		},
		recordOnly: func(tx core.Tx, c *core.Cluster) error {
			c.UpdatedAt = now()
			if err := tx.Clusters().Put(*c); err != nil {
				return err
			}
			_, err := tx.Events().Append(core.Event{Type: "cluster.scaled", Cluster: c.ID,
				Message: fmt.Sprintf("Kubernetes cluster %s: size %d, offering %s%s", c.Name, c.Size, c.ServiceOfferingID, describeShapes(*c))})
			return err
		},
	}
	opUpgrade = &operation{
		command: "upgradeKubernetesCluster",
		accept:  map[core.ClusterState]core.ClusterState{core.ClusterRunning: core.ClusterUpgrading},
		refused: "Kubernetes cluster ID: %[1]s is not in running state",
		target:  core.ClusterRunning, fail: core.ClusterAlert,
		call: func(ctx context.Context, m Membership, c core.Cluster, v core.Version, _ *core.Job) error {
			return m.SetVersion(ctx, c, v)
		},
		failed: func(_ *core.Job, v core.Version) string { return "setting version " + v.SemVer },
		apply:  func(c *core.Cluster, _ *core.Job, v core.Version) { c.VersionID = v.ID },
		done:   func(_, _ core.Cluster, v core.Version) string { return "upgraded to " + v.SemVer },
	}
	// Stopping a Stopped or Stopping cluster succeeds without change, as in
	// CloudStack.
	opStop = &operation{
		command: "stopKubernetesCluster",
		accept: map[core.ClusterState]core.ClusterState{core.ClusterRunning: core.ClusterStopping,
			core.ClusterStopped: "", core.ClusterStopping: ""},
		refused: "Kubernetes cluster ID: %[1]s is in %[2]s state and cannot be stopped",
		target:  core.ClusterStopped, fail: core.ClusterAlert,
		call: func(ctx context.Context, m Membership, c core.Cluster, _ core.Version, _ *core.Job) error {
			return m.Stop(ctx, c)
		},
		failed: func(j *core.Job, _ core.Version) string { return j.Command },
		done:   func(core.Cluster, core.Cluster, core.Version) string { return "tokens suspended; members kept" },
		plain:  true,
	}
	// Starting recovers a cluster in Alert; starting a Running or Starting
	// one succeeds without change, as in CloudStack.
	opStart = &operation{
		command: "startKubernetesCluster",
		accept: map[core.ClusterState]core.ClusterState{core.ClusterStopped: core.ClusterStarting,
			core.ClusterAlert: core.ClusterRecovering, core.ClusterRunning: "", core.ClusterStarting: ""},
		refused: "Kubernetes cluster ID: %[1]s is in %[2]s state and cannot be started",
		target:  core.ClusterRunning, fail: core.ClusterAlert,
		// A started cluster is Starting until the watch sees it healthy,
		// as after create; a recovered one is Running, and the watch moves
		// it back to Alert if it is not healthy for AlertAfter.
		targetFrom: map[core.ClusterState]core.ClusterState{core.ClusterStarting: core.ClusterStarting},
		call: func(ctx context.Context, m Membership, c core.Cluster, _ core.Version, _ *core.Job) error {
			return m.Start(ctx, c)
		},
		failed: func(j *core.Job, _ core.Version) string { return j.Command },
		done:   func(core.Cluster, core.Cluster, core.Version) string { return "tokens re-enabled" },
	}
	opDelete = &operation{
		command: "deleteKubernetesCluster",
		accept: map[core.ClusterState]core.ClusterState{core.ClusterRunning: core.ClusterDestroying,
			core.ClusterStopped: core.ClusterDestroying, core.ClusterAlert: core.ClusterDestroying,
			core.ClusterError: core.ClusterDestroying},
		refused: "Kubernetes cluster ID: %[1]s is in %[2]s state and cannot be deleted",
		target:  core.ClusterDestroyed, fail: core.ClusterAlert,
		beyond: deleteBeyond,
		// With force, a Membership that takes members off their nodes
		// first (ForceDestroyer) destroys the cluster even when that
		// failed, and the members it left are recorded in the job.
		call: func(ctx context.Context, m Membership, c core.Cluster, _ core.Version, j *core.Job) error {
			fd, ok := m.(ForceDestroyer)
			if !j.Params.Force || !ok {
				return m.Destroy(ctx, c)
			}
			abandoned, err := fd.DestroyForce(ctx, c)
			if err != nil {
				return err
			}
			j.Abandoned = abandoned
			return nil
		},
		failed: func(*core.Job, core.Version) string { return "destroying" },
		done: func(core.Cluster, core.Cluster, core.Version) string {
			return "tokens revoked, members left, CA destroyed"
		},
		plain: true, remove: true,
	}
)

// checkFunc validates an operation's parameters against the cluster and
// fills the job's; enter false accepts it without the state change.
type checkFunc func(tx core.Tx, c *core.Cluster, j *core.Job) (enter bool, err error)

// accept validates and accepts op on the cluster ref in one transaction:
// the state must be one op accepts, check (optional) must pass, the cluster
// enters op's transient state and the job is stored. Then the job runs.
func (s *Service) accept(caller Caller, ref string, op *operation, check checkFunc) (core.Job, error) {
	return s.acceptWith(caller, ref, op, core.JobParams{}, check)
}

// acceptWith is accept of a job that starts with params (a forced delete's
// Force), which op.beyond may consult.
func (s *Service) acceptWith(caller Caller, ref string, op *operation, params core.JobParams, check checkFunc) (core.Job, error) {
	var j core.Job
	err := s.st.Update(func(tx core.Tx) error {
		c, err := clusterFor(tx, caller, ref)
		if err != nil {
			return err
		}
		if op == opScale || op == opUpgrade || op == opStop || op == opStart {
			if err := refuseExternal(c, op.command); err != nil {
				return err
			}
		}
		j = newJob(op.command, InstanceCluster, c.ID, caller)
		j.Appliance = s.opts.Appliance
		j.Params = params
		enter, ok := op.accept[c.State]
		added := false
		if !ok && op.beyond != nil {
			if enter, err = op.beyond(s, tx, c, j); err != nil {
				return err
			}
			ok, added = enter != "", true
		}
		if !ok {
			return core.Errorf(core.KindState, op.refused, c.ID, c.State)
		}
		if check != nil {
			in, err := check(tx, &c, &j)
			if err != nil {
				return err
			}
			if !in {
				enter = ""
			}
		}
		if enter != "" {
			j.FailState, j.Params.Target = op.fail, op.target
			if t, ok := op.targetFrom[enter]; ok {
				j.Params.Target = t
			}
			if enter != c.State {
				if err := s.moveState(tx, &c, enter, op.command, added || CanTransition(c.State, enter)); err != nil {
					return err
				}
			}
		}
		if err := appendWrite(tx, caller, op.command, c.ID, "", fmt.Sprintf("%s of Kubernetes cluster %s accepted (job %s)", op.command, c.Name, j.ID),
			map[string]string{"job": j.ID}); err != nil {
			return err
		}
		return tx.Jobs().Put(j)
	})
	if err != nil {
		return core.Job{}, err
	}
	s.start(j, func(ctx context.Context, j *core.Job) error { return s.run(ctx, op, j) })
	return j, nil
}

// run is every operation's job: enter the transient state (atRun), make
// the joiner's call, move to the target state with the job's changes, and
// record the outcome. A job accepted without a state change only records
// (recordOnly) or succeeds at once.
func (s *Service) run(ctx context.Context, op *operation, j *core.Job) error {
	if op.atRun {
		if _, err := s.transition(j.InstanceID, op.accept[core.ClusterCreated], op.reason); err != nil {
			return s.failJob(j, err)
		}
	}
	var c core.Cluster
	var v core.Version
	err := s.st.View(func(tx core.Tx) error {
		var err error
		if c, err = tx.Clusters().Get(j.InstanceID); err != nil {
			return err
		}
		if j.Params.VersionID != "" {
			v, err = tx.Versions().Get(j.Params.VersionID)
		}
		return err
	})
	if err != nil {
		return s.failJob(j, err)
	}
	entered := j.Params.Target != ""
	if !entered && op.recordOnly == nil {
		return s.succeed(j, &c, op.plain) // nothing to do
	}
	if op.apply != nil {
		op.apply(&c, j, v)
	}
	if entered && s.mem != nil && op.call != nil {
		if err := s.call(ctx, func(ctx context.Context) error { return op.call(ctx, s.mem, c, v, j) }); err != nil {
			return s.failJob(j, fmt.Errorf("%s: %w", op.failed(j, v), err))
		}
	}
	err = s.st.Update(func(tx core.Tx) error {
		cur, err := tx.Clusters().Get(j.InstanceID)
		if err != nil {
			return err
		}
		old := cur
		if op.apply != nil {
			op.apply(&cur, j, v)
		}
		switch {
		case entered && cur.State == j.Params.Target:
			// Reached already (create's Starting): keep the job's changes.
			cur.UpdatedAt = now()
			if err = tx.Clusters().Put(cur); err == nil {
				_, err = tx.Events().Append(core.Event{Type: "cluster." + op.command, Cluster: cur.ID,
					Message: fmt.Sprintf("Kubernetes cluster %s: %s (%s)", cur.Name, cur.State, op.done(old, cur, v))})
			}
		case entered && j.Params.Target == core.ClusterStarting && (cur.State == core.ClusterRunning || cur.State == core.ClusterAlert):
			// The watch decided while the job ran: its state stands.
			err = tx.Clusters().Put(cur)
		case entered:
			err = s.setState(tx, &cur, j.Params.Target, op.done(old, cur, v))
		default:
			err = op.recordOnly(tx, &cur)
		}
		if err != nil {
			return err
		}
		if len(j.Abandoned) > 0 {
			if err := appendAbandoned(tx, cur, j); err != nil {
				return err
			}
		}
		c = cur
		if op.remove {
			return tx.Clusters().Delete(cur.ID)
		}
		return nil
	})
	if err != nil {
		return s.failJob(j, err)
	}
	if op.remove {
		s.members.forget(c.ID)
		return s.succeed(j, nil, op.plain)
	}
	return s.succeed(j, &c, op.plain)
}

// ScaleCluster changes the desired size and/or the service offering.
// size <= 0 leaves the size; offering "" leaves the offering. remove names
// the worker members to take out (CloudStack's nodeids: device IDs); the
// size then shrinks by as many (a size given must agree).
func (s *Service) ScaleCluster(ctx context.Context, caller Caller, ref string, size int, offering string, remove ...string) (core.Job, error) {
	return s.ScaleClusterShapes(ctx, caller, ref, size, offering, nil, remove...)
}

// ScaleClusterShapes is ScaleCluster that may also set per-role offerings
// (nodeofferings: node type to offering ID or name), none smaller than
// the role's current one.
func (s *Service) ScaleClusterShapes(ctx context.Context, caller Caller, ref string, size int, offering string, nodeOfferings map[string]string, remove ...string) (core.Job, error) {
	// The etcd type is checked against the cluster below.
	roles, err := resolveNodeOfferings(nodeOfferings, MaxEtcdNodes)
	if err != nil {
		return core.Job{}, err
	}
	if len(remove) > 0 {
		if len(roles) > 0 {
			return core.Job{}, core.Errorf(core.KindInvalid, "Kubernetes cluster %s: nodeids and nodeofferings cannot be passed together", ref)
		}
		return s.scaleRemoving(caller, ref, size, offering, remove)
	}
	if size == 0 && offering == "" && len(roles) == 0 {
		return core.Job{}, core.Errorf(core.KindInvalid, "Kubernetes cluster %s cannot be scaled, either a new service offering or a new cluster size must be passed", ref)
	}
	if size < 0 || size > MaxNodes {
		return core.Job{}, core.Errorf(core.KindInvalid, "Kubernetes cluster %s cannot be scaled for size, %d", ref, size)
	}
	var off Offering
	if offering != "" {
		var ok bool
		if off, ok = OfferingByID(offering); !ok {
			return core.Job{}, core.Errorf(core.KindInvalid, "Failed to find service offering ID: %s", offering)
		}
	}
	return s.accept(caller, ref, opScale, func(tx core.Tx, c *core.Cluster, j *core.Job) (bool, error) {
		if size > 0 && c.State == core.ClusterStopped {
			return false, core.Errorf(core.KindState, "Kubernetes cluster ID: %s is in %s state; its size can change only while it is Created or Running", c.ID, c.State)
		}
		if offering != "" {
			cur, _ := OfferingByID(c.ServiceOfferingID)
			if err := checkNotSmaller(*c, "", cur, off); err != nil {
				return false, err
			}
		}
		if roles[NodeEtcd] != "" && c.EtcdNodes == 0 {
			return false, core.Errorf(core.KindInvalid, "nodeofferings: node type etcd needs etcd nodes, and Kubernetes cluster %s runs etcd on its control planes", c.Name)
		}
		for t, id := range roles {
			cur, _ := RoleOffering(*c, t)
			next, _ := OfferingByID(id)
			if err := checkNotSmaller(*c, "the "+t+" nodes of ", cur, next); err != nil {
				return false, err
			}
		}
		j.Params = core.JobParams{Size: size, OfferingID: off.ID, NodeOfferings: roles}
		return c.State == core.ClusterRunning && size > 0 && size != c.Size, nil
	})
}

// scaleRemoving is a scale-down that names its members: each must be a
// distinct worker member of the Running cluster, and one worker at least
// must stay.
func (s *Service) scaleRemoving(caller Caller, ref string, size int, offering string, remove []string) (core.Job, error) {
	if offering != "" {
		return core.Job{}, core.Errorf(core.KindInvalid, "Kubernetes cluster %s: nodeids and serviceofferingid cannot be passed together", ref)
	}
	return s.removeNamed(opScale, caller, ref, size, remove)
}

// removeNamed accepts op (a scale naming its members) over remove.
func (s *Service) removeNamed(op *operation, caller Caller, ref string, size int, remove []string) (core.Job, error) {
	return s.accept(caller, ref, op, func(tx core.Tx, c *core.Cluster, j *core.Job) (bool, error) {
		if c.State != core.ClusterRunning {
			return false, core.Errorf(core.KindState, "Kubernetes cluster ID: %s is in %s state; nodes can be removed only while it is Running", c.ID, c.State)
		}
		seen := map[string]bool{}
		var ids []string
		for _, ref := range remove {
			id, err := core.NormalizeMAC(ref)
			if err != nil {
				id = ref
			}
			m, err := tx.Memberships().Get(id)
			if err != nil || m.Cluster != c.ID || m.State == core.StateLeft || m.State == core.StateLeaving {
				return false, core.Errorf(core.KindInvalid, "Kubernetes cluster %s has no node %s", c.Name, ref)
			}
			if m.Role == "control-plane" {
				return false, core.Errorf(core.KindInvalid, "node %s of Kubernetes cluster %s is a control plane; only worker nodes can be removed", ref, c.Name)
			}
			if m.Role == NodeEtcd {
				return false, core.Errorf(core.KindInvalid, "node %s of Kubernetes cluster %s is an etcd node; only worker nodes can be removed", ref, c.Name)
			}
			if seen[id] {
				return false, core.Errorf(core.KindInvalid, "node %s is named twice", ref)
			}
			seen[id] = true
			ids = append(ids, id)
		}
		newSize := c.Size - len(ids)
		if newSize < 1 {
			return false, core.Errorf(core.KindInvalid, "Kubernetes cluster %s cannot be scaled below 1 worker (size %d, %d nodes named)", c.Name, c.Size, len(ids))
		}
		if size > 0 && size != newSize {
			return false, core.Errorf(core.KindInvalid, "Kubernetes cluster %s: removing %d of its %d workers leaves %d, not the size %d given", c.Name, len(ids), c.Size, newSize, size)
		}
		j.Params = core.JobParams{Size: newSize, Remove: ids}
		return true, nil
	})
}

// UpgradeCluster moves a Running cluster to another Kubernetes version.
func (s *Service) UpgradeCluster(ctx context.Context, caller Caller, ref, versionRef string) (core.Job, error) {
	return s.accept(caller, ref, opUpgrade, func(tx core.Tx, c *core.Cluster, j *core.Job) (bool, error) {
		to, err := versionByRef(tx, versionRef)
		if err != nil {
			return false, core.Errorf(core.KindInvalid, "Invalid Kubernetes version ID: %s", versionRef)
		}
		if err := checkVersionUsable(to, s.zone); err != nil {
			return false, err
		}
		from, err := tx.Versions().Get(c.VersionID)
		if err != nil {
			return false, core.Errorf(core.KindInvalid, "Invalid Kubernetes version associated with cluster ID: %s", c.ID)
		}
		if err := CheckUpgrade(from.SemVer, to.SemVer); err != nil {
			return false, &core.Error{Kind: core.KindInvalid, Msg: err.Error()}
		}
		j.Params = core.JobParams{VersionID: to.ID}
		return true, nil
	})
}

// StopCluster stops a Running cluster: the joiner suspends its tokens, so
// no device joins; existing members are kept.
func (s *Service) StopCluster(ctx context.Context, caller Caller, ref string) (core.Job, error) {
	return s.accept(caller, ref, opStop, nil)
}

// StartCluster starts a Stopped cluster, or recovers one in Alert: the
// joiner re-enables its tokens.
func (s *Service) StartCluster(ctx context.Context, caller Caller, ref string) (core.Job, error) {
	return s.accept(caller, ref, opStart, nil)
}

// DeleteOptions are how a cluster is deleted.
type DeleteOptions struct {
	// Force destroys the cluster even when its members cannot be taken out
	// of it first (ForceDestroyer): the job succeeds, names the members
	// left on their nodes (core.Job.Abandoned) and a "cluster.abandoned"
	// event records them. CloudStack's deleteKubernetesCluster has no such
	// parameter; the REST API and the CLI set it.
	Force bool
}

// DeleteCluster destroys a cluster: members taken out of it (by a
// Membership that acts on nodes), tokens revoked, members left, CA key
// destroyed, record removed.
func (s *Service) DeleteCluster(ctx context.Context, caller Caller, ref string, opts DeleteOptions) (core.Job, error) {
	return s.acceptWith(caller, ref, opDelete, core.JobParams{Force: opts.Force}, nil)
}

// deleteBeyond admits the deletes CloudStack's state machine has no edge
// for (see transitions): with force from any state, and without it a Starting
// cluster none of whose members has joined, which has nothing on any node
// to take down. A Starting cluster with joined members is refused with
// what would let it go.
func deleteBeyond(s *Service, tx core.Tx, c core.Cluster, j core.Job) (core.ClusterState, error) {
	if j.Params.Force {
		return core.ClusterDestroying, nil
	}
	if c.State != core.ClusterStarting {
		return "", nil
	}
	joined, err := joinedMembers(tx, c.ID)
	if err != nil {
		return "", err
	}
	if len(joined) == 0 {
		return core.ClusterDestroying, nil
	}
	return "", core.Errorf(core.KindState, "Kubernetes cluster ID: %s is in %s state and cannot be deleted: %d %s joined (%s); "+
		"it can be deleted once it is Running, or in Alert, where it goes if it is not Running within %s of starting, or with force",
		c.ID, c.State, len(joined), plural(len(joined), "member has", "members have"), strings.Join(joined, ", "), HumanDuration(s.opts.StartTimeout))
}

// joinedMembers are the devices of cluster whose Node has registered
// (joined, not ready or lost), in device order.
func joinedMembers(tx core.Tx, cluster string) ([]string, error) {
	var joined []string
	err := tx.Memberships().Roster(cluster, func(device, _ string) (bool, error) {
		m, err := tx.Memberships().Get(device)
		if errors.Is(err, core.ErrNotFound) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		if NodeRegistered(m.State) {
			joined = append(joined, device)
		}
		return true, nil
	})
	return joined, err
}

// NodeRegistered reports whether a member in state st has joined: its Node
// registered (Ready, not ready or lost). A member that has not has
// nothing on its node for a delete to take down.
func NodeRegistered(st core.DeviceState) bool {
	switch st {
	case core.StateJoined, core.StateNotReady, core.StateLost:
		return true
	}
	return false
}

// appendAbandoned records, with the deletion, the members a forced delete
// left on their nodes: one event naming each (device, Node, why) and who
// asked.
func appendAbandoned(tx core.Tx, c core.Cluster, j *core.Job) error {
	parts := make([]string, 0, len(j.Abandoned))
	devices := make([]string, 0, len(j.Abandoned))
	nodes := make([]string, 0, len(j.Abandoned))
	for _, a := range j.Abandoned {
		node := a.Node
		if node == "" {
			node = "no Node"
		}
		parts = append(parts, fmt.Sprintf("%s (device %s): %s", node, a.Device, a.Reason))
		devices = append(devices, a.Device)
		nodes = append(nodes, a.Node)
	}
	_, err := tx.Events().Append(core.Event{Type: "cluster.abandoned", Cluster: c.ID,
		Message: fmt.Sprintf("Kubernetes cluster %s deleted with force; %d %s abandoned, left as they were: %s",
			c.Name, len(j.Abandoned), plural(len(j.Abandoned), "member", "members"), strings.Join(parts, "; ")),
		Fields: map[string]string{"job": j.ID, "api_key": j.Owner, "account": j.Account,
			"devices": strings.Join(devices, ","), "nodes": strings.Join(nodes, ",")}})
	return err
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// call runs one Membership call bounded by the operation timeout.
func (s *Service) call(ctx context.Context, f func(context.Context) error) error {
	ctx, cancel := CallContext(ctx, s.opts.OpTimeout)
	defer cancel()
	return f(ctx)
}

type jobContextKey struct{}

// CallContext is the context of one Membership call of the job running in
// job: bounded by timeout, its JobContext job.
func CallContext(job context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithValue(job, jobContextKey{}, job), timeout)
}

// JobContext is, for a Membership call, the context of the job it runs
// in: without the call's deadline (Options.OpTimeout), cancelled when the
// service closes. A call waiting for what outlives that deadline (a
// rollout) waits on it, so a closing service still ends the wait. Outside
// a job it is ctx.
func JobContext(ctx context.Context) context.Context {
	if j, ok := ctx.Value(jobContextKey{}).(context.Context); ok {
		return j
	}
	return ctx
}

// transition moves a cluster to state `to` if the state machine allows it,
// in its own durable transaction, and returns the stored cluster.
func (s *Service) transition(id string, to core.ClusterState, reason string) (core.Cluster, error) {
	var c core.Cluster
	err := s.st.Update(func(tx core.Tx) error {
		var err error
		if c, err = tx.Clusters().Get(id); err != nil {
			return err
		}
		return s.setState(tx, &c, to, reason)
	})
	return c, err
}

// setState applies one state-machine step inside tx and records an event.
func (s *Service) setState(tx core.Tx, c *core.Cluster, to core.ClusterState, reason string) error {
	return s.moveState(tx, c, to, reason, CanTransition(c.State, to))
}

// moveState is setState with the step's admission decided by the caller:
// the steps ztpd adds to CloudStack's (see transitions) are deleteBeyond's.
func (s *Service) moveState(tx core.Tx, c *core.Cluster, to core.ClusterState, reason string, allowed bool) error {
	if !allowed {
		return core.Errorf(core.KindState, "Kubernetes cluster %s cannot move from %s to %s", c.Name, c.State, to)
	}
	from := c.State
	c.State = to
	c.UpdatedAt = now()
	c.StateSince = c.UpdatedAt
	if err := tx.Clusters().Put(*c); err != nil {
		return err
	}
	_, err := tx.Events().Append(core.Event{Type: "cluster.state", Cluster: c.ID,
		Message: fmt.Sprintf("Kubernetes cluster %s: %s -> %s (%s)", c.Name, from, to, reason),
		Fields:  map[string]string{"from": string(from), "to": string(to)}})
	return err
}
