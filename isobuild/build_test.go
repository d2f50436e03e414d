package isobuild

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"
)

// testFile is one file of a generated tree.
type testFile struct {
	path string
	size int
	mode fs.FileMode
}

// cksTree is shaped like a CloudStack binaries ISO, small: odd sizes, an
// empty file, exact-sector sizes, colons in image archive names.
var cksTree = []testFile{
	{"10-kubeadm.conf", 440, 0o644},
	{"cni/cni-plugins-amd64.tgz", 300_001, 0o644},
	{"cri-tools/crictl-linux-amd64.tar.gz", 2048, 0o644},
	{"dashboard.yaml", 2049, 0o644},
	{"docker/coredns:v1.11.3.tar", 65_536, 0o644},
	{"docker/etcd:3.5.15-0.tar", 4095, 0o644},
	{"docker/kube-apiserver:v1.31.4.tar", 123_457, 0o644},
	{"docker/kube-controller-manager:v1.31.4.tar", 99_999, 0o644},
	{"docker/pause:3.10.tar", 1, 0o644},
	{"k8s/kubeadm", 200_003, 0o755},
	{"k8s/kubectl", 150_000, 0o755},
	{"k8s/kubelet", 250_001, 0o755},
	{"kubelet.service", 283, 0o644},
	{"network.yaml", 0, 0o644},
}

// makeTree writes random files and returns them as Build input with their sha256.
func makeTree(t *testing.T, dir string, spec []testFile, seed int64) ([]File, map[string]string) {
	t.Helper()
	r := rand.New(rand.NewSource(seed))
	var files []File
	sums := map[string]string{}
	for _, s := range spec {
		p := filepath.Join(dir, filepath.FromSlash(s.path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, s.size)
		r.Read(b)
		if err := os.WriteFile(p, b, 0o600); err != nil { // source modes do not matter
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		sums[s.path] = hex.EncodeToString(sum[:])
		files = append(files, File{Path: s.path, Source: p, Mode: s.mode})
	}
	return files, sums
}

func needTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (apt-get install xorriso genisoimage libarchive-tools)", tool)
		}
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func fileSHA(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func build(t *testing.T, files []File, out string) *Result {
	t.Helper()
	res, err := Build(context.Background(), Options{Files: files, Output: out, TempDir: t.TempDir()})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return res
}

// TestBuildReadBackWithRealTools builds a CloudStack-shaped image and reads it
// back with xorriso, isoinfo -R, bsdtar and blkid.
func TestBuildReadBackWithRealTools(t *testing.T) {
	needTools(t, "xorriso", "isoinfo", "bsdtar")
	dir := t.TempDir()
	files, sums := makeTree(t, filepath.Join(dir, "tree"), cksTree, 1)
	iso := filepath.Join(dir, "out.iso")
	res := build(t, files, iso)

	st, err := os.Stat(iso)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size()%2048 != 0 || st.Size() != res.Size {
		t.Errorf("image is %d bytes (result says %d), not whole 2048-byte sectors", st.Size(), res.Size)
	}
	if got := fileSHA(t, iso); got != res.SHA256 {
		t.Errorf("reported image sha256 %s, file has %s", res.SHA256, got)
	}
	for _, f := range res.Files {
		if f.SHA256 != sums[f.Path] || f.Pinned {
			t.Errorf("result %s: sha256 %s pinned=%v, want %s from source", f.Path, f.SHA256, f.Pinned, sums[f.Path])
		}
	}
	want := map[string]testFile{}
	for _, s := range cksTree {
		want[s.path] = s
	}

	// xorriso: names, modes, sizes, label.
	out := run(t, "xorriso", "-indev", iso, "-pvd_info", "-find", "/", "-type", "f", "-exec", "lsdl")
	if !strings.Contains(out, "Volume Id    : CDROM") && !strings.Contains(out, "Volume id    : 'CDROM'") {
		t.Errorf("xorriso: label CDROM not found:\n%s", out)
	}
	lsdl := regexp.MustCompile(`(?m)^(-[rwx-]{9})\s+\d+\s+\d+\s+\d+\s+(\d+)\s+\w+\s+\d+\s+\d+\s+'/(.*)'$`)
	seen := map[string]bool{}
	for _, m := range lsdl.FindAllStringSubmatch(out, -1) {
		w, ok := want[m[3]]
		if !ok {
			t.Errorf("xorriso: unexpected file %q", m[3])
			continue
		}
		seen[m[3]] = true
		if m[1] != fs.FileMode(w.mode).String() {
			t.Errorf("xorriso: %s mode %s, want %s", m[3], m[1], fs.FileMode(w.mode))
		}
		if m[2] != strconv.Itoa(w.size) {
			t.Errorf("xorriso: %s size %s, want %d", m[3], m[2], w.size)
		}
	}
	if len(seen) != len(want) {
		t.Errorf("xorriso listed %d of %d files:\n%s", len(seen), len(want), out)
	}

	// isoinfo -R: label, names with colons, modes, and every file's bytes.
	if d := run(t, "isoinfo", "-d", "-i", iso); !strings.Contains(d, "Volume id: CDROM") || !strings.Contains(d, "Rock Ridge signatures") {
		t.Errorf("isoinfo -d:\n%s", d)
	}
	listing := run(t, "isoinfo", "-R", "-l", "-i", iso)
	for _, s := range cksTree {
		base := filepath.Base(s.path)
		line := regexp.MustCompile(`(?m)^(\S{10})\s+\d+\s+\d+\s+\d+\s+(\d+) .*\]\s+` + regexp.QuoteMeta(base) + ` $`).FindStringSubmatch(listing)
		if line == nil {
			t.Errorf("isoinfo -R -l: %s not listed", base)
			continue
		}
		if line[1] != fs.FileMode(s.mode).String() || line[2] != strconv.Itoa(s.size) {
			t.Errorf("isoinfo -R -l: %s is %s %s, want %s %d", base, line[1], line[2], fs.FileMode(s.mode), s.size)
		}
		data, err := exec.Command("isoinfo", "-R", "-i", iso, "-x", "/"+s.path).Output()
		if err != nil {
			t.Fatalf("isoinfo -x %s: %v", s.path, err)
		}
		if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != sums[s.path] {
			t.Errorf("isoinfo -x %s: sha256 differs from the source", s.path)
		}
	}

	// bsdtar: extract everything, compare bytes and modes.
	ex := filepath.Join(dir, "bsdtar")
	os.Mkdir(ex, 0o755)
	run(t, "bsdtar", "-x", "-p", "-f", iso, "-C", ex)
	n := 0
	filepath.WalkDir(ex, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(ex, p)
		rel = filepath.ToSlash(rel)
		w, ok := want[rel]
		if !ok {
			t.Errorf("bsdtar: unexpected %s", rel)
			return nil
		}
		n++
		info, _ := d.Info()
		if info.Mode().Perm() != w.mode {
			t.Errorf("bsdtar: %s mode %v, want %v", rel, info.Mode().Perm(), w.mode)
		}
		if fileSHA(t, p) != sums[rel] {
			t.Errorf("bsdtar: %s sha256 differs from the source", rel)
		}
		return nil
	})
	if n != len(want) {
		t.Errorf("bsdtar extracted %d of %d files", n, len(want))
	}

	// blkid is how nodes find the disc (LABEL=CDROM, TYPE=iso9660).
	if _, err := exec.LookPath("blkid"); err == nil {
		out := run(t, "blkid", "-p", iso)
		if !strings.Contains(out, `LABEL="CDROM"`) || !strings.Contains(out, `TYPE="iso9660"`) {
			t.Errorf("blkid: %s", out)
		}
	}

	// Our own reader agrees.
	m, err := ReadManifest(context.Background(), iso, true)
	if err != nil {
		t.Fatal(err)
	}
	if m.Label != "CDROM" || m.SHA256 != res.SHA256 || len(m.Files) != len(cksTree) || !m.RockRidge {
		t.Errorf("manifest = %+v", m)
	}
	for _, f := range m.Files {
		w := want[f.Path]
		if f.SHA256 != sums[f.Path] || f.Size != int64(w.size) || f.Mode != fmt.Sprintf("%04o", uint32(w.mode)) {
			t.Errorf("manifest %+v, want %+v", f, w)
		}
	}
}

// TestReproducible: same inputs, same bytes, whatever the source mtimes, the
// staging times, the output directory or go-diskfs's map order.
func TestReproducible(t *testing.T) {
	dir := t.TempDir()
	spec := append([]testFile{}, cksTree...)
	// Two collision groups whose 8.3 renaming candidates overlap: go-diskfs
	// resolves them in map order, normalize must undo that.
	for i, n := range collisionNames() {
		if !strings.HasPrefix(n, "cri-tools/") {
			spec = append(spec, testFile{n, 10 + i, 0o644})
		}
	}
	files, _ := makeTree(t, filepath.Join(dir, "tree"), spec, 2)
	first := build(t, files, filepath.Join(dir, "a.iso"))
	for i := 0; i < 8; i++ {
		for _, f := range files { // new mtimes and ctimes on every source
			tm := time.Now().Add(time.Duration(i) * time.Hour)
			os.Chtimes(f.Source, tm, tm)
		}
		out := filepath.Join(dir, fmt.Sprintf("sub%d", i), "b.iso")
		os.MkdirAll(filepath.Dir(out), 0o755)
		res := build(t, files, out)
		if res.SHA256 != first.SHA256 {
			out := run(t, "cmp", "-l", filepath.Join(dir, "a.iso"), out)
			t.Fatalf("build %d differs: %s vs %s\n%.2000s", i, res.SHA256, first.SHA256, out)
		}
	}
	// The epoch is the only date in the image.
	e := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	res, err := Build(context.Background(), Options{Files: files, Output: filepath.Join(dir, "e.iso"), Epoch: e, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if res.SHA256 == first.SHA256 {
		t.Error("a different epoch gave the same image")
	}
	if _, err := exec.LookPath("isoinfo"); err == nil {
		d := run(t, "xorriso", "-indev", filepath.Join(dir, "e.iso"), "-pvd_info")
		if !strings.Contains(d, "Creation Time: 2024050607080900") || !strings.Contains(d, "Modif. Time  : 2024050607080900") {
			t.Errorf("xorriso -pvd_info does not show the epoch as creation date:\n%s", d)
		}
		l := run(t, "isoinfo", "-R", "-l", "-i", filepath.Join(dir, "e.iso"))
		for _, line := range strings.Split(l, "\n") {
			if strings.Contains(line, "[") && !strings.Contains(line, "May  6 2024") {
				t.Errorf("isoinfo: record not dated by the epoch: %s", line)
			}
		}
	}
}

func TestEpochFromEnv(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	e, err := EpochFromEnv()
	if err != nil || !e.Equal(time.Unix(1700000000, 0)) {
		t.Errorf("EpochFromEnv = %v, %v", e, err)
	}
	for _, bad := range []string{"yesterday", "-1", "1e9", "99999999999999"} {
		t.Setenv("SOURCE_DATE_EPOCH", bad)
		if _, err := EpochFromEnv(); err == nil {
			t.Errorf("SOURCE_DATE_EPOCH=%s accepted", bad)
		}
	}
	t.Setenv("SOURCE_DATE_EPOCH", "")
	if e, err := EpochFromEnv(); err != nil || !e.Equal(DefaultEpoch) {
		t.Errorf("unset: %v %v", e, err)
	}
}

// noLeftovers checks that a failed build left nothing in dir but want.
func noLeftovers(t *testing.T, dir string, want ...string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("%s holds %v after a failed build, want %v", dir, got, want)
	}
}

func TestBuildErrors(t *testing.T) {
	dir := t.TempDir()
	files, sums := makeTree(t, filepath.Join(dir, "tree"), cksTree, 3)
	outDir := filepath.Join(dir, "out")
	os.Mkdir(outDir, 0o755)
	out := filepath.Join(outDir, "k8s.iso")
	// An existing image must survive every failed build untouched.
	os.WriteFile(out, []byte("previous image"), 0o644)

	t.Run("corrupt source", func(t *testing.T) {
		fs := append([]File{}, files...)
		for i := range fs {
			fs[i].SHA256 = sums[fs[i].Path]
		}
		kubelet := filepath.Join(dir, "tree", "k8s", "kubelet")
		orig, _ := os.ReadFile(kubelet)
		bad := append([]byte{}, orig...)
		bad[1000] ^= 0xff // flip one byte: same size, different content
		os.WriteFile(kubelet, bad, 0o600)
		defer os.WriteFile(kubelet, orig, 0o600)
		_, err := Build(context.Background(), Options{Files: fs, Output: out, TempDir: t.TempDir()})
		var ce *ChecksumError
		if !errors.As(err, &ce) {
			t.Fatalf("err = %v, want a ChecksumError", err)
		}
		badSum := sha256.Sum256(bad)
		msg := err.Error()
		if ce.Path != "k8s/kubelet" || !strings.Contains(msg, sums["k8s/kubelet"]) || !strings.Contains(msg, hex.EncodeToString(badSum[:])) {
			t.Errorf("error should name the artifact and both hashes: %v", err)
		}
	})
	t.Run("missing artifact", func(t *testing.T) {
		fs := append([]File{}, files...)
		fs = append(fs, File{Path: "docker/kube-proxy:v1.31.4.tar", Source: filepath.Join(dir, "tree", "docker", "kube-proxy:v1.31.4.tar"), Name: "kube-proxy-image"})
		_, err := Build(context.Background(), Options{Files: fs, Output: out})
		if err == nil || !strings.Contains(err.Error(), "kube-proxy-image") || !strings.Contains(err.Error(), "missing") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("4 GiB file", func(t *testing.T) {
		big := filepath.Join(dir, "big.tar")
		f, _ := os.Create(big)
		if err := f.Truncate(4 << 30); err != nil { // sparse: no disk used
			t.Skip("sparse files not supported here:", err)
		}
		f.Close()
		defer os.Remove(big)
		fs := append(append([]File{}, files...), File{Path: "docker/huge:1.0.tar", Source: big, Name: "huge"})
		_, err := Build(context.Background(), Options{Files: fs, Output: out})
		if err == nil || !strings.Contains(err.Error(), "huge") || !strings.Contains(err.Error(), "4 GiB") {
			t.Fatalf("err = %v", err)
		}
		// One byte less fits in 32 bits and passes planning.
		if err := os.Truncate(big, 4<<30-1); err != nil {
			t.Fatal(err)
		}
		if _, err := plan([]File{{Path: "x", Source: big}}); err != nil {
			t.Errorf("4 GiB - 1 refused: %v", err)
		}
	})
	t.Run("bad paths", func(t *testing.T) {
		for _, p := range []string{"../etc/passwd", "/abs", "a//b", "a/./b", ""} {
			_, err := Build(context.Background(), Options{Files: []File{{Path: p, Content: []byte("x")}}, Output: out})
			if err == nil {
				t.Errorf("path %q accepted", p)
			}
		}
		_, err := Build(context.Background(), Options{Files: []File{{Path: "k8s", Content: []byte("x")}, {Path: "k8s/kubeadm", Content: []byte("y")}}, Output: out})
		if err == nil || !strings.Contains(err.Error(), "directory") {
			t.Errorf("file/dir clash: %v", err)
		}
	})
	t.Run("bad label", func(t *testing.T) {
		if _, err := Build(context.Background(), Options{Files: files, Output: out, Label: "cdrom"}); err == nil {
			t.Error("lowercase label accepted")
		}
	})
	if b, _ := os.ReadFile(out); string(b) != "previous image" {
		t.Errorf("a failed build touched the existing output: %q", b)
	}
	noLeftovers(t, outDir, "k8s.iso")
}

// TestContentAndPins: inline content, pinned hashes, and a wrong pin on
// inline content all behave.
func TestContentAndPins(t *testing.T) {
	dir := t.TempDir()
	unit := []byte("[Unit]\nDescription=kubelet\n")
	sum := sha256.Sum256(unit)
	out := filepath.Join(dir, "c.iso")
	res, err := Build(context.Background(), Options{Output: out, Files: []File{
		{Path: "kubelet.service", Content: unit, SHA256: hex.EncodeToString(sum[:])},
		{Path: "empty", Content: []byte{}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Files[1].Pinned || res.Files[1].SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("files = %+v", res.Files)
	}
	_, err = Build(context.Background(), Options{Output: out, Files: []File{
		{Path: "kubelet.service", Content: unit, SHA256: strings.Repeat("0", 64), Name: "kubelet.service"},
	}})
	var ce *ChecksumError
	if !errors.As(err, &ce) || ce.Want != strings.Repeat("0", 64) || ce.Got != hex.EncodeToString(sum[:]) {
		t.Errorf("err = %v", err)
	}
}

// TestKill9 kills a build process mid-write: the output name must hold the
// previous image (or nothing), never a partial one.
func TestKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	dir := t.TempDir()
	big := filepath.Join(dir, "big.tar")
	f, _ := os.Create(big)
	f.Truncate(1500 << 20) // sparse: reads as zeros, still copied byte by byte
	f.Close()
	out := filepath.Join(dir, "k8s.iso")
	os.WriteFile(out, []byte("previous image"), 0o644)
	cmd := exec.Command(os.Args[0]) // TestMain builds instead of testing
	cmd.Env = append(os.Environ(), "ZTPD_ISO_KILL_CHILD=1", "KILL_SRC="+big, "KILL_OUT="+out)
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	killed := false
	for sc.Scan() {
		var w, total int64
		if n, _ := fmt.Sscanf(sc.Text(), "progress %d %d", &w, &total); n == 2 && w > 0 && w < total {
			cmd.Process.Kill() // SIGKILL
			killed = true
			break
		}
	}
	cmd.Wait()
	if !killed {
		t.Fatal("the child build reported no progress mid-write")
	}
	if b, _ := os.ReadFile(out); string(b) != "previous image" {
		t.Fatalf("after kill -9 the output holds %d bytes, not the previous image", len(b))
	}
	// Only a hidden temp file may remain, and the next build removes it.
	ents, _ := os.ReadDir(dir)
	stale := 0
	for _, e := range ents {
		n := e.Name()
		switch {
		case strings.HasPrefix(n, ".k8s.iso.tmp-"):
			stale++
		case n != "k8s.iso" && n != "big.tar":
			t.Errorf("unexpected leftover %s", n)
		}
	}
	if stale != 1 {
		t.Errorf("%d temp files after kill -9, want 1", stale)
	}
	build(t, []File{{Path: "a", Content: []byte("a")}}, out)
	noLeftovers(t, dir, "k8s.iso", "big.tar")
}

// TestMain runs the build TestKill9 kills when started as its child
// (ZTPD_ISO_KILL_CHILD set), and the tests otherwise.
func TestMain(m *testing.M) {
	if os.Getenv("ZTPD_ISO_KILL_CHILD") == "" {
		os.Exit(m.Run())
	}
	_, err := Build(context.Background(), Options{
		Files: []File{{Path: "docker/big:1.tar", Source: os.Getenv("KILL_SRC")}}, Output: os.Getenv("KILL_OUT"),
		Progress: func(p Progress) {
			fmt.Printf("progress %d %d\n", p.Written, p.Total)
			if p.Written > 0 && p.Written < p.Total {
				time.Sleep(time.Minute) // mid-write: wait for the kill, so it always lands here
			}
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// TestReadManifestForeign reads images made by genisoimage and xorriso.
func TestReadManifestForeign(t *testing.T) {
	needTools(t, "genisoimage", "xorriso")
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	_, sums := makeTree(t, tree, cksTree, 4)
	os.Chmod(filepath.Join(tree, "k8s", "kubeadm"), 0o755)
	for name, args := range map[string][]string{
		"genisoimage": {"genisoimage", "-quiet", "-J", "-R", "-l", "-V", "CDROM", "-o"},
		"xorriso":     {"xorriso", "-as", "mkisofs", "-quiet", "-J", "-R", "-l", "-V", "CDROM", "-o"},
	} {
		iso := filepath.Join(dir, name+".iso")
		run(t, args[0], append(args[1:], iso, tree)...)
		m, err := ReadManifest(context.Background(), iso, true)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if m.Label != "CDROM" || !m.RockRidge || len(m.Files) != len(cksTree) || m.SHA256 != fileSHA(t, iso) {
			t.Errorf("%s: manifest %+v", name, m)
		}
		for _, f := range m.Files {
			if f.SHA256 != sums[f.Path] {
				t.Errorf("%s: %s sha256 %s, want %s", name, f.Path, f.SHA256, sums[f.Path])
			}
		}
	}
}

func TestVerify(t *testing.T) {
	dir := t.TempDir()
	files, sums := makeTree(t, filepath.Join(dir, "tree"), cksTree[:4], 5)
	iso := filepath.Join(dir, "v.iso")
	build(t, files, iso)
	var exp []Expected
	for _, f := range files {
		exp = append(exp, Expected{Path: f.Path, Size: -1, Mode: f.Mode, SHA256: sums[f.Path]})
	}
	if _, err := Verify(context.Background(), iso, "CDROM", exp); err != nil {
		t.Fatal(err)
	}
	exp[1].SHA256 = strings.Repeat("a", 64)
	if _, err := Verify(context.Background(), iso, "CDROM", exp); err == nil || !strings.Contains(err.Error(), strings.Repeat("a", 64)) {
		t.Errorf("wrong hash: %v", err)
	}
	if _, err := Verify(context.Background(), iso, "CDROM", exp[2:]); err == nil || !strings.Contains(err.Error(), "unexpected file") {
		t.Errorf("extra file: %v", err)
	}
	if _, err := Verify(context.Background(), iso, "OTHER", nil); err == nil || !strings.Contains(err.Error(), "label") {
		t.Errorf("label: %v", err)
	}
	// Corrupt one data byte in the image: Verify must notice.
	b, _ := os.ReadFile(iso)
	m, _ := ReadManifest(context.Background(), iso, false)
	_ = m
	exp[1].SHA256 = sums[files[1].Path]
	v, files2, _, err := listFiles(bytes.NewReader(b), int64(len(b)))
	if err != nil || v == nil {
		t.Fatal(err)
	}
	for _, e := range files2 {
		if e.path == files[1].Path {
			b[e.extents[0].off+7] ^= 1
		}
	}
	os.WriteFile(iso, b, 0o644)
	var ce *ChecksumError
	if _, err := Verify(context.Background(), iso, "CDROM", exp); !errors.As(err, &ce) || ce.Path != files[1].Path {
		t.Errorf("corrupted image: %v", err)
	}
}

// collisionNames collide in their ISO 9660 8.3 form in ways that make go-diskfs
// assign different short names from run to run (it resolves in map order).
func collisionNames() []string {
	var names []string
	for i := 0; i < 14; i++ { // > 10 in one group: two digits
		names = append(names, fmt.Sprintf("docker/kube-apiserver-%02d:v1.31.4.tar", i))
	}
	return append(names, "docker/kubernetes-a:1.tar", "docker/kubernetes-b:1.tar", "docker/kubernex-a:1.tar",
		"docker/kubernex-b:1.tar", "docker/KUBERNE0.TAR", "cri-tools/a", "cri-toolsx/b", "a.b.c.d", "noext", ".hidden", "über.tar")
}

// TestShortNamesVsGoDiskfs: go-diskfs's 8.3 names for a colliding tree vary
// between runs; the names normalize computes are unique and always the same
// length as go-diskfs's, so they can be patched in place.
func TestShortNamesVsGoDiskfs(t *testing.T) {
	dir := t.TempDir()
	outputs := map[string]bool{}
	for run := 0; run < 12; run++ {
		ws := filepath.Join(dir, fmt.Sprint("ws", run))
		for _, n := range collisionNames() {
			p := filepath.Join(ws, filepath.FromSlash(n))
			os.MkdirAll(filepath.Dir(p), 0o755)
			os.WriteFile(p, nil, 0o644)
		}
		f, err := os.Create(filepath.Join(dir, fmt.Sprint("raw", run, ".iso")))
		if err != nil {
			t.Fatal(err)
		}
		fsys, err := iso9660.Create(file.New(f, false), 0, 0, 2048, ws)
		if err != nil {
			t.Fatal(err)
		}
		if err := fsys.Finalize(iso9660.FinalizeOptions{RockRidge: true}); err != nil {
			t.Fatal(err)
		}
		st, _ := f.Stat()
		v, err := readVolume(f, st.Size())
		if err != nil {
			t.Fatal(err)
		}
		var all []string
		w := &walker{r: f, size: st.Size(), vol: v}
		err = w.walk(func(d string, recs []*record) error {
			want := shortNames(recs[2:])
			seen := map[string]bool{}
			for i, r := range recs[2:] {
				all = append(all, r.id)
				if len(r.id) != len(want[i]) {
					t.Errorf("%s/%s: go-diskfs wrote %q, shortNames says %q (length differs)", d, r.name, r.id, want[i])
				}
				if seen[want[i]] || !regexp.MustCompile(`^[A-Z0-9_]{0,8}(\.[A-Z0-9_]{0,3};1)?$`).MatchString(want[i]) {
					t.Errorf("%s: duplicate or invalid short name %q", d, want[i])
				}
				seen[want[i]] = true
			}
			return nil
		})
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		outputs[strings.Join(all, ",")] = true
	}
	t.Logf("go-diskfs wrote %d different name sets in 12 runs", len(outputs))
}

// TestHashShared: one sequential read feeds the image hash and per-file
// hashes across chunk boundaries, with an empty file in between.
func TestHashShared(t *testing.T) {
	r := rand.New(rand.NewSource(9))
	img := make([]byte, 5<<20)
	r.Read(img)
	spans := []extent{{off: 2048, size: 1<<20 + 5000}, {off: 3 << 20, size: 0}, {off: 3<<20 + 4096, size: 1<<20 + 1}}
	var jobs []hashJob
	sums := make([]string, len(spans))
	for i, x := range spans {
		jobs = append(jobs, hashJob{extents: []extent{x}, label: fmt.Sprint(i), done: func(s string) error { sums[i] = s; return nil }})
	}
	if !inImageOrder(jobs) {
		t.Fatal("jobs not in image order")
	}
	sum, err := hashImage(context.Background(), bytes.NewReader(img), int64(len(img)), jobs, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := sha256.Sum256(img); sum != hex.EncodeToString(want[:]) {
		t.Error("image hash wrong")
	}
	for i, x := range spans {
		if want := sha256.Sum256(img[x.off : x.off+x.size]); sums[i] != hex.EncodeToString(want[:]) {
			t.Errorf("file %d hash wrong", i)
		}
	}
	// A pin that does not match stops the pass with the job's error.
	jobs[2].done = func(string) error { return errors.New("pin mismatch") }
	if _, err := hashImage(context.Background(), bytes.NewReader(img), int64(len(img)), jobs, true); err == nil || !strings.Contains(err.Error(), "pin mismatch") {
		t.Errorf("mismatch: %v", err)
	}
}

// TestFullDisk: a build that runs out of space fails cleanly, leaves no temp
// file and keeps the previous image.
func TestFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	os.Mkdir(small, 0o755)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", small).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", small).Run() })
	files, _ := makeTree(t, filepath.Join(dir, "tree"), []testFile{{"k8s/kubelet", 3 << 20, 0o755}, {"a", 10, 0o644}}, 7)
	out := filepath.Join(small, "k8s.iso")
	os.WriteFile(out, []byte("previous image"), 0o644)
	_, err := Build(context.Background(), Options{Files: files, Output: out, TempDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("err = %v, want no space left on device", err)
	}
	if b, _ := os.ReadFile(out); string(b) != "previous image" {
		t.Errorf("previous image damaged: %q", b)
	}
	noLeftovers(t, small, "k8s.iso")
}

// TestSourceChangesDuringBuild: a source rewritten or truncated while it is
// being copied fails the build with its name, and nothing lands.
func TestSourceChangesDuringBuild(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "kubelet")
	data := bytes.Repeat([]byte("kubelet binary "), 300_000) // ~4.3 MiB: several chunks
	out := filepath.Join(dir, "k.iso")
	for _, tc := range []struct {
		name, want string
		change     func() error
	}{
		{"rewritten", "changed during the build", func() error {
			f, err := os.OpenFile(src, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte("tampered"), 10); err != nil {
				return err
			}
			// A write in the same clock tick as the open's stat could keep
			// mtime; move it on so the test does not depend on timer granularity.
			later := time.Now().Add(time.Second)
			return os.Chtimes(src, later, later)
		}},
		{"truncated", "shrank during the build", func() error { return os.Truncate(src, pipeChunkSize+10) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(src, data, 0o644); err != nil {
				t.Fatal(err)
			}
			changed := false
			testHookChunkWritten = func(source string, done int64) {
				if source == src && done == pipeChunkSize && !changed {
					changed = true
					if err := tc.change(); err != nil {
						t.Error(err)
					}
				}
			}
			defer func() { testHookChunkWritten = nil }()
			_, err := Build(context.Background(), Options{Output: out, Files: []File{{Path: "k8s/kubelet", Source: src, Name: "kubelet"}}})
			if !changed {
				t.Fatal("hook never ran")
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "kubelet") {
				t.Fatalf("err = %v, want %q naming the artifact", err, tc.want)
			}
			noLeftovers(t, dir, "kubelet")
		})
	}
}

// TestEmptyFilePin: an empty file is checked against its pin like any other.
func TestEmptyFilePin(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "e.iso")
	res, err := Build(context.Background(), Options{Output: out, Files: []File{{Path: "empty", Content: []byte{}, SHA256: emptySHA256}, {Path: "x", Content: []byte("x")}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Files[0].SHA256 != emptySHA256 {
		t.Errorf("empty file sha256 %s", res.Files[0].SHA256)
	}
	_, err = Build(context.Background(), Options{Output: out, Files: []File{{Path: "empty", Content: []byte{}, SHA256: strings.Repeat("1", 64), Name: "empty"}}})
	var ce *ChecksumError
	if !errors.As(err, &ce) || ce.Got != emptySHA256 {
		t.Errorf("wrong pin on an empty file: %v", err)
	}
}
