package safepath

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCleanRefusesEscapes(t *testing.T) {
	bad := []string{"", "/etc/passwd", "..", "../x", "a/../../x", "a/..", "a\\..\\b", "a\x00b", "\x7f", "/", ".", "./", "a/\n", strings.Repeat("a", MaxLen+1)}
	for _, p := range bad {
		if c, err := Clean(p); err == nil || !errors.Is(err, ErrUnsafe) {
			t.Errorf("Clean(%q) = %q, %v; want ErrUnsafe", p, c, err)
		}
	}
	good := map[string]string{"a": "a", "a//b": "a/b", "./a/./b/": "a/b", "ztp/ztp.json": "ztp/ztp.json", "a..b": "a..b", "...": "..."}
	for in, want := range good {
		if c, err := Clean(in); err != nil || c != want {
			t.Errorf("Clean(%q) = %q, %v; want %q", in, c, err, want)
		}
	}
}

func TestOpenRefusesSymlinksOut(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	os.MkdirAll(filepath.Join(root, "sub"), 0o755)
	os.WriteFile(filepath.Join(base, "secret"), []byte("secret"), 0o644)
	os.WriteFile(filepath.Join(root, "sub", "ok.txt"), []byte("ok"), 0o644)
	must(t, os.Symlink("../secret", filepath.Join(root, "out")))
	must(t, os.Symlink(filepath.Join(base, "secret"), filepath.Join(root, "abs")))
	must(t, os.Symlink("sub/ok.txt", filepath.Join(root, "in")))
	must(t, os.Symlink("..", filepath.Join(root, "sub", "up")))
	r, err := os.OpenRoot(root)
	must(t, err)
	defer r.Close()

	for _, name := range []string{"out", "abs", "sub/up/../secret", "sub/up/out"} {
		f, err := Open(r, name)
		if err == nil {
			b, _ := io.ReadAll(f)
			f.Close()
			t.Errorf("Open(%q) succeeded, read %q", name, b)
			continue
		}
		if !errors.Is(err, ErrUnsafe) {
			t.Errorf("Open(%q): %v, want ErrUnsafe", name, err)
		}
	}
	for _, name := range []string{"in", "sub/ok.txt", "sub//ok.txt"} {
		f, err := Open(r, name)
		if err != nil {
			t.Fatalf("Open(%q): %v", name, err)
		}
		b, _ := io.ReadAll(f)
		f.Close()
		if string(b) != "ok" {
			t.Errorf("Open(%q) read %q", name, b)
		}
	}
	if _, err := Open(r, "sub"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open(dir): %v, want not-exist", err)
	}
	if _, err := Open(r, "missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open(missing): %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func FuzzClean(f *testing.F) {
	for _, s := range []string{"ztp.json", "../etc/passwd", "a/./b", "/abs", "a\\b", "..%2f", "a/b/../../..", "images/x.bin"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := Clean(s)
		if err != nil {
			return
		}
		if strings.HasPrefix(c, "/") || c == ".." || strings.HasPrefix(c, "../") || strings.Contains(c, "/../") || strings.HasSuffix(c, "/..") {
			t.Fatalf("Clean(%q) = %q escapes", s, c)
		}
		if filepath.IsAbs(c) || !filepath.IsLocal(c) {
			t.Fatalf("Clean(%q) = %q is not local", s, c)
		}
		if c2, err := Clean(c); err != nil || c2 != c {
			t.Fatalf("Clean not idempotent: %q -> %q -> %q %v", s, c, c2, err)
		}
	})
}
