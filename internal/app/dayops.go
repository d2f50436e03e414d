package app

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/desired"
	"github.com/ztpd/ztpd/internal/rollout"
	"github.com/ztpd/ztpd/joiner/agent"
	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/joiner/joinhttp"
)

// Day-2 operations, wired: the device agents' channel (desired states,
// served on the API listener) and the rollout engine. What the cluster
// operations do to nodes is rollout's (ClusterMembership, KubeNodes).

// agentFiles renders the device agent's installation for the joiner: the
// agent polls the API listener over TLS, pinned to the certificate the
// API serves. Nil when devices could not reach or verify it (no TLS API
// listener, or no address a device can use).
func (a *App) agentFiles() func(credential string) ([]bundle.File, error) {
	addr, useTLS := a.Cfg.APIListener()
	if addr == "" || !useTLS {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	if adv := a.Endpoints.Advertise(); adv.IsValid() {
		host = adv.String()
	} else if ip, err := netip.ParseAddr(host); err != nil || ip.IsUnspecified() || ip.IsLoopback() {
		return nil
	}
	url := "https://" + net.JoinHostPort(host, port) + "/agent/v1"
	certFile := a.Cfg.API.TLS.CertFile
	if certFile == "" {
		certFile = filepath.Join(a.Cfg.DataDir, APITLSDir, "cert.pem")
	}
	var pinned changedFile
	return func(credential string) ([]bundle.File, error) {
		// Read again when it changed: the certificate is made when the
		// listener starts and may be replaced.
		ca, err := pinned.read(certFile)
		if err != nil {
			return nil, fmt.Errorf("the API certificate agents pin: %w", err)
		}
		files, err := agent.Files(agent.InstallConfig{URL: url, Credential: credential, CAPEM: ca})
		if err != nil {
			return nil, err
		}
		// The join plugin beside it: a switch rejoins (an image upgrade,
		// back from standalone) by running it from the agent.
		return append(files, bundle.File{Path: "/usr/local/bin/ztpd-join-plugin", Mode: 0o755, Content: joinhttp.Plugin()}), nil
	}
}

// changedFile is a small file's content, read again only when its size or
// modification time changed: the API certificate goes into every bundle,
// and reading it each time was 1.4 % of a boot storm's CPU.
type changedFile struct {
	mu     sync.Mutex
	loaded bool
	size   int64
	mod    time.Time
	data   string
}

func (f *changedFile) read(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.loaded && fi.Size() == f.size && fi.ModTime().Equal(f.mod) {
		return f.data, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	f.loaded, f.size, f.mod, f.data = true, fi.Size(), fi.ModTime(), string(b)
	return f.data, nil
}

// buildDayOps builds the desired-state owner and the rollout engine.
func (a *App) buildDayOps() {
	a.Desired = desired.New(a.Store, desired.Options{Auth: a.Joiner, Log: a.Log.With("part", "desired"),
		JoinSection: a.joinSection,
		Defaults:    a.desiredDefaults,
		Neighbors:   a.Joiner.ObserveNeighbors,
		ImageURL:    func(sha string) string { return a.Endpoints.Image(netip.Addr{}, sha) },
		// A running rollout's nodes poll fast; the engine is built after
		// this service (it is given it), so it is looked up at each poll.
		FastPoll:   func(device string) bool { return a.Rollouts != nil && a.Rollouts.Involved(device) },
		NextPoll:   func(device string) bool { return a.Rollouts != nil && a.Rollouts.Upcoming(device) },
		Registerer: a.Metrics})
	a.nodeOps = rollout.NewKubeNodes(a.Joiner)
}

// joinSection is the join step's arguments for a device's agent: the
// same section SONiC ZTP gets in ztp.json (a fresh enrollment bound to the
// device and the address its record holds; with the device HTTPS
// listener, its URL and pins), as strings.
func (a *App) joinSection(ctx context.Context, device, cluster string) (map[string]string, error) {
	var dev core.Device
	if err := a.Store.View(func(tx core.Tx) error {
		var err error
		dev, err = tx.Devices().Get(device)
		return err
	}); err != nil {
		return nil, err
	}
	sec, err := a.Joiner.ZTPSection(ctx, dev, cluster, dev.Hostname)
	if err != nil {
		return nil, err
	}
	if sec == nil {
		return nil, core.Errorf(core.KindState, "device %s may not join cluster %s now", device, cluster)
	}
	out := map[string]string{}
	for k, arg := range map[string]string{"enrollment": "enrollment", "join-url": "join_url", "tls-pin": "tls_pin", "mac": "mac", "serial": "serial", "hostname": "hostname"} {
		if v, ok := sec[k].(string); ok && v != "" {
			out[arg] = v
		}
	}
	return out, nil
}

// buildRollouts starts the engine (after the store is open: it marks
// rollouts a restart interrupted).
func (a *App) buildRollouts() error {
	eng, err := rollout.New(a.Store, rollout.Options{Appliance: a.applianceName(), Nodes: a.nodeOps, Agents: a.Desired, Members: a.Joiner,
		Binaries:     a.rolloutBinaries,
		DrainTimeout: a.Cfg.Rollout.DrainTimeout.D(), StepTimeout: a.Cfg.Rollout.StepTimeout.D(), NodeTimeout: a.Cfg.Rollout.NodeTimeout.D(),
		GateScripts: a.Cfg.Rollout.GateScripts,
		Log:         a.Log.With("part", "rollout"), Registerer: a.Metrics})
	if err != nil {
		return err
	}
	a.Rollouts = eng
	return nil
}

// rolloutBinaries is the rollout engine's Binaries: a version's kubeadm
// and kubelet from its ISO on the ZTP listener, with their sha256s; for a
// version ztpd holds no ISO of, none (the node's own kubeadm, as the
// engine warns).
func (a *App) rolloutBinaries(version string) (string, map[string]string, error) {
	set, err := a.Binaries.Sums(context.Background(), version)
	if core.KindOf(err) == core.KindNotFound {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, err
	}
	sums := set.SHA256()
	for _, name := range []string{"kubeadm", "kubelet"} {
		if sums[name] == "" {
			return "", nil, fmt.Errorf("the ISO of Kubernetes %s (%s) holds no k8s/%s", version, set.ISO.Name, name)
		}
	}
	return a.Endpoints.Binaries(version), sums, nil
}
