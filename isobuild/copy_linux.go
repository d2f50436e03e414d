//go:build linux

package isobuild

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// sizeImage reserves the image's blocks up front (fallocate): one allocation
// instead of one per written page, and a full disk fails here, before any
// copying. File systems without fallocate get a sparse file.
func sizeImage(f *os.File, size int64) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if size > st.Size() {
		err = unix.Fallocate(int(f.Fd()), 0, st.Size(), size-st.Size())
		if err == nil || !(errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS)) {
			return err
		}
	}
	return f.Truncate(size)
}

// startWriteback asks the kernel to begin writing a range to disk now, so the
// final fsync finds most of the image already written while we were hashing.
func startWriteback(f *os.File, off, n int64) {
	_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}

// lockTemp marks a temp image as in use until the process exits (flock is
// released by the kernel even after kill -9).
func lockTemp(f *os.File) error {
	return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
}

// unusedTemp reports whether no running build holds the temp image p.
func unusedTemp(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil
}
