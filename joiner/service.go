// Package joiner turns admitted devices into cluster members. It owns each
// cluster's PKI and join credentials, decides who may join and as what
// (admission), hands out join bundles, and keeps the membership record.
//
// Storage (all through core.Store):
//
//	clusters             core.Cluster (shared with the API)
//	secrets  cluster/<id>         sealed CA key, certificate key, token seed
//	meta     joiner/cluster/<id>  member counts, first control plane, endpoint
//	tokens   <kind>/<id>          token records: id + hash, never the secret
//	memberships <device>          role, state and history
//	index    member/<cluster>/<device>, pool/<cluster>/<token>
//
// Every admission decision and its records commit in one transaction through
// the store's group commit, so concurrent joins can never exceed a cluster's
// desired size, and a bundle is only handed out once it is durably recorded.
package joiner

import (
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/secretbox"
	"github.com/ztpd/ztpd/joiner/pki"
	"github.com/ztpd/ztpd/joiner/tokens"
)

// Errors callers map to answers. Credential failures share one public
// meaning ("not authorised") but stay distinct for logs and tests.
var (
	ErrEnrollmentInvalid  = errors.New("enrollment secret unknown or wrong")
	ErrEnrollmentUsed     = errors.New("enrollment secret already used")
	ErrEnrollmentExpired  = errors.New("enrollment secret expired")
	ErrRevoked            = errors.New("credential revoked")
	ErrBindingMismatch    = errors.New("device does not match the enrollment secret's binding")
	ErrReportInvalid      = errors.New("report credential unknown or wrong")
	ErrClusterUnavailable = errors.New("cluster does not accept members")
	ErrMemberElsewhere    = errors.New("device is a member of another cluster")
	ErrInvalid            = errors.New("invalid request")
	ErrNotHolder          = errors.New("the request's address holds no lease and no operator-declared binding")
	ErrAlreadyIssued      = errors.New("join material was already issued to this device")
)

// IsUnauthorized reports whether err is a credential failure.
func IsUnauthorized(err error) bool {
	for _, e := range []error{ErrEnrollmentInvalid, ErrEnrollmentUsed, ErrEnrollmentExpired, ErrRevoked, ErrBindingMismatch,
		ErrReportInvalid, ErrNotHolder, ErrAlreadyIssued} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// WaitError means the device was admitted to the queue but cannot join yet
// (awaiting approval, no room, no control plane yet). It should retry.
type WaitError struct {
	Reason     string
	RetryAfter time.Duration
}

func (e *WaitError) Error() string { return "waiting: " + e.Reason }

// Rule auto-approves devices. An empty field matches anything; a device must
// match every non-empty field. Cluster, when set, limits the rule to that
// cluster (name or id).
//
// Subnets, MACs, CircuitIDs, RemoteIDs and Reserved are what the network
// proves: the address the device holds (core.HolderOf), the MAC it leased
// with, the relay agent information its DHCP requests carried, a reserved
// address. AssertedSerials and AssertedProducts are what the device says
// about itself, matched only where a rule names them. A rule approves worker
// roles; ControlPlane lets it approve control planes too (never implied).
type Rule struct {
	Subnets          []string // CIDRs
	MACs             []string
	CircuitIDs       []string
	RemoteIDs        []string
	Reserved         bool
	AssertedSerials  []string
	AssertedProducts []string
	ControlPlane     bool
	Cluster          string
}

// Options configure the service.
type Options struct {
	EnrollmentTTL time.Duration // default 1h
	TokenTTL      time.Duration // default 24h; 0 after defaulting is not allowed
	ReportTTL     time.Duration // default 7 days
	// ReissueWindow is how long after its first issue a member's bundle
	// may be issued again to retry a join that has not succeeded; default
	// 15 minutes. After it (or once joined) only `ztpd device reset` does.
	ReissueWindow time.Duration
	// Bindings are the operator-declared addresses (DHCP reservations) of
	// static devices; joins come from the holder of an address (see
	// core.HolderOf).
	Bindings    core.Bindings
	AutoApprove []Rule
	// BaseURL is the appliance's device-facing HTTP base, e.g.
	// http://10.99.0.1:8080; links in ztp.json sections and the default
	// ReportURL derive from it.
	BaseURL string
	// ReportURL is where nodes POST joined/failed; default BaseURL +
	// /join/report. Empty (and no BaseURL): bundles carry no report step.
	ReportURL string
	Now       func() time.Time
	Log       *slog.Logger
}

// Service is the joiner.
type Service struct {
	store core.Store
	keys  *secretbox.Keyring
	opts  Options
	rules []compiledRule
	now   func() time.Time
	log   *slog.Logger

	mu     sync.RWMutex
	cache  map[string]*clusterKeys // opened cluster secrets by cluster id
	leases core.LeaseCache         // decoded leases, for the holder check of every join

	// bindKick asks the sweeper loop to create a cluster's admin binding.
	bindKick chan string
}

// New builds the service over an opened store and keyring.
func New(store core.Store, keys *secretbox.Keyring, opts Options) (*Service, error) {
	if store == nil || keys == nil {
		return nil, errors.New("joiner: store and keyring are required")
	}
	if opts.EnrollmentTTL <= 0 {
		opts.EnrollmentTTL = time.Hour
	}
	if opts.TokenTTL <= 0 {
		opts.TokenTTL = 24 * time.Hour
	}
	if opts.ReissueWindow <= 0 {
		opts.ReissueWindow = 15 * time.Minute
	}
	if opts.ReportTTL <= 0 {
		opts.ReportTTL = 7 * 24 * time.Hour
	}
	opts.BaseURL = strings.TrimSuffix(opts.BaseURL, "/")
	if opts.ReportURL == "" && opts.BaseURL != "" {
		opts.ReportURL = opts.BaseURL + "/join/report"
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	rules, err := compileRules(opts.AutoApprove)
	if err != nil {
		return nil, err
	}
	return &Service{store: store, keys: keys, opts: opts, rules: rules, now: opts.Now, log: opts.Log,
		cache: map[string]*clusterKeys{}, bindKick: make(chan string, 64)}, nil
}

// Storage keys.
func secretsKey(cluster string) string            { return "cluster/" + cluster }
func runtimeKey(cluster string) string            { return "joiner/cluster/" + cluster }
func tokenKey(kind tokens.Kind, id string) string { return string(kind) + "/" + id }
func memberIndexKey(cluster, device string) string {
	return "member/" + cluster + "/" + device
}
func poolIndexKey(cluster, token string) string { return "pool/" + cluster + "/" + token }

// clusterSecrets is the sealed key material of one cluster.
type clusterSecrets struct {
	CA        pki.SealedCA `json:"ca"`
	CertKey   []byte       `json:"certificate_key"` // sealed hex certificate key
	TokenSeed []byte       `json:"token_seed"`      // sealed 32 random bytes
}

// clusterKeys is clusterSecrets opened, held in memory while the process runs.
type clusterKeys struct {
	ca      *pki.CA
	certKey tokens.CertificateKey
	seed    []byte
}

// clusterRuntime is the joiner's own view of a cluster's membership.
type clusterRuntime struct {
	KubernetesVersion string        `json:"kubernetes_version"`
	Algorithm         pki.Algorithm `json:"algorithm"`
	FirstControlPlane string        `json:"first_control_plane,omitempty"`
	Initialized       bool          `json:"initialized,omitempty"` // first control plane reported joined
	ControlPlanes     int           `json:"control_planes"`        // active, including the first
	Workers           int           `json:"workers"`               // active, including switches
	APIEndpoint       string        `json:"api_endpoint,omitempty"`
	Suspended         bool          `json:"suspended,omitempty"` // cluster stopped: no joins
	// AdminBinding: the ClusterRoleBinding giving ztpd's kubeconfig group
	// cluster-admin exists in the cluster (created or found by ztpd).
	AdminBinding bool `json:"admin_binding,omitempty"`
	// AdminBindingRetry: creating it failed (API server not reachable
	// yet); the sweeper tries again.
	AdminBindingRetry bool `json:"admin_binding_retry,omitempty"`
}

// tokenRecord is core.Token plus the joiner's bindings; other readers see a
// plain core.Token.
type tokenRecord struct {
	core.Token
	BindMAC    string `json:"bind_mac,omitempty"`
	BindSerial string `json:"bind_serial,omitempty"`
	// InitIssued: the token was in the first control plane's init
	// configuration, so kubeadm init creates it in the cluster.
	InitIssued bool `json:"init_issued,omitempty"`
}

func (r *tokenRecord) record() tokens.Record {
	return tokens.Record{ID: r.ID, Kind: tokens.Kind(r.Kind), SecretHash: hexDecode(r.SecretHash),
		ExpiresAt: r.Expires, UsedAt: r.UsedAt, Revoked: r.Revoked, SingleUse: r.Kind == string(tokens.KindEnrollment)}
}

// member is core.Membership plus what the joiner needs to re-issue and revoke.
type member struct {
	core.Membership
	Method     string `json:"join_method"`
	TokenID    string `json:"token_id,omitempty"`
	ReportID   string `json:"report_id,omitempty"`
	IP         string `json:"ip,omitempty"`
	WaitReason string `json:"wait_reason,omitempty"`
	// IssuedAt is when the bundle was first handed out: re-issues are
	// allowed only within Options.ReissueWindow of it.
	IssuedAt time.Time `json:"issued_at,omitzero"`
}

// keysFor opens (once) and returns a cluster's secrets.
func (s *Service) keysFor(clusterID string) (*clusterKeys, error) {
	s.mu.RLock()
	k := s.cache[clusterID]
	s.mu.RUnlock()
	if k != nil {
		return k, nil
	}
	var sec clusterSecrets
	err := s.store.View(func(tx core.Tx) error {
		ok, err := tx.Get(core.BucketSecrets, secretsKey(clusterID), &sec)
		if err == nil && !ok {
			err = fmt.Errorf("cluster %s has no PKI: %w", clusterID, core.ErrNotFound)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	k, err = s.openSecrets(clusterID, sec)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.cache[clusterID] = k
	s.mu.Unlock()
	return k, nil
}

func (s *Service) openSecrets(clusterID string, sec clusterSecrets) (*clusterKeys, error) {
	ctx := secretsKey(clusterID)
	ca, err := pki.OpenCA(sec.CA, s.keys, ctx)
	if err != nil {
		return nil, err
	}
	ck, err := s.keys.Open(sec.CertKey, []byte(ctx+"/certificate-key"))
	if err != nil {
		return nil, fmt.Errorf("cluster %s certificate key: %w", clusterID, err)
	}
	certKey, err := tokens.ParseCertificateKey(string(ck))
	if err != nil {
		return nil, err
	}
	seed, err := s.keys.Open(sec.TokenSeed, []byte(ctx+"/token-seed"))
	if err != nil {
		return nil, fmt.Errorf("cluster %s token seed: %w", clusterID, err)
	}
	return &clusterKeys{ca: ca, certKey: certKey, seed: seed}, nil
}

func (s *Service) forget(clusterID string) {
	s.mu.Lock()
	delete(s.cache, clusterID)
	s.mu.Unlock()
}

// newUUID returns a random RFC 4122 version 4 UUID, CloudStack's id form.
func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

func event(tx core.Tx, now time.Time, typ, device, cluster, msg string, fields map[string]string) error {
	_, err := core.AppendEvent(tx, core.Event{Time: now.UTC(), Type: typ, Device: device, Cluster: cluster, Message: msg, Fields: fields})
	return err
}

func getRuntime(tx core.Tx, cluster string) (clusterRuntime, error) {
	var rt clusterRuntime
	ok, err := tx.Get(core.BucketMeta, runtimeKey(cluster), &rt)
	if err == nil && !ok {
		err = fmt.Errorf("cluster %s is not set up for joining: %w", cluster, core.ErrNotFound)
	}
	return rt, err
}

// clusterRuntime reads a cluster (by id or name) and the joiner's runtime
// of it in one snapshot.
func (s *Service) clusterRuntime(ref string) (c core.Cluster, rt clusterRuntime, err error) {
	err = s.store.View(func(tx core.Tx) error {
		if c, err = clusterByRef(tx, ref); err != nil {
			return err
		}
		rt, err = getRuntime(tx, c.ID)
		return err
	})
	return c, rt, err
}

// clusterByRef finds a cluster by id, then by name.
func clusterByRef(tx core.Tx, ref string) (core.Cluster, error) {
	c, err := core.GetCluster(tx, ref)
	if errors.Is(err, core.ErrNotFound) {
		return core.ClusterByName(tx, ref)
	}
	return c, err
}
