package secretbox

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestSealOpenRoundTripAndBinding(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k", "api.key")
	b, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Size() != KeySize {
		t.Fatalf("key file mode %v size %d", fi.Mode().Perm(), fi.Size())
	}
	sealed, err := b.Seal([]byte("s3cret"), []byte("key-a"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte("s3cret")) {
		t.Fatal("plaintext visible in sealed blob")
	}
	// Reopening the same file yields the same key.
	b2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	pt, err := b2.Open(sealed, []byte("key-a"))
	if err != nil || string(pt) != "s3cret" {
		t.Fatalf("open: %q %v", pt, err)
	}
	if _, err := b2.Open(sealed, []byte("key-b")); !errors.Is(err, ErrSealed) {
		t.Fatalf("other aad: %v", err)
	}
	sealed[len(sealed)-1] ^= 1
	if _, err := b2.Open(sealed, []byte("key-a")); !errors.Is(err, ErrSealed) {
		t.Fatalf("tampered: %v", err)
	}
	if _, err := b2.Open([]byte("short"), nil); !errors.Is(err, ErrSealed) {
		t.Fatalf("short: %v", err)
	}
	// Another key file cannot open it.
	other, err := Open(filepath.Join(t.TempDir(), "other.key"))
	if err != nil {
		t.Fatal(err)
	}
	sealed[len(sealed)-1] ^= 1
	if _, err := other.Open(sealed, []byte("key-a")); !errors.Is(err, ErrSealed) {
		t.Fatalf("other key: %v", err)
	}
}

func TestOpenRefusesLooseModeAndBadSize(t *testing.T) {
	dir := t.TempDir()
	loose := filepath.Join(dir, "loose.key")
	if err := os.WriteFile(loose, make([]byte, KeySize), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(loose, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(loose); err == nil {
		t.Fatal("0644 key file accepted")
	}
	short := filepath.Join(dir, "short.key")
	if err := os.WriteFile(short, []byte("abc"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(short); err == nil {
		t.Fatal("3-byte key accepted")
	}
}
