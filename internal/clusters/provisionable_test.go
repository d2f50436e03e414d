package clusters

import (
	"context"
	"testing"

	"github.com/ztpd/ztpd/internal/core"
)

// Regression: a cluster of a version ztpd cannot provision was created, then
// failed into Error. The version is refused when added, and a cluster of such
// a version already in the store is refused before anything is stored.
func TestUnprovisionableVersionRefusedBeforeState(t *testing.T) {
	rec := &recorder{}
	s, st := newSvc(t, rec)
	ctx := context.Background()
	_, err := s.AddVersion(ctx, admin, VersionSpec{SemVer: "2.0.0", URL: "http://10.99.0.1:8080/isos/x.iso"})
	wantKind(t, err, core.KindInvalid, "Kubernetes 1.x")

	old := core.Version{ID: "old-2", Name: "v2.0.0", SemVer: "2.0.0", ISOURL: "http://10.99.0.1/x.iso",
		State: VersionEnabled, MinCPU: 2, MinMemoryMB: 2048}
	if err := st.Update(func(tx core.Tx) error { return tx.Versions().Put(old) }); err != nil {
		t.Fatal(err)
	}
	_, _, err = s.CreateCluster(ctx, admin, ClusterSpec{Name: "two", ZoneID: s.Zone().ID, VersionID: old.ID,
		ServiceOfferingID: Offerings[0].ID, Size: 1, JoinMethod: JoinSONiC})
	wantKind(t, err, core.KindInvalid, "cannot be provisioned")
	list, n, err := s.ListClusters(ctx, admin, ClusterFilter{}, 1, 100)
	if err != nil || n != 0 {
		t.Fatalf("a refused create left clusters: %+v %v", list, err)
	}
	if len(rec.calls) != 0 {
		t.Fatalf("the joiner was called: %v", rec.calls)
	}
}
