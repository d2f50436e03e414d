package isobuild

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// FuzzReadImage feeds mutated images to the reader: it must never panic, hang
// or report data outside the image. Inputs are the image after the 32 KiB
// system area, which the reader never looks at.
func FuzzReadImage(f *testing.F) {
	dir := f.TempDir()
	small := []File{
		{Path: "k8s/kubeadm", Content: []byte("#!/bin/sh\necho kubeadm\n"), Mode: 0o755},
		{Path: "docker/pause:3.10.tar", Content: bytes.Repeat([]byte("p"), 3000)},
		{Path: "kubelet.service", Content: []byte("[Unit]\n")},
	}
	iso := filepath.Join(dir, "seed.iso")
	if _, err := Build(context.Background(), Options{Files: small, Output: iso, NoFsync: true}); err != nil {
		f.Fatal(err)
	}
	if b, err := os.ReadFile(iso); err == nil {
		f.Add(b[pvdOffset:])
	}
	if _, err := exec.LookPath("genisoimage"); err == nil {
		tree := filepath.Join(dir, "tree")
		os.MkdirAll(filepath.Join(tree, "docker"), 0o755)
		os.WriteFile(filepath.Join(tree, "docker", "coredns:v1.11.3.tar"), []byte("c"), 0o644)
		g := filepath.Join(dir, "g.iso")
		if exec.Command("genisoimage", "-quiet", "-R", "-J", "-V", "CDROM", "-o", g, tree).Run() == nil {
			if b, err := os.ReadFile(g); err == nil {
				// Drop genisoimage's 300 KiB of trailing padding: small inputs fuzz faster.
				b = bytes.TrimRight(b, "\x00")
				f.Add(b[pvdOffset:])
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4<<20 {
			return
		}
		img := append(make([]byte, pvdOffset), data...)
		r := bytes.NewReader(img)
		_, files, _, err := listFiles(r, int64(len(img)))
		if err != nil {
			return
		}
		jobs := make([]hashJob, 0, len(files))
		for _, e := range files {
			for _, x := range e.extents {
				if x.off < 0 || x.size < 0 || x.off+x.size > int64(len(img)) {
					t.Fatalf("%s: extent %+v outside a %d-byte image", e.path, x, len(img))
				}
			}
			if e.path == "" {
				t.Fatal("empty path")
			}
			jobs = append(jobs, hashJob{extents: e.extents, done: func(string) error { return nil }})
		}
		if _, err := hashImage(context.Background(), r, int64(len(img)), jobs, true); err != nil {
			t.Fatalf("hashing a listed image: %v", err)
		}
	})
}
