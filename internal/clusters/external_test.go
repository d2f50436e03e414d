package clusters

import (
	"context"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/internal/core"
)

// registrar is the recorder with the joiner's external registration: it
// answers as an API server of version v would and records what it stores.
type registrar struct {
	*recorder
	version  string
	recorded int
}

func (r *registrar) PrepareExternal(_ context.Context, c core.Cluster, kc []byte) (PreparedExternal, error) {
	if string(kc) == "bad" {
		return PreparedExternal{}, core.Errorf(core.KindInvalid, "the kubeconfig's identity may not create Secrets in kube-system")
	}
	return PreparedExternal{Endpoint: "https://10.99.7.1:6443/", Version: r.version, CAHash: "sha256:00",
		Record: func(tx core.Tx, c core.Cluster) error {
			r.recorded++
			return tx.Clusters().PutJoinState(c.ID, core.JoinState{KubernetesVersion: r.version, APIEndpoint: "10.99.7.1:6443", Initialized: true})
		}}, nil
}

func TestRegisterExternal(t *testing.T) {
	ctx := context.Background()
	r := &registrar{recorder: &recorder{}, version: "v1.31.4+vendor"}
	s, _ := newSvc(t, r)
	zone := s.Zone().ID
	spec := ExternalSpec{Name: "lab-b", ZoneID: zone, Kubeconfig: []byte("kc")}

	// The API server's version must be stored (VMs install its ISO).
	_, _, err := s.RegisterExternal(ctx, admin, spec)
	wantKind(t, err, core.KindInvalid, "no enabled Kubernetes version 1.31.4 is stored")
	old := addVersion(t, s, "1.30.2")
	spec.VersionID = old.ID
	_, _, err = s.RegisterExternal(ctx, admin, spec)
	wantKind(t, err, core.KindInvalid, "kubeadm joins a control plane of its own minor version")
	spec.VersionID = ""
	v := addVersion(t, s, "1.31.4")

	_, _, err = s.RegisterExternal(ctx, admin, ExternalSpec{Name: "lab-b", ZoneID: zone, Kubeconfig: []byte("bad")})
	wantKind(t, err, core.KindInvalid, "may not create Secrets")
	_, _, err = s.RegisterExternal(ctx, admin, ExternalSpec{Name: "lab-b", ZoneID: zone})
	wantKind(t, err, core.KindInvalid, "needs the kubeconfig")
	if r.recorded != 0 {
		t.Fatalf("refused registrations stored %d times", r.recorded)
	}

	c, j, err := s.RegisterExternal(ctx, user, spec)
	if err != nil {
		t.Fatal(err)
	}
	if done := wait(t, s, j); done.Status != core.JobSucceeded {
		t.Fatalf("create job: %+v", done)
	}
	if c.VersionID != v.ID || !c.IsExternal() || c.Endpoint != "https://10.99.7.1:6443/" || r.recorded != 1 {
		t.Fatalf("registered %+v (recorded %d)", c, r.recorded)
	}
	if st := state(t, s, c.ID); st != core.ClusterStarting {
		t.Fatalf("state %s, want Starting", st)
	}
	// Running once its API server answers, with no Node of ztpd's.
	if err := s.ObserveHealth(c.ID, Health{APIReachable: true}); err != nil {
		t.Fatal(err)
	}
	if st := state(t, s, c.ID); st != core.ClusterRunning {
		t.Fatalf("state %s, want Running", st)
	}
	_, _, err = s.RegisterExternal(ctx, admin, spec)
	wantKind(t, err, core.KindConflict, "already exists")

	// What CloudStack does not support for ExternalManaged is refused.
	_, err = s.ScaleCluster(ctx, user, c.ID, 3, "")
	wantKind(t, err, core.KindInvalid, "scaleKubernetesCluster is not supported for ExternalManaged")
	_, err = s.StopCluster(ctx, user, c.ID)
	wantKind(t, err, core.KindInvalid, "not supported for ExternalManaged")
	_, _, err = s.Kubeconfig(ctx, user, c.ID)
	wantKind(t, err, core.KindInvalid, "issues no kubeconfig")

	// clustertype filters; the account's own clusters only.
	addVersion(t, s, "1.31.5")
	for typ, want := range map[string]int{"": 1, "ExternalManaged": 1, "externalmanaged": 1, "CloudManaged": 0} {
		vs, _, err := s.ListClusters(ctx, user, ClusterFilter{Type: typ}, 0, 0)
		if err != nil || len(vs) != want {
			t.Fatalf("type %q: %d clusters, %v", typ, len(vs), err)
		}
	}

	// Delete unregisters it through the joiner's Destroy.
	j, err = s.DeleteCluster(ctx, user, c.ID, DeleteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if done := wait(t, s, j); done.Status != core.JobSucceeded || !strings.HasPrefix(r.last(), "destroy lab-b") {
		t.Fatalf("delete job %+v, last call %q", done, r.last())
	}
}
