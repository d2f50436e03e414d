//go:build !linux

package isobuild

import "os"

func startWriteback(*os.File, int64, int64) {}

func lockTemp(*os.File) error { return nil }

func unusedTemp(string) bool { return false }

func sizeImage(f *os.File, size int64) error { return f.Truncate(size) }
