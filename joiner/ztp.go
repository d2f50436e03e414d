package joiner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/ztp/endpoints"
)

// What the ZTP content service asks of the joiner while it renders a
// device's documents (its JoinProvider).

// PluginPath is where joinhttp serves the SONiC ZTP join plugin.
const PluginPath = "/join/sonic-plugin"

// ZTPSection returns the body of the ztp.json section that joins a SONiC
// switch to clusterRef: SONiC ZTP downloads the plugin and runs it with the
// section, which carries a fresh enrollment secret bound to the switch's MAC
// and serial. The plugin posts to /join, installs the credentials and
// config_db's KUBERNETES_MASTER, and ctrmgrd joins.
func (s *Service) ZTPSection(ctx context.Context, dev core.Device, clusterRef, hostname string) (map[string]any, error) {
	base, secure, _ := s.deviceURLs(ctx)
	if base == "" {
		return nil, errors.New("joiner: no base URL configured for device-facing links")
	}
	if err := s.profileCluster(clusterRef); err != nil {
		return nil, err
	}
	if ok, reason, err := s.Issuable(ctx, dev.ID, clusterRef, false); err != nil {
		return nil, err
	} else if !ok {
		s.log.Info("ztp.json without a join section", "device", dev.ID, "reason", reason)
		return nil, nil
	}
	// Bound to the address the switch holds: dev is the holder of the
	// address its ztp.json was fetched from.
	cred, err := s.Enroll(ctx, EnrollRequest{Cluster: clusterRef, MAC: dev.MAC, Serial: dev.Serial, IP: dev.IP})
	if err != nil {
		return nil, err
	}
	sec := map[string]any{
		"plugin":      map[string]any{"url": base + PluginPath},
		"description": "join Kubernetes cluster " + clusterRef,
		"enrollment":  cred.Reveal(),
		"join-url":    base + "/join",
		"mac":         dev.MAC,
	}
	// With the device HTTPS listener, the bundle (secrets) is fetched over
	// TLS pinned to the certificate this document names: what travels in
	// clear is the one-time enrollment, bound to this switch's address,
	// and the pin.
	if secure != "" {
		sec["join-url"] = secure + "/join"
		sec["tls-pin"] = s.opts.DevicePins()
	}
	if dev.Serial != "" {
		sec["serial"] = dev.Serial
	}
	if h := nodeName(hostname); h != "" {
		sec["hostname"] = h
	}
	return sec, nil
}

// KubernetesMaster returns the API server a switch writes into config_db's
// KUBERNETES_MASTER|SERVER (an IPv6 host bracketed, see
// bundle.SonicServerIP), when dev joins clusterRef by the SONiC method
// (a kubeadm cluster); ok is false for devices that join otherwise, and
// while the cluster has no API endpoint yet: the join plugin, which waits
// for admission, then writes KUBERNETES_MASTER itself.
func (s *Service) KubernetesMaster(ctx context.Context, dev core.Device, clusterRef string) (host string, port int, ok bool, err error) {
	if err := ctx.Err(); err != nil {
		return "", 0, false, err
	}
	if dev.Kind != core.KindSONiC {
		return "", 0, false, nil
	}
	if err := s.profileCluster(clusterRef); err != nil {
		return "", 0, false, err
	}
	c, rt, err := s.clusterState(clusterRef)
	if err != nil {
		return "", 0, false, err
	}
	if c.JoinMethod == MethodK3s {
		return "", 0, false, nil
	}
	if rt.APIEndpoint == "" {
		return "", 0, false, nil
	}
	h, p, err := net.SplitHostPort(rt.APIEndpoint)
	if err != nil {
		return "", 0, false, err
	}
	port, err = strconv.Atoi(p)
	return bundle.SonicServerIP(h), port, err == nil, err
}

// JoinDataPath is where the device HTTPS listener serves a VM its join
// data (endpoints.JoinDataPath: the content door identifies the VM).
const JoinDataPath = endpoints.JoinDataPath

// UserData is a CloudStack VM's user-data when its profile names a
// cluster.
//
// With the device HTTPS listener it is public: the join waiter with the
// URL of the VM's join data and the listener's pins, the same whether
// the VM is admitted yet or not, so cloud-init (which runs user-data once
// per instance) never boots a VM that cannot join later; JoinData hands
// the secrets over TLS.
//
// Without it (the operator's choice) the user-data is the join bundle's
// cloud-config, secrets included, issued in-process (the content service
// has identified the VM by its lease) and once: after that, and outside
// the retry window or once joined, a cloud-config without key material;
// cloud-init fetches user-data at every boot, so this is not an error.
func (s *Service) UserData(ctx context.Context, dev core.Device, clusterRef, role, hostname string) ([]byte, error) {
	if _, secure, _ := s.deviceURLs(ctx); secure != "" {
		if err := s.profileCluster(clusterRef); err != nil && core.KindOf(err) != core.KindWaiting {
			return nil, err
		}
		return bundle.RenderWaiterCloudConfig(bundle.WaiterParams{URL: secure + JoinDataPath,
			Pins: s.opts.DevicePins(), Hostname: nodeName(hostname), EtcdKeys: s.hasEtcdNodes(clusterRef)})
	}
	if err := s.profileCluster(clusterRef); err != nil {
		return nil, err
	}
	b, err := s.issueVM(ctx, dev, clusterRef, role, hostname, true, EtcdCSRs{})
	if errors.Is(err, ErrAlreadyIssued) {
		s.log.Info("user-data without join material", "device", dev.ID, "reason", err.Error())
		return issuedCloudConfig(dev.ID, nodeName(hostname)), nil
	}
	if err != nil {
		return nil, err
	}
	return b.CloudConfig, nil
}

// ErrJoinDataIssued answers a VM whose join data may not be handed out
// again: its waiter stops and logs the reason, which names the reset.
var ErrJoinDataIssued = joinError(core.KindState, "this device's join data was already issued")

// JoinData issues a CloudStack VM's join data (the files and commands of
// its cloud-config, secrets included) as JSON, for its join waiter over
// the device HTTPS listener; dev is the holder of the address it asks
// from. While the VM waits (approval, its cluster, the first control
// plane) the error is a wait. Issued data is handed out again only to
// retry a join within the reissue window (an answer lost on its way):
// the waiter stops asking once it has installed it, unlike cloud-init,
// which fetches user-data at every boot. After that, ErrJoinDataIssued.
//
// etcd are the requests of the etcd keys the VM made (a cluster with etcd
// nodes): the ones its role needs are checked and signed.
func (s *Service) JoinData(ctx context.Context, dev core.Device, clusterRef, role, hostname string, etcd EtcdCSRs) ([]byte, error) {
	if err := s.profileCluster(clusterRef); err != nil {
		return nil, err
	}
	b, err := s.issueVM(ctx, dev, clusterRef, role, hostname, false, etcd)
	if errors.Is(err, ErrAlreadyIssued) {
		s.log.Info("join data not issued again", "device", dev.ID, "reason", err.Error())
		msg := strings.TrimPrefix(err.Error(), ErrAlreadyIssued.Error()+": ")
		if !strings.Contains(msg, "ztpd device reset") {
			msg += "; `ztpd device reset " + dev.ID + "` allows a new one"
		}
		return nil, &core.Error{Kind: core.KindState, Msg: msg, Err: ErrJoinDataIssued}
	}
	if err != nil {
		return nil, err
	}
	d, ok := b.NodeDelivery()
	if !ok {
		return nil, fmt.Errorf("%w: device %s joins by %s, not as a kubeadm VM", ErrInvalid, dev.ID, b.Method)
	}
	doc, err := d.AppendJSON(make([]byte, 0, 32<<10))
	if err != nil {
		return nil, err
	}
	return append(doc, '\n'), nil
}

// issueVM issues dev's kubeadm bundle in-process, when Issuable allows
// it (once: never again; else mayReissue's window); an error wrapping
// ErrAlreadyIssued when not.
func (s *Service) issueVM(ctx context.Context, dev core.Device, clusterRef, role, hostname string, once bool, etcd EtcdCSRs) (*Bundle, error) {
	if ok, reason, err := s.Issuable(ctx, dev.ID, clusterRef, once); err != nil {
		return nil, err
	} else if !ok {
		if !strings.HasPrefix(reason, ErrAlreadyIssued.Error()) {
			reason = ErrAlreadyIssued.Error() + ": " + reason
		}
		return nil, &alreadyIssued{reason}
	}
	cred, err := s.Enroll(ctx, EnrollRequest{Cluster: clusterRef, MAC: dev.MAC, IP: dev.IP})
	if err != nil {
		return nil, err
	}
	b, err := s.Join(ctx, JoinRequest{Enrollment: cred.Reveal(), MAC: dev.MAC, Serial: dev.Serial,
		Hostname: hostname, Kind: core.KindVM, Role: role, RemoteIP: dev.IP, Once: once, Etcd: etcd})
	if err != nil { // ErrAlreadyIssued: a concurrent fetch got it first
		return nil, err
	}
	if b.CloudConfig == nil {
		return nil, fmt.Errorf("%w: device %s joins by %s, not cloud-config", ErrInvalid, dev.ID, b.Method)
	}
	return b, nil
}

// alreadyIssued is Issuable's "no" as an ErrAlreadyIssued error.
type alreadyIssued struct{ reason string }

func (e *alreadyIssued) Error() string        { return e.reason }
func (e *alreadyIssued) Is(target error) bool { return target == ErrAlreadyIssued }

// issuedCloudConfig is the user-data of a VM whose bundle was already
// issued: its host name and nothing secret. hostname went through
// nodeName, so it is a plain DNS name.
func issuedCloudConfig(id, hostname string) []byte {
	b := []byte("#cloud-config\n# ztpd: the join bundle of " + id + " was already issued and is not served again;\n" +
		"# re-installing this node needs `ztpd device reset " + id + "`.\n")
	if hostname != "" {
		b = append(b, "hostname: "+hostname+"\npreserve_hostname: false\n"...)
	}
	return b
}

// hasEtcdNodes reports whether cluster ref has etcd nodes: its VMs' waiters
// then make the etcd keys a role there may need and send their requests.
func (s *Service) hasEtcdNodes(ref string) bool {
	has := false
	_ = s.store.View(func(tx core.Tx) error {
		c, err := clusters.ByRef(tx, ref)
		has = err == nil && c.EtcdNodes > 0
		return nil
	})
	return has
}

// ErrClusterByName: a profile names by name a cluster an account other
// than admin created.
var ErrClusterByName = joinError(core.KindRefused, "a profile names another account's cluster by name")

// profileCluster checks the cluster a profile names for its devices (what
// the operator configured). Names are first come, first served, and any
// API key may create a cluster: a user key that creates a cluster under the
// name a profile uses, before the operator does, must not receive the
// profile's devices (their nodes would run that account's workloads). So
// a name resolves only to a cluster of the admin account; a profile puts
// devices into another account's cluster by that cluster's id, which
// nobody can choose.
func (s *Service) profileCluster(ref string) error {
	return s.store.View(func(tx core.Tx) error {
		c, err := clusters.ByRef(tx, ref)
		if errors.Is(err, core.ErrNotFound) {
			// The operator creates the cluster after writing the profile
			// (or not yet): its devices wait for it, they are not refused.
			return &WaitError{Reason: fmt.Sprintf("waiting for Kubernetes cluster %q, which does not exist yet (ztpd cluster create %s)", ref, ref),
				RetryAfter: waitRetry}
		}
		if err != nil {
			return err
		}
		if c.ID != ref && core.ClusterAccount(c) != core.AdminAccount {
			return fmt.Errorf("%w: cluster %q belongs to account %s; name it by its id (%s) in the profile if its devices are meant for it",
				ErrClusterByName, ref, core.ClusterAccount(c), c.ID)
		}
		return nil
	})
}
