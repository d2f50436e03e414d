package clusters

import (
	"context"
	"fmt"
	"strings"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/semver"
)

// External clusters (CloudStack's clustertype=ExternalManaged): a cluster
// ztpd did not build, registered from a kubeconfig with a narrow role
// (docs/examples/ztpd-onboarder-rbac.yaml), into which ztpd onboards
// devices. ztpd mints their bootstrap tokens through that API server and
// pins the CA its cluster-info publishes; it never holds the cluster's CA
// key, so it issues no kubeconfigs for it and neither scales, upgrades,
// stops nor starts it (CloudStack answers those commands the same way for
// an ExternalManaged cluster).

// ExternalSpec registers an existing cluster.
type ExternalSpec struct {
	Name        string // required
	Description string
	ZoneID      string // this appliance's zone
	// Kubeconfig reaches the cluster's API server as an identity bound to
	// ztpd's onboarding role. It is stored sealed by the joiner and never
	// shown again.
	Kubeconfig []byte
	// VersionID names the Kubernetes version (and so the binaries ISO) VMs
	// joining the cluster install; "" picks the enabled version equal to
	// the API server's.
	VersionID string
	// Size caps how many devices ztpd onboards into the cluster; 0: no cap.
	Size int
}

// ExternalRegistrar is a Membership that can take over a cluster it did
// not build (the joiner).
type ExternalRegistrar interface {
	// PrepareExternal checks kubeconfig against the cluster's API server:
	// it answers, its cluster-info publishes a CA that verifies it, and the
	// identity holds the rights ztpd needs. The returned Record writes the
	// joiner's part (the sealed kubeconfig, the pinned CA) inside the
	// transaction that stores c; it is safe to run more than once.
	PrepareExternal(ctx context.Context, c core.Cluster, kubeconfig []byte) (PreparedExternal, error)
}

// PreparedExternal is what registering an external cluster learnt from it.
type PreparedExternal struct {
	Endpoint string // the API server, https://host:port/
	Version  string // its gitVersion, e.g. v1.37.2
	CAHash   string // sha256:<hex> of the CA pinned from cluster-info
	Record   func(tx core.Tx, c core.Cluster) error
}

// RegisterExternal stores an existing cluster as ExternalManaged and
// starts the create job, which moves it to Starting; ztpd's watch then
// finds it Running once its API server answers.
func (s *Service) RegisterExternal(ctx context.Context, caller Caller, spec ExternalSpec) (core.Cluster, core.Job, error) {
	switch {
	case !clusterNameRE.MatchString(spec.Name):
		return core.Cluster{}, core.Job{}, core.Errorf(core.KindInvalid, "Invalid name for the Kubernetes cluster name: %q (use up to 63 letters, digits and -, starting and ending with a letter or digit)", spec.Name)
	case len(spec.Description) > 1024:
		return core.Cluster{}, core.Job{}, core.Errorf(core.KindInvalid, "Description is longer than 1024 characters")
	case spec.ZoneID != s.zone.ID:
		return core.Cluster{}, core.Job{}, core.Errorf(core.KindInvalid, "Unable to find zone by ID: %s", spec.ZoneID)
	case spec.Size < 0 || spec.Size > MaxNodes:
		return core.Cluster{}, core.Job{}, core.Errorf(core.KindInvalid, "Invalid cluster size: %d", spec.Size)
	case len(strings.TrimSpace(string(spec.Kubeconfig))) == 0:
		return core.Cluster{}, core.Job{}, core.Errorf(core.KindInvalid, "an ExternalManaged cluster needs the kubeconfig ztpd reaches it with (parameter kubeconfig)")
	}
	reg, ok := s.mem.(ExternalRegistrar)
	if !ok {
		return core.Cluster{}, core.Job{}, core.Errorf(core.KindUnavailable, "no joiner is wired to this ztpd: it cannot onboard devices into an existing cluster")
	}
	if err := s.st.View(func(tx core.Tx) error {
		if _, err := tx.Clusters().ByName(spec.Name); err == nil {
			return core.Errorf(core.KindConflict, "Kubernetes cluster with name %s already exists", spec.Name)
		}
		return nil
	}); err != nil {
		return core.Cluster{}, core.Job{}, err
	}
	t := now()
	c := core.Cluster{ID: newUUID(), Name: spec.Name, Description: spec.Description, ZoneID: s.zone.ID,
		Size: spec.Size, State: core.ClusterCreated, JoinMethod: JoinKubeadm, Type: core.ClusterExternalManaged,
		Owner: caller.APIKey, Account: caller.AccountName(), Created: t, UpdatedAt: t, StateSince: t}
	var prep PreparedExternal
	err := s.call(ctx, func(ctx context.Context) error {
		var err error
		prep, err = reg.PrepareExternal(ctx, c, spec.Kubeconfig)
		return err
	})
	if err != nil {
		return core.Cluster{}, core.Job{}, err
	}
	server, err := semver.Parse(strings.TrimPrefix(strings.SplitN(prep.Version, "+", 2)[0], "v"))
	if err != nil {
		return core.Cluster{}, core.Job{}, core.Errorf(core.KindInvalid, "the API server reports version %q, which is not MAJOR.MINOR.PATCH", prep.Version)
	}
	c.Endpoint = prep.Endpoint
	var j core.Job
	err = s.st.Update(func(tx core.Tx) error {
		v, err := externalVersion(tx, spec.VersionID, server, s.zone)
		if err != nil {
			return err
		}
		if _, err := tx.Clusters().ByName(spec.Name); err == nil {
			return core.Errorf(core.KindConflict, "Kubernetes cluster with name %s already exists", spec.Name)
		}
		c.VersionID = v.ID
		if err := tx.Clusters().Put(c); err != nil {
			return err
		}
		if err := prep.Record(tx, c); err != nil {
			return err
		}
		if _, err := tx.Events().Append(core.Event{Type: "cluster.registered", Cluster: c.ID,
			Message: fmt.Sprintf("existing Kubernetes cluster %s registered (API server %s, %s, CA %s)", c.Name, c.Endpoint, server.Tag(), prep.CAHash),
			Fields:  map[string]string{"type": core.ClusterExternalManaged, "endpoint": c.Endpoint, "ca_hash": prep.CAHash, "version": v.ID}}); err != nil {
			return err
		}
		j = newJob(opCreate.command, InstanceCluster, c.ID, caller)
		j.Appliance = s.opts.Appliance
		j.FailState, j.Params.Target = opCreate.fail, opCreate.target
		if err := appendWrite(tx, caller, j.Command, c.ID, "", fmt.Sprintf("createKubernetesCluster %s (ExternalManaged) accepted (job %s)", c.Name, j.ID),
			map[string]string{"job": j.ID, "type": core.ClusterExternalManaged}); err != nil {
			return err
		}
		return tx.Jobs().Put(j)
	})
	if err != nil {
		return core.Cluster{}, core.Job{}, err
	}
	s.log.Info("existing cluster registered", "cluster", c.Name, "endpoint", c.Endpoint, "version", server.Tag(), "ca_hash", prep.CAHash,
		"api_key", caller.APIKey, "account", caller.AccountName())
	s.start(j, func(ctx context.Context, j *core.Job) error { return s.run(ctx, opCreate, j) })
	return c, j, nil
}

// externalVersion is the version VMs joining an external cluster install:
// the one named, else the enabled one equal to the API server's. kubeadm
// joins only a control plane of its own minor version.
func externalVersion(tx core.Tx, ref string, server semver.Version, z Zone) (core.Version, error) {
	if ref != "" {
		v, err := versionByRef(tx, ref)
		if err != nil {
			return v, core.Errorf(core.KindInvalid, "Unable to find given Kubernetes version in supported versions")
		}
		if err := checkVersionUsable(v, z); err != nil {
			return v, err
		}
		sv, err := semver.Parse(v.SemVer)
		if err != nil {
			return v, &core.Error{Kind: core.KindInvalid, Msg: err.Error()}
		}
		if sv.Major != server.Major || sv.Minor != server.Minor {
			return v, core.Errorf(core.KindInvalid, "Kubernetes version %s cannot join the cluster: its API server runs %s (kubeadm joins a control plane of its own minor version)", v.SemVer, server.Tag())
		}
		return v, nil
	}
	var found core.Version
	err := scanVersions(tx, func(v core.Version) bool {
		if v.SemVer == server.String() && checkVersionUsable(v, z) == nil {
			found = v
			return false
		}
		return true
	})
	if err != nil {
		return found, err
	}
	if found.ID == "" {
		return found, core.Errorf(core.KindInvalid, "the cluster's API server runs %s and no enabled Kubernetes version %s is stored: add it (addKubernetesSupportedVersion) or name one of the same minor version (kubernetesversionid)", server.Tag(), server.String())
	}
	return found, nil
}

// refuseExternal answers a command CloudStack does not support for an
// ExternalManaged cluster.
func refuseExternal(c core.Cluster, command string) error {
	if !c.IsExternal() {
		return nil
	}
	return core.Errorf(core.KindInvalid, "%s is not supported for ExternalManaged Kubernetes cluster %s: ztpd did not build it and holds no key to change it", command, c.Name)
}
