// Package netns creates network namespaces and veth links for tests and
// labs, runs commands and Go code inside them, and removes them again.
// It drives iproute2 (`ip`), which every test host here has; it needs root.
package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// NS is one named network namespace (see ip-netns(8)).
type NS struct {
	Name string
}

// Check reports why namespaces cannot be used here (not root, no ip tool),
// or nil.
func Check() error {
	if os.Geteuid() != 0 {
		return errors.New("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("iproute2 `ip` is not installed")
	}
	return nil
}

// Add creates namespace name (removing a leftover of the same name) with
// its loopback up.
func Add(name string) (*NS, error) {
	if err := Check(); err != nil {
		return nil, err
	}
	_ = run("ip", "netns", "del", name)
	if err := run("ip", "netns", "add", name); err != nil {
		return nil, err
	}
	n := &NS{Name: name}
	if err := n.IP("link", "set", "lo", "up"); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// Close deletes the namespace. Processes still inside keep it alive until
// they exit; callers stop what they started first.
func (n *NS) Close() error { return run("ip", "netns", "del", n.Name) }

// IP runs `ip -n <ns> args...`.
func (n *NS) IP(args ...string) error {
	return run("ip", append([]string{"-n", n.Name}, args...)...)
}

// Command returns a command that runs inside the namespace.
func (n *NS) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// Do runs fn on an OS thread that has entered the namespace. Sockets fn
// opens stay in the namespace after it returns; goroutines fn starts do not
// inherit it. The thread is discarded afterwards.
func (n *NS) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		f, err := os.Open(filepath.Join("/var/run/netns", n.Name))
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("enter netns %s: %w", n.Name, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// Veth links two namespaces with a veth pair, assigns each end its
// addresses (CIDR notation, may be empty) and brings both ends up.
func Veth(a *NS, aIf, aAddr string, b *NS, bIf, bAddr string) error {
	if err := run("ip", "link", "add", aIf, "netns", a.Name, "type", "veth", "peer", "name", bIf, "netns", b.Name); err != nil {
		return err
	}
	for _, e := range []struct {
		ns         *NS
		ifn, addrs string
	}{{a, aIf, aAddr}, {b, bIf, bAddr}} {
		for _, ad := range strings.Fields(e.addrs) {
			if err := e.ns.IP("addr", "add", ad, "dev", e.ifn); err != nil {
				return err
			}
		}
		if err := e.ns.IP("link", "set", e.ifn, "up"); err != nil {
			return err
		}
	}
	return nil
}

// MAC returns the hardware address of an interface in the namespace.
func (n *NS) MAC(ifname string) (string, error) {
	out, err := exec.Command("ip", "-n", n.Name, "-br", "link", "show", "dev", ifname).Output()
	if err != nil {
		return "", fmt.Errorf("ip link show %s: %w", ifname, err)
	}
	f := strings.Fields(string(out))
	if len(f) < 3 {
		return "", fmt.Errorf("unexpected `ip -br link` output %q", out)
	}
	return f[2], nil
}

// Pair is two namespaces joined by one veth link: the usual server/client
// setup.
type Pair struct {
	A, B     *NS
	AIf, BIf string
	AAddr    string // CIDR
	BAddr    string // CIDR, may be empty
}

// ForTest creates namespaces <prefix>-<pid>-a and -b joined by veth a0/b0
// with the given addresses, and removes them when the test ends. The
// process id keeps concurrent test runs apart. It skips the test when
// namespaces are unavailable.
func ForTest(t testing.TB, prefix, aAddr, bAddr string) *Pair {
	t.Helper()
	if err := Check(); err != nil {
		t.Skip("skipping:", err)
	}
	prefix = fmt.Sprintf("%s-%x", prefix, os.Getpid())
	a, err := Add(prefix + "-a")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	b, err := Add(prefix + "-b")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := Veth(a, "a0", aAddr, b, "b0", bAddr); err != nil {
		t.Fatal(err)
	}
	return &Pair{A: a, B: b, AIf: "a0", BIf: "b0", AAddr: aAddr, BAddr: bAddr}
}

func run(name string, args ...string) error {
	var stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}
