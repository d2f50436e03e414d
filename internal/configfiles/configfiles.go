// Package configfiles lists the operator's files that configuration names
// by file or by directory (profiles, cabling plans).
package configfiles

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// List is the files under paths: a file as given, a directory's regular,
// non-hidden files whose names end in one of exts, in name order. Each path
// that cannot be read is an error prefixed by what ("profiles"), and the
// others are still listed.
func List(paths []string, what string, exts ...string) ([]string, []error) {
	var files []string
	var errs []error
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
			continue
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		ents, err := os.ReadDir(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
			continue
		}
		for _, e := range ents {
			n := e.Name()
			if e.Type().IsRegular() && !strings.HasPrefix(n, ".") && slices.ContainsFunc(exts, func(x string) bool { return strings.HasSuffix(n, x) }) {
				files = append(files, filepath.Join(p, n))
			}
		}
	}
	return files, errs
}
