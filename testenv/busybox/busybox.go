// Package busybox finds the busybox whose udhcpc6 the DHCPv6 tests run:
// Debian's busybox has no udhcpc6, so build.sh builds one from Debian's
// busybox source into a cache.
package busybox

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Udhcpc6 is the path of a busybox with the udhcpc6 applet: the one
// build.sh cached (ZTPD_PEER_CACHE, default ~/.cache/ztpd), else one on
// PATH that has it. The error says how to get one.
func Udhcpc6() (string, error) {
	cache := os.Getenv("ZTPD_PEER_CACHE")
	if cache == "" {
		if dir, err := os.UserCacheDir(); err == nil {
			cache = filepath.Join(dir, "ztpd")
		}
	}
	var candidates []string
	if cache != "" {
		candidates = append(candidates, filepath.Join(cache, "busybox", "udhcpc6", "busybox"))
	}
	if p, err := exec.LookPath("busybox"); err == nil {
		candidates = append(candidates, p)
	}
	for _, p := range candidates {
		if hasUdhcpc6(p) {
			return p, nil
		}
	}
	return "", errors.New("no busybox with udhcpc6 (Debian's has none): build one with `make peer-bins` (testenv/busybox/build.sh)")
}

func hasUdhcpc6(path string) bool {
	out, err := exec.Command(path, "--list").Output()
	if err != nil {
		return false
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "udhcpc6" {
			return true
		}
	}
	return false
}
