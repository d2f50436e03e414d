package joiner

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/internal/positions"
	"github.com/ztpd/ztpd/joiner/pki"
	"github.com/ztpd/ztpd/joiner/tokens"
)

// EnrollRequest asks for a one-time enrollment secret for one device, to
// embed in its ztp.json or user-data. At least one of MAC and Serial binds it.
type EnrollRequest struct {
	Cluster string // name or id
	MAC     string
	Serial  string
	// IP is the address the device holds (the one its document was
	// fetched from); the secret is redeemed only from it. Empty binds
	// no address.
	IP  string
	TTL time.Duration // 0: Options.EnrollmentTTL
}

// Enroll issues an enrollment secret. Only its hash is stored; the secret
// is returned once.
func (s *Service) Enroll(ctx context.Context, req EnrollRequest) (tokens.Credential, error) {
	if err := ctx.Err(); err != nil {
		return tokens.Credential{}, err
	}
	var mac string
	if req.MAC != "" {
		var err error
		if mac, err = core.NormalizeMAC(req.MAC); err != nil {
			return tokens.Credential{}, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	serial := strings.TrimSpace(req.Serial)
	var ip string
	if req.IP != "" {
		a, err := netip.ParseAddr(req.IP)
		if err != nil {
			return tokens.Credential{}, fmt.Errorf("%w: address %q", ErrInvalid, req.IP)
		}
		ip = a.Unmap().String()
	}
	if mac == "" && serial == "" {
		return tokens.Credential{}, fmt.Errorf("%w: an enrollment secret must be bound to a MAC address or a serial number", ErrInvalid)
	}
	ttl := req.TTL
	if ttl <= 0 {
		ttl = s.opts.EnrollmentTTL
	}
	cred, err := tokens.NewEnrollmentSecret()
	if err != nil {
		return tokens.Credential{}, err
	}
	now := s.now().UTC()
	err = s.store.Batch(func(tx core.Tx) error {
		c, err := clusters.ByRef(tx, req.Cluster)
		if err != nil {
			return err
		}
		if !clusters.AcceptsMembers(c.State) {
			return fmt.Errorf("%w: cluster %s is %s", ErrClusterUnavailable, c.Name, c.State)
		}
		if rt, err := joinState(tx, c.ID); err != nil {
			return err
		} else if rt.Suspended {
			return fmt.Errorf("%w: cluster %s is stopped", ErrClusterUnavailable, c.Name)
		}
		rec := core.Token{
			ID: cred.ID(), Kind: string(tokens.KindEnrollment), SecretHash: hex.EncodeToString(cred.Hash()),
			Cluster: c.ID, Device: mac, Description: "enrollment", Expires: now.Add(ttl), Created: now,
			BindMAC: mac, BindSerial: serial, BindIP: ip,
		}
		// One live enrollment secret per device: a new one replaces the
		// previous if it was not used, so re-fetched documents cannot pile
		// up secrets (or records).
		key := core.EnrollmentKey{MAC: mac, Serial: serial}
		if prev, ok, err := tx.Tokens().Enrollment(key); err != nil {
			return err
		} else if ok {
			old, err := tx.Tokens().Get(string(tokens.KindEnrollment), prev)
			if err == nil && old.UsedAt.IsZero() {
				if err := tx.Tokens().Delete(string(tokens.KindEnrollment), prev); err != nil {
					return err
				}
			} else if err != nil && !errors.Is(err, core.ErrNotFound) {
				return err
			}
		}
		if err := tx.Tokens().SetEnrollment(key, cred.ID()); err != nil {
			return err
		}
		return tx.Tokens().Put(rec)
	})
	if err != nil {
		return tokens.Credential{}, err
	}
	return cred, nil
}

// Issuable reports whether join material may be handed to device id for
// clusterRef now: not when its bundle was already issued and may not be
// re-issued (see mayReissue; once: never re-issued). The reason says why not, for the device's
// document and the log.
func (s *Service) Issuable(ctx context.Context, id, clusterRef string, once bool) (ok bool, reason string, err error) {
	if err := ctx.Err(); err != nil {
		return false, "", err
	}
	now := s.now().UTC()
	err = s.store.View(func(tx core.Tx) error {
		c, err := clusters.ByRef(tx, clusterRef)
		if err != nil {
			return err
		}
		m, err := tx.Memberships().Get(id)
		had := err == nil
		if err != nil && !errors.Is(err, core.ErrNotFound) {
			return err
		}
		ok = true
		if had && m.Cluster == c.ID && holdsSlot(m.State) {
			if e := s.mayReissue(m, now, once); e != nil {
				ok, reason = false, e.Error()
			}
		}
		return nil
	})
	return ok, reason, err
}

// JoinRequest is a device presenting its enrollment secret.
type JoinRequest struct {
	Enrollment   string
	MAC          string // claimed identity; checked against the binding
	Serial       string
	Hostname     string
	Product      string
	SONiCVersion string
	Kind         core.DeviceKind // sonic or vm; "" uses the device record, else vm
	Role         string          // role fixed by the device's profile, or ""
	// RemoteIP is the address the request came from. Its holder (an active
	// lease or an operator-declared binding, core.HolderOf) must be the
	// device: a secret copied to another machine is refused.
	RemoteIP string
	// Once refuses any re-issue: cloud-init's user-data, which it fetches
	// at every boot but runs once per instance, gets join material once.
	Once bool
	// CSR is the device's PEM certificate signing request, for a join that
	// issues it a client certificate (a SONiC switch joining by
	// certificate): the device made the key and keeps it. Ignored by joins
	// that issue no certificate (kubeadm's kubelet makes its own key by TLS
	// bootstrap; k3s joins with a token).
	CSR string
	// Etcd are the device's etcd certificate signing requests, for a join
	// into a cluster with etcd nodes: an etcd node's server and peer
	// requests, the first control plane's apiserver-etcd-client one.
	Etcd EtcdCSRs
	// Neighbors are the LLDP neighbours the device reports (its join
	// plugin runs lldpctl); none when it has no LLDP. Compared with its
	// planned position's expected neighbours.
	Neighbors []positions.Neighbor
}

// joinResult is what the admission transaction decided.
type joinResult struct {
	wait       string
	waitNews   bool // the wait is new or changed: logged once
	cluster    core.Cluster
	rt         core.JoinState
	device     core.Device
	role       string
	method     string
	first      bool // this node runs kubeadm init
	tokenID    string
	publish    bool // the node's token was made after init: create it in the cluster
	tokenExp   time.Time
	initTokens []core.Token
	report     tokens.Credential
	agent      tokens.Credential // zero without Options.AgentFiles
	ip         string
	nodeName   string // the member's node name (core.Membership.NodeName)
	csr        csrCheck
	etcdCSR    etcdCSRCheck
	etcd       etcdRender
	// enrollment is the stored enrollment the request named, when there
	// is one: a refusal's event names its device.
	enrollment *core.Token
	// replaced is the member this join replaced at its position, whose
	// Node is deleted once the admission committed.
	replaced *replacedMember
}

// Join admits a device and issues its join bundle. The enrollment secret is
// used up only when a bundle is issued; a device told to wait may retry
// with it until it expires.
func (s *Service) Join(ctx context.Context, req JoinRequest) (*Bundle, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cred, err := tokens.ParseCredential(tokens.KindEnrollment, strings.TrimSpace(req.Enrollment))
	if err != nil {
		return nil, ErrEnrollmentInvalid
	}
	if req.MAC != "" {
		if req.MAC, err = core.NormalizeMAC(req.MAC); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	req.Serial = strings.TrimSpace(req.Serial)
	if req.RemoteIP != "" && net.ParseIP(req.RemoteIP) == nil {
		return nil, fmt.Errorf("%w: remote address %q", ErrInvalid, req.RemoteIP)
	}
	// The facts a request states are checked here, where they enter.
	stated := requestFacts(req)
	if err := stated.Check(nil); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := positions.CheckNeighbors(req.Neighbors); err != nil {
		return nil, fmt.Errorf("%w: lldp_neighbors: %v", ErrInvalid, err)
	}
	// The request's signature is verified here, outside the transaction;
	// admit refuses a bad one only to a device that proved who it is.
	var csr csrCheck
	if req.CSR != "" {
		csr.csr, csr.err = pki.ParseCSR([]byte(req.CSR))
	}
	var etcdCSR etcdCSRCheck
	if !req.Etcd.empty() {
		etcdCSR = parseEtcdCSRs(req.Etcd)
	}
	report, err := tokens.NewReportCredential()
	if err != nil {
		return nil, err
	}
	var agent tokens.Credential
	if s.opts.AgentFiles != nil {
		if agent, err = tokens.NewAgentCredential(); err != nil {
			return nil, err
		}
	}
	now := s.now().UTC()
	var res joinResult
	admit := func() error {
		return s.store.Batch(func(tx core.Tx) error {
			res = joinResult{report: report, agent: agent, csr: csr, etcdCSR: etcdCSR} // Batch may run fn more than once
			return s.admit(tx, cred, req, now, &res)
		})
	}
	err = admit()
	// A join told to wait on a cluster's etcd nodes looks at them (etcd's
	// /health over TLS, the cluster's word rather than the nodes'), and
	// asks again when one changed: what it is told is what they answer
	// now. Other joins cost nothing more.
	if err == nil && waitsOnEtcd(res.wait) && s.observeEtcd(ctx, res.cluster.ID) {
		now = s.now().UTC()
		err = admit()
	}
	if me := (*movedError)(nil); errors.As(err, &me) {
		s.movedRefused(me, res.cluster.ID, now)
		if me.wait {
			s.metrics.joinsWaiting.Inc()
			return nil, &WaitError{Reason: me.reason, RetryAfter: waitRetry, recorded: true}
		}
	}
	if err != nil {
		s.metrics.joinsRefused.WithLabelValues(refusalReason(err)).Inc()
		if errors.Is(err, ErrCSRRefused) || errors.Is(err, ErrCSRMissing) || errors.Is(err, ErrEtcdCSRMissing) {
			s.csrRefused(res.device.ID, res.cluster.ID, req, err, now)
		}
		if IsUnauthorized(err) {
			s.log.Warn("join refused", "enrollment", cred.ID(), "mac", req.MAC, "serial", req.Serial, "remote", req.RemoteIP, "reason", err.Error())
		}
		s.enrollmentRefused(res.enrollment, cred.ID(), req, now, err)
		return nil, err
	}
	if res.wait != "" {
		s.metrics.joinsWaiting.Inc()
		retry := waitRetry
		if soonWait(res.wait) {
			retry = waitRetryFirstCP
		}
		if res.waitNews {
			s.log.Info("device waiting", "device", res.device.ID, "cluster", res.cluster.Name, "reason", res.wait)
		}
		return nil, &WaitError{Reason: res.wait, RetryAfter: retry, recorded: true}
	}
	if res.replaced != nil {
		s.deleteReplacedNode(ctx, res.replaced, now)
	}
	b, err := s.render(ctx, &res, now)
	if err != nil {
		s.metrics.joinsRefused.WithLabelValues("error").Inc()
		return nil, fmt.Errorf("join bundle for %s: %w", res.device.ID, err)
	}
	s.metrics.bundlesIssued.WithLabelValues(res.method, res.role).Inc()
	return b, nil
}

// admit runs inside one store transaction: check the credential and the
// device, decide admission and role, and record everything.
func (s *Service) admit(tx core.Tx, cred tokens.Credential, req JoinRequest, now time.Time, res *joinResult) error {
	// 1. The enrollment secret.
	enr, err := tx.Tokens().Get(string(tokens.KindEnrollment), cred.ID())
	if err != nil && !errors.Is(err, core.ErrNotFound) {
		return err
	}
	if err == nil {
		res.enrollment = &enr
	}
	if err != nil || !cred.Matches(hexDecode(enr.SecretHash)) {
		return ErrEnrollmentInvalid
	}
	switch {
	case enr.Revoked:
		return ErrRevoked
	case !enr.UsedAt.IsZero():
		return ErrEnrollmentUsed
	case !enr.Expires.IsZero() && !now.Before(enr.Expires):
		return ErrEnrollmentExpired
	case enr.BindIP != "" && unmapped(req.RemoteIP) != enr.BindIP:
		return ErrEnrollmentAddress
	}

	// 2. The device: the holder of the address the request comes from
	// (core.HolderOf), which must be the device the secret was bound to.
	// What the request claims (MAC, serial) must agree with both.
	h, mac, err := s.holder(tx, req, now)
	if err != nil {
		return err
	}
	if enr.BindMAC != "" && mac != enr.BindMAC {
		return ErrBindingMismatch
	}
	if enr.BindSerial != "" && req.Serial != "" && req.Serial != enr.BindSerial {
		return ErrBindingMismatch
	}
	dev, err := s.loadDevice(tx, mac, req, now)
	if err != nil {
		return err
	}
	if req.MAC != "" && req.MAC != dev.MAC && req.MAC != dev.BaseMAC {
		return ErrBindingMismatch
	}
	if enr.BindSerial != "" && dev.Serial != enr.BindSerial {
		return ErrBindingMismatch
	}
	res.device = dev
	res.ip = req.RemoteIP
	if res.ip == "" {
		res.ip = dev.IP
	}

	// 3. The cluster.
	c, err := tx.Clusters().Get(enr.Cluster)
	if err != nil {
		return err
	}
	if !clusters.AcceptsMembers(c.State) {
		return fmt.Errorf("%w: cluster %s is %s", ErrClusterUnavailable, c.Name, c.State)
	}
	rt, err := joinState(tx, c.ID)
	if err != nil {
		return err
	}
	if rt.Suspended {
		return fmt.Errorf("%w: cluster %s is stopped", ErrClusterUnavailable, c.Name)
	}
	res.cluster = c

	// 4. An existing membership keeps its role (a rebuilt VM, a retried join).
	m, err := tx.Memberships().Get(dev.ID)
	had := err == nil
	if err != nil && !errors.Is(err, core.ErrNotFound) {
		return err
	}
	// The cabling plan: a member of another position, the cabling, a
	// replacement (positions.go).
	rule, err := s.positionRule(tx, dev, m, had, c, req, now, res)
	if err != nil {
		return err
	}
	if res.replaced != nil {
		// The predecessor's slot was released.
		if rt, err = joinState(tx, c.ID); err != nil {
			return err
		}
	}
	if had && m.Cluster != c.ID && holdsSlot(m.State) {
		return fmt.Errorf("%w: %s belongs to cluster %s", ErrMemberElsewhere, dev.ID, m.Cluster)
	}
	reissue := had && m.Cluster == c.ID && holdsSlot(m.State)
	if reissue {
		// Secrets once: the bundle (and, for the first control plane, the
		// CA key) goes out again only to retry a join that has not
		// succeeded, within the reissue window.
		if err := s.mayReissue(m, now, req.Once); err != nil {
			return err
		}
	}
	if !had || m.Cluster != c.ID || m.State == core.StateLeft {
		// A new membership; the device's agent credential, if any, is
		// replaced at issue (issueAgentCredential), so it is carried over.
		m = core.Membership{Device: dev.ID, Cluster: c.ID, Created: now, AgentID: m.AgentID}
	}

	method := MethodKubeadm
	switch {
	case c.JoinMethod == MethodK3s:
		method = MethodK3s
	case dev.Kind == core.KindSONiC:
		method = MethodSONiC
	}
	if reissue {
		method = m.Method
	}
	if method == MethodSONiC && !c.IsExternal() {
		name := m.NodeName
		if name == "" || !reissue {
			name = s.nodeNameFor(dev, method)
		}
		if err := checkSwitchCSR(req.CSR, res.csr, name); err != nil {
			return err
		}
	}

	// 5. Admission: approval, then room.
	wait := ""
	if !reissue {
		wait = rule.wait
	}
	role, first := m.Role, reissue && rt.FirstControlPlane == dev.ID
	preset := dev.Role
	if req.Role != "" {
		preset = req.Role
	}
	withEtcd := c.EtcdNodes > 0 && method == MethodKubeadm && !c.IsExternal()
	if withEtcd {
		if res.etcd.members, err = readEtcdMembers(tx, c.ID); err != nil {
			return err
		}
		res.etcd.first = reissue && rt.FirstEtcd == dev.ID
	}
	if !reissue && wait == "" {
		approved := s.approvalOf(dev, c, h)
		switch {
		case approved == 0:
			wait = "awaiting approval (ztpd device approve " + dev.ID + ")"
		case c.IsExternal():
			role, wait = decideExternalRole(c, rt, method, preset)
		case preset == RoleEtcd && !withEtcd:
			wait = fmt.Sprintf("its profile gives it the etcd role, and cluster %s has no etcd nodes (etcd runs on its control planes)", c.Name)
		default:
			etcdDecided := false
			if withEtcd {
				role, res.etcd.first, wait, etcdDecided = decideEtcdRole(c, rt, res.etcd.members, preset)
				first = false
			}
			if !etcdDecided {
				role, first, wait = decideRole(c, rt, method, preset)
				if wait == "" && first && withEtcd {
					if wait = gateFirstControlPlane(c, res.etcd.members); wait != "" {
						role, first = "", false
					}
				}
			}
			if wait == "" && (role == RoleControlPlane || role == RoleEtcd) && approved&approvedControlPlane == 0 {
				what := "a control plane"
				if role == RoleEtcd {
					what = "an etcd node (it holds the cluster's whole state)"
				}
				role, first, res.etcd.first = "", false, false
				wait = "awaiting approval as " + what + ": no auto_approve rule names the control-plane role (ztpd device approve " + dev.ID + ")"
			}
		}
	}
	if wait == "" && withEtcd {
		name := m.NodeName
		if name == "" || !reissue {
			name = s.nodeNameFor(dev, method)
		}
		if err := checkEtcdCSRs(c, role, first, req.Etcd, res.etcdCSR, name, res.ip); err != nil {
			return err
		}
	}
	if wait == "" && first && rt.APIEndpoint == "" {
		host := c.ExternalLBIP
		if host == "" {
			host = res.ip
		}
		if host == "" {
			return fmt.Errorf("%w: the first control plane's address is unknown (no lease and no remote address)", ErrInvalid)
		}
		rt.APIEndpoint = net.JoinHostPort(host, "6443")
	}
	if wait != "" {
		res.wait = wait
		started := m.State != core.StateWaiting || m.WaitReason != wait
		if started {
			m.WaitReason = wait
			if err := s.transition(tx, &m, core.StateWaiting, wait, now); err != nil {
				return err
			}
		}
		if _, err := s.recordDevice(tx, dev.ID, req, now, placement{cluster: c.ID, state: core.StateWaiting, wait: wait}); err != nil {
			return err
		}
		if !started {
			return nil // a waiting device asking again is no news
		}
		res.waitNews = true
		// Every change of a device's state is an event: its timeline and
		// the console's live stream (which follows the event log) see it.
		return s.event(tx, now, "join.waiting", dev.ID, c.ID, wait, nil)
	}

	// 6. Credentials for the node.
	keys, err := s.keysFor(c.ID)
	if err != nil {
		return err
	}
	switch {
	case method == MethodKubeadm, method == MethodK3s, c.IsExternal():
		if !first && role != RoleEtcd { // an etcd node is no Kubernetes Node
			tok, publish, err := s.nodeToken(tx, c, rt, m, dev.ID, keys.seed, now)
			if err != nil {
				return err
			}
			if short := now.Add(ExternalTokenTTL); c.IsExternal() && (tok.Expires.IsZero() || tok.Expires.After(short)) {
				// Minted in a cluster ztpd did not build, where it cannot
				// delete it early: short-lived.
				tok.Expires = short
				if err := tx.Tokens().Put(tok); err != nil {
					return err
				}
			}
			res.tokenID, res.tokenExp, res.publish = tok.ID, tok.Expires, publish
			m.TokenID = tok.ID
		}
	}
	if first && method == MethodKubeadm {
		// Every other expected kubeadm node's token is created by kubeadm
		// init; a switch fabric's workers join with certificates, so only
		// its extra control planes need one.
		want := c.Size + c.ControlNodes - 1 - (rt.ControlPlanes + rt.Workers - boolInt(reissue))
		if c.JoinMethod == MethodSONiC {
			want = c.ControlNodes - 1 - (rt.ControlPlanes - boolInt(reissue))
		}
		if err := s.fillPool(tx, c, keys.seed, want, now); err != nil {
			return err
		}
		if res.initTokens, err = clusterKubeadmTokens(tx, c.ID, now); err != nil {
			return err
		}
	}
	if s.opts.ReportURL != "" {
		if m.ReportID != "" {
			_ = tx.Tokens().Delete(string(tokens.KindReport), m.ReportID)
		}
		rec := core.Token{ID: res.report.ID(), Kind: string(tokens.KindReport),
			SecretHash: hex.EncodeToString(res.report.Hash()), Cluster: c.ID, Device: dev.ID,
			Description: "join report", Expires: now.Add(s.opts.ReportTTL), Created: now}
		if err := tx.Tokens().Put(rec); err != nil {
			return err
		}
		m.ReportID = rec.ID
	}
	if s.opts.AgentFiles != nil {
		if err := s.issueAgentCredential(tx, &m, res.agent, now); err != nil {
			return err
		}
	}

	// 7. Record: the secret is used, the slot is taken, the history grows.
	enr.UsedAt = now
	if err := tx.Tokens().Put(enr); err != nil {
		return err
	}
	if !reissue {
		take(&rt, role)
		if first {
			rt.FirstControlPlane = dev.ID
		}
		if res.etcd.first {
			rt.FirstEtcd = dev.ID
		}
	}
	if err := tx.Clusters().PutJoinState(c.ID, rt); err != nil {
		return err
	}
	m.Role, m.Method, m.IP, m.WaitReason = role, method, res.ip, ""
	m.Version = rt.KubernetesVersion
	if m.NodeName == "" || !reissue {
		m.NodeName = s.nodeNameFor(dev, method)
	}
	if !reissue {
		m.IssuedAt = now
	}
	what := role
	switch {
	case first:
		what = "first control plane (kubeadm init)"
	case res.etcd.first:
		what = "first etcd node (a new etcd cluster)"
	case role == RoleEtcd:
		what = "etcd node (added to the etcd cluster)"
	}
	reason := "bundle issued as " + what
	if reissue {
		reason = "bundle re-issued as " + what
	}
	if err := s.transition(tx, &m, core.StateJoinIssued, reason, now); err != nil {
		return err
	}
	if err := tx.Memberships().Enlist(c.ID, dev.ID, role); err != nil {
		return err
	}
	dev, err = s.recordDevice(tx, dev.ID, req, now, placement{cluster: c.ID, role: role, setRole: true, state: core.StateJoinIssued})
	if err != nil {
		return err
	}
	if c.Endpoint == "" && rt.APIEndpoint != "" {
		// The first control plane's address is the cluster's API endpoint
		// when none was given: the clusters service records it.
		if c, err = clusters.RecordEndpoint(tx, c.ID, rt.APIEndpoint, now); err != nil {
			return err
		}
	}
	res.cluster, res.rt, res.device, res.role, res.first, res.method = c, rt, dev, role, first, method
	res.nodeName = m.NodeName
	return s.event(tx, now, "join.issued", dev.ID, c.ID, reason, map[string]string{"method": method, "role": role})
}

// loadDevice finds the device's record, or the record it starts with when
// it has none yet, with what the request tells about it learnt (as
// recordDevice stores it).
func (s *Service) loadDevice(tx core.Tx, mac string, req JoinRequest, now time.Time) (d core.Device, err error) {
	switch {
	case mac != "":
		d, err = tx.Devices().Get(mac)
	case req.Serial != "":
		d, err = tx.Devices().BySerial(req.Serial)
	default:
		return d, fmt.Errorf("%w: the device sent neither a MAC address nor a serial number", ErrInvalid)
	}
	if errors.Is(err, core.ErrNotFound) {
		if mac == "" {
			return d, fmt.Errorf("%w: unknown device with serial %q: send its MAC address", ErrInvalid, req.Serial)
		}
		// Not recorded yet (DHCP and the content service write device
		// records behind): the request's kind fills in below.
		d = devices.NewRecord(mac, now)
	} else if err != nil {
		return d, err
	}
	stated := requestFacts(req)
	if !learnStated(&d, &stated, now) {
		return d, ErrBindingMismatch
	}
	return d, nil
}

// placement is what admission decided for a device: its cluster, its role
// (when setRole) and the state it advances to.
type placement struct {
	cluster, role string
	setRole       bool
	state         core.DeviceState
	wait          string // what the device waits for; "" once admitted
}

// recordDevice stores device id's record through the devices service: what
// the request tells about it learnt (as loadDevice did), then placed.
func (s *Service) recordDevice(tx core.Tx, id string, req JoinRequest, now time.Time, p placement) (core.Device, error) {
	return s.devices.ChangeOrCreate(tx, id, now, func(d *core.Device) error {
		stated := requestFacts(req)
		if !learnStated(d, &stated, now) {
			return ErrBindingMismatch
		}
		d.Cluster = p.cluster
		if p.setRole {
			d.Role = p.role
		}
		d.State = core.Advance(d.State, p.state)
		// The wait is the device's current reason ("device show", "device
		// list --state unmatched", the console) until it is admitted.
		switch {
		case p.wait != "":
			if d.Refusal.Kind != core.RefusalWaiting || d.Refusal.Reason != p.wait {
				d.Refusal = core.Refusal{What: "join", Kind: core.RefusalWaiting, Reason: p.wait, At: now}
			}
		case d.Refusal.Kind == core.RefusalWaiting:
			d.Refusal = core.Refusal{}
		}
		return nil
	})
}

// requestFacts is what a join request says about the device. Its kind
// classifies only a device nothing classified (devices.MergeKind); a
// request stating none comes from a VM.
func requestFacts(req JoinRequest) devices.Facts {
	f := devices.Facts{Source: devices.SourceJoin, Kind: req.Kind, Serial: req.Serial, Product: req.Product,
		Hostname: req.Hostname, SONiCVer: req.SONiCVersion, IP: req.RemoteIP}
	if f.Kind == "" {
		f.Kind = core.KindVM
	}
	return f
}

// learnStated merges what a join request states into d by the one rule
// (devices.Merge) and notes d seen at now. A serial or product that
// contradicts d's is not merged: the request is refused (false) and d is
// left as it was.
func learnStated(d *core.Device, stated *devices.Facts, now time.Time) bool {
	if devices.Contradicts(d, stated).Has(devices.FactSerial | devices.FactProduct) {
		return false
	}
	devices.Merge(d, stated)
	d.LastSeen, d.UpdatedAt = now, now
	return true
}

// holder identifies the device a join comes from: the holder of the
// request's address and its device (holderOf), the request's MAC and
// serial only selecting.
func (s *Service) holder(tx core.Tx, req JoinRequest, now time.Time) (core.Holder, string, error) {
	ip, err := netip.ParseAddr(req.RemoteIP)
	if err != nil {
		return core.Holder{}, "", fmt.Errorf("%w: the request's address is unknown", ErrNotHolder)
	}
	return holderOf(tx, ip, now, s.opts.Bindings, asker{mac: req.MAC, serial: req.Serial})
}

// mayReissue reports whether a member's bundle may be handed out again:
// only while its join has not succeeded, and within ReissueWindow of the
// first issue. Anything else needs an operator's `ztpd device reset`.
func (s *Service) mayReissue(m core.Membership, now time.Time, once bool) error {
	switch {
	case once:
		return fmt.Errorf("%w: the bundle of %s was issued at %s and is handed out once; `ztpd device reset %s` allows a new one",
			ErrAlreadyIssued, m.Device, m.IssuedAt.Format(time.RFC3339), m.Device)
	case m.State == core.StateJoined || m.State == core.StateNotReady || m.State == core.StateLost:
		return fmt.Errorf("%w: %s is a registered Node of its cluster (since %s); re-installing it needs `ztpd device reset %s`",
			ErrAlreadyIssued, m.Device, m.UpdatedAt.Format(time.RFC3339), m.Device)
	case m.State != core.StateJoinIssued && m.State != core.StateFailed:
		return fmt.Errorf("%w: membership of %s is %s", ErrAlreadyIssued, m.Device, m.State)
	case !m.IssuedAt.IsZero() && now.Sub(m.IssuedAt) >= s.opts.ReissueWindow:
		return fmt.Errorf("%w: the bundle of %s was issued at %s, longer ago than the %s retry window; `ztpd device reset %s` allows a new one",
			ErrAlreadyIssued, m.Device, m.IssuedAt.Format(time.RFC3339), s.opts.ReissueWindow, m.Device)
	}
	return nil
}

// nodeToken gives a node its bootstrap token: its previous one if still
// usable, else one from the pool (already created by kubeadm init), else a
// new one that must be created in the running cluster (publish).
func (s *Service) nodeToken(tx core.Tx, c core.Cluster, rt core.JoinState, m core.Membership, device string, seed []byte, now time.Time) (core.Token, bool, error) {
	margin := now.Add(10 * time.Minute) // the node needs time to use it
	kubeadm := string(tokens.KindKubeadm)
	if m.TokenID != "" {
		rec, err := tx.Tokens().Get(kubeadm, m.TokenID)
		if err != nil && !errors.Is(err, core.ErrNotFound) {
			return rec, false, err
		}
		if err == nil && rec.Device == device && tokenRecord(rec).Usable(margin) == nil {
			return rec, !inInit(rec, rt), nil
		}
	}
	var claimed core.Token
	var stale []string
	err := tx.Tokens().Pool(c.ID, func(id string) (bool, error) {
		rec, err := tx.Tokens().Get(kubeadm, id)
		if err != nil && !errors.Is(err, core.ErrNotFound) {
			return false, err
		}
		stale = append(stale, id)
		if err == nil && rec.Device == "" && tokenRecord(rec).Usable(margin) == nil {
			claimed = rec
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return claimed, false, err
	}
	for _, id := range stale {
		if err := tx.Tokens().PoolRemove(c.ID, id); err != nil {
			return claimed, false, err
		}
	}
	if claimed.ID != "" {
		claimed.Device = device
		claimed.Description = "ztpd join token for " + device
		return claimed, !inInit(claimed, rt), tx.Tokens().Put(claimed)
	}
	rec, err := s.newKubeadmToken(tx, c.ID, device, seed, now)
	if err != nil {
		return rec, false, err
	}
	rec.Description = "ztpd join token for " + device
	return rec, true, tx.Tokens().Put(rec)
}

// inInit reports whether kubeadm init created this token: it existed when
// the first control plane's bundle was issued. For k3s clusters (no init by
// ztpd) every token must be created in the cluster.
func inInit(t core.Token, rt core.JoinState) bool {
	return rt.FirstControlPlane != "" && t.InitIssued
}

// clusterKubeadmTokens lists the cluster's usable kubeadm tokens for the
// init configuration (the pool and those of current members) and marks
// them as created by init.
func clusterKubeadmTokens(tx core.Tx, cluster string, now time.Time) ([]core.Token, error) {
	var ids []string
	err := tx.Tokens().Pool(cluster, func(id string) (bool, error) {
		ids = append(ids, id)
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	err = eachMember(tx, cluster, func(m *core.Membership) error {
		if m.TokenID != "" && holdsSlot(m.State) {
			ids = append(ids, m.TokenID)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []core.Token
	for _, id := range ids {
		rec, err := tx.Tokens().Get(string(tokens.KindKubeadm), id)
		if errors.Is(err, core.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if rec.Cluster != cluster || tokenRecord(rec).Usable(now.Add(time.Minute)) != nil {
			continue
		}
		rec.InitIssued = true
		if err := tx.Tokens().Put(rec); err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	return out, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// maxHistory bounds a membership's history: its first entry and the newest.
const maxHistory = 32

// transition moves a membership to st, appends to its history, and mirrors
// the state onto the device record.
func (s *Service) transition(tx core.Tx, m *core.Membership, st core.DeviceState, reason string, now time.Time) error {
	m.State, m.UpdatedAt = st, now
	m.History = append(m.History, core.StateTransition{State: st, At: now, Reason: reason})
	if n := len(m.History); n > maxHistory {
		// Keep how it started and the newest; a device retrying all day
		// must not grow its record without bound.
		m.History = append(m.History[:1], m.History[n-maxHistory+1:]...)
	}
	if err := tx.Memberships().Put(*m); err != nil {
		return err
	}
	if st == core.StateJoinIssued || st == core.StateWaiting {
		return nil // admit records the device itself
	}
	// The device's state follows its membership's, back too (failed,
	// leaving, left).
	_, err := s.devices.Change(tx, m.Device, now, func(d *core.Device) error {
		d.State = st
		return nil
	})
	return err
}

// revokeMemberTokens revokes a member's kubeadm and report tokens.
func (s *Service) revokeMemberTokens(tx core.Tx, m core.Membership) error {
	for _, k := range []struct{ kind, id string }{{string(tokens.KindKubeadm), m.TokenID}, {string(tokens.KindReport), m.ReportID}} {
		if k.id == "" {
			continue
		}
		rec, err := tx.Tokens().Get(k.kind, k.id)
		if errors.Is(err, core.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if !rec.Revoked {
			rec.Revoked = true
			if err := tx.Tokens().Put(rec); err != nil {
				return err
			}
		}
	}
	return nil
}

// eachMember calls fn for every member on a cluster's roster.
func eachMember(tx core.Tx, clusterID string, fn func(*core.Membership) error) error {
	var ids []string
	err := tx.Memberships().Roster(clusterID, func(device, _ string) (bool, error) {
		ids = append(ids, device)
		return true, nil
	})
	if err != nil {
		return err
	}
	for _, id := range ids {
		m, err := tx.Memberships().Get(id)
		if errors.Is(err, core.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if m.Cluster == clusterID {
			if err := fn(&m); err != nil {
				return err
			}
		}
	}
	return nil
}

func hexDecode(s string) []byte {
	b, _ := hex.DecodeString(s)
	return b
}
