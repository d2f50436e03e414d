package controlplane

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/joiner/pki"
	"github.com/ztpd/ztpd/joiner/tokens"
	"github.com/ztpd/ztpd/testenv/kubebin"
	"github.com/ztpd/ztpd/testenv/netns"
)

// TestOptions shape the control plane StartForTest brings up.
type TestOptions struct {
	Version   string // e.g. "v1.37.2"; "" is the newest pinned version
	Namespace string // the network namespace's name, unique to the test
	// EndpointIP (what a load balancer would hold) and AdvertiseIP (the
	// node's) go on the namespace's loopback; 10.99.0.0/16 addresses.
	EndpointIP, AdvertiseIP string
	Tokens                  []bundle.Token // created by kubeadm init
	CertSANs                []string
	Manifests               [][]byte      // applied after init, as a ztpd init bundle's
	Timeout                 time.Duration // for the start; default 5 minutes
	// NS, when set, is a namespace the test made (and closes) to start
	// in, for peers that must run there before the control plane starts;
	// nil: a new one named Namespace.
	NS *netns.NS
	// ExternalEtcd, when set, is the etcd the control plane stores in
	// instead of running its own (it must be serving already).
	ExternalEtcd *TestExternalEtcd
}

// TestExternalEtcd is an external etcd for StartForTest: its client
// endpoints (kubeadm's configuration) and the files the API server reaches
// it with.
type TestExternalEtcd struct {
	Endpoints []string
	Files     ExternalEtcdFiles
}

// TestPlane is a real control plane a test started from a fresh init
// bundle shaped as ztpd renders it (an ECDSA cluster CA, node cp-1), in a
// network namespace of its own; it is stopped when the test ends.
type TestPlane struct {
	*ControlPlane
	NS      *netns.NS
	CA      *pki.CA
	Bins    kubebin.Set
	Version bundle.Version
}

// StartForTest starts a TestPlane, or skips the test with the reason when
// this machine cannot run one (not root, no namespaces, binaries not built).
func StartForTest(t testing.TB, o TestOptions) *TestPlane {
	t.Helper()
	if err := Check(); err != nil {
		t.Skip("skipping:", err)
	}
	if err := netns.Check(); err != nil {
		t.Skip("skipping:", err)
	}
	if o.Version == "" {
		vs, err := kubebin.Versions()
		if err != nil {
			t.Fatal(err)
		}
		o.Version = vs[len(vs)-1]
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Minute
	}
	bins := kubebin.Require(t, o.Version)
	etcd := kubebin.RequireEtcd(t)
	ns := o.NS
	if ns == nil {
		var err error
		if ns, err = netns.Add(o.Namespace); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ns.Close() })
	}
	for _, a := range []string{o.EndpointIP + "/32", o.AdvertiseIP + "/32"} {
		if err := ns.IP("addr", "add", a, "dev", "lo"); err != nil {
			t.Fatal(err)
		}
	}
	v := bundle.MustVersion(strings.TrimPrefix(o.Version, "v"))
	ca, err := pki.NewCA("kubernetes", pki.ECDSAP256, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	caKey, err := ca.PrivateKeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	certKey, err := tokens.GenerateCertificateKey()
	if err != nil {
		t.Fatal(err)
	}
	var external *bundle.ExternalEtcd
	var files *ExternalEtcdFiles
	if o.ExternalEtcd != nil {
		external, files = &bundle.ExternalEtcd{Endpoints: o.ExternalEtcd.Endpoints}, &o.ExternalEtcd.Files
	}
	plan, err := bundle.PlanInit(bundle.InitParams{
		Version:              v,
		ControlPlaneEndpoint: o.EndpointIP + ":6443",
		AdvertiseAddress:     o.AdvertiseIP,
		NodeName:             "cp-1",
		CertSANs:             o.CertSANs,
		Tokens:               o.Tokens,
		CertificateKey:       certKey,
		EncryptionAlgorithm:  pki.ECDSAP256,
		PodSubnet:            "10.244.0.0/16",
		ExternalEtcd:         external,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
	defer cancel()
	cp, err := Start(ctx, Config{
		Kubernetes:    bins,
		Etcd:          etcd,
		KubeadmConfig: plan.Config,
		CACert:        ca.CertPEM(),
		CAKey:         caKey,
		Manifests:     o.Manifests,
		ExternalEtcd:  files,
		Dir:           filepath.Join(t.TempDir(), "cp"),
		Run:           NetnsRun(ns),
		Dial:          NetnsDial(ns),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cp.Stop() })
	t.Logf("%s control plane ready in %v", o.Version, cp.StartDuration.Round(time.Millisecond))
	return &TestPlane{ControlPlane: cp, NS: ns, CA: ca, Bins: bins, Version: v}
}
