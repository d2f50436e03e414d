package clusters

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/hosturl"
	"github.com/ztpd/ztpd/internal/semver"
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
	NodeRootDiskSize  int64  // GiB; > 0 when given
	JoinMethod        string // kubeadm (default), k3s or sonic
	// Endpoint is the API server URL when known in advance,
	// https://host[:port]/; a k3s cluster needs it (ztpd does not install
	// k3s servers). Otherwise the external load balancer's address, else the
	// first control plane's, becomes the endpoint, as in CloudStack.
	Endpoint string
	// CNIConfigID names a registered CNI configuration (ID or name) to
	// apply once the first control plane's API server answers;
	// CNIDetails are the values of its parameters.
	CNIConfigID string
	CNIDetails  map[string]string
	// NodeOfferings and NodeTemplates are the per-role shapes: node type
	// (worker, control) to a service offering (ID or name), and to the
	// name of the profile a member of that role gets. ServiceOfferingID
	// may be left out when NodeOfferings names the worker's offering.
	NodeOfferings map[string]string
	NodeTemplates map[string]string
	// EtcdNodes is the number of dedicated etcd nodes: 0 (etcd on the
	// control planes) or an odd 1 to MaxEtcdNodes (external etcd).
	EtcdNodes int
}

// Join methods of a cluster.
const (
	JoinKubeadm = "kubeadm"
	JoinK3s     = "k3s"
	JoinSONiC   = "sonic"
)

var clusterNameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)

// CreateCluster validates spec, stores the cluster in state Created and
// starts the job that provisions it (Created -> Starting -> Running).
func (s *Service) CreateCluster(ctx context.Context, caller Caller, spec ClusterSpec) (core.Cluster, core.Job, error) {
	if spec.ControlNodes == 0 {
		spec.ControlNodes = 1
	}
	if spec.JoinMethod == "" {
		spec.JoinMethod = JoinKubeadm
	}
	switch {
	case !clusterNameRE.MatchString(spec.Name):
		return core.Cluster{}, core.Job{}, core.Errorf(core.KindInvalid, "Invalid name for the Kubernetes cluster name: %q (use up to 63 letters, digits and -, starting and ending with a letter or digit)", spec.Name)
	case len(spec.Description) > 1024:
		return core.Cluster{}, core.Job{}, core.Errorf(core.KindInvalid, "Description is longer than 1024 characters")
	case spec.ControlNodes < 1 || spec.ControlNodes > MaxNodes:
		return core.Cluster{}, core.Job{}, core.Errorf(core.KindInvalid, "Invalid cluster control nodes count: %d", spec.ControlNodes)
	case spec.Size < 1 || spec.Size > MaxNodes:
		return core.Cluster{}, core.Job{}, core.Errorf(core.KindInvalid, "Invalid cluster size: %d", spec.Size)
	case spec.ZoneID != s.zone.ID:
		return core.Cluster{}, core.Job{}, core.Errorf(core.KindInvalid, "Unable to find zone by ID: %s", spec.ZoneID)
	case spec.NodeRootDiskSize < 0:
		return core.Cluster{}, core.Job{}, core.Errorf(core.KindInvalid, "Invalid value for noderootdisksize")
	}
	switch spec.JoinMethod {
	case JoinKubeadm, JoinK3s, JoinSONiC:
	default:
		return core.Cluster{}, core.Job{}, core.Errorf(core.KindInvalid, "Invalid join method %q: use kubeadm, k3s or sonic", spec.JoinMethod)
	}
	if spec.Endpoint != "" {
		if _, err := EndpointHostPort(spec.Endpoint); err != nil {
			return core.Cluster{}, core.Job{}, &core.Error{Kind: core.KindInvalid, Msg: err.Error()}
		}
	} else if spec.JoinMethod == JoinK3s {
		return core.Cluster{}, core.Job{}, core.Errorf(core.KindInvalid, "a k3s cluster needs its server endpoint")
	}
	if spec.ExternalLBIP != "" {
		if _, err := netip.ParseAddr(spec.ExternalLBIP); err != nil {
			return core.Cluster{}, core.Job{}, core.Errorf(core.KindInvalid, "Invalid external load balancer IP address")
		}
	}
	if err := CheckEtcdNodes(spec.EtcdNodes); err != nil {
		return core.Cluster{}, core.Job{}, err
	}
	if spec.EtcdNodes > 0 && spec.JoinMethod == JoinK3s {
		return core.Cluster{}, core.Job{}, core.Errorf(core.KindInvalid, "Invalid value for parameter etcdnodes: a k3s cluster's servers are not ztpd's to build, so it has no etcd nodes")
	}
	nodeOfferings, err := resolveNodeOfferings(spec.NodeOfferings, spec.EtcdNodes)
	if err != nil {
		return core.Cluster{}, core.Job{}, err
	}
	nodeTemplates, err := s.resolveNodeTemplates(spec.Name, spec.NodeTemplates, spec.EtcdNodes)
	if err != nil {
		return core.Cluster{}, core.Job{}, err
	}
	if spec.ServiceOfferingID == "" && nodeOfferings[NodeWorker] != "" {
		// CloudStack's cluster offering is then the workers'.
		spec.ServiceOfferingID = nodeOfferings[NodeWorker]
	}
	off, ok := OfferingByID(spec.ServiceOfferingID)
	if !ok {
		return core.Cluster{}, core.Job{}, core.Errorf(core.KindInvalid, "No service offering with ID: %s", spec.ServiceOfferingID)
	}
	var c core.Cluster
	var j core.Job
	err = s.st.Update(func(tx core.Tx) error {
		v, err := versionByRef(tx, spec.VersionID)
		if err != nil {
			return core.Errorf(core.KindInvalid, "Unable to find given Kubernetes version in supported versions")
		}
		if err := checkVersionUsable(v, s.zone); err != nil {
			return err
		}
		// A version stored before versions were checked on add would
		// otherwise make a cluster that fails into Error when provisioned.
		if sv, err := semver.Parse(v.SemVer); err != nil {
			return &core.Error{Kind: core.KindInvalid, Msg: err.Error()}
		} else if err := semver.Provisionable(sv); err != nil {
			return &core.Error{Kind: core.KindInvalid, Msg: err.Error()}
		}
		if spec.ControlNodes > 1 && !SupportsHA(v.SemVer) {
			return core.Errorf(core.KindInvalid, "HA support is available only for Kubernetes version %s and above. Given version ID: %s is %s", MinVersionHA, v.ID, v.SemVer)
		}
		if _, err := tx.Clusters().ByName(spec.Name); err == nil {
			return core.Errorf(core.KindConflict, "Kubernetes cluster with name %s already exists", spec.Name)
		}
		t := now()
		c = core.Cluster{ID: newUUID(), Name: spec.Name, Description: spec.Description, ZoneID: s.zone.ID,
			VersionID: v.ID, ServiceOfferingID: off.ID, Size: spec.Size, ControlNodes: spec.ControlNodes,
			State: core.ClusterCreated, Keypair: spec.Keypair, NetworkID: spec.NetworkID,
			ExternalLBIP: spec.ExternalLBIP, JoinMethod: spec.JoinMethod, Owner: caller.APIKey,
			Account: caller.AccountName(), Endpoint: spec.Endpoint, Created: t, UpdatedAt: t, StateSince: t,
			NodeOfferings: nodeOfferings, NodeTemplates: nodeTemplates, EtcdNodes: spec.EtcdNodes}
		if c.Endpoint == "" && c.ExternalLBIP != "" {
			c.Endpoint = endpointURL(c.ExternalLBIP)
		}
		if spec.CNIConfigID != "" || len(spec.CNIDetails) > 0 {
			if c.CNI, err = clusterCNI(tx, spec.CNIConfigID, spec.CNIDetails); err != nil {
				return err
			}
		}
		if err := tx.Clusters().Put(c); err != nil {
			return err
		}
		if _, err := tx.Events().Append(core.Event{Type: "cluster.created", Cluster: c.ID,
			Message: fmt.Sprintf("Kubernetes cluster %s created (version %s, %d control + %d workers%s%s)", c.Name, v.SemVer, c.ControlNodes, c.Size, describeEtcd(c), describeShapes(c)),
			Fields:  map[string]string{"state": string(c.State), "version": v.ID}}); err != nil {
			return err
		}
		j = newJob(opCreate.command, InstanceCluster, c.ID, caller)
		j.Appliance = s.opts.Appliance
		j.FailState, j.Params.Target = opCreate.fail, opCreate.target
		if err := appendWrite(tx, caller, j.Command, c.ID, "", fmt.Sprintf("createKubernetesCluster %s accepted (job %s)", c.Name, j.ID),
			map[string]string{"job": j.ID}); err != nil {
			return err
		}
		return tx.Jobs().Put(j)
	})
	if err != nil {
		return core.Cluster{}, core.Job{}, err
	}
	s.start(j, func(ctx context.Context, j *core.Job) error { return s.run(ctx, opCreate, j) })
	return c, j, nil
}

// EndpointHostPort is the host:port of a cluster's API server endpoint
// URL, https://host[:port]/ (port 6443 when not given).
func EndpointHostPort(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "https" || u.Hostname() == "" {
		return "", fmt.Errorf("endpoint %q must be https://host[:port]/", endpoint)
	}
	if a, err := netip.ParseAddr(u.Hostname()); err == nil && a.Zone() != "" {
		return "", fmt.Errorf("endpoint %q names a zone, one machine's interface; every node dials this address", endpoint)
	}
	port := u.Port()
	if port == "" {
		port = "6443"
	}
	return net.JoinHostPort(u.Hostname(), port), nil
}

// AcceptsMembers reports whether devices may enroll in and join a cluster
// in state st (the joiner asks; a stopped cluster is also suspended there).
func AcceptsMembers(st core.ClusterState) bool {
	switch st {
	case core.ClusterCreated, core.ClusterStarting, core.ClusterRunning, core.ClusterScaling,
		core.ClusterAlert, core.ClusterRecovering, core.ClusterUpgrading:
		return true
	}
	return false
}

func checkVersionUsable(v core.Version, z Zone) error {
	if v.State != VersionEnabled {
		return core.Errorf(core.KindInvalid, "Kubernetes version ID: %s is in %s state", v.ID, v.State)
	}
	if v.ZoneID != "" && v.ZoneID != z.ID {
		return core.Errorf(core.KindInvalid, "Kubernetes version ID: %s is not available for zone ID: %s", v.ID, z.ID)
	}
	return nil
}

func endpointURL(ip string) string { return hosturl.Base("https", ip, "6443") + "/" }

// clusterFor finds a cluster by ID or name among those caller sees; any
// other is "not found", worded as for a cluster that does not exist.
func clusterFor(tx core.Tx, caller Caller, ref string) (core.Cluster, error) {
	if c, err := ByRef(tx, ref); err == nil && caller.Sees(c) {
		return c, nil
	}
	return core.Cluster{}, core.Errorf(core.KindNotFound, "Invalid Kubernetes cluster ID: %s", ref)
}

// ByRef finds a cluster by ID, then by name, in tx: the one lookup every
// part of ztpd that names clusters (the joiner included) uses.
func ByRef(tx core.Tx, ref string) (core.Cluster, error) {
	if c, err := tx.Clusters().Get(ref); err == nil {
		return c, nil
	} else if !errors.Is(err, core.ErrNotFound) {
		return c, err
	}
	if c, err := tx.Clusters().ByName(ref); err == nil {
		return c, nil
	} else if !errors.Is(err, core.ErrNotFound) {
		return c, err
	}
	return core.Cluster{}, &core.Error{Kind: core.KindNotFound, Msg: "Invalid Kubernetes cluster ID: " + ref, Err: core.ErrNotFound}
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
	if c.IsExternal() {
		return c, nil, core.Errorf(core.KindInvalid, "Kubernetes cluster %s is ExternalManaged: ztpd holds no CA key for it and issues no kubeconfig; ask its administrators", c.Name)
	}
	if c.State == core.ClusterStarting {
		return c, nil, core.Errorf(core.KindUnavailable, "Kubernetes cluster %s is Starting (%s); its kubeconfig is available once it is Running", c.Name, StartingReason(c))
	}
	m := s.mem
	if m == nil {
		return c, nil, core.Errorf(core.KindUnavailable, "cluster CA not provisioned: no joiner is wired to this ztpd, so Kubernetes cluster %s has no CA to issue a kubeconfig from", c.Name)
	}
	if c.State == core.ClusterCreated || c.State == core.ClusterError || c.State == core.ClusterDestroying {
		return c, nil, core.Errorf(core.KindUnavailable, "cluster CA not provisioned: Kubernetes cluster %s is in %s state", c.Name, c.State)
	}
	req := KubeconfigRequest{User: kubeconfigUser(caller), Group: KubeconfigGroup, Validity: s.opts.KubeconfigTTL}
	var kc IssuedKubeconfig
	err = s.call(ctx, func(ctx context.Context) error {
		var err error
		kc, err = m.Kubeconfig(ctx, c, req)
		return err
	})
	if err != nil {
		return c, nil, &core.Error{Kind: core.KindUnavailable, Msg: fmt.Sprintf("Failed to retrieve kubeconfig of Kubernetes cluster %s: %v", c.Name, err), Err: err}
	}
	err = s.st.Update(func(tx core.Tx) error {
		f := caller.AuditFields()
		f["user"], f["group"], f["serial"] = kc.User, kc.Group, kc.Serial
		f["not_after"] = kc.NotAfter.UTC().Format(time.RFC3339)
		_, err := tx.Events().Append(core.Event{Type: "kubeconfig.issued", Cluster: c.ID,
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

// RecordEndpoint records hostPort, the address of a cluster's first control
// plane, as the API server endpoint of cluster id when the cluster has none
// (none was given at creation and it has no external load balancer). The
// joiner calls it inside the transaction that issues that control plane's
// bundle. It returns the cluster as stored.
func RecordEndpoint(tx core.Tx, id, hostPort string, now time.Time) (core.Cluster, error) {
	c, err := tx.Clusters().Get(id)
	if err != nil || c.Endpoint != "" {
		return c, err
	}
	c.Endpoint, c.UpdatedAt = "https://"+hostPort+"/", now
	return c, tx.Clusters().Put(c)
}
