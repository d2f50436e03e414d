package app

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The pinned certificate is read again once the file changed (a new
// certificate in place), and not before.
func TestChangedFileReadsAgainOnlyWhenItChanged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cert.pem")
	write := func(s string, mod time.Time) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mod, mod); err != nil {
			t.Fatal(err)
		}
	}
	var f changedFile
	t0 := time.Now().Add(-time.Hour)
	write("first", t0)
	if got, err := f.read(path); err != nil || got != "first" {
		t.Fatalf("first read: %q %v", got, err)
	}
	write("other", t0) // same size and time: taken as unchanged
	if got, _ := f.read(path); got != "first" {
		t.Fatalf("read again without a change: %q", got)
	}
	write("second certificate", t0.Add(time.Minute))
	if got, err := f.read(path); err != nil || got != "second certificate" {
		t.Fatalf("after a change: %q %v", got, err)
	}
	os.Remove(path)
	if _, err := f.read(path); err == nil {
		t.Fatal("a removed file was read")
	}
}
