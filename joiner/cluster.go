package joiner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/joiner/kubeconfig"
	"github.com/ztpd/ztpd/joiner/pki"
	"github.com/ztpd/ztpd/joiner/tokens"
)

// Join methods.
const (
	MethodKubeadm = "kubeadm" // CloudStack VMs: cloud-config running kubeadm
	MethodSONiC   = "sonic"   // SONiC switches: ctrmgrd with a client certificate
	MethodK3s     = "k3s"     // k3s agents: server URL and token
)

// Provision gives a cluster created by the clusters service its PKI and
// join credentials. It is idempotent.
func (s *Service) Provision(ctx context.Context, c core.Cluster) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.now().UTC()
	// The keys are cached once committed: fn may run again (a shared
	// store) and find the cluster set up by then, or make other keys.
	var keys *clusterKeys
	err := s.store.Update(func(tx core.Tx) error {
		keys = nil
		cur, err := tx.Clusters().Get(c.ID)
		if err != nil {
			return err
		}
		if _, err := tx.Clusters().JoinState(cur.ID); err == nil || !errors.Is(err, core.ErrNotFound) {
			return err
		}
		v, err := tx.Versions().Get(cur.VersionID)
		if err != nil {
			return err
		}
		keys, err = s.setup(tx, cur, v.SemVer, now)
		return err
	})
	if err == nil && keys != nil {
		s.mu.Lock()
		s.cache[c.ID] = keys
		s.mu.Unlock()
	}
	return err
}

// setup writes a cluster's secrets, join state and first pool of bootstrap
// tokens, and returns the keys it sealed. The cluster's rules (sizes, HA,
// endpoint) are the clusters service's, checked when it was created; what
// is checked here is what the joiner can provision: a release kubeadm
// supports, a kubeadm or k3s join.
func (s *Service) setup(tx core.Tx, c core.Cluster, version string, now time.Time) (*clusterKeys, error) {
	if c.JoinMethod == "" {
		c.JoinMethod = MethodKubeadm
	}
	v, err := bundle.ParseVersion(version)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if _, err := bundle.KubeadmAPIFor(v); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	// A sonic cluster (a switch fabric) is a kubeadm cluster: its control
	// plane is the first non-switch device admitted with the control-plane
	// role (a VM or server running kubeadm init from its bundle), and its
	// switches join with client certificates.
	if c.JoinMethod != MethodKubeadm && c.JoinMethod != MethodK3s && c.JoinMethod != MethodSONiC {
		return nil, fmt.Errorf("%w: join method %q (want kubeadm, k3s or sonic)", ErrInvalid, c.JoinMethod)
	}
	alg := caAlgorithm(c.JoinMethod, v)
	rt := core.JoinState{KubernetesVersion: v.Tag(), Algorithm: string(alg)}
	if c.Endpoint != "" {
		hp, err := clusters.EndpointHostPort(c.Endpoint)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		rt.APIEndpoint = hp
	} else if c.ExternalLBIP != "" {
		rt.APIEndpoint = net.JoinHostPort(c.ExternalLBIP, "6443")
	}
	ca, err := pki.NewCA("kubernetes", alg, now)
	if err != nil {
		return nil, err
	}
	certKey, err := tokens.GenerateCertificateKey()
	if err != nil {
		return nil, err
	}
	seed := make([]byte, 32)
	if _, err := rand.Read(seed); err != nil {
		return nil, err
	}
	ctx := secretsOwner(c.ID)
	sec := clusterSecrets{}
	if sec.CA, err = ca.Seal(s.keys, ctx); err != nil {
		return nil, err
	}
	if sec.CertKey, err = s.keys.Seal([]byte(certKey.Reveal()), []byte(ctx+"/certificate-key")); err != nil {
		return nil, err
	}
	if sec.TokenSeed, err = s.keys.Seal(seed, []byte(ctx+"/token-seed")); err != nil {
		return nil, err
	}
	var etcdCA *pki.CA
	if c.EtcdNodes > 0 {
		if c.JoinMethod == MethodK3s {
			return nil, fmt.Errorf("%w: a k3s cluster has no etcd nodes", ErrInvalid)
		}
		if etcdCA, err = pki.NewEtcdCA(alg, now); err != nil {
			return nil, err
		}
		sealed, err := etcdCA.Seal(s.keys, etcdCAOwner(c.ID))
		if err != nil {
			return nil, err
		}
		sec.EtcdCA = &sealed
	}
	raw, err := json.Marshal(sec)
	if err != nil {
		return nil, err
	}
	if err := tx.Secrets().Put(ctx, raw); err != nil {
		return nil, err
	}
	if err := tx.Clusters().PutJoinState(c.ID, rt); err != nil {
		return nil, err
	}
	// One token per expected node besides the first control plane: the
	// first control plane creates them all at kubeadm init.
	switch c.JoinMethod {
	case MethodKubeadm:
		if err := s.fillPool(tx, c, seed, c.Size+c.ControlNodes-1, now); err != nil {
			return nil, err
		}
	case MethodSONiC: // switches join with certificates: tokens only for extra control planes
		if c.ControlNodes > 1 {
			if err := s.fillPool(tx, c, seed, c.ControlNodes-1, now); err != nil {
				return nil, err
			}
		}
	}
	fields := map[string]string{"version": v.Tag(), "ca": string(alg), "ca_hash": ca.DiscoveryHash()}
	what := "cluster PKI and join tokens created"
	if etcdCA != nil {
		fields["etcd_ca_hash"] = etcdCA.DiscoveryHash()
		what = fmt.Sprintf("cluster PKI, etcd CA (for %d etcd nodes) and join tokens created", c.EtcdNodes)
	}
	if err = s.event(tx, now, "cluster.created", "", c.ID, what, fields); err != nil {
		return nil, err
	}
	return &clusterKeys{ca: ca, certKey: certKey, seed: seed, etcdCA: etcdCA}, nil
}

// caAlgorithm picks the CA key type: ECDSA P-256 where kubeadm supports it
// end to end (v1beta4, 1.31+) and for k3s (which uses ECDSA itself), RSA
// 2048 (kubeadm's default, loadable by every release) before that.
func caAlgorithm(method string, v bundle.Version) pki.Algorithm {
	if method == MethodK3s || v.AtLeast(1, 31) {
		return pki.ECDSAP256
	}
	return pki.RSA2048
}

// fillPool adds unassigned bootstrap tokens until the cluster has want
// usable ones (unexpired, unrevoked, not yet bound to a device).
func (s *Service) fillPool(tx core.Tx, c core.Cluster, seed []byte, want int, now time.Time) error {
	have := 0
	var stale []string
	err := tx.Tokens().Pool(c.ID, func(id string) (bool, error) {
		rec, err := tx.Tokens().Get(string(tokens.KindKubeadm), id)
		if err != nil && !errors.Is(err, core.ErrNotFound) {
			return false, err
		}
		if err != nil || rec.Device != "" || tokenRecord(rec).Usable(now.Add(time.Minute)) != nil {
			stale = append(stale, id)
			return true, nil
		}
		have++
		return true, nil
	})
	if err != nil {
		return err
	}
	for _, id := range stale {
		if err := tx.Tokens().PoolRemove(c.ID, id); err != nil {
			return err
		}
	}
	for ; have < want; have++ {
		rec, err := s.newKubeadmToken(tx, c.ID, "", seed, now)
		if err != nil {
			return err
		}
		if err := tx.Tokens().PoolAdd(c.ID, rec.ID); err != nil {
			return err
		}
	}
	return nil
}

// newKubeadmToken stores a fresh token record whose secret derives from
// the cluster seed.
func (s *Service) newKubeadmToken(tx core.Tx, cluster, device string, seed []byte, now time.Time) (core.Token, error) {
	for range 16 {
		id, err := tokens.RandomString(6)
		if err != nil {
			return core.Token{}, err
		}
		if _, err := tx.Tokens().Get(string(tokens.KindKubeadm), id); err == nil {
			continue // id taken (kubeadm ids are 6 characters; collisions happen)
		} else if !errors.Is(err, core.ErrNotFound) {
			return core.Token{}, err
		}
		bt, err := tokens.DeriveBootstrapToken(seed, id)
		if err != nil {
			return core.Token{}, err
		}
		rec := core.Token{
			ID: id, Kind: string(tokens.KindKubeadm), SecretHash: hex.EncodeToString(bt.Hash()),
			Cluster: cluster, Device: device, Usages: tokens.DefaultUsages(), Groups: tokens.DefaultGroups(),
			Description: "ztpd join token", Expires: now.Add(s.opts.TokenTTL).UTC(), Created: now.UTC(),
		}
		return rec, tx.Tokens().Put(rec)
	}
	return core.Token{}, errors.New("could not find a free token id")
}

// Resize applies a changed desired size (the clusters service's scale):
// surplus workers, newest first, are marked leaving and their tokens
// revoked; waiting devices are admitted when they next ask. The cluster
// record itself is the caller's to store.
func (s *Service) Resize(ctx context.Context, c core.Cluster) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.now().UTC()
	return s.store.Update(func(tx core.Tx) error {
		rt, err := joinState(tx, c.ID)
		if err != nil {
			return err
		}
		var workers []core.Membership
		err = eachMember(tx, c.ID, func(m *core.Membership) error {
			if m.Role != RoleControlPlane && m.Role != RoleEtcd && holdsSlot(m.State) {
				workers = append(workers, *m)
			}
			return nil
		})
		if err != nil {
			return err
		}
		// Newest first: the last to join are the first to leave.
		slices.SortFunc(workers, func(a, b core.Membership) int { return b.Created.Compare(a.Created) })
		leaving := 0
		for i := 0; i < len(workers)-c.Size; i++ {
			m := workers[i]
			if err := s.transition(tx, &m, core.StateLeaving, "scale down to "+strconv.Itoa(c.Size), now); err != nil {
				return err
			}
			rt.Workers--
			if err := s.revokeMemberTokens(tx, m); err != nil {
				return err
			}
			leaving++
		}
		if err := tx.Clusters().PutJoinState(c.ID, rt); err != nil {
			return err
		}
		return s.event(tx, now, "cluster.scaled", "", c.ID, fmt.Sprintf("size %d, %d leaving", c.Size, leaving), nil)
	})
}

// RemoveMembers is a scale-down that names its members (CloudStack's
// nodeids): each named worker is marked leaving and its tokens revoked, as
// Resize does for the newest; the caller takes them off their nodes.
func (s *Service) RemoveMembers(ctx context.Context, c core.Cluster, devices []string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.now().UTC()
	return s.store.Update(func(tx core.Tx) error {
		rt, err := joinState(tx, c.ID)
		if err != nil {
			return err
		}
		for _, id := range devices {
			m, err := tx.Memberships().Get(id)
			if err != nil {
				return fmt.Errorf("member %s: %w", id, err)
			}
			if m.Cluster != c.ID || m.Role == RoleControlPlane || m.Role == RoleEtcd || !holdsSlot(m.State) {
				return fmt.Errorf("%w: %s is not a worker member of %s (%s)", ErrInvalid, id, c.Name, m.State)
			}
			if err := s.transition(tx, &m, core.StateLeaving, "removed by name: scale down to "+strconv.Itoa(c.Size), now); err != nil {
				return err
			}
			rt.Workers--
			if err := s.revokeMemberTokens(tx, m); err != nil {
				return err
			}
		}
		if err := tx.Clusters().PutJoinState(c.ID, rt); err != nil {
			return err
		}
		return s.event(tx, now, "cluster.scaled", "", c.ID, fmt.Sprintf("size %d, %s leaving", c.Size, strings.Join(devices, ", ")), nil)
	})
}

// leave ends a membership: its slot is freed, its tokens revoked, its
// history records why. A first control plane that leaves an otherwise
// empty cluster takes the cluster's init with it, so the next control
// plane initialises the cluster again.
func (s *Service) leave(tx core.Tx, m core.Membership, reason string, now time.Time) error {
	if m.State == core.StateLeft {
		return nil
	}
	if holdsSlot(m.State) {
		rt, err := joinState(tx, m.Cluster)
		if err != nil {
			return err
		}
		release(&rt, m.Role)
		if rt.FirstControlPlane == m.Device && rt.ControlPlanes+rt.Workers == 0 {
			rt.FirstControlPlane, rt.Initialized = "", false
		}
		if rt.FirstEtcd == m.Device && rt.EtcdMembers == 0 {
			rt.FirstEtcd = "" // the next etcd node starts a new etcd cluster
		}
		if err := tx.Clusters().PutJoinState(m.Cluster, rt); err != nil {
			return err
		}
	}
	if err := s.revokeMemberTokens(tx, m); err != nil {
		return err
	}
	if err := s.transition(tx, &m, core.StateLeft, reason, now); err != nil {
		return err
	}
	return tx.Memberships().Delist(m.Cluster, m.Device)
}

// ResetDevice is the operator's "re-install this device" (ztpd device
// reset): its membership ends, its credentials are revoked (kubeadm and
// report tokens, any unused enrollment secret), and its next ZTP or
// user-data fetch gets join material again, once. Approval and cluster
// assignment are kept.
func (s *Service) ResetDevice(ctx context.Context, deviceID string) (core.Device, error) {
	if err := ctx.Err(); err != nil {
		return core.Device{}, err
	}
	now := s.now().UTC()
	var d core.Device
	err := s.store.Update(func(tx core.Tx) error {
		var err error
		if d, err = deviceByRef(tx, deviceID); err != nil {
			return err
		}
		if m, err := tx.Memberships().Get(d.ID); err == nil {
			if err := s.leave(tx, m, "reset by an operator", now); err != nil {
				return err
			}
		} else if !errors.Is(err, core.ErrNotFound) {
			return err
		}
		for _, k := range []core.EnrollmentKey{{MAC: d.MAC}, {Serial: d.Serial}} {
			if k.MAC == "" && k.Serial == "" {
				continue
			}
			id, ok, err := tx.Tokens().Enrollment(k)
			if err != nil {
				return err
			}
			if ok {
				if err := tx.Tokens().Delete(string(tokens.KindEnrollment), id); err != nil {
					return err
				}
				if err := tx.Tokens().ClearEnrollment(k); err != nil {
					return err
				}
			}
		}
		// Read again: leave may have changed the record.
		d, err = s.devices.Change(tx, d.ID, now, func(rec *core.Device) error {
			rec.Role = ""
			rec.State = core.StateDiscovered
			if rec.IP != "" {
				if l, err := tx.Leases().Get(rec.IP); err == nil && l.MAC == rec.MAC && core.LeaseHolds(l, now) {
					rec.State = core.StateLeased
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		return s.event(tx, now, "device.reset", d.ID, d.Cluster, "reset for re-install: membership ended, credentials revoked", nil)
	})
	return d, err
}

// Approve marks a device approved for joining (ztpd device approve) and,
// when clusterRef is not empty, assigns it to that cluster. The cluster a
// device joins is the one its profile names (the join section or
// cloud-config comes with its ZTP content): an approval that would change
// nothing (its profile names no cluster, or another one, or a cluster that
// does not exist) is refused with the reason.
func (s *Service) Approve(ctx context.Context, deviceID, clusterRef string) (core.Device, error) {
	if err := ctx.Err(); err != nil {
		return core.Device{}, err
	}
	now := s.now().UTC()
	var d core.Device
	err := s.store.Update(func(tx core.Tx) error {
		var err error
		d, err = deviceByRef(tx, deviceID)
		if errors.Is(err, core.ErrNotFound) {
			return core.Errorf(core.KindNotFound, "device %s not found (ztpd device list shows the devices ztpd has seen)", deviceID)
		} else if err != nil {
			return err
		}
		cluster := d.Cluster
		if clusterRef != "" {
			c, err := clusters.ByRef(tx, clusterRef)
			if errors.Is(err, core.ErrNotFound) {
				return core.Errorf(core.KindNotFound, "cluster %q not found (ztpd cluster list)", clusterRef)
			} else if err != nil {
				return err
			}
			cluster = c.ID
		}
		if profileCluster, err := s.approvalTakesEffect(tx, d, clusterRef, cluster); err != nil {
			return err
		} else if cluster == "" {
			cluster = profileCluster
		}
		if d.Approved && d.Cluster == cluster {
			return nil
		}
		d, err = s.devices.Change(tx, d.ID, now, func(rec *core.Device) error {
			rec.Approved, rec.Cluster = true, cluster
			return nil
		})
		if err != nil {
			return err
		}
		return s.event(tx, now, "device.approved", d.ID, d.Cluster, "approved for joining", nil)
	})
	return d, err
}

// approvalTakesEffect refuses an approval of d that would change nothing.
// cluster is the cluster ID it would be approved for (the one given,
// clusterRef, else the one it asked to join). The cluster d is told to join
// is its profile's, whose ID it returns; without known profiles (offline
// CLI use) it cannot tell, and returns "" and no error.
func (s *Service) approvalTakesEffect(tx core.Tx, d core.Device, clusterRef, cluster string) (string, error) {
	var name, pc string
	known := false
	if s.opts.ProfileOf != nil {
		name, pc, known = s.opts.ProfileOf(d)
	}
	if !known {
		return "", nil
	}
	switch {
	case name == "" && !statedFacts(d):
		// Seen on DHCP only: the serial or platform a profile may match on
		// comes with its first ZTP fetch, so pre-approving it is not
		// refused; the approval takes effect if a profile with a cluster
		// then matches.
		return "", nil
	case name == "":
		return "", core.Errorf(core.KindState, "device %s matches no profile, so it is told to join no cluster and approving it would change nothing; "+
			"a profile that matches it must name the cluster (cluster: NAME; ztpd device show %s says why it was refused)", d.ID, d.ID)
	case pc == "":
		return "", core.Errorf(core.KindState, "device %s matches profile %q, which names no cluster, so it is told to join none and approving it would change nothing; "+
			"add \"cluster: NAME\" to profile %s (--cluster cannot replace that: the join comes with the profile's content)", d.ID, name, name)
	}
	c, err := clusters.ByRef(tx, pc)
	if errors.Is(err, core.ErrNotFound) {
		return "", core.Errorf(core.KindState, "device %s matches profile %q, which names cluster %q, and that cluster does not exist; "+
			"create it first (ztpd cluster create %s ...) or correct the profile", d.ID, name, pc, pc)
	} else if err != nil {
		return "", err
	}
	if clusterRef != "" && cluster != c.ID {
		return "", core.Errorf(core.KindState, "device %s matches profile %q, which puts it in cluster %q: it would join %s, not %s; "+
			"approve it without --cluster, or change the profile", d.ID, name, c.Name, c.Name, clusterRef)
	}
	return c.ID, nil
}

// statedFacts reports whether d has told ztpd about itself (a ZTP fetch or a
// serial), so that the profile it matches is final.
func statedFacts(d core.Device) bool {
	return d.Serial != "" || core.StateRank(d.State) >= core.StateRank(core.StateZTPServed)
}

// deviceByRef finds a device by id (MAC in any notation) or serial number.
func deviceByRef(tx core.Tx, ref string) (core.Device, error) {
	if mac, err := core.NormalizeMAC(ref); err == nil {
		if d, err := tx.Devices().Get(mac); err == nil || !errors.Is(err, core.ErrNotFound) {
			return d, err
		}
	}
	if d, err := tx.Devices().Get(ref); err == nil || !errors.Is(err, core.ErrNotFound) {
		return d, err
	}
	return tx.Devices().BySerial(ref)
}

// IssueKubeconfig signs a client certificate for user (CN) in group (O)
// with the cluster CA, valid for validity (0: one year), and returns a
// kubeconfig for it. The cluster's ClusterRoleBinding of the group to
// cluster-admin is made sure of in the background (EnsureAdminBinding)
// until it is recorded. The caller records the issue (event).
func (s *Service) IssueKubeconfig(ctx context.Context, clusterRef, user, group string, validity time.Duration) (clusters.IssuedKubeconfig, error) {
	if err := ctx.Err(); err != nil {
		return clusters.IssuedKubeconfig{}, err
	}
	c, rt, err := s.clusterState(clusterRef)
	if err != nil {
		return clusters.IssuedKubeconfig{}, err
	}
	if rt.APIEndpoint == "" {
		return clusters.IssuedKubeconfig{}, fmt.Errorf("%w: cluster %s has no API endpoint yet (no control plane has been issued)", ErrClusterUnavailable, c.Name)
	}
	k, err := s.keysFor(c.ID)
	if err != nil {
		return clusters.IssuedKubeconfig{}, err
	}
	if k.ext != nil {
		return clusters.IssuedKubeconfig{}, errNoCAKey("a kubeconfig")
	}
	creds, err := kubeconfig.IssueUser(k.ca, c.Name, "https://"+rt.APIEndpoint, user, []string{group}, validity, s.now())
	if err != nil {
		return clusters.IssuedKubeconfig{}, err
	}
	out, err := creds.Marshal()
	if err != nil {
		return clusters.IssuedKubeconfig{}, err
	}
	if !rt.AdminBinding {
		s.kickAdminBinding(c.ID)
	}
	return clusters.IssuedKubeconfig{Config: out, User: user, Group: group, Serial: creds.Serial, NotAfter: creds.NotAfter}, nil
}

// CAHash is the cluster CA's kubeadm discovery hash.
func (s *Service) CAHash(clusterID string) (string, error) {
	k, err := s.keysFor(clusterID)
	if err != nil {
		return "", err
	}
	return k.caHash(), nil
}

// CACertPEM is the cluster CA certificate.
func (s *Service) CACertPEM(clusterID string) ([]byte, error) {
	k, err := s.keysFor(clusterID)
	if err != nil {
		return nil, err
	}
	return k.caCertPEM(), nil
}
