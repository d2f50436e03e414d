// Package clusterstest makes the Kubernetes versions and clusters tests
// need, through the clusters service as the API makes them (so the joiner
// provisions the cluster's CA), and waits for the create job.
package clusterstest

import (
	"context"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
)

// Cluster adds Kubernetes version semver (its ISO named under isoBase, e.g.
// "http://10.99.0.1:8080") and creates cluster name of size nodes on it as
// the local administrator, and returns the cluster once its create job
// succeeded.
func Cluster(t testing.TB, svc *clusters.Service, isoBase, semver, name string, size int) core.Cluster {
	t.Helper()
	ctx := context.Background()
	v, err := svc.AddVersion(ctx, clusters.LocalAdmin, clusters.VersionSpec{SemVer: semver, URL: isoBase + "/isos/v" + semver + ".iso"})
	if err != nil {
		t.Fatal(err)
	}
	c, job, err := svc.CreateCluster(ctx, clusters.LocalAdmin, clusters.ClusterSpec{Name: name, ZoneID: svc.Zone().ID,
		VersionID: v.ID, ServiceOfferingID: clusters.Offerings[0].ID, Size: size})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if done, err := svc.WaitJob(wctx, job.ID); err != nil || done.Status != core.JobSucceeded {
		t.Fatalf("create cluster %s: %+v %v", name, done, err)
	}
	return c
}
