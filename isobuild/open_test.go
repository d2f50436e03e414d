package isobuild

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// checkOpen opens iso with OpenImage and checks every file of want (path ->
// sha256) byte for byte against tree, its Sums, and the image's own sha256.
func checkOpen(t *testing.T, name, iso, tree string, want map[string]string, paths []string) {
	t.Helper()
	f, err := os.Open(iso)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	im, err := OpenImage(f, st.Size())
	if err != nil {
		t.Fatalf("%s: OpenImage: %v", name, err)
	}
	if im.Label() != "CDROM" {
		t.Errorf("%s: label %q", name, im.Label())
	}
	for _, p := range paths {
		sec, err := im.Open(p)
		if err != nil {
			t.Fatalf("%s: Open %s: %v", name, p, err)
		}
		got, err := io.ReadAll(sec)
		if err != nil {
			t.Fatalf("%s: read %s: %v", name, p, err)
		}
		src, _ := os.ReadFile(filepath.Join(tree, filepath.FromSlash(p)))
		if !bytes.Equal(got, src) || sec.Size() != int64(len(src)) {
			t.Fatalf("%s: %s: %d bytes read (size %d), source has %d, equal %v", name, p, len(got), sec.Size(), len(src), bytes.Equal(got, src))
		}
	}
	imageSum, sums, err := im.Sums(context.Background(), paths)
	if err != nil {
		t.Fatalf("%s: Sums: %v", name, err)
	}
	if imageSum != fileSHA(t, iso) {
		t.Errorf("%s: image sha256 %s, want %s", name, imageSum, fileSHA(t, iso))
	}
	for _, p := range paths {
		if sums[p] != want[p] {
			t.Errorf("%s: %s sha256 %s, want %s", name, p, sums[p], want[p])
		}
	}
	if _, err := im.Open("k8s/kubeadm.missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s: Open of a missing file: %v", name, err)
	}
	if _, err := im.Open("k8s"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s: Open of a directory: %v", name, err)
	}
	if _, _, err := im.Sums(context.Background(), []string{"k8s/kubeadm", "nope"}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s: Sums of a missing file: %v", name, err)
	}
}

// TestOpenImage reads files in place from our own image and from images
// genisoimage and xorriso made (with Rock Ridge, and a plain ISO 9660 one
// whose upper-case names are matched without regard to case).
func TestOpenImage(t *testing.T) {
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	files, sums := makeTree(t, tree, cksTree, 7)
	paths := []string{"k8s/kubeadm", "k8s/kubectl", "k8s/kubelet", "docker/pause:3.10.tar", "network.yaml"}
	ours := filepath.Join(dir, "ours.iso")
	build(t, files, ours)
	checkOpen(t, "isobuild", ours, tree, sums, paths)

	if _, err := OpenImage(bytes.NewReader(make([]byte, 40<<10)), 40<<10); err == nil {
		t.Error("OpenImage of zeros: no error")
	}

	needTools(t, "genisoimage", "xorriso")
	for name, args := range map[string][]string{
		"genisoimage": {"genisoimage", "-quiet", "-J", "-R", "-l", "-V", "CDROM", "-o"},
		"xorriso":     {"xorriso", "-as", "mkisofs", "-quiet", "-J", "-R", "-l", "-V", "CDROM", "-o"},
	} {
		iso := filepath.Join(dir, name+".iso")
		run(t, args[0], append(args[1:], iso, tree)...)
		checkOpen(t, name, iso, tree, sums, paths)
	}
	// Plain ISO 9660 (no Rock Ridge): K8S/KUBEADM answers k8s/kubeadm.
	plain := filepath.Join(dir, "plain.iso")
	run(t, "genisoimage", "-quiet", "-V", "CDROM", "-o", plain, filepath.Join(tree, "k8s"))
	sub := map[string]string{"kubeadm": sums["k8s/kubeadm"], "kubelet": sums["k8s/kubelet"]}
	checkOpen(t, "plain", plain, filepath.Join(tree, "k8s"), sub, []string{"kubeadm", "kubelet"})
}

// TestExtentReader reads a file stored in several extents (images over 4 GiB
// per file do that) as one run of bytes, at any offset.
func TestExtentReader(t *testing.T) {
	img := []byte("....abc..defg.h")
	x := extentReader{r: bytes.NewReader(img), extents: []extent{{off: 4, size: 3}, {off: 9, size: 4}, {off: 14, size: 1}}}
	sec := io.NewSectionReader(x, 0, 8)
	got, err := io.ReadAll(sec)
	if err != nil || string(got) != "abcdefgh" {
		t.Fatalf("ReadAll: %q %v", got, err)
	}
	for off := int64(0); off < 8; off++ {
		b := make([]byte, 3)
		n, err := sec.ReadAt(b, off)
		want := "abcdefgh"[off:min(off+3, 8)]
		if string(b[:n]) != want || (n < 3) != (err == io.EOF) {
			t.Fatalf("ReadAt(%d): %q %v, want %q", off, b[:n], err, want)
		}
	}
}
