package kubebin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestVersionsFromPinFile(t *testing.T) {
	vs, err := Versions()
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) < 2 {
		t.Fatalf("versions = %v, want the two pinned minors", vs)
	}
	for _, v := range vs {
		if !strings.HasPrefix(v, "v1.") {
			t.Errorf("version %q: want v1.x.y", v)
		}
	}
	ev, err := EtcdVersion()
	if err != nil || !strings.HasPrefix(ev, "v3.") {
		t.Fatalf("etcd version = %q, %v", ev, err)
	}
}

func TestCacheDirRule(t *testing.T) {
	t.Setenv("ZTPD_K8S_CACHE", "")
	t.Setenv("XDG_CACHE_HOME", "/x/cache")
	if got := CacheDir(); got != "/x/cache/ztpd/k8s" {
		t.Errorf("with XDG_CACHE_HOME: %s", got)
	}
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "/home/u")
	if got := CacheDir(); got != "/home/u/.cache/ztpd/k8s" {
		t.Errorf("with HOME: %s", got)
	}
	t.Setenv("ZTPD_K8S_CACHE", "/c")
	if got := CacheDir(); got != "/c" {
		t.Errorf("with ZTPD_K8S_CACHE: %s", got)
	}
}

// fakeCache lays out a cache the way build.sh does: a keyed directory with a
// .complete marker and a <version> symlink to it.
func fakeCache(t *testing.T, version string, complete bool, bins ...string) string {
	root := t.TempDir()
	dir := filepath.Join(root, version+"-0123456789ab")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, b := range bins {
		if err := os.WriteFile(filepath.Join(dir, b), []byte("#!/bin/true\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if complete {
		if err := os.WriteFile(filepath.Join(dir, ".complete"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Base(dir), filepath.Join(root, version)); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ZTPD_K8S_CACHE", root)
	return dir
}

func TestKubernetesFindsCompleteBuild(t *testing.T) {
	vs, err := Versions()
	if err != nil {
		t.Fatal(err)
	}
	v := vs[len(vs)-1]
	dir := fakeCache(t, v, true, "kube-apiserver", "kube-controller-manager", "kubeadm")
	s, err := Kubernetes(strings.TrimPrefix(v, "v"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Version != v || s.Dir != dir || s.Kubeadm != filepath.Join(dir, "kubeadm") ||
		s.APIServer != filepath.Join(dir, "kube-apiserver") || s.ControllerManager != filepath.Join(dir, "kube-controller-manager") {
		t.Errorf("set = %+v", s)
	}
}

func TestKubernetesRefusesIncompleteOrMissing(t *testing.T) {
	vs, err := Versions()
	if err != nil {
		t.Fatal(err)
	}
	v := vs[0]
	fakeCache(t, v, false, "kube-apiserver", "kube-controller-manager", "kubeadm")
	if _, err := Kubernetes(v); !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), ".complete") {
		t.Errorf("incomplete build: %v", err)
	}
	fakeCache(t, v, true, "kube-apiserver", "kubeadm")
	if _, err := Kubernetes(v); !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), "kube-controller-manager") {
		t.Errorf("missing binary: %v", err)
	}
	t.Setenv("ZTPD_K8S_CACHE", t.TempDir())
	if _, err := Kubernetes(v); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("empty cache: %v", err)
	}
	if _, err := Etcd(); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("empty cache, etcd: %v", err)
	}
	if _, err := Kubernetes("v1.2.3"); err == nil || errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), "not pinned") {
		t.Errorf("unpinned version: %v", err)
	}
}

type recorder struct {
	skipped, fataled string
}

func (r *recorder) Helper()                   {}
func (r *recorder) Skipf(f string, a ...any)  { r.skipped = fmt.Sprintf(f, a...) }
func (r *recorder) Fatalf(f string, a ...any) { r.fataled = fmt.Sprintf(f, a...) }

func TestRequireSkipsWithBuildCommand(t *testing.T) {
	vs, err := Versions()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("ZTPD_K8S_CACHE", t.TempDir())
	var r recorder
	Require(&r, vs[0])
	if !strings.Contains(r.skipped, "real Kubernetes "+vs[0]+" binaries not built: run testenv/k8sbin/build.sh") || r.fataled != "" {
		t.Errorf("skip = %q, fatal = %q", r.skipped, r.fataled)
	}
	r = recorder{}
	RequireEtcd(&r)
	if !strings.Contains(r.skipped, "testenv/k8sbin/build.sh") {
		t.Errorf("etcd skip = %q", r.skipped)
	}
	r = recorder{}
	Require(&r, "v1.2.3")
	if r.fataled == "" || r.skipped != "" {
		t.Errorf("unpinned version must fail, not skip: skip=%q fatal=%q", r.skipped, r.fataled)
	}
}

// The hollow node's entry is <cache>/kubemark-<version>, apart from the
// control plane's, and Require of a control plane never needs it.
func TestHollowFindsItsOwnEntry(t *testing.T) {
	hs, err := HollowVersions()
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) == 0 {
		t.Fatal("the versions file pins no kubemark version")
	}
	v := hs[len(hs)-1]
	dir := fakeCache(t, "kubemark-"+v, true, "kubemark", "kube-scheduler")
	s, err := Hollow(v)
	if err != nil {
		t.Fatal(err)
	}
	if s.Version != v || s.Dir != dir || s.Kubemark != filepath.Join(dir, "kubemark") || s.Scheduler != filepath.Join(dir, "kube-scheduler") {
		t.Errorf("set = %+v", s)
	}
	if _, err := Kubernetes(v); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("the control plane from the kubemark entry: %v", err)
	}

	fakeCache(t, "kubemark-"+v, true, "kubemark")
	if _, err := Hollow(v); !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), "kube-scheduler") {
		t.Errorf("missing scheduler: %v", err)
	}
	t.Setenv("ZTPD_K8S_CACHE", t.TempDir())
	var r recorder
	RequireHollow(&r, v)
	if !strings.Contains(r.skipped, "kubemark (hollow node) "+v+" not built: run testenv/k8sbin/build.sh") || r.fataled != "" {
		t.Errorf("skip = %q, fatal = %q", r.skipped, r.fataled)
	}
	r = recorder{}
	RequireHollow(&r, "v1.2.3")
	if r.fataled == "" || r.skipped != "" {
		t.Errorf("unpinned version must fail, not skip: skip=%q fatal=%q", r.skipped, r.fataled)
	}
}
