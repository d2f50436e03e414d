package bom

import (
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/testenv/kubebin"
)

func TestBuiltinResolves(t *testing.T) {
	vs := BuiltinVersions()
	if !slices.Equal(vs, []string{"1.30.0", "1.31.4", "1.36.3", "1.37.2"}) {
		t.Fatalf("BuiltinVersions = %v", vs)
	}
	b, err := Builtin("1.31.4")
	if err != nil {
		t.Fatal(err)
	}
	for _, arch := range []string{"amd64", "arm64"} {
		items, err := b.Resolve(arch)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]Item{}
		for _, it := range items {
			got[it.Path] = it
		}
		want := []string{
			"cni/cni-plugins-" + arch + ".tgz", "cri-tools/crictl-linux-" + arch + ".tar.gz",
			"k8s/kubeadm", "k8s/kubelet", "k8s/kubectl", "kubelet.service", "10-kubeadm.conf",
			"network.yaml", "dashboard.yaml", "docker/kube-apiserver:v1.31.4.tar",
			"docker/coredns:v1.11.3.tar", "docker/pause:3.10.tar", "docker/etcd:3.5.15-0.tar",
		}
		for _, p := range want {
			if _, ok := got[p]; !ok {
				t.Errorf("%s: %s missing from %v", arch, p, items)
			}
		}
		if k := got["k8s/kubelet"]; k.Mode != 0o755 || k.Kind != KindURL ||
			k.URL != "https://dl.k8s.io/release/v1.31.4/bin/linux/"+arch+"/kubelet" ||
			k.SHA256URL != k.URL+".sha256" || k.Pinned() {
			t.Errorf("kubelet item = %+v", k)
		}
		if c := got["cni/cni-plugins-"+arch+".tgz"]; c.URL != "https://github.com/containernetworking/plugins/releases/download/v1.5.1/cni-plugins-linux-"+arch+"-v1.5.1.tgz" || c.Mode != 0o644 {
			t.Errorf("cni item = %+v", c)
		}
		u := got["kubelet.service"]
		if u.Kind != KindContent || !u.Pinned() || !strings.Contains(string(u.Content), "ExecStart=/opt/bin/kubelet") || strings.Contains(string(u.Content), "/usr/bin") {
			t.Errorf("kubelet.service = %+v", u)
		}
		if im := got["docker/coredns:v1.11.3.tar"]; im.Kind != KindImage || im.Image != "registry.k8s.io/coredns/coredns:v1.11.3" {
			t.Errorf("coredns image = %+v", im)
		}
		for i := 1; i < len(items); i++ {
			if items[i-1].Path >= items[i].Path {
				t.Errorf("items not sorted: %s before %s", items[i-1].Path, items[i].Path)
			}
		}
	}
	if _, err := Builtin("1.99.0"); err == nil || !strings.Contains(err.Error(), "1.31.4") {
		t.Errorf("unknown version error should list known versions: %v", err)
	}
	if _, err := Builtin("../etc"); err == nil {
		t.Error("bad version accepted")
	}
}

// TestBuiltinImagesMatchKubeadm holds the BOMs of the versions built here
// to the image list of the real kubeadm of that version.
func TestBuiltinImagesMatchKubeadm(t *testing.T) {
	vs, err := kubebin.Versions()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		t.Run(v, func(t *testing.T) {
			b, err := Builtin(strings.TrimPrefix(v, "v"))
			if err != nil {
				t.Fatalf("no built-in BOM for %s, a version built in testenv/k8sbin: %v", v, err)
			}
			kubeadm := kubebin.Require(t, v).Kubeadm
			out, err := exec.Command(kubeadm, "config", "images", "list", "--kubernetes-version", v).Output()
			if err != nil {
				t.Fatalf("kubeadm config images list: %v", err)
			}
			want := strings.Fields(string(out))
			items, err := b.Resolve("amd64")
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, it := range items {
				if it.Kind == KindImage && strings.HasPrefix(it.Image, "registry.k8s.io/") {
					got = append(got, it.Image)
				}
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("BOM %s images %v, kubeadm %s lists %v", v, got, v, want)
			}
		})
	}
}

const base = `kubernetesVersion: 1.31.4
arches: [amd64, arm64]
artifacts:
`

func TestParseErrors(t *testing.T) {
	hexA := strings.Repeat("a", 64)
	cases := []struct{ name, doc, want string }{
		{"unknown field", base + "  - {name: x, path: x, sha265: " + hexA + "}\n", "sha265"},
		{"bad hash", base + "  - {name: x, path: x, sha256: abc}\n", "not 64 lowercase hex"},
		{"upper hash", base + "  - {name: x, path: x, sha256: " + strings.ToUpper(hexA) + "}\n", "lowercase"},
		{"unknown arch key", base + "  - {name: x, path: x, sha256: {s390x: " + hexA + "}}\n", "s390x"},
		{"traversal", base + "  - {name: x, path: ../etc/passwd}\n", ".."},
		{"absolute", base + "  - {name: x, path: /etc/passwd}\n", "relative"},
		{"dup path", base + "  - {name: x, path: a}\n  - {name: y, path: a}\n", "both write a"},
		{"dir clash", base + "  - {name: x, path: k8s}\n  - {name: y, path: k8s/kubeadm}\n", "as a directory"},
		{"dup name", base + "  - {name: x, path: a}\n  - {name: x, path: b}\n", "duplicate"},
		{"bad mode", base + "  - {name: x, path: a, mode: \"9755\"}\n", "mode"},
		{"unreadable mode", base + "  - {name: x, path: a, mode: \"0311\"}\n", "readable"},
		{"bad template", base + "  - {name: x, path: \"{{.Arch\"}\n", "path"},
		{"unknown template key", base + "  - {name: x, path: \"{{.Nope}}\"}\n", "Nope"},
		{"two sources", base + "  - {name: x, path: a, url: \"https://h/a\", content: hi}\n", "at most one"},
		{"content pinned", base + "  - {name: x, path: a, content: hi, sha256: " + hexA + "}\n", "inline content"},
		{"ftp", base + "  - {name: x, path: a, url: \"ftp://h/a\"}\n", "http"},
		{"version", "kubernetesVersion: v1.31\narches: [amd64]\nartifacts:\n  - {name: x, path: a}\n", "MAJOR.MINOR.PATCH"},
		{"arch", "kubernetesVersion: 1.31.4\narches: [x86]\nartifacts:\n  - {name: x, path: a}\n", "unknown arch"},
		{"empty", "", "empty"},
		{"two docs", base + "  - {name: x, path: a}\n---\nfoo: 1\n", "more than one"},
		{"bad image", base + "  - {name: x, image: \"UPPER/Case:tag\"}\n", "image"},
		{"too deep", base + "  - {name: x, path: a/b/c/d/e/f/g/h/i}\n", "deeper"},
		{"no path", base + "  - {name: x, url: \"https://h/a\"}\n", "path: required"},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.doc))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want mention of %q", c.name, err, c.want)
		}
	}
}

func TestPinsPerArch(t *testing.T) {
	a, b := strings.Repeat("a", 64), strings.Repeat("b", 64)
	doc := base + "  - {name: x, path: \"bin/x-{{.Arch}}\", url: \"https://h/{{.Version}}/{{.Arch}}/x\", sha256: {amd64: " + a + ", arm64: " + b + "}}\n" +
		"  - {name: y, path: y, sha256: " + a + ", arches: [arm64]}\n" +
		"  - {name: img, image: \"quay.io:443/org/app:1.0\", version: \"2.0\"}\n"
	bm, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	amd, _ := bm.Resolve("amd64")
	arm, _ := bm.Resolve("arm64")
	if len(amd) != 2 || len(arm) != 3 {
		t.Fatalf("amd64 %v arm64 %v", amd, arm)
	}
	if amd[0].Path != "bin/x-amd64" || amd[0].SHA256 != a || amd[0].URL != "https://h/v1.31.4/amd64/x" {
		t.Errorf("amd64 x = %+v", amd[0])
	}
	if arm[0].SHA256 != b || arm[2].SHA256 != a || arm[2].Kind != KindLocal {
		t.Errorf("arm64 = %+v", arm)
	}
	if amd[1].Path != "docker/app:1.0.tar" {
		t.Errorf("image path = %s", amd[1].Path)
	}
	if _, err := bm.Resolve("riscv64"); err == nil {
		t.Error("unknown arch resolved")
	}
}

func TestImageArchiveName(t *testing.T) {
	for in, want := range map[string]string{
		"registry.k8s.io/coredns/coredns:v1.11.3": "coredns:v1.11.3.tar",
		"registry.k8s.io/pause:3.10":              "pause:3.10.tar",
		"busybox":                                 "busybox.tar",
		"docker.io/calico/node:v3.28.2@sha256:" + strings.Repeat("0", 64): "node:v3.28.2.tar",
	} {
		if got := ImageArchiveName(in); got != want {
			t.Errorf("ImageArchiveName(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, v := range BuiltinVersions() {
		data, _ := builtin.ReadFile("kubernetes-" + v + ".yaml")
		f.Add(data)
	}
	f.Add([]byte(base + "  - {name: x, path: \"{{.Arch}}/{{.Version}}\", sha256: {amd64: " + strings.Repeat("0", 64) + "}}\n"))
	f.Add([]byte(base + "  - {name: x, image: \"a/b:c\"}\n"))
	f.Add([]byte("kubernetesVersion: 1.0.0\narches: [amd64]\nartifacts: [{name: a, path: \"{{range .}}x{{end}}\"}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := Parse(data)
		if err != nil {
			return
		}
		for _, arch := range b.Arches {
			items, err := b.Resolve(arch)
			if err != nil {
				t.Fatalf("validated BOM fails to resolve for %s: %v", arch, err)
			}
			seen := map[string]bool{}
			for _, it := range items {
				if err := CheckPath(it.Path); err != nil {
					t.Fatalf("resolved bad path: %v", err)
				}
				if seen[it.Path] {
					t.Fatalf("duplicate path %s", it.Path)
				}
				seen[it.Path] = true
				if it.Mode&^0o777 != 0 {
					t.Fatalf("mode %v", it.Mode)
				}
			}
		}
	})
}

// TestVersionSpelling: a BOM's version is semver.Parse's in its one
// canonical spelling, exactly what the pattern it replaced accepted.
func TestVersionSpelling(t *testing.T) {
	was := regexp.MustCompile(`^(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})$`)
	for _, s := range []string{"1.31.4", "0.0.0", "9999.9999.9999", "1.31.04", "01.2.3", "1.2.10000", "1.2", "1.2.3.4", "v1.2.3",
		"1.2.3-rc1", "+1.2.3", "1.2. 3", "1..3", "", "1.2.0000", "10.20.30", "1.2.3\n"} {
		if _, ok := parseVersion(s); ok != was.MatchString(s) {
			t.Errorf("%q: accepted %v, the pattern %v", s, ok, was.MatchString(s))
		}
	}
}

func FuzzVersionSpelling(f *testing.F) {
	was := regexp.MustCompile(`^(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})$`)
	for _, s := range []string{"1.31.4", "1.31.04", "9999.0.0", "10000.0.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, ok := parseVersion(s)
		if ok != was.MatchString(s) || ok && v.String() != s {
			t.Fatalf("%q: accepted %v as %v", s, ok, v)
		}
	})
}
