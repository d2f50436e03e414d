package joiner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
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

// ClusterSpec describes a cluster to create, with CloudStack's semantics:
// Size workers plus ControlNodes control planes.
type ClusterSpec struct {
	ID                string // optional; a UUID is generated
	Name              string
	Description       string
	KubernetesVersion string // semantic version; or VersionID
	VersionID         string // a core.Version record
	Size              int
	ControlNodes      int // default 1
	ExternalLBIP      string
	// Endpoint is the API server URL when known in advance (required for
	// k3s clusters, whose server ztpd does not install); otherwise the first
	// control plane's address becomes the endpoint, as in CloudStack.
	Endpoint   string
	JoinMethod string // kubeadm (default) or k3s
	Owner      string
}

// CreateCluster validates spec, stores the cluster and sets up its PKI and
// join credentials, all in one transaction.
func (s *Service) CreateCluster(ctx context.Context, spec ClusterSpec) (core.Cluster, error) {
	if err := ctx.Err(); err != nil {
		return core.Cluster{}, err
	}
	if spec.ID == "" {
		spec.ID = newUUID()
	}
	if spec.ControlNodes == 0 {
		spec.ControlNodes = 1
	}
	if spec.JoinMethod == "" {
		spec.JoinMethod = MethodKubeadm
	}
	now := s.now().UTC()
	c := core.Cluster{
		ID: spec.ID, Name: spec.Name, Description: spec.Description, VersionID: spec.VersionID,
		Size: spec.Size, ControlNodes: spec.ControlNodes, State: core.ClusterCreated,
		ExternalLBIP: spec.ExternalLBIP, Endpoint: spec.Endpoint, JoinMethod: spec.JoinMethod,
		Owner: spec.Owner, Created: now, UpdatedAt: now,
	}
	err := s.store.Update(func(tx core.Tx) error {
		semver := spec.KubernetesVersion
		if spec.VersionID != "" {
			v, err := core.GetVersion(tx, spec.VersionID)
			if err != nil {
				return err
			}
			semver = v.SemVer
		}
		if _, err := core.GetCluster(tx, c.ID); err == nil {
			return fmt.Errorf("%w: cluster id %s exists", ErrInvalid, c.ID)
		}
		if err := core.PutCluster(tx, c); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		return s.setup(tx, c, semver, now)
	})
	if err != nil {
		return core.Cluster{}, err
	}
	s.log.Info("cluster created", "cluster", c.ID, "name", c.Name, "size", c.Size, "control_nodes", c.ControlNodes)
	return c, nil
}

// SetupCluster gives an existing cluster record (created by the API) its
// PKI and join credentials. It is idempotent.
func (s *Service) SetupCluster(ctx context.Context, clusterRef, kubernetesVersion string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.now().UTC()
	return s.store.Update(func(tx core.Tx) error {
		c, err := clusterByRef(tx, clusterRef)
		if err != nil {
			return err
		}
		if ok, err := tx.Get(core.BucketMeta, runtimeKey(c.ID), &clusterRuntime{}); err != nil || ok {
			return err
		}
		semver := kubernetesVersion
		if semver == "" && c.VersionID != "" {
			v, err := core.GetVersion(tx, c.VersionID)
			if err != nil {
				return err
			}
			semver = v.SemVer
		}
		return s.setup(tx, c, semver, now)
	})
}

// setup validates a cluster against CloudStack's rules and writes its
// secrets, runtime record and the first pool of bootstrap tokens.
func (s *Service) setup(tx core.Tx, c core.Cluster, semver string, now time.Time) error {
	if c.JoinMethod == "" {
		c.JoinMethod = MethodKubeadm
	}
	v, err := bundle.ParseVersion(semver)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if _, err := bundle.KubeadmAPIFor(v); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	switch {
	case c.Size < 1:
		return fmt.Errorf("%w: size must be at least 1", ErrInvalid)
	case c.ControlNodes < 1:
		return fmt.Errorf("%w: control nodes must be at least 1", ErrInvalid)
	case c.ControlNodes > 1 && !v.AtLeast(1, 16):
		return fmt.Errorf("%w: more than one control node needs Kubernetes 1.16.0 or newer", ErrInvalid)
	case c.JoinMethod != MethodKubeadm && c.JoinMethod != MethodK3s:
		return fmt.Errorf("%w: join method %q (want kubeadm or k3s)", ErrInvalid, c.JoinMethod)
	case c.JoinMethod == MethodK3s && c.Endpoint == "":
		return fmt.Errorf("%w: a k3s cluster needs its server endpoint", ErrInvalid)
	}
	if c.ExternalLBIP != "" && net.ParseIP(c.ExternalLBIP) == nil {
		return fmt.Errorf("%w: external load balancer address %q is not an IP", ErrInvalid, c.ExternalLBIP)
	}
	rt := clusterRuntime{KubernetesVersion: v.String(), Algorithm: caAlgorithm(c.JoinMethod, v)}
	if c.Endpoint != "" {
		hp, err := endpointHostPort(c.Endpoint)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		rt.APIEndpoint = hp
	} else if c.ExternalLBIP != "" {
		rt.APIEndpoint = net.JoinHostPort(c.ExternalLBIP, "6443")
	}
	ca, err := pki.NewCA("kubernetes", rt.Algorithm, now)
	if err != nil {
		return err
	}
	certKey, err := tokens.GenerateCertificateKey()
	if err != nil {
		return err
	}
	seed := make([]byte, 32)
	if _, err := rand.Read(seed); err != nil {
		return err
	}
	ctx := secretsKey(c.ID)
	sec := clusterSecrets{}
	if sec.CA, err = ca.Seal(s.keys, ctx); err != nil {
		return err
	}
	if sec.CertKey, err = s.keys.Seal([]byte(certKey.Reveal()), []byte(ctx+"/certificate-key")); err != nil {
		return err
	}
	if sec.TokenSeed, err = s.keys.Seal(seed, []byte(ctx+"/token-seed")); err != nil {
		return err
	}
	if err := tx.Put(core.BucketSecrets, ctx, sec); err != nil {
		return err
	}
	if err := tx.Put(core.BucketMeta, runtimeKey(c.ID), rt); err != nil {
		return err
	}
	// One token per expected node besides the first control plane: the
	// first control plane creates them all at kubeadm init.
	if c.JoinMethod == MethodKubeadm {
		if err := s.fillPool(tx, c, seed, c.Size+c.ControlNodes-1, now); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.cache[c.ID] = &clusterKeys{ca: ca, certKey: certKey, seed: seed}
	s.mu.Unlock()
	return event(tx, now, "cluster.created", "", c.ID, "cluster PKI and join tokens created",
		map[string]string{"version": v.String(), "ca": string(rt.Algorithm), "ca_hash": ca.DiscoveryHash()})
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

func endpointHostPort(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "https" || u.Hostname() == "" {
		return "", fmt.Errorf("endpoint %q must be https://host[:port]/", endpoint)
	}
	port := u.Port()
	if port == "" {
		port = "6443"
	}
	return net.JoinHostPort(u.Hostname(), port), nil
}

// fillPool adds unassigned bootstrap tokens until the cluster has want
// usable ones (unexpired, unrevoked, not yet bound to a device).
func (s *Service) fillPool(tx core.Tx, c core.Cluster, seed []byte, want int, now time.Time) error {
	have := 0
	var stale []string
	err := tx.ScanPrefix(core.BucketIndex, poolIndexKey(c.ID, ""), func(k string, _ []byte) (bool, error) {
		id := k[strings.LastIndexByte(k, '/')+1:]
		var rec tokenRecord
		ok, err := tx.Get(core.BucketTokens, tokenKey(tokens.KindKubeadm, id), &rec)
		if err != nil {
			return false, err
		}
		r := rec.record()
		if !ok || rec.Device != "" || r.Usable(now.Add(time.Minute)) != nil {
			stale = append(stale, k)
			return true, nil
		}
		have++
		return true, nil
	})
	if err != nil {
		return err
	}
	for _, k := range stale {
		if err := tx.Delete(core.BucketIndex, k); err != nil {
			return err
		}
	}
	for ; have < want; have++ {
		rec, err := s.newKubeadmToken(tx, c.ID, "", seed, now)
		if err != nil {
			return err
		}
		if err := tx.Put(core.BucketIndex, poolIndexKey(c.ID, rec.ID), ""); err != nil {
			return err
		}
	}
	return nil
}

// newKubeadmToken stores a fresh token record whose secret derives from
// the cluster seed.
func (s *Service) newKubeadmToken(tx core.Tx, cluster, device string, seed []byte, now time.Time) (tokenRecord, error) {
	for range 16 {
		id, err := tokens.RandomString(6)
		if err != nil {
			return tokenRecord{}, err
		}
		if ok, err := tx.Get(core.BucketTokens, tokenKey(tokens.KindKubeadm, id), &tokenRecord{}); err != nil {
			return tokenRecord{}, err
		} else if ok {
			continue // id taken (kubeadm ids are 6 characters; collisions happen)
		}
		bt, err := tokens.DeriveBootstrapToken(seed, id)
		if err != nil {
			return tokenRecord{}, err
		}
		rec := tokenRecord{Token: core.Token{
			ID: id, Kind: string(tokens.KindKubeadm), SecretHash: hex.EncodeToString(bt.Hash()),
			Cluster: cluster, Device: device, Usages: tokens.DefaultUsages(), Groups: tokens.DefaultGroups(),
			Description: "ztpd join token", Expires: now.Add(s.opts.TokenTTL).UTC(), Created: now.UTC(),
		}}
		return rec, tx.Put(core.BucketTokens, tokenKey(tokens.KindKubeadm, id), rec)
	}
	return tokenRecord{}, errors.New("could not find a free token id")
}

// Scale sets a cluster's desired worker count (CloudStack scaleKubernetesCluster).
// Scaling down marks the newest workers beyond the new size to leave and
// revokes their tokens; it returns their device ids.
func (s *Service) Scale(ctx context.Context, clusterRef string, size int) ([]string, error) {
	return s.resize(ctx, clusterRef, size, true)
}

// resize marks surplus workers leaving; with store it also saves the new size.
func (s *Service) resize(ctx context.Context, clusterRef string, size int, store bool) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if size < 1 {
		return nil, fmt.Errorf("%w: size must be at least 1", ErrInvalid)
	}
	now := s.now().UTC()
	var leaving []string
	err := s.store.Update(func(tx core.Tx) error {
		leaving = nil
		c, err := clusterByRef(tx, clusterRef)
		if err != nil {
			return err
		}
		switch c.State {
		case core.ClusterCreated, core.ClusterRunning, core.ClusterStarting, core.ClusterScaling:
		default:
			return fmt.Errorf("%w: cluster %s is %s; scale needs Created or Running", ErrClusterUnavailable, c.Name, c.State)
		}
		rt, err := getRuntime(tx, c.ID)
		if err != nil {
			return err
		}
		var workers []member
		err = tx.ScanPrefix(core.BucketIndex, memberIndexKey(c.ID, ""), func(k string, _ []byte) (bool, error) {
			var m member
			ok, err := tx.Get(core.BucketMemberships, k[strings.LastIndexByte(k, '/')+1:], &m)
			if err != nil || !ok {
				return err == nil, err
			}
			if m.Cluster == c.ID && m.Role != RoleControlPlane && holdsSlot(m.State) {
				workers = append(workers, m)
			}
			return true, nil
		})
		if err != nil {
			return err
		}
		// Newest first: the last to join are the first to leave.
		slices.SortFunc(workers, func(a, b member) int { return b.Created.Compare(a.Created) })
		for i := 0; i < len(workers)-size; i++ {
			m := workers[i]
			if err := s.transition(tx, &m, core.StateLeaving, "scale down to "+strconv.Itoa(size), now); err != nil {
				return err
			}
			rt.Workers--
			if err := s.revokeMemberTokens(tx, m, now); err != nil {
				return err
			}
			leaving = append(leaving, m.Device)
		}
		if store {
			c.Size, c.UpdatedAt = size, now
			if err := core.PutCluster(tx, c); err != nil {
				return err
			}
		}
		if err := tx.Put(core.BucketMeta, runtimeKey(c.ID), rt); err != nil {
			return err
		}
		return event(tx, now, "cluster.scaled", "", c.ID, fmt.Sprintf("size %d, %d leaving", size, len(leaving)), nil)
	})
	return leaving, err
}

// MarkLeft records that a leaving (or any) member has left its cluster.
func (s *Service) MarkLeft(ctx context.Context, deviceID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.now().UTC()
	return s.store.Update(func(tx core.Tx) error {
		var m member
		ok, err := tx.Get(core.BucketMemberships, deviceID, &m)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("membership of %s: %w", deviceID, core.ErrNotFound)
		}
		return s.leave(tx, m, "left the cluster", now)
	})
}

// leave ends a membership: its slot is freed, its tokens revoked, its
// history records why. A first control plane that leaves an otherwise
// empty cluster takes the cluster's init with it, so the next control
// plane initialises the cluster again.
func (s *Service) leave(tx core.Tx, m member, reason string, now time.Time) error {
	if m.State == core.StateLeft {
		return nil
	}
	if holdsSlot(m.State) {
		rt, err := getRuntime(tx, m.Cluster)
		if err != nil {
			return err
		}
		rt.release(m)
		if rt.FirstControlPlane == m.Device && rt.ControlPlanes+rt.Workers == 0 {
			rt.FirstControlPlane, rt.Initialized = "", false
		}
		if err := tx.Put(core.BucketMeta, runtimeKey(m.Cluster), rt); err != nil {
			return err
		}
	}
	if err := s.revokeMemberTokens(tx, m, now); err != nil {
		return err
	}
	if err := s.transition(tx, &m, core.StateLeft, reason, now); err != nil {
		return err
	}
	return tx.Delete(core.BucketIndex, memberIndexKey(m.Cluster, m.Device))
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
		var m member
		had, err := tx.Get(core.BucketMemberships, d.ID, &m)
		if err != nil {
			return err
		}
		if had {
			if err := s.leave(tx, m, "reset by an operator", now); err != nil {
				return err
			}
		}
		for _, idx := range []string{enrollIndexKey(d.MAC, ""), enrollIndexKey("", d.Serial)} {
			var id string
			if ok, err := tx.Get(core.BucketIndex, idx, &id); err != nil {
				return err
			} else if ok {
				if err := tx.Delete(core.BucketTokens, tokenKey(tokens.KindEnrollment, id)); err != nil {
					return err
				}
				if err := tx.Delete(core.BucketIndex, idx); err != nil {
					return err
				}
			}
		}
		d, err = core.GetDevice(tx, d.ID) // leave may have updated it
		if err != nil {
			return err
		}
		d.Role, d.UpdatedAt = "", now
		d.State = core.StateDiscovered
		if d.IP != "" {
			if l, err := core.GetLease(tx, d.IP); err == nil && l.MAC == d.MAC && core.LeaseHolds(l, now) {
				d.State = core.StateLeased
			}
		}
		if err := core.PutDevice(tx, d); err != nil {
			return err
		}
		return event(tx, now, "device.reset", d.ID, d.Cluster, "reset for re-install: membership ended, credentials revoked", nil)
	})
	return d, err
}

// Approve marks a device approved for joining (ztpd device approve) and,
// when clusterRef is not empty, assigns it to that cluster.
func (s *Service) Approve(ctx context.Context, deviceID, clusterRef string) (core.Device, error) {
	if err := ctx.Err(); err != nil {
		return core.Device{}, err
	}
	now := s.now().UTC()
	var d core.Device
	err := s.store.Update(func(tx core.Tx) error {
		var err error
		d, err = deviceByRef(tx, deviceID)
		if err != nil {
			return err
		}
		if clusterRef != "" {
			c, err := clusterByRef(tx, clusterRef)
			if err != nil {
				return err
			}
			if d.Approved && d.Cluster == c.ID {
				return nil
			}
			d.Cluster = c.ID
		} else if d.Approved {
			return nil
		}
		d.Approved, d.UpdatedAt = true, now
		if err := core.PutDevice(tx, d); err != nil {
			return err
		}
		return event(tx, now, "device.approved", d.ID, d.Cluster, "approved for joining", nil)
	})
	return d, err
}

// deviceByRef finds a device by id (MAC in any notation) or serial number.
func deviceByRef(tx core.Tx, ref string) (core.Device, error) {
	if mac, err := core.NormalizeMAC(ref); err == nil {
		if d, err := core.GetDevice(tx, mac); err == nil || !errors.Is(err, core.ErrNotFound) {
			return d, err
		}
	}
	if d, err := core.GetDevice(tx, ref); err == nil || !errors.Is(err, core.ErrNotFound) {
		return d, err
	}
	return core.DeviceBySerial(tx, ref)
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
	c, rt, err := s.clusterRuntime(clusterRef)
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
	return k.ca.DiscoveryHash(), nil
}

// CACertPEM is the cluster CA certificate.
func (s *Service) CACertPEM(clusterID string) ([]byte, error) {
	k, err := s.keysFor(clusterID)
	if err != nil {
		return nil, err
	}
	return k.ca.CertPEM(), nil
}
