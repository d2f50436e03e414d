package halab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ztpd/ztpd/testenv/lab"
	"github.com/ztpd/ztpd/testenv/netns"
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
	buildDir  string // removed by TestMain
)

// requireLab skips t unless the lab can run here, and returns the ztpd
// binary (built once per test binary).
func requireLab(t *testing.T, tools ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts three ztpd appliances on embedded etcd in network namespaces; skipped in -short mode")
	}
	if err := netns.Check(); err != nil {
		t.Skip("skipping:", err)
	}
	for _, tool := range append([]string{"tcpdump", "go"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipping: needs %s", tool)
		}
	}
	buildOnce.Do(func() {
		builtBin = filepath.Join(buildDir, "ztpd")
		buildErr = lab.BuildBinaries(map[string]string{builtBin: "github.com/ztpd/ztpd/cmd/ztpd"})
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// startGroup starts n appliances (Start) and returns once every bucket is
// answered by exactly one of them; the test's cleanup stops them, after
// showing their logs' tails if it failed. tag keeps the namespaces of the
// package's tests apart.
func startGroup(t *testing.T, bin, tag string, n int) *Group {
	t.Helper()
	return startGroupWith(t, bin, tag, n, nil)
}

// startGroupWith is startGroup with the options changed by mutate.
func startGroupWith(t *testing.T, bin, tag string, n int, mutate func(*Options)) *Group {
	t.Helper()
	work := t.TempDir()
	if keep := os.Getenv("HALAB_KEEP"); keep != "" {
		// Kept for a look afterwards: logs, configs, the capture.
		work = filepath.Join(keep, t.Name())
		if err := os.RemoveAll(work); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(work, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	CleanupStale("halab", "halab.test")
	o := Options{Prefix: fmt.Sprintf("halab%x%s", os.Getpid()&0xffff, tag), Work: work, Bin: bin, Appliances: n, Logf: t.Logf}
	if mutate != nil {
		mutate(&o)
	}
	g, err := Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			where := "HALAB_KEEP=<dir> keeps the logs, configs and capture"
			if os.Getenv("HALAB_KEEP") != "" {
				where = "kept"
			}
			t.Logf("appliances' ztpd.out (%s):\n%s", where, g.LogTails(30))
		}
		g.Close()
	})
	return g
}

// capture is g.Capture, failing t on an error.
func capture(t *testing.T, g *Group, path string) func() int {
	t.Helper()
	stop, err := g.Capture(path)
	if err != nil {
		t.Fatal(err)
	}
	return stop
}

// raftLeader is g.RaftLeader, failing t on an error.
func raftLeader(t *testing.T, g *Group) *Appliance {
	t.Helper()
	a, err := g.RaftLeader()
	if err != nil {
		t.Fatal(err)
	}
	return a
}
