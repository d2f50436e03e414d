// Package safepath resolves names sent by clients (TFTP file names, HTTP path
// segments) to files under a root directory without ever leaving it.
//
// Two layers: Clean rejects every name that could leave the root by its text
// (absolute paths, ".." elements, NUL and control bytes, backslashes), and
// Open resolves the cleaned name through os.Root, which also refuses symlinks
// (and ".." reached through symlinks) pointing outside the root. Only regular
// files are opened.
package safepath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
)

// MaxLen bounds a client-supplied name.
const MaxLen = 1024

// ErrUnsafe marks a name refused because it could leave the root.
var ErrUnsafe = errors.New("path leaves the served root")

// Clean validates a relative, slash-separated name and returns its canonical
// form ("a//b/./c" becomes "a/b/c"). It never consults the file system.
func Clean(name string) (string, error) {
	switch {
	case name == "":
		return "", fmt.Errorf("empty path: %w", ErrUnsafe)
	case len(name) > MaxLen:
		return "", fmt.Errorf("path longer than %d bytes: %w", MaxLen, ErrUnsafe)
	case name[0] == '/':
		return "", fmt.Errorf("absolute path %q: %w", name, ErrUnsafe)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c < 0x20 || c == 0x7f || c == '\\' {
			return "", fmt.Errorf("path %q has a control byte or backslash: %w", name, ErrUnsafe)
		}
	}
	for _, el := range strings.Split(name, "/") {
		if el == ".." {
			return "", fmt.Errorf("path %q has a \"..\" element: %w", name, ErrUnsafe)
		}
	}
	c := path.Clean(name)
	if c == "." {
		return "", fmt.Errorf("path %q names the root itself: %w", name, ErrUnsafe)
	}
	return c, nil
}

// Open cleans name and opens it under root. Symlinks are followed only while
// they stay inside root; directories and special files are refused.
func Open(root *os.Root, name string) (*os.File, error) {
	c, err := Clean(name)
	if err != nil {
		return nil, err
	}
	f, err := root.Open(c)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrPermission) {
			// os.Root reports escapes as a plain path error.
			return nil, fmt.Errorf("%s: %w", c, ErrUnsafe)
		}
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file: %w", c, fs.ErrNotExist)
	}
	return f, nil
}
