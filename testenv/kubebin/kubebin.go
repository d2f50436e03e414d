// Package kubebin finds the real Kubernetes and etcd binaries that
// testenv/k8sbin/build.sh builds from the Go module proxy. The versions come
// from testenv/k8sbin/versions (the one place they are pinned); the binaries
// from the build cache, through the stable <cache>/<version> symlinks
// build.sh maintains.
//
// Tests that need the binaries call Require or RequireEtcd, which skip the
// test with the command to run when a build is missing.
package kubebin

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

// ErrNotBuilt is wrapped by the errors of Kubernetes and Etcd when the cache
// has no complete build of the version.
var ErrNotBuilt = errors.New("not built")

// Set is one Kubernetes version's binaries (absolute paths).
type Set struct {
	Version           string // e.g. v1.37.2
	Dir               string // the cache entry holding them
	APIServer         string
	ControllerManager string
	Kubeadm           string
}

// TB is the part of testing.TB that Require needs, so this package does
// not import testing.
type TB interface {
	Helper()
	Skipf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// CacheDir is where build.sh puts its builds: $ZTPD_K8S_CACHE, else
// ${XDG_CACHE_HOME:-$HOME/.cache}/ztpd/k8s (the same rule as build.sh).
func CacheDir() string {
	if d := os.Getenv("ZTPD_K8S_CACHE"); d != "" {
		return d
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		base = filepath.Join(os.Getenv("HOME"), ".cache")
	}
	return filepath.Join(base, "ztpd", "k8s")
}

// VersionsFile returns the path of testenv/k8sbin/versions. It is found
// next to this package's source (runtime.Caller) or, when the binary was
// built with -trimpath, by walking up from the working directory.
func VersionsFile() (string, error) {
	const rel = "testenv/k8sbin/versions"
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		p := filepath.Join(filepath.Dir(file), "..", "k8sbin", "versions")
		if _, err := os.Stat(p); err == nil {
			return filepath.Clean(p), nil
		}
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("kubebin: %s not found above the working directory or next to the kubebin source", rel)
		}
		dir = parent
	}
}

// pins reads the versions file: the versions of each kind ("kubernetes",
// "etcd"), in file order.
func pins() (map[string][]string, error) {
	path, err := VersionsFile()
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 || !strings.HasPrefix(f[1], "v") {
			return nil, fmt.Errorf("kubebin: %s:%d: want `<kind> v<version>`, have %q", path, n, line)
		}
		out[f[0]] = append(out[f[0]], f[1])
	}
	return out, sc.Err()
}

// Versions lists the pinned Kubernetes versions ("v1.36.3", "v1.37.2"), in
// the order of the versions file (oldest first).
func Versions() ([]string, error) {
	p, err := pins()
	if err != nil {
		return nil, err
	}
	if len(p["kubernetes"]) == 0 {
		return nil, errors.New("kubebin: the versions file pins no kubernetes version")
	}
	return p["kubernetes"], nil
}

// EtcdVersion is the pinned etcd version ("v3.7.3").
func EtcdVersion() (string, error) {
	p, err := pins()
	if err != nil {
		return "", err
	}
	if len(p["etcd"]) != 1 {
		return "", fmt.Errorf("kubebin: the versions file pins %d etcd versions, want 1", len(p["etcd"]))
	}
	return p["etcd"][0], nil
}

// Kubernetes returns the binaries of a pinned Kubernetes version ("v1.37.2"
// or "1.37.2"). The error wraps ErrNotBuilt when the cache lacks them.
func Kubernetes(version string) (Set, error) {
	version = "v" + strings.TrimPrefix(version, "v")
	vs, err := Versions()
	if err != nil {
		return Set{}, err
	}
	if !slices.Contains(vs, version) {
		return Set{}, fmt.Errorf("kubebin: Kubernetes %s is not pinned in testenv/k8sbin/versions (pinned: %s)", version, strings.Join(vs, ", "))
	}
	dir, err := entry(version, "kube-apiserver", "kube-controller-manager", "kubeadm")
	if err != nil {
		return Set{}, err
	}
	return Set{
		Version:           version,
		Dir:               dir,
		APIServer:         filepath.Join(dir, "kube-apiserver"),
		ControllerManager: filepath.Join(dir, "kube-controller-manager"),
		Kubeadm:           filepath.Join(dir, "kubeadm"),
	}, nil
}

// Etcd returns the path of the pinned etcd's binary. The error wraps
// ErrNotBuilt when the cache lacks it.
func Etcd() (string, error) {
	v, err := EtcdVersion()
	if err != nil {
		return "", err
	}
	dir, err := entry(v, "etcd")
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "etcd"), nil
}

// entry resolves <cache>/<version> and checks that the build completed and
// has the executables.
func entry(version string, bins ...string) (string, error) {
	link := filepath.Join(CacheDir(), version)
	dir, err := filepath.EvalSymlinks(link)
	if err != nil {
		return "", fmt.Errorf("kubebin: %s: %w (no %s)", version, ErrNotBuilt, link)
	}
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err != nil {
		return "", fmt.Errorf("kubebin: %s: %w (%s has no .complete marker)", version, ErrNotBuilt, dir)
	}
	for _, b := range bins {
		fi, err := os.Stat(filepath.Join(dir, b))
		if err != nil || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("kubebin: %s: %w (%s/%s missing or not executable)", version, ErrNotBuilt, dir, b)
		}
	}
	return dir, nil
}

// Require returns the binaries of a Kubernetes version, or skips the test
// with the command that builds them. A version that is not pinned, or an
// unreadable versions file, fails the test instead.
func Require(t TB, version string) Set {
	t.Helper()
	s, err := Kubernetes(version)
	if err != nil && !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("%v", err)
		return Set{}
	}
	if err != nil {
		t.Skipf("real Kubernetes %s binaries not built: run testenv/k8sbin/build.sh (about 6 min per version cold): %v", "v"+strings.TrimPrefix(version, "v"), err)
	}
	return s
}

// RequireEtcd returns the etcd binary's path, or skips the test with the
// command that builds it.
func RequireEtcd(t TB) string {
	t.Helper()
	p, err := Etcd()
	if err != nil && !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("%v", err)
		return ""
	}
	if err != nil {
		t.Skipf("real etcd binary not built: run testenv/k8sbin/build.sh (about a minute cold): %v", err)
	}
	return p
}

// HollowSet is one Kubernetes version's hollow node (kubemark: the real
// kubelet over a fake container runtime, which runs no containers) and the
// kube-scheduler that lands pods on it, built by build.sh from
// testenv/k8sbin/kubemark-<version> into <cache>/kubemark-<version>.
type HollowSet struct {
	Version   string // e.g. v1.37.2
	Dir       string // the cache entry holding them
	Kubemark  string
	Scheduler string
}

// HollowVersions lists the versions pinned as `kubemark <version>` in the
// versions file, oldest first (none: no hollow node is built).
func HollowVersions() ([]string, error) {
	p, err := pins()
	if err != nil {
		return nil, err
	}
	return p["kubemark"], nil
}

// Hollow returns the hollow node and scheduler of a version pinned as
// `kubemark <version>`. The error wraps ErrNotBuilt when the cache lacks
// them.
func Hollow(version string) (HollowSet, error) {
	version = "v" + strings.TrimPrefix(version, "v")
	vs, err := HollowVersions()
	if err != nil {
		return HollowSet{}, err
	}
	if !slices.Contains(vs, version) {
		return HollowSet{}, fmt.Errorf("kubebin: kubemark %s is not pinned in testenv/k8sbin/versions (pinned: %s)", version, strings.Join(vs, ", "))
	}
	dir, err := entry("kubemark-"+version, "kubemark", "kube-scheduler")
	if err != nil {
		return HollowSet{}, err
	}
	return HollowSet{Version: version, Dir: dir,
		Kubemark: filepath.Join(dir, "kubemark"), Scheduler: filepath.Join(dir, "kube-scheduler")}, nil
}

// RequireHollow returns the hollow node of a version, or skips the test
// with the command that builds it. A version that is not pinned fails the
// test instead.
func RequireHollow(t TB, version string) HollowSet {
	t.Helper()
	s, err := Hollow(version)
	if err != nil && !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("%v", err)
		return HollowSet{}
	}
	if err != nil {
		t.Skipf("kubemark (hollow node) %s not built: run testenv/k8sbin/build.sh (a few minutes per version): %v", "v"+strings.TrimPrefix(version, "v"), err)
	}
	return s
}
