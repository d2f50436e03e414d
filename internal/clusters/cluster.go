package clusters

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// ClusterSpec is a new cluster (createKubernetesCluster parameters).
type ClusterSpec struct {
	Name              string // required
	Description       string
	ZoneID            string // required by CloudStack; must be this appliance's zone
	VersionID         string // required (ID or name)
	ServiceOfferingID string // required (ID or name)
	Size              int    // workers, >= 1
	ControlNodes      int    // >= 1, default 1; > 1 needs Kubernetes >= 1.16.0
	Keypair           string
	NetworkID         string
	ExternalLBIP      string
	NodeRootDiskSize  int64 // GiB; > 0 when given
	JoinMethod        string
}

var clusterNameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)

// CreateCluster validates spec, stores the cluster in state Created and
// starts the job that provisions it (Created -> Starting -> Running).
func (s *Service) CreateCluster(ctx context.Context, caller Caller, spec ClusterSpec) (core.Cluster, Job, error) {
	if spec.ControlNodes == 0 {
		spec.ControlNodes = 1
	}
	if spec.JoinMethod == "" {
		spec.JoinMethod = "kubeadm"
	}
	switch {
	case !clusterNameRE.MatchString(spec.Name):
		return core.Cluster{}, Job{}, errorf(KindInvalid, "Invalid name for the Kubernetes cluster name: %q (use up to 63 letters, digits and -, starting and ending with a letter or digit)", spec.Name)
	case len(spec.Description) > 1024:
		return core.Cluster{}, Job{}, errorf(KindInvalid, "Description is longer than 1024 characters")
	case spec.ControlNodes < 1 || spec.ControlNodes > MaxNodes:
		return core.Cluster{}, Job{}, errorf(KindInvalid, "Invalid cluster control nodes count: %d", spec.ControlNodes)
	case spec.Size < 1 || spec.Size > MaxNodes:
		return core.Cluster{}, Job{}, errorf(KindInvalid, "Invalid cluster size: %d", spec.Size)
	case spec.ZoneID != s.zone.ID:
		return core.Cluster{}, Job{}, errorf(KindInvalid, "Unable to find zone by ID: %s", spec.ZoneID)
	case spec.NodeRootDiskSize < 0:
		return core.Cluster{}, Job{}, errorf(KindInvalid, "Invalid value for noderootdisksize")
	}
	switch spec.JoinMethod {
	case "kubeadm", "k3s", "sonic":
	default:
		return core.Cluster{}, Job{}, errorf(KindInvalid, "Invalid join method %q: use kubeadm, k3s or sonic", spec.JoinMethod)
	}
	if spec.ExternalLBIP != "" {
		if _, err := netip.ParseAddr(spec.ExternalLBIP); err != nil {
			return core.Cluster{}, Job{}, errorf(KindInvalid, "Invalid external load balancer IP address")
		}
	}
	off, ok := OfferingByID(spec.ServiceOfferingID)
	if !ok {
		return core.Cluster{}, Job{}, errorf(KindInvalid, "No service offering with ID: %s", spec.ServiceOfferingID)
	}
	var c core.Cluster
	var j Job
	err := s.st.Update(func(tx core.Tx) error {
		v, err := versionByRef(tx, spec.VersionID)
		if err != nil {
			return errorf(KindInvalid, "Unable to find given Kubernetes version in supported versions")
		}
		if err := checkVersionUsable(v, s.zone); err != nil {
			return err
		}
		if spec.ControlNodes > 1 && !SupportsHA(v.SemVer) {
			return errorf(KindInvalid, "HA support is available only for Kubernetes version %s and above. Given version ID: %s is %s", MinVersionHA, v.ID, v.SemVer)
		}
		if _, err := core.ClusterByName(tx, spec.Name); err == nil {
			return errorf(KindConflict, "Kubernetes cluster with name %s already exists", spec.Name)
		}
		t := now()
		c = core.Cluster{ID: newUUID(), Name: spec.Name, Description: spec.Description, ZoneID: s.zone.ID,
			VersionID: v.ID, ServiceOfferingID: off.ID, Size: spec.Size, ControlNodes: spec.ControlNodes,
			State: core.ClusterCreated, Keypair: spec.Keypair, NetworkID: spec.NetworkID,
			ExternalLBIP: spec.ExternalLBIP, JoinMethod: spec.JoinMethod, Owner: caller.APIKey,
			Account: caller.AccountName(), Created: t, UpdatedAt: t}
		if c.ExternalLBIP != "" {
			c.Endpoint = endpointURL(c.ExternalLBIP)
		}
		if err := core.PutCluster(tx, c); err != nil {
			return err
		}
		if _, err := core.AppendEvent(tx, core.Event{Type: "cluster.created", Cluster: c.ID,
			Message: fmt.Sprintf("Kubernetes cluster %s created (version %s, %d control + %d workers)", c.Name, v.SemVer, c.ControlNodes, c.Size),
			Fields:  map[string]string{"state": string(c.State), "version": v.ID}}); err != nil {
			return err
		}
		j = newJob("createKubernetesCluster", InstanceCluster, c.ID, caller)
		j.FailState = core.ClusterError
		if err := appendWrite(tx, caller, j.Command, c.ID, "", fmt.Sprintf("createKubernetesCluster %s accepted (job %s)", c.Name, j.ID),
			map[string]string{"job": j.ID}); err != nil {
			return err
		}
		return tx.Put(core.BucketJobs, j.ID, j)
	})
	if err != nil {
		return core.Cluster{}, Job{}, err
	}
	s.start(j, s.runCreate)
	return c, j, nil
}

func checkVersionUsable(v core.Version, z Zone) error {
	if v.State != VersionEnabled {
		return errorf(KindInvalid, "Kubernetes version ID: %s is in %s state", v.ID, v.State)
	}
	if v.ZoneID != "" && v.ZoneID != z.ID {
		return errorf(KindInvalid, "Kubernetes version ID: %s is not available for zone ID: %s", v.ID, z.ID)
	}
	return nil
}

func endpointURL(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err == nil && a.Is6() {
		return "https://[" + ip + "]:6443/"
	}
	return "https://" + ip + ":6443/"
}

func (s *Service) runCreate(ctx context.Context, j *Job) error {
	c, err := s.transition(j.InstanceID, core.ClusterStarting, "provisioning")
	if err != nil {
		return s.failJob(j, err)
	}
	if m := s.membership(); m != nil {
		if err := s.call(ctx, func(ctx context.Context) error { return m.Provision(ctx, c) }); err != nil {
			return s.failJob(j, fmt.Errorf("provisioning cluster CA and tokens: %w", err))
		}
	}
	if c, err = s.transition(j.InstanceID, core.ClusterRunning, "CA and join tokens provisioned; devices join over time"); err != nil {
		return s.failJob(j, err)
	}
	return s.succeed(j, &c, false)
}

// call runs one Membership call bounded by the operation timeout.
func (s *Service) call(ctx context.Context, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.OpTimeout)
	defer cancel()
	return f(ctx)
}

// transition moves a cluster to state `to` if the state machine allows it,
// in its own durable transaction, and returns the stored cluster.
func (s *Service) transition(id string, to core.ClusterState, reason string) (core.Cluster, error) {
	var c core.Cluster
	err := s.st.Update(func(tx core.Tx) error {
		var err error
		if c, err = core.GetCluster(tx, id); err != nil {
			return err
		}
		return s.setState(tx, &c, to, reason)
	})
	return c, err
}

// setState applies one state-machine step inside tx and records an event.
func (s *Service) setState(tx core.Tx, c *core.Cluster, to core.ClusterState, reason string) error {
	if !CanTransition(c.State, to) {
		return errorf(KindState, "Kubernetes cluster %s cannot move from %s to %s", c.Name, c.State, to)
	}
	from := c.State
	c.State = to
	c.UpdatedAt = now()
	if err := core.PutCluster(tx, *c); err != nil {
		return err
	}
	_, err := core.AppendEvent(tx, core.Event{Type: "cluster.state", Cluster: c.ID,
		Message: fmt.Sprintf("Kubernetes cluster %s: %s -> %s (%s)", c.Name, from, to, reason),
		Fields:  map[string]string{"from": string(from), "to": string(to)}})
	return err
}

// clusterFor finds a cluster by ID or name among those caller sees; any
// other is "not found", worded as for a cluster that does not exist.
func clusterFor(tx core.Tx, caller Caller, ref string) (core.Cluster, error) {
	if c, err := core.GetCluster(tx, ref); err == nil && caller.Sees(c) {
		return c, nil
	}
	if c, err := core.ClusterByName(tx, ref); err == nil && caller.Sees(c) {
		return c, nil
	}
	return core.Cluster{}, errorf(KindNotFound, "Invalid Kubernetes cluster ID: %s", ref)
}

// clusterByRef finds a cluster by ID or name.
func clusterByRef(tx core.Tx, ref string) (core.Cluster, error) {
	if c, err := core.GetCluster(tx, ref); err == nil {
		return c, nil
	}
	if c, err := core.ClusterByName(tx, ref); err == nil {
		return c, nil
	}
	return core.Cluster{}, errorf(KindNotFound, "Invalid Kubernetes cluster ID: %s", ref)
}

func scanClusters(tx core.Tx, fn func(core.Cluster) bool) error {
	return tx.Scan(core.BucketClusters, "", func(_ string, raw []byte) (bool, error) {
		var c core.Cluster
		if err := core.Decode(raw, &c); err != nil {
			return false, err
		}
		return fn(c), nil
	})
}

// begin validates and accepts a cluster operation in one transaction: check
// runs on the current cluster and returns the state to enter now ("" to
// leave it) or an error; the job is stored with it.
func (s *Service) begin(caller Caller, ref, command string, check func(tx core.Tx, c *core.Cluster, j *Job) (core.ClusterState, error)) (Job, error) {
	var j Job
	err := s.st.Update(func(tx core.Tx) error {
		c, err := clusterFor(tx, caller, ref)
		if err != nil {
			return err
		}
		j = newJob(command, InstanceCluster, c.ID, caller)
		enter, err := check(tx, &c, &j)
		if err != nil {
			return err
		}
		if enter != "" && enter != c.State {
			if err := s.setState(tx, &c, enter, command); err != nil {
				return err
			}
		}
		if err := appendWrite(tx, caller, command, c.ID, "", fmt.Sprintf("%s of Kubernetes cluster %s accepted (job %s)", command, c.Name, j.ID),
			map[string]string{"job": j.ID}); err != nil {
			return err
		}
		return tx.Put(core.BucketJobs, j.ID, j)
	})
	return j, err
}

// ScaleCluster changes the desired size and/or the service offering.
// size <= 0 leaves the size; offering "" leaves the offering.
func (s *Service) ScaleCluster(ctx context.Context, caller Caller, ref string, size int, offering string) (Job, error) {
	if size == 0 && offering == "" {
		return Job{}, errorf(KindInvalid, "Kubernetes cluster %s cannot be scaled, either a new service offering or a new cluster size must be passed", ref)
	}
	if size < 0 || size > MaxNodes {
		return Job{}, errorf(KindInvalid, "Kubernetes cluster %s cannot be scaled for size, %d", ref, size)
	}
	var off Offering
	if offering != "" {
		var ok bool
		if off, ok = OfferingByID(offering); !ok {
			return Job{}, errorf(KindInvalid, "Failed to find service offering ID: %s", offering)
		}
	}
	j, err := s.begin(caller, ref, "scaleKubernetesCluster", func(tx core.Tx, c *core.Cluster, j *Job) (core.ClusterState, error) {
		switch c.State {
		case core.ClusterCreated, core.ClusterRunning, core.ClusterStopped:
		default:
			return "", errorf(KindState, "Kubernetes cluster ID: %s is in %s state", c.ID, c.State)
		}
		if size > 0 && c.State == core.ClusterStopped {
			return "", errorf(KindState, "Kubernetes cluster ID: %s is in %s state; its size can change only while it is Created or Running", c.ID, c.State)
		}
		if offering != "" {
			cur, _ := OfferingByID(c.ServiceOfferingID)
			if off.CPU < cur.CPU || off.MemoryMB < cur.MemoryMB {
				return "", errorf(KindInvalid, "Kubernetes cluster cannot be scaled down for service offering. Service offering ID: %s offers lesser resources as compared to service offering ID: %s of Kubernetes cluster ID: %s", off.ID, cur.ID, c.ID)
			}
		}
		j.Params = JobParams{Size: size, OfferingID: off.ID, Target: c.State}
		if c.State == core.ClusterRunning && size > 0 && size != c.Size {
			j.FailState = core.ClusterAlert
			return core.ClusterScaling, nil
		}
		return "", nil
	})
	if err != nil {
		return Job{}, err
	}
	s.start(j, s.runScale)
	return j, nil
}

func (s *Service) runScale(ctx context.Context, j *Job) error {
	apply := func(c *core.Cluster) {
		if j.Params.Size > 0 {
			c.Size = j.Params.Size
		}
		if j.Params.OfferingID != "" {
			c.ServiceOfferingID = j.Params.OfferingID
		}
	}
	var c core.Cluster
	err := s.st.View(func(tx core.Tx) error {
		var err error
		c, err = core.GetCluster(tx, j.InstanceID)
		return err
	})
	if err != nil {
		return s.failJob(j, err)
	}
	apply(&c)
	if c.State == core.ClusterScaling {
		if m := s.membership(); m != nil {
			if err := s.call(ctx, func(ctx context.Context) error { return m.Resize(ctx, c) }); err != nil {
				return s.failJob(j, fmt.Errorf("resizing: %w", err))
			}
		}
	}
	err = s.st.Update(func(tx core.Tx) error {
		cur, err := core.GetCluster(tx, j.InstanceID)
		if err != nil {
			return err
		}
		old := cur.Size
		apply(&cur)
		if cur.State == core.ClusterScaling {
			if err := s.setState(tx, &cur, core.ClusterRunning, fmt.Sprintf("scaled from %d to %d workers", old, cur.Size)); err != nil {
				return err
			}
		} else {
			cur.UpdatedAt = now()
			if err := core.PutCluster(tx, cur); err != nil {
				return err
			}
			if _, err := core.AppendEvent(tx, core.Event{Type: "cluster.scaled", Cluster: cur.ID,
				Message: fmt.Sprintf("Kubernetes cluster %s: size %d, offering %s", cur.Name, cur.Size, cur.ServiceOfferingID)}); err != nil {
				return err
			}
		}
		c = cur
		return nil
	})
	if err != nil {
		return s.failJob(j, err)
	}
	return s.succeed(j, &c, false)
}

// UpgradeCluster moves a Running cluster to another Kubernetes version.
func (s *Service) UpgradeCluster(ctx context.Context, caller Caller, ref, versionRef string) (Job, error) {
	j, err := s.begin(caller, ref, "upgradeKubernetesCluster", func(tx core.Tx, c *core.Cluster, j *Job) (core.ClusterState, error) {
		if c.State != core.ClusterRunning {
			return "", errorf(KindState, "Kubernetes cluster ID: %s is not in running state", c.ID)
		}
		to, err := versionByRef(tx, versionRef)
		if err != nil {
			return "", errorf(KindInvalid, "Invalid Kubernetes version ID: %s", versionRef)
		}
		if err := checkVersionUsable(to, s.zone); err != nil {
			return "", err
		}
		from, err := core.GetVersion(tx, c.VersionID)
		if err != nil {
			return "", errorf(KindInvalid, "Invalid Kubernetes version associated with cluster ID: %s", c.ID)
		}
		if err := CheckUpgrade(from.SemVer, to.SemVer); err != nil {
			return "", &Error{Kind: KindInvalid, Msg: err.Error()}
		}
		j.Params = JobParams{VersionID: to.ID}
		j.FailState = core.ClusterAlert
		return core.ClusterUpgrading, nil
	})
	if err != nil {
		return Job{}, err
	}
	s.start(j, s.runUpgrade)
	return j, nil
}

func (s *Service) runUpgrade(ctx context.Context, j *Job) error {
	var c core.Cluster
	var v core.Version
	err := s.st.View(func(tx core.Tx) error {
		var err error
		if c, err = core.GetCluster(tx, j.InstanceID); err != nil {
			return err
		}
		v, err = core.GetVersion(tx, j.Params.VersionID)
		return err
	})
	if err != nil {
		return s.failJob(j, err)
	}
	c.VersionID = v.ID
	if m := s.membership(); m != nil {
		if err := s.call(ctx, func(ctx context.Context) error { return m.SetVersion(ctx, c, v) }); err != nil {
			return s.failJob(j, fmt.Errorf("setting version %s: %w", v.SemVer, err))
		}
	}
	err = s.st.Update(func(tx core.Tx) error {
		cur, err := core.GetCluster(tx, j.InstanceID)
		if err != nil {
			return err
		}
		cur.VersionID = v.ID
		if err := s.setState(tx, &cur, core.ClusterRunning, "upgraded to "+v.SemVer); err != nil {
			return err
		}
		c = cur
		return nil
	})
	if err != nil {
		return s.failJob(j, err)
	}
	return s.succeed(j, &c, false)
}

// StopCluster stops a Running cluster; stopping a Stopped or Stopping one
// succeeds without change, as in CloudStack.
func (s *Service) StopCluster(ctx context.Context, caller Caller, ref string) (Job, error) {
	j, err := s.begin(caller, ref, "stopKubernetesCluster", func(tx core.Tx, c *core.Cluster, j *Job) (core.ClusterState, error) {
		switch c.State {
		case core.ClusterRunning:
			j.FailState = core.ClusterAlert
			j.Params.Target = core.ClusterStopped
			return core.ClusterStopping, nil
		case core.ClusterStopped, core.ClusterStopping:
			return "", nil
		}
		return "", errorf(KindState, "Kubernetes cluster ID: %s is in %s state and cannot be stopped", c.ID, c.State)
	})
	if err != nil {
		return Job{}, err
	}
	s.start(j, func(ctx context.Context, j *Job) error {
		return s.runSimple(ctx, j, func(m Membership) func(context.Context, core.Cluster) error { return m.Stop }, "tokens suspended; members kept", true)
	})
	return j, nil
}

// StartCluster starts a Stopped cluster, or recovers one in Alert. Starting a
// Running or Starting cluster succeeds without change, as in CloudStack.
func (s *Service) StartCluster(ctx context.Context, caller Caller, ref string) (Job, error) {
	j, err := s.begin(caller, ref, "startKubernetesCluster", func(tx core.Tx, c *core.Cluster, j *Job) (core.ClusterState, error) {
		switch c.State {
		case core.ClusterStopped:
			j.FailState = core.ClusterAlert
			j.Params.Target = core.ClusterRunning
			return core.ClusterStarting, nil
		case core.ClusterAlert:
			j.FailState = core.ClusterAlert
			j.Params.Target = core.ClusterRunning
			return core.ClusterRecovering, nil
		case core.ClusterRunning, core.ClusterStarting:
			return "", nil
		}
		return "", errorf(KindState, "Kubernetes cluster ID: %s is in %s state and cannot be started", c.ID, c.State)
	})
	if err != nil {
		return Job{}, err
	}
	s.start(j, func(ctx context.Context, j *Job) error {
		return s.runSimple(ctx, j, func(m Membership) func(context.Context, core.Cluster) error { return m.Start }, "tokens re-enabled", false)
	})
	return j, nil
}

// runSimple performs a one-call operation (start, stop) and moves the
// cluster to the job's target state.
func (s *Service) runSimple(ctx context.Context, j *Job, op func(Membership) func(context.Context, core.Cluster) error, reason string, plain bool) error {
	var c core.Cluster
	err := s.st.View(func(tx core.Tx) error {
		var err error
		c, err = core.GetCluster(tx, j.InstanceID)
		return err
	})
	if err != nil {
		return s.failJob(j, err)
	}
	if j.Params.Target == "" { // nothing to do
		return s.succeed(j, &c, plain)
	}
	if m := s.membership(); m != nil {
		if err := s.call(ctx, func(ctx context.Context) error { return op(m)(ctx, c) }); err != nil {
			return s.failJob(j, fmt.Errorf("%s: %w", j.Command, err))
		}
	}
	if c, err = s.transition(j.InstanceID, j.Params.Target, reason); err != nil {
		return s.failJob(j, err)
	}
	return s.succeed(j, &c, plain)
}

// DeleteCluster destroys a cluster: tokens revoked, members left, CA key
// destroyed, record removed.
func (s *Service) DeleteCluster(ctx context.Context, caller Caller, ref string) (Job, error) {
	j, err := s.begin(caller, ref, "deleteKubernetesCluster", func(tx core.Tx, c *core.Cluster, j *Job) (core.ClusterState, error) {
		if !CanTransition(c.State, core.ClusterDestroying) {
			return "", errorf(KindState, "Kubernetes cluster ID: %s is in %s state and cannot be deleted", c.ID, c.State)
		}
		j.FailState = core.ClusterAlert
		return core.ClusterDestroying, nil
	})
	if err != nil {
		return Job{}, err
	}
	s.start(j, s.runDelete)
	return j, nil
}

func (s *Service) runDelete(ctx context.Context, j *Job) error {
	var c core.Cluster
	err := s.st.View(func(tx core.Tx) error {
		var err error
		c, err = core.GetCluster(tx, j.InstanceID)
		return err
	})
	if err != nil {
		return s.failJob(j, err)
	}
	if m := s.membership(); m != nil {
		if err := s.call(ctx, func(ctx context.Context) error { return m.Destroy(ctx, c) }); err != nil {
			return s.failJob(j, fmt.Errorf("destroying: %w", err))
		}
	}
	err = s.st.Update(func(tx core.Tx) error {
		cur, err := core.GetCluster(tx, j.InstanceID)
		if err != nil {
			return err
		}
		if err := s.setState(tx, &cur, core.ClusterDestroyed, "tokens revoked, members left, CA destroyed"); err != nil {
			return err
		}
		return core.DeleteCluster(tx, cur.ID)
	})
	if err != nil {
		return s.failJob(j, err)
	}
	return s.succeed(j, nil, true)
}

// Kubeconfig issues a kubeconfig of the cluster for the caller: a
// certificate for the caller's identity (CN the key's name, O
// KubeconfigGroup) valid for Options.KubeconfigTTL. Every issue is a
// "kubeconfig.issued" event with the certificate's serial and expiry.
func (s *Service) Kubeconfig(ctx context.Context, caller Caller, ref string) (core.Cluster, []byte, error) {
	var c core.Cluster
	err := s.st.View(func(tx core.Tx) error {
		var err error
		c, err = clusterFor(tx, caller, ref)
		return err
	})
	if err != nil {
		return c, nil, err
	}
	m := s.membership()
	if m == nil {
		return c, nil, errorf(KindUnavailable, "cluster CA not provisioned: no joiner is wired to this ztpd, so Kubernetes cluster %s has no CA to issue a kubeconfig from", c.Name)
	}
	if c.State == core.ClusterCreated || c.State == core.ClusterError || c.State == core.ClusterDestroying {
		return c, nil, errorf(KindUnavailable, "cluster CA not provisioned: Kubernetes cluster %s is in %s state", c.Name, c.State)
	}
	req := KubeconfigRequest{User: kubeconfigUser(caller), Group: KubeconfigGroup, Validity: s.opts.KubeconfigTTL}
	var kc IssuedKubeconfig
	err = s.call(ctx, func(ctx context.Context) error {
		var err error
		kc, err = m.Kubeconfig(ctx, c, req)
		return err
	})
	if err != nil {
		return c, nil, &Error{Kind: KindUnavailable, Msg: fmt.Sprintf("Failed to retrieve kubeconfig of Kubernetes cluster %s: %v", c.Name, err), Err: err}
	}
	err = s.st.Update(func(tx core.Tx) error {
		f := caller.auditFields()
		f["user"], f["group"], f["serial"] = kc.User, kc.Group, kc.Serial
		f["not_after"] = kc.NotAfter.UTC().Format(time.RFC3339)
		_, err := core.AppendEvent(tx, core.Event{Type: "kubeconfig.issued", Cluster: c.ID,
			Message: fmt.Sprintf("kubeconfig of Kubernetes cluster %s issued to %s (certificate %s, valid until %s)",
				c.Name, kc.User, kc.Serial, kc.NotAfter.UTC().Format(time.RFC3339)), Fields: f})
		return err
	})
	if err != nil {
		// An issue that cannot be recorded is not handed out.
		return c, nil, fmt.Errorf("recording the kubeconfig issue: %w", err)
	}
	s.log.Info("kubeconfig issued", "cluster", c.Name, "user", kc.User, "api_key", caller.APIKey,
		"account", caller.AccountName(), "serial", kc.Serial, "not_after", kc.NotAfter)
	return c, kc.Config, nil
}

// ClusterFilter selects clusters; empty fields match all.
type ClusterFilter struct {
	ID      string
	Name    string
	State   string
	Keyword string // substring of name or description
	// ListAll lists every account's clusters to an admin (CloudStack's
	// listall=true); without it an admin lists its own account's, unless
	// it asks for one ID. Callers that are not admins list their own.
	ListAll bool
	// Account lists only that account's clusters (within what the caller
	// may list).
	Account string
}

// ListClusters returns the matching clusters the caller may list, oldest
// first: one page of views (page from 1; pageSize <= 0 means all) and the
// total match count.
func (s *Service) ListClusters(ctx context.Context, caller Caller, f ClusterFilter, page, pageSize int) ([]ClusterView, int, error) {
	// As CloudStack's buildACLSearchParameters: a user lists its account's;
	// an admin too, unless listall or an id widens it.
	account := caller.AccountName()
	everyone := caller.Admin && (f.ListAll || f.ID != "" || f.Account != "")
	var matched []core.Cluster
	gens := map[string]uint64{}
	err := s.st.View(func(tx core.Tx) error {
		return tx.Scan(core.BucketClusters, "", func(key string, raw []byte) (bool, error) {
			cp, gen, err := s.cluMemo.decode(key, raw)
			if err != nil {
				return false, err
			}
			c := *cp
			gens[c.ID] = gen
			if !everyone && core.ClusterAccount(c) != account || f.Account != "" && core.ClusterAccount(c) != f.Account {
				return true, nil
			}
			if f.ID != "" && c.ID != f.ID {
				return true, nil
			}
			if f.Name != "" && c.Name != f.Name {
				return true, nil
			}
			if f.State != "" && !strings.EqualFold(string(c.State), f.State) {
				return true, nil
			}
			if f.Keyword != "" {
				k := strings.ToLower(f.Keyword)
				if !strings.Contains(strings.ToLower(c.Name), k) && !strings.Contains(strings.ToLower(c.Description), k) {
					return true, nil
				}
			}
			matched = append(matched, c)
			return true, nil
		})
	})
	if err != nil {
		return nil, 0, err
	}
	sort.SliceStable(matched, func(i, j int) bool {
		if !matched[i].Created.Equal(matched[j].Created) {
			return matched[i].Created.Before(matched[j].Created)
		}
		return matched[i].ID < matched[j].ID
	})
	total := len(matched)
	if pageSize > 0 {
		if page < 1 {
			page = 1
		}
		start := (page - 1) * pageSize
		if start >= len(matched) {
			matched = nil
		} else {
			matched = matched[start:min(start+pageSize, len(matched))]
		}
	}
	g := make([]uint64, len(matched))
	for i, c := range matched {
		g[i] = gens[c.ID]
	}
	views, err := s.views(ctx, matched, g)
	return views, total, err
}

// AccountClusters returns the IDs of the clusters the caller's account
// owns (front ends filter devices, leases and events by them).
func (s *Service) AccountClusters(ctx context.Context, caller Caller) (map[string]bool, error) {
	out := map[string]bool{}
	account := caller.AccountName()
	err := s.st.View(func(tx core.Tx) error {
		return tx.Scan(core.BucketClusters, "", func(key string, raw []byte) (bool, error) {
			c, _, err := s.cluMemo.decode(key, raw)
			if err != nil {
				return false, err
			}
			if core.ClusterAccount(*c) == account {
				out[c.ID] = true
			}
			return true, nil
		})
	})
	return out, err
}

// GetCluster returns one cluster view, by ID or name, that caller sees.
func (s *Service) GetCluster(ctx context.Context, caller Caller, ref string) (ClusterView, error) {
	var c core.Cluster
	err := s.st.View(func(tx core.Tx) error {
		var err error
		c, err = clusterFor(tx, caller, ref)
		return err
	})
	if err != nil {
		return ClusterView{}, err
	}
	vs, err := s.views(ctx, []core.Cluster{c}, nil)
	if err != nil {
		return ClusterView{}, err
	}
	return vs[0], nil
}

// View renders one stored cluster (for example a job's result) with its
// current version, offering and members.
func (s *Service) View(ctx context.Context, c core.Cluster) (ClusterView, error) {
	vs, err := s.views(ctx, []core.Cluster{c}, nil)
	if err != nil {
		return ClusterView{}, err
	}
	return vs[0], nil
}
