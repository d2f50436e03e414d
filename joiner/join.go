package joiner

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/joiner/tokens"
)

// EnrollRequest asks for a one-time enrollment secret for one device, to
// embed in its ztp.json or user-data. At least one of MAC and Serial binds it.
type EnrollRequest struct {
	Cluster string // name or id
	MAC     string
	Serial  string
	TTL     time.Duration // 0: Options.EnrollmentTTL
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
		c, err := clusterByRef(tx, req.Cluster)
		if err != nil {
			return err
		}
		if !acceptsMembers(c.State) {
			return fmt.Errorf("%w: cluster %s is %s", ErrClusterUnavailable, c.Name, c.State)
		}
		if rt, err := getRuntime(tx, c.ID); err != nil {
			return err
		} else if rt.Suspended {
			return fmt.Errorf("%w: cluster %s is stopped", ErrClusterUnavailable, c.Name)
		}
		rec := tokenRecord{Token: core.Token{
			ID: cred.ID(), Kind: string(tokens.KindEnrollment), SecretHash: hex.EncodeToString(cred.Hash()),
			Cluster: c.ID, Device: mac, Description: "enrollment", Expires: now.Add(ttl), Created: now,
		}, BindMAC: mac, BindSerial: serial}
		return tx.Put(core.BucketTokens, tokenKey(tokens.KindEnrollment, cred.ID()), rec)
	})
	if err != nil {
		return tokens.Credential{}, err
	}
	return cred, nil
}

func acceptsMembers(st core.ClusterState) bool {
	switch st {
	case core.ClusterCreated, core.ClusterStarting, core.ClusterRunning, core.ClusterScaling,
		core.ClusterAlert, core.ClusterRecovering, core.ClusterUpgrading:
		return true
	}
	return false
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
	// RemoteIP is the address the request came from. When it holds an
	// active DHCP lease, the lease's MAC must be the device's: a secret
	// copied to another machine on ztpd's networks is refused.
	RemoteIP string
}

// joinResult is what the admission transaction decided.
type joinResult struct {
	wait       string
	cluster    core.Cluster
	rt         clusterRuntime
	device     core.Device
	role       string
	method     string
	first      bool // this node runs kubeadm init
	tokenID    string
	publish    bool // the node's token was made after init: create it in the cluster
	tokenExp   time.Time
	initTokens []tokenRecord
	report     tokens.Credential
	ip         string
	serialWas  string // the stored device's serial, to skip re-indexing
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
	report, err := tokens.NewReportCredential()
	if err != nil {
		return nil, err
	}
	now := s.now().UTC()
	var res joinResult
	err = s.store.Batch(func(tx core.Tx) error {
		res = joinResult{report: report} // Batch may run fn more than once
		return s.admit(tx, cred, req, now, &res)
	})
	if err != nil {
		joinsRefused.WithLabelValues(refusalReason(err)).Inc()
		if IsUnauthorized(err) {
			s.log.Warn("join refused", "enrollment", cred.ID(), "mac", req.MAC, "serial", req.Serial, "remote", req.RemoteIP, "reason", err.Error())
		}
		return nil, err
	}
	if res.wait != "" {
		joinsWaiting.Inc()
		retry := waitRetry
		if res.wait == waitFirstControlPlane {
			retry = waitRetryFirstCP
		}
		return nil, &WaitError{Reason: res.wait, RetryAfter: retry}
	}
	b, err := s.render(ctx, &res, now)
	if err != nil {
		joinsRefused.WithLabelValues("error").Inc()
		return nil, fmt.Errorf("join bundle for %s: %w", res.device.ID, err)
	}
	bundlesIssued.WithLabelValues(res.method, res.role).Inc()
	return b, nil
}

// admit runs inside one store transaction: check the credential and the
// device, decide admission and role, and record everything.
func (s *Service) admit(tx core.Tx, cred tokens.Credential, req JoinRequest, now time.Time, res *joinResult) error {
	// 1. The enrollment secret.
	var enr tokenRecord
	ok, err := tx.Get(core.BucketTokens, tokenKey(tokens.KindEnrollment, cred.ID()), &enr)
	if err != nil {
		return err
	}
	if !ok || !cred.Matches(hexDecode(enr.SecretHash)) {
		return ErrEnrollmentInvalid
	}
	switch {
	case enr.Revoked:
		return ErrRevoked
	case !enr.UsedAt.IsZero():
		return ErrEnrollmentUsed
	case !enr.Expires.IsZero() && !now.Before(enr.Expires):
		return ErrEnrollmentExpired
	}

	// 2. The device: its claimed identity must match the binding, and its
	// lease (if it has one here) must agree.
	mac := req.MAC
	lm := leaseMAC(tx, req.RemoteIP, now)
	if mac == "" && enr.BindMAC != "" {
		mac = lm // e.g. cloud-init #include: no claim, the lease proves it
	}
	if enr.BindMAC != "" && mac != enr.BindMAC {
		return ErrBindingMismatch
	}
	if enr.BindSerial != "" && req.Serial != enr.BindSerial {
		return ErrBindingMismatch
	}
	if lm != "" && mac != "" && lm != mac {
		return ErrBindingMismatch
	}
	dev, storedSerial, err := s.loadDevice(tx, mac, req, now)
	if err != nil {
		return err
	}
	if enr.BindSerial != "" && dev.Serial != "" && dev.Serial != enr.BindSerial {
		return ErrBindingMismatch
	}
	res.device, res.serialWas = dev, storedSerial
	res.ip = req.RemoteIP
	if res.ip == "" {
		res.ip = dev.IP
	}

	// 3. The cluster.
	c, err := core.GetCluster(tx, enr.Cluster)
	if err != nil {
		return err
	}
	if !acceptsMembers(c.State) {
		return fmt.Errorf("%w: cluster %s is %s", ErrClusterUnavailable, c.Name, c.State)
	}
	rt, err := getRuntime(tx, c.ID)
	if err != nil {
		return err
	}
	if rt.Suspended {
		return fmt.Errorf("%w: cluster %s is stopped", ErrClusterUnavailable, c.Name)
	}
	res.cluster = c

	// 4. An existing membership keeps its role (a rebuilt VM, a retried join).
	var m member
	had, err := tx.Get(core.BucketMemberships, dev.ID, &m)
	if err != nil {
		return err
	}
	if had && m.Cluster != c.ID && holdsSlot(m.State) {
		return fmt.Errorf("%w: %s belongs to cluster %s", ErrMemberElsewhere, dev.ID, m.Cluster)
	}
	reissue := had && m.Cluster == c.ID && holdsSlot(m.State)
	if !had || m.Cluster != c.ID || m.State == core.StateLeft {
		m = member{Membership: core.Membership{Device: dev.ID, Cluster: c.ID, Created: now}}
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

	// 5. Admission: approval, then room.
	wait := ""
	role, first := m.Role, reissue && rt.FirstControlPlane == dev.ID
	preset := dev.Role
	if req.Role != "" {
		preset = req.Role
	}
	if !reissue {
		if !dev.Approved && !s.autoApproved(dev, c, res.ip) {
			wait = "awaiting approval (ztpd device approve " + dev.ID + ")"
		} else {
			role, first, wait = decideRole(c, rt, method, preset)
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
		if m.State != core.StateWaiting || m.WaitReason != wait {
			m.WaitReason = wait
			if err := s.transition(tx, &m, core.StateWaiting, wait, now); err != nil {
				return err
			}
		}
		dev.State = core.Advance(dev.State, core.StateWaiting)
		dev.Cluster = c.ID
		return putDevice(tx, dev, storedSerial)
	}

	// 6. Credentials for the node.
	keys, err := s.keysFor(c.ID)
	if err != nil {
		return err
	}
	switch method {
	case MethodKubeadm, MethodK3s:
		if !first {
			tok, publish, err := s.nodeToken(tx, c, rt, m, dev.ID, keys.seed, now)
			if err != nil {
				return err
			}
			res.tokenID, res.tokenExp, res.publish = tok.ID, tok.Expires, publish
			m.TokenID = tok.ID
		}
	}
	if first && method == MethodKubeadm {
		// Every other expected node's token is created by kubeadm init.
		if err := s.fillPool(tx, c, keys.seed, c.Size+c.ControlNodes-1-(rt.ControlPlanes+rt.Workers-boolInt(reissue)), now); err != nil {
			return err
		}
		if res.initTokens, err = clusterKubeadmTokens(tx, c.ID, now); err != nil {
			return err
		}
	}
	if s.opts.ReportURL != "" {
		if m.ReportID != "" {
			_ = tx.Delete(core.BucketTokens, tokenKey(tokens.KindReport, m.ReportID))
		}
		rec := tokenRecord{Token: core.Token{ID: res.report.ID(), Kind: string(tokens.KindReport),
			SecretHash: hex.EncodeToString(res.report.Hash()), Cluster: c.ID, Device: dev.ID,
			Description: "join report", Expires: now.Add(s.opts.ReportTTL), Created: now}}
		if err := tx.Put(core.BucketTokens, tokenKey(tokens.KindReport, rec.ID), rec); err != nil {
			return err
		}
		m.ReportID = rec.ID
	}

	// 7. Record: the secret is used, the slot is taken, the history grows.
	enr.UsedAt = now
	if err := tx.Put(core.BucketTokens, tokenKey(tokens.KindEnrollment, enr.ID), enr); err != nil {
		return err
	}
	if !reissue {
		rt.take(role)
		if first {
			rt.FirstControlPlane = dev.ID
		}
	}
	if err := tx.Put(core.BucketMeta, runtimeKey(c.ID), rt); err != nil {
		return err
	}
	m.Role, m.Method, m.IP, m.WaitReason = role, method, res.ip, ""
	m.Version = rt.KubernetesVersion
	what := role
	if first {
		what = "first control plane (kubeadm init)"
	}
	reason := "bundle issued as " + what
	if reissue {
		reason = "bundle re-issued as " + what
	}
	if err := s.transition(tx, &m, core.StateJoinIssued, reason, now); err != nil {
		return err
	}
	if err := tx.Put(core.BucketIndex, memberIndexKey(c.ID, dev.ID), role); err != nil {
		return err
	}
	dev.Cluster, dev.Role = c.ID, role
	dev.State = core.Advance(dev.State, core.StateJoinIssued)
	if err := putDevice(tx, dev, res.serialWas); err != nil {
		return err
	}
	if c.Endpoint == "" && rt.APIEndpoint != "" {
		c.Endpoint, c.UpdatedAt = "https://"+rt.APIEndpoint+"/", now
		if err := core.PutCluster(tx, c); err != nil {
			return err
		}
	}
	res.cluster, res.rt, res.device, res.role, res.first, res.method = c, rt, dev, role, first, method
	return event(tx, now, "join.issued", dev.ID, c.ID, reason, map[string]string{"method": method, "role": role})
}

// loadDevice finds or creates the device record and refreshes what the
// request tells about it. storedSerial is the serial on record ("\x00" for a
// new device), so the caller knows whether the serial index needs updating.
func (s *Service) loadDevice(tx core.Tx, mac string, req JoinRequest, now time.Time) (d core.Device, storedSerial string, err error) {
	switch {
	case mac != "":
		d, err = core.GetDevice(tx, mac)
	case req.Serial != "":
		d, err = core.DeviceBySerial(tx, req.Serial)
	default:
		return d, "", fmt.Errorf("%w: the device sent neither a MAC address nor a serial number", ErrInvalid)
	}
	storedSerial = d.Serial
	if errors.Is(err, core.ErrNotFound) {
		if mac == "" {
			return d, "", fmt.Errorf("%w: unknown device with serial %q: send its MAC address", ErrInvalid, req.Serial)
		}
		d = core.Device{ID: mac, MAC: mac, Kind: core.KindVM, State: core.StateDiscovered, FirstSeen: now}
		storedSerial = "\x00"
	} else if err != nil {
		return d, "", err
	}
	if req.Kind != "" {
		d.Kind = req.Kind
	} else if d.Kind == "" || d.Kind == core.KindUnknown {
		d.Kind = core.KindVM
	}
	if d.Serial == "" {
		d.Serial = req.Serial
	}
	setIf(&d.Hostname, req.Hostname)
	setIf(&d.Product, req.Product)
	setIf(&d.SONiCVer, req.SONiCVersion)
	setIf(&d.IP, req.RemoteIP)
	d.LastSeen, d.UpdatedAt = now, now
	return d, storedSerial, nil
}

func setIf(dst *string, v string) {
	if v != "" {
		*dst = v
	}
}

// putDevice stores d. When its serial number is the one already stored
// (the serial index is current) it writes the record directly, saving
// core.PutDevice's read of the old record on this hot path.
func putDevice(tx core.Tx, d core.Device, storedSerial string) error {
	if d.Serial == storedSerial {
		return tx.Put(core.BucketDevices, d.ID, d)
	}
	return core.PutDevice(tx, d)
}

// leaseMAC is the MAC holding an active lease on ip, or "".
func leaseMAC(tx core.Tx, ip string, now time.Time) string {
	if ip == "" {
		return ""
	}
	l, err := core.GetLease(tx, ip)
	if err != nil || l.State != core.LeaseActive || (!l.Expiry.IsZero() && now.After(l.Expiry)) {
		return ""
	}
	return l.MAC
}

// nodeToken gives a node its bootstrap token: its previous one if still
// usable, else one from the pool (already created by kubeadm init), else a
// new one that must be created in the running cluster (publish).
func (s *Service) nodeToken(tx core.Tx, c core.Cluster, rt clusterRuntime, m member, device string, seed []byte, now time.Time) (tokenRecord, bool, error) {
	margin := now.Add(10 * time.Minute) // the node needs time to use it
	if m.TokenID != "" {
		var rec tokenRecord
		if ok, err := tx.Get(core.BucketTokens, tokenKey(tokens.KindKubeadm, m.TokenID), &rec); err != nil {
			return rec, false, err
		} else if r := rec.record(); ok && rec.Device == device && r.Usable(margin) == nil {
			return rec, !rec.inInit(rt), nil
		}
	}
	var claimed tokenRecord
	var stale []string
	err := tx.ScanPrefix(core.BucketIndex, poolIndexKey(c.ID, ""), func(k string, _ []byte) (bool, error) {
		id := k[strings.LastIndexByte(k, '/')+1:]
		var rec tokenRecord
		ok, err := tx.Get(core.BucketTokens, tokenKey(tokens.KindKubeadm, id), &rec)
		if err != nil {
			return false, err
		}
		stale = append(stale, k)
		if r := rec.record(); ok && rec.Device == "" && r.Usable(margin) == nil {
			claimed = rec
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return claimed, false, err
	}
	for _, k := range stale {
		if err := tx.Delete(core.BucketIndex, k); err != nil {
			return claimed, false, err
		}
	}
	if claimed.ID != "" {
		claimed.Device = device
		claimed.Description = "ztpd join token for " + device
		return claimed, !claimed.inInit(rt), tx.Put(core.BucketTokens, tokenKey(tokens.KindKubeadm, claimed.ID), claimed)
	}
	rec, err := s.newKubeadmToken(tx, c.ID, device, seed, now)
	if err != nil {
		return rec, false, err
	}
	rec.Description = "ztpd join token for " + device
	return rec, true, tx.Put(core.BucketTokens, tokenKey(tokens.KindKubeadm, rec.ID), rec)
}

// inInit reports whether kubeadm init created this token: it existed when
// the first control plane's bundle was issued. For k3s clusters (no init by
// ztpd) every token must be created in the cluster.
func (r tokenRecord) inInit(rt clusterRuntime) bool {
	return rt.FirstControlPlane != "" && r.InitIssued
}

// clusterKubeadmTokens lists the cluster's usable kubeadm tokens for the
// init configuration (the pool and those of current members) and marks
// them as created by init.
func clusterKubeadmTokens(tx core.Tx, cluster string, now time.Time) ([]tokenRecord, error) {
	var ids []string
	err := tx.ScanPrefix(core.BucketIndex, poolIndexKey(cluster, ""), func(k string, _ []byte) (bool, error) {
		ids = append(ids, k[strings.LastIndexByte(k, '/')+1:])
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	err = tx.ScanPrefix(core.BucketIndex, memberIndexKey(cluster, ""), func(k string, _ []byte) (bool, error) {
		var m member
		ok, err := tx.Get(core.BucketMemberships, k[strings.LastIndexByte(k, '/')+1:], &m)
		if ok && m.TokenID != "" && holdsSlot(m.State) {
			ids = append(ids, m.TokenID)
		}
		return err == nil, err
	})
	if err != nil {
		return nil, err
	}
	var out []tokenRecord
	for _, id := range ids {
		var rec tokenRecord
		ok, err := tx.Get(core.BucketTokens, tokenKey(tokens.KindKubeadm, id), &rec)
		if err != nil {
			return nil, err
		}
		if r := rec.record(); !ok || rec.Cluster != cluster || r.Usable(now.Add(time.Minute)) != nil {
			continue
		}
		rec.InitIssued = true
		if err := tx.Put(core.BucketTokens, tokenKey(tokens.KindKubeadm, id), rec); err != nil {
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

// transition moves a membership to st, appends to its history, and mirrors
// the state onto the device record.
func (s *Service) transition(tx core.Tx, m *member, st core.DeviceState, reason string, now time.Time) error {
	m.State, m.UpdatedAt = st, now
	m.History = append(m.History, core.StateTransition{State: st, At: now, Reason: reason})
	if err := tx.Put(core.BucketMemberships, m.Device, m); err != nil {
		return err
	}
	if st == core.StateJoinIssued || st == core.StateWaiting {
		return nil // admit writes the device itself
	}
	d, err := core.GetDevice(tx, m.Device)
	if err != nil {
		return err
	}
	d.State, d.UpdatedAt = st, now
	if st == core.StateJoined {
		d.State = core.Advance(d.State, core.StateJoined)
	}
	return core.PutDevice(tx, d)
}

func (s *Service) revokeMemberTokens(tx core.Tx, m member, now time.Time) error {
	for _, k := range []string{tokenKey(tokens.KindKubeadm, m.TokenID), tokenKey(tokens.KindReport, m.ReportID)} {
		if strings.HasSuffix(k, "/") {
			continue
		}
		var rec tokenRecord
		ok, err := tx.Get(core.BucketTokens, k, &rec)
		if err != nil {
			return err
		}
		if ok && !rec.Revoked {
			rec.Revoked = true
			if err := tx.Put(core.BucketTokens, k, rec); err != nil {
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
