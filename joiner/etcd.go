package joiner

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/joiner/pki"
)

// A cluster created with etcd nodes (CloudStack's etcdnodes) is built in
// kubeadm's external etcd topology: its first etcdnodes admitted devices
// (or those whose profile or node template fixes the etcd role) run etcd
// and nothing else, with the cluster's own etcd CA; its control planes'
// API servers use them. Every etcd key is made where it is used: a member
// sends the requests of its server and peer keys with its join, the first
// control plane the request of its apiserver-etcd-client key, and ztpd
// signs them for the node name and the address that device holds, never
// for a name it asks beyond those (pki.EtcdCSR). The first member starts
// a new etcd cluster; each later one adds itself through a member that
// answers (etcd's member add) and starts with initial-cluster-state
// existing, so ztpd never needs every member's address in advance. ztpd
// counts a member up when its etcd answers /health to ztpd over TLS (its
// own client certificate of the etcd CA, the member's certificate checked
// for its address): the cluster is the truth, not the device's word.

// RoleEtcd is the role of a cluster's etcd node (clusters.NodeEtcd).
const RoleEtcd = clusters.NodeEtcd

// ErrEtcdCSRMissing: a device to be issued etcd certificates sent no
// request for them (a join waiter older than the cluster's etcd nodes, or
// a client that makes no keys).
var ErrEtcdCSRMissing = joinError(core.KindInvalid, "no etcd certificate signing request")

// EtcdCSRs are the PEM certificate signing requests a device sends with
// its join for the etcd certificates it may be issued: an etcd node's
// server and peer requests, the first control plane's apiserver-etcd-client
// request. Ignored by a join that issues none.
type EtcdCSRs struct {
	Server string `json:"server,omitempty"`
	Peer   string `json:"peer,omitempty"`
	Client string `json:"client,omitempty"`
}

func (e EtcdCSRs) empty() bool { return e.Server == "" && e.Peer == "" && e.Client == "" }

// etcdCSRCheck is EtcdCSRs as pki.ParseEtcdCSR found them (outside the
// admission transaction: signature verifications).
type etcdCSRCheck struct {
	server, peer, client *pki.EtcdCSR
	err                  error // the first refusal, naming its request
}

func parseEtcdCSRs(r EtcdCSRs) etcdCSRCheck {
	var c etcdCSRCheck
	for _, p := range []struct {
		name string
		raw  string
		out  **pki.EtcdCSR
	}{{"server", r.Server, &c.server}, {"peer", r.Peer, &c.peer}, {"client", r.Client, &c.client}} {
		if p.raw == "" {
			continue
		}
		csr, err := pki.ParseEtcdCSR([]byte(p.raw))
		if err != nil && c.err == nil {
			c.err = fmt.Errorf("etcd %s request: %s", p.name, csrReason(err))
		}
		*p.out = csr
	}
	return c
}

// checkEtcdCSRs refuses the join of a device that is to be issued etcd
// certificates (an etcd member, or the first control plane of a cluster
// with etcd nodes) when its requests are missing, failed parsing, or name
// anything the device is not entitled to: its node name and the address
// it holds (addr).
func checkEtcdCSRs(c core.Cluster, role string, first bool, raw EtcdCSRs, chk etcdCSRCheck, nodeName, addr string) error {
	switch {
	case role == RoleEtcd:
		if raw.Server == "" || raw.Peer == "" {
			return fmt.Errorf("%w: an etcd node sends the certificate signing requests of the server and peer keys it made (etcd_csrs server and peer); ztpd makes no etcd key", ErrEtcdCSRMissing)
		}
		if chk.err != nil {
			return fmt.Errorf("%w: %s", ErrCSRRefused, chk.err.Error())
		}
		a, err := netip.ParseAddr(addr)
		if err != nil {
			return fmt.Errorf("%w: the etcd node's address %q is unknown", ErrInvalid, addr)
		}
		server, peer := pki.EtcdMemberCerts(nodeName, a.WithZone(""))
		if err := chk.server.CheckEtcd(server); err != nil {
			return fmt.Errorf("%w: etcd server request: %s", ErrCSRRefused, csrReason(err))
		}
		if err := chk.peer.CheckEtcd(peer); err != nil {
			return fmt.Errorf("%w: etcd peer request: %s", ErrCSRRefused, csrReason(err))
		}
	case first && c.EtcdNodes > 0:
		if raw.Client == "" {
			return fmt.Errorf("%w: the first control plane of a cluster with etcd nodes sends the certificate signing request of the apiserver-etcd-client key it made (etcd_csrs client)", ErrEtcdCSRMissing)
		}
		if chk.err != nil {
			return fmt.Errorf("%w: %s", ErrCSRRefused, chk.err.Error())
		}
		if err := chk.client.CheckEtcd(pki.EtcdAPIServerClient()); err != nil {
			return fmt.Errorf("%w: etcd client request: %s", ErrCSRRefused, csrReason(err))
		}
	}
	return nil
}

// etcdMembers is what admission knows of a cluster's etcd nodes.
type etcdMembers struct {
	members []core.Membership // holding a slot, in join order
	up      int               // of them, answering ztpd (state joined)
}

func (e etcdMembers) quorum(want int) bool { return e.up >= want/2+1 }

// endpoints are the members' client host:port, in join order.
func (e etcdMembers) endpoints() []string {
	out := make([]string, 0, len(e.members))
	for _, m := range e.members {
		if m.IP != "" {
			out = append(out, bundle.EtcdEndpoint(m.IP))
		}
	}
	return out
}

// upEndpoints are the client host:port of the members that answer.
func (e etcdMembers) upEndpoints() []string {
	var out []string
	for _, m := range e.members {
		if m.State == core.StateJoined && m.IP != "" {
			out = append(out, bundle.EtcdEndpoint(m.IP))
		}
	}
	return out
}

func readEtcdMembers(tx core.Tx, clusterID string) (etcdMembers, error) {
	var e etcdMembers
	err := eachMember(tx, clusterID, func(m *core.Membership) error {
		if m.Role == RoleEtcd && holdsSlot(m.State) {
			e.members = append(e.members, *m)
			if m.State == core.StateJoined {
				e.up++
			}
		}
		return nil
	})
	slices.SortFunc(e.members, func(a, b core.Membership) int { return a.Created.Compare(b.Created) })
	return e, err
}

// Waits of a cluster with etcd nodes; like waitFirstControlPlane they end
// as soon as a member answers, so the node is asked back soon.
const (
	waitFirstEtcd        = "waiting for the cluster's first etcd node to answer over TLS (a later etcd node adds itself through it)"
	waitEtcdQuorumPrefix = "waiting for the cluster's etcd nodes"
)

func waitEtcdQuorum(e etcdMembers, want int) string {
	return fmt.Sprintf("%s: %d of %d issued, %d answer ztpd over TLS, the control plane starts with a quorum (%d) of all %d",
		waitEtcdQuorumPrefix, len(e.members), want, e.up, want/2+1, want)
}

// soonWait reports whether a wait ends with another device's progress, not
// an operator's: the device is asked back after waitRetryFirstCP.
func soonWait(w string) bool {
	return w == waitFirstControlPlane || w == waitControlPlaneUp || waitsOnEtcd(w)
}

// waitsOnEtcd reports whether a wait ends when etcd nodes answer.
func waitsOnEtcd(w string) bool {
	return w == waitFirstEtcd || strings.HasPrefix(w, waitEtcdQuorumPrefix)
}

// decideEtcdRole is decideRole for a kubeadm device of a cluster with etcd
// nodes: the etcd nodes come first (their devices' profile may fix the
// role), a later etcd node waits for the first to answer, and the first
// control plane waits for all of them to be issued and a quorum to answer.
// ok is false when the device is no etcd node: decideRole decides, and
// gateFirstControlPlane then holds the first control plane back.
func decideEtcdRole(c core.Cluster, rt core.JoinState, e etcdMembers, preset string) (role string, firstEtcd bool, wait string, ok bool) {
	switch {
	case preset != RoleEtcd && preset != "":
		return "", false, "", false
	case preset == "" && rt.EtcdMembers >= c.EtcdNodes:
		return "", false, "", false
	case rt.EtcdMembers >= c.EtcdNodes:
		return "", false, fmt.Sprintf("cluster has its %d etcd node(s)", c.EtcdNodes), true
	case rt.FirstEtcd == "":
		return RoleEtcd, true, "", true
	case e.up == 0:
		return "", false, waitFirstEtcd, true
	}
	return RoleEtcd, false, "", true
}

// gateFirstControlPlane holds back the first control plane of a cluster
// with etcd nodes until every etcd node is issued and a quorum answers.
func gateFirstControlPlane(c core.Cluster, e etcdMembers) string {
	if len(e.members) < c.EtcdNodes || !e.quorum(c.EtcdNodes) {
		return waitEtcdQuorum(e, c.EtcdNodes)
	}
	return ""
}

// EtcdProbe asks an etcd member's client endpoint (host:port) whether it
// is healthy, over TLS with cfg; nil when it is.
type EtcdProbe func(ctx context.Context, endpoint string, cfg *tls.Config) error

// probeEtcdHealth is etcd's /health: 200 and {"health":"true"}.
func probeEtcdHealth(ctx context.Context, endpoint string, cfg *tls.Config) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+endpoint+"/health", nil)
	if err != nil {
		return err
	}
	tr := &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var h struct {
		Health string `json:"health"`
		Reason string `json:"reason"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &h) != nil || h.Health != "true" {
		return fmt.Errorf("etcd /health answered %d: %s", resp.StatusCode, strings.TrimSpace(core.PrintableText(string(body))))
	}
	return nil
}

// etcdProbeTLS is ztpd's TLS configuration towards the member at addr:
// its client certificate of the cluster's etcd CA (made once per process,
// in memory), the member's certificate verified against that CA and for
// that address.
func (k *clusterKeys) etcdProbeTLS(addr string, now time.Time) (*tls.Config, error) {
	k.etcdProbeOnce.Do(func() {
		kp, err := k.etcdCA.IssueEtcdClient("ztpd-etcd-probe", now)
		if err != nil {
			k.etcdProbeErr = err
			return
		}
		keyPEM, err := kp.PrivateKeyPEM()
		if err != nil {
			k.etcdProbeErr = err
			return
		}
		cert, err := tls.X509KeyPair(kp.CertPEM(), keyPEM)
		clear(keyPEM)
		k.etcdProbeCert, k.etcdProbeErr = &cert, err
	})
	if k.etcdProbeErr != nil {
		return nil, k.etcdProbeErr
	}
	pool := x509.NewCertPool()
	pool.AddCert(k.etcdCA.Certificate())
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: addr,
		Certificates: []tls.Certificate{*k.etcdProbeCert}}, nil
}

// etcdProbeState holds what a clusterKeys keeps for probing.
type etcdProbeState struct {
	etcdProbeOnce sync.Once
	etcdProbeCert *tls.Certificate
	etcdProbeErr  error
}

// observeEtcd probes the etcd nodes of cluster clusterID and records what
// changed, reporting whether anything did: a member that answers is
// joined, one that stopped is not-ready, each change an event. Joins told
// to wait on them call it; its cost is one TLS request per member.
func (s *Service) observeEtcd(ctx context.Context, clusterID string) bool {
	var c core.Cluster
	var e etcdMembers
	err := s.store.View(func(tx core.Tx) error {
		var err error
		if c, err = tx.Clusters().Get(clusterID); err != nil {
			return err
		}
		if c.EtcdNodes == 0 {
			return nil
		}
		e, err = readEtcdMembers(tx, clusterID)
		return err
	})
	if err != nil || c.EtcdNodes == 0 || len(e.members) == 0 {
		return false
	}
	keys, err := s.keysFor(clusterID)
	if err != nil || keys.etcdCA == nil {
		return false
	}
	now := s.now().UTC()
	type outcome struct {
		device string
		err    error
	}
	results := make([]outcome, len(e.members))
	var wg sync.WaitGroup
	for i, m := range e.members {
		results[i].device = m.Device
		cfg, err := keys.etcdProbeTLS(m.IP, now)
		if err != nil {
			results[i].err = err
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i].err = s.opts.EtcdProbe(ctx, bundle.EtcdEndpoint(m.IP), cfg)
		}()
	}
	wg.Wait()
	var changed []string
	err = s.store.Batch(func(tx core.Tx) error {
		changed = changed[:0]
		for _, r := range results {
			m, err := tx.Memberships().Get(r.device)
			if err != nil || m.Cluster != clusterID || m.Role != RoleEtcd || !holdsSlot(m.State) {
				continue
			}
			next, reason := m.State, ""
			switch {
			case r.err == nil && m.State != core.StateJoined:
				next, reason = core.StateJoined, "etcd answers /health to ztpd over TLS"
			case r.err != nil && m.State == core.StateJoined:
				next, reason = core.StateNotReady, "etcd does not answer /health: "+r.err.Error()
			}
			if next == m.State {
				continue
			}
			if err := s.transition(tx, &m, next, reason, now); err != nil {
				return err
			}
			changed = append(changed, m.Device+" "+string(next))
			if err := s.event(tx, now, "etcd.member", m.Device, clusterID, reason, map[string]string{"state": string(next)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		s.log.Warn("record etcd members' health", "cluster", c.Name, "err", err)
		return false
	}
	for _, ch := range changed {
		s.log.Info("etcd member", "cluster", c.Name, "member", ch)
	}
	return len(changed) > 0
}

// etcdRender is what render needs of a cluster's etcd.
type etcdRender struct {
	members etcdMembers
	first   bool // this member starts the etcd cluster
}

// renderEtcdMember signs an etcd member's certificates and builds what it
// writes and runs.
func renderEtcdMember(res *joinResult, keys *clusterKeys, now time.Time, report *bundle.Report, agent []bundle.File) (*bundle.Node, error) {
	if keys.etcdCA == nil {
		return nil, fmt.Errorf("cluster %s has no etcd CA", res.cluster.Name)
	}
	a, err := netip.ParseAddr(res.ip)
	if err != nil {
		return nil, fmt.Errorf("etcd node address %q: %w", res.ip, err)
	}
	a = a.WithZone("").Unmap()
	serverReq, peerReq := pki.EtcdMemberCerts(res.nodeName, a)
	server, err := keys.etcdCA.SignEtcd(serverReq, res.etcdCSR.server, now)
	if err != nil {
		return nil, err
	}
	peer, err := keys.etcdCA.SignEtcd(peerReq, res.etcdCSR.peer, now)
	if err != nil {
		return nil, err
	}
	p := bundle.EtcdMemberParams{Name: res.nodeName, Addr: a.String(), CACertPEM: keys.etcdCA.CertPEM(),
		ServerCertPEM: server.CertPEM(), PeerCertPEM: peer.CertPEM(), New: res.etcd.first, Report: report, Agent: agent}
	if !res.etcd.first {
		p.JoinEndpoints = res.etcd.members.upEndpoints()
	}
	return bundle.BuildEtcdMember(p)
}

// etcdClientFiles are the first control plane's external etcd files: the
// etcd CA and its apiserver-etcd-client certificate (the key is its own).
func etcdClientFiles(res *joinResult, keys *clusterKeys, now time.Time) (*bundle.EtcdClientFiles, []string, error) {
	if keys.etcdCA == nil {
		return nil, nil, fmt.Errorf("cluster %s has no etcd CA", res.cluster.Name)
	}
	cert, err := keys.etcdCA.SignEtcd(pki.EtcdAPIServerClient(), res.etcdCSR.client, now)
	if err != nil {
		return nil, nil, err
	}
	return &bundle.EtcdClientFiles{CACertPEM: keys.etcdCA.CertPEM(), CertPEM: cert.CertPEM()}, res.etcd.members.endpoints(), nil
}
