package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runCLI runs ztpd with args in-process and returns its stdout.

func TestISOBuildCLI(t *testing.T) {
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	files := map[string]string{
		"k8s/kubeadm":                       "kubeadm binary",
		"docker/kube-apiserver:v1.31.4.tar": "image archive",
		"network.yaml":                      "kind: DaemonSet\n",
	}
	for p, c := range files {
		os.MkdirAll(filepath.Dir(filepath.Join(tree, p)), 0o755)
		os.WriteFile(filepath.Join(tree, p), []byte(c), 0o644)
	}
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	bomFile := filepath.Join(dir, "bom.yaml")
	os.WriteFile(bomFile, []byte(`kubernetesVersion: 1.31.4
arches: [amd64, arm64]
artifacts:
  - {name: kubeadm, path: k8s/kubeadm, mode: "0755", sha256: {amd64: `+sum("kubeadm binary")+`}}
  - {name: apiserver, image: "registry.k8s.io/kube-apiserver:{{.Version}}"}
  - {name: network, path: network.yaml}
  - {name: unit, path: kubelet.service, content: "[Service]\n"}
`), 0o644)
	out := filepath.Join(dir, "k8s.iso")
	stdout, err := runCLI(t, "iso", "build", "--kubernetes-version", "1.31.4", "--bom", bomFile, "--from-dir", tree, "-O", out, "-o", "json", "--no-fsync")
	if err != nil {
		t.Fatalf("build: %v\n%s", err, stdout)
	}
	var res struct {
		Path, SHA256, Label string
		Size                int64
		Arch                string
		Files               []struct {
			Path, Mode, SHA256 string
			Pinned             bool
		}
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("-o json: %v\n%s", err, stdout)
	}
	img, _ := os.ReadFile(out)
	if res.SHA256 != sum(string(img)) || res.Size != int64(len(img)) || res.Label != "CDROM" || res.Arch != "amd64" || len(res.Files) != 4 {
		t.Errorf("result %+v (image %d bytes)", res, len(img))
	}
	for _, f := range res.Files {
		want := files[f.Path]
		if f.Path == "kubelet.service" {
			want = "[Service]\n"
		}
		if f.SHA256 != sum(want) {
			t.Errorf("%s: sha256 %s", f.Path, f.SHA256)
		}
		if (f.Path == "k8s/kubeadm") != (f.Mode == "0755") {
			t.Errorf("%s: mode %s", f.Path, f.Mode)
		}
	}

	// Table output names the image's sha256 and size.
	stdout, err = runCLI(t, "iso", "build", "--bom", bomFile, "--from-dir", tree, "-O", out, "--no-fsync")
	if err != nil || !strings.Contains(stdout, res.SHA256) || !strings.Contains(stdout, "CDROM") {
		t.Errorf("table output: %v\n%s", err, stdout)
	}

	// A corrupt source: the artifact and both hashes, and no ISO.
	os.WriteFile(filepath.Join(tree, "k8s/kubeadm"), []byte("kubeadm binarY"), 0o644)
	bad := filepath.Join(dir, "bad.iso")
	_, err = runCLI(t, "iso", "build", "--bom", bomFile, "--from-dir", tree, "-O", bad)
	if err == nil || !strings.Contains(err.Error(), "kubeadm") || !strings.Contains(err.Error(), sum("kubeadm binary")) || !strings.Contains(err.Error(), sum("kubeadm binarY")) {
		t.Errorf("corrupt source: %v", err)
	}
	if _, serr := os.Stat(bad); serr == nil {
		t.Error("an ISO was written despite the bad checksum")
	}

	// Inspect reads it back.
	stdout, err = runCLI(t, "iso", "inspect", "--hash", out, "-o", "json")
	if err != nil || !strings.Contains(stdout, `"docker/kube-apiserver:v1.31.4.tar"`) || !strings.Contains(stdout, res.SHA256) {
		t.Errorf("inspect: %v\n%s", err, stdout)
	}

	// Usage errors are clear.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"iso", "build", "--bom", bomFile, "-O", out}, "--from-dir"},
		{[]string{"iso", "build", "--kubernetes-version", "1.31.5", "--bom", bomFile, "--from-dir", tree}, "1.31.4"},
		{[]string{"iso", "build", "--from-dir", tree}, "--kubernetes-version"},
		{[]string{"iso", "build", "--kubernetes-version", "1.2.3", "--from-dir", tree}, "built-in"},
		{[]string{"iso", "build", "--bom", bomFile, "--arch", "s390x", "--from-dir", tree}, "arch"},
	} {
		if _, err := runCLI(t, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want mention of %q", c.args, err, c.want)
		}
	}
}

func TestISOBOMCLI(t *testing.T) {
	stdout, err := runCLI(t, "iso", "bom", "--kubernetes-version", "1.31.4", "--arch", "arm64", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var rows []struct{ Path, Mode, Kind, Source string }
	if err := json.NewDecoder(bytes.NewReader([]byte(stdout))).Decode(&rows); err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, r := range rows {
		switch r.Path {
		case "docker/coredns:v1.11.3.tar":
			found++
		case "k8s/kubelet":
			if r.Mode == "0755" && r.Source == "https://dl.k8s.io/release/v1.31.4/bin/linux/arm64/kubelet" {
				found++
			}
		case "cni/cni-plugins-arm64.tgz":
			found++
		}
	}
	if found != 3 {
		t.Errorf("bom rows: %s", stdout)
	}
}
