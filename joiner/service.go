// Package joiner turns admitted devices into cluster members. It owns each
// cluster's PKI and join credentials, decides who may join and as what
// (admission), hands out join bundles, and keeps the membership record.
//
// What it keeps (all through core.Store's repositories):
//
//	Secrets     cluster/<id>  sealed CA key, certificate key, token seed
//	Clusters    JoinState     member counts, first control plane, endpoint
//	Tokens                    token records: id + hash, never the secret;
//	                          each cluster's pool, each device's enrollment
//	Memberships               role, state and history; each cluster's roster
//
// Clusters themselves (their records, versions and rules) are the clusters
// service's: it drives the joiner (Provision, Resize, SetVersion, Stop,
// Start, Destroy) and the joiner asks it (clusters.ByRef,
// clusters.AcceptsMembers, clusters.RecordEndpoint for the first control
// plane's address). Device records and the event log are the devices
// service's: the joiner reports its changes and events to it
// (devices.Recorder) inside its own transactions, so a membership and its
// device commit together.
//
// Every admission decision and its records commit in one transaction through
// the store's group commit, so concurrent joins can never exceed a cluster's
// desired size, and a bundle is only handed out once it is durably recorded.
package joiner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/internal/positions"
	"github.com/ztpd/ztpd/internal/ratelimit"
	"github.com/ztpd/ztpd/internal/secretbox"
	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/joiner/pki"
	"github.com/ztpd/ztpd/joiner/tokens"
)

// Errors callers map to answers, classified by core.KindOf. Credential
// failures share one public meaning ("not authorised", core.KindRefused)
// but stay distinct for logs and tests.
var (
	ErrEnrollmentInvalid  = joinError(core.KindRefused, "enrollment secret unknown or wrong")
	ErrEnrollmentUsed     = joinError(core.KindRefused, "enrollment secret already used")
	ErrEnrollmentExpired  = joinError(core.KindRefused, "enrollment secret expired")
	ErrEnrollmentAddress  = joinError(core.KindRefused, "enrollment secret presented from an address other than its device's")
	ErrRevoked            = joinError(core.KindRefused, "credential revoked")
	ErrBindingMismatch    = joinError(core.KindRefused, "device does not match the enrollment secret's binding")
	ErrReportInvalid      = joinError(core.KindRefused, "report credential unknown or wrong")
	ErrClusterUnavailable = joinError(core.KindUnavailable, "cluster does not accept members")
	ErrMemberElsewhere    = joinError(core.KindConflict, "device is a member of another cluster")
	ErrInvalid            = joinError(core.KindInvalid, "invalid request")
	ErrNotHolder          = joinError(core.KindRefused, "the request's address holds no lease and no operator-declared binding")
	ErrAlreadyIssued      = joinError(core.KindRefused, "join material was already issued to this device")
	ErrWrongHolder        = joinError(core.KindRefused, "the request's address is not held by the credential's device")
	ErrMoved              = joinError(core.KindRefused, "the device is the member of another position")
)

func joinError(k core.ErrorKind, msg string) error { return &core.Error{Kind: k, Msg: msg} }

// IsUnauthorized reports whether err is a credential failure.
func IsUnauthorized(err error) bool {
	for _, e := range []error{ErrEnrollmentInvalid, ErrEnrollmentUsed, ErrEnrollmentExpired, ErrEnrollmentAddress, ErrRevoked, ErrBindingMismatch,
		ErrReportInvalid, ErrNotHolder, ErrWrongHolder, ErrAlreadyIssued} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// WaitError means the device cannot join yet (awaiting approval, no room,
// no control plane yet, the profile's cluster not created yet). It should
// retry. It is a wait in the one error model (core.KindWaiting).
type WaitError struct {
	Reason     string
	RetryAfter time.Duration
	// recorded: admission already put the wait on the device's record
	// and, when it changed, in the event log (join.waiting).
	recorded bool
}

func (e *WaitError) Error() string {
	if strings.HasPrefix(e.Reason, "waiting") {
		return e.Reason
	}
	return "waiting: " + e.Reason
}

// Unwrap makes core.KindOf (and errors.As to *core.Error) see a wait.
func (e *WaitError) Unwrap() error {
	return &core.Error{Kind: core.KindWaiting, Msg: e.Reason, RetryAfter: e.RetryAfter}
}

// Recorded reports whether the joiner has already recorded the wait on the
// device (its reason and, once per change, its event), so a door that
// answers it records nothing more.
func (e *WaitError) Recorded() bool { return e.recorded }

// Rule auto-approves devices. An empty field matches anything; a device must
// match every non-empty field. Cluster, when set, limits the rule to that
// cluster (name or id).
//
// Subnets, MACs, CircuitIDs, RemoteIDs and Reserved are what the network
// proves: the address the device holds (core.HolderOf), the MAC it leased
// with, the relay agent information its DHCP requests carried, a reserved
// address. AssertedSerials and AssertedProducts are what the device says
// about itself, matched only where a rule names them. Reserved counts only
// reservations by MAC; relay agent information only reaches a device record
// from relays declared under dhcp.relays. A rule approves worker
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
	// Observer is the identity ztpd watches its clusters with.
	Observer Observer
	// ProfileLabels gives a profile's labels by name, for the Node labels
	// of its devices (nil: none).
	ProfileLabels func(profile string) map[string]string
	// ProfileOf names the profile a device's next ZTP or user-data fetch
	// gets ("" when none matches) and the cluster that profile names (""
	// for none): that cluster is the one the device is told to join.
	// known is false when no profiles are loaded (offline CLI use); nil is
	// never known. Approve refuses what it can tell would change nothing.
	ProfileOf     func(d core.Device) (profile, cluster string, known bool)
	EnrollmentTTL time.Duration // default DefaultEnrollmentTTL
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
	// SecureBaseURL is the device HTTPS listener's base, e.g.
	// https://10.99.0.1 (a func: the port may be known only once the
	// listener is bound), and DevicePins the pins of its certificate as
	// curl --pinnedpubkey takes them: with both, a ztp.json section's
	// join-url is on that listener and the section names the pins
	// ("tls-pin"), and a switch's join answer gives the report URL on it
	// with the pins. Nil or "": join-url stays on BaseURL.
	SecureBaseURL func() string
	DevicePins    func() string
	// ReportURL is where nodes POST joined/failed; default BaseURL +
	// /join/report (switches: SecureBaseURL's with the listener). Empty
	// (and no BaseURL): bundles carry no report step.
	ReportURL string
	// BasesFor, when set, is BaseURL and SecureBaseURL for the device
	// whose request ctx serves, in the address family it asked over (an
	// appliance serving both); an empty answer keeps the configured one.
	// A defaulted ReportURL follows it.
	BasesFor func(ctx context.Context) (base, secure string)
	// AgentFiles renders the device agent's installation (script, units,
	// its configuration with the credential, the pinned appliance CA) for
	// one credential; nil: bundles install no agent and issue no agent
	// credential.
	AgentFiles func(credential string) ([]bundle.File, error)
	// Plan is the cabling plan in use (nil, or a nil answer: none). A
	// device at a planned position joins under the position's name, and
	// the plan's replace, moved and cabling policies decide what a new
	// box there, a member of another slot, or unexpected LLDP neighbours
	// meet (positions.go).
	Plan func() *positions.Plan
	// EtcdProbe asks an etcd node whether it is healthy (default: etcd's
	// /health over TLS); tests replace it.
	EtcdProbe EtcdProbe
	// DeleteNode deletes a cluster's Node as ztpd's operator (the
	// scale-down's NodeOps): the Node of a member a replacement ended.
	// Nil: the Node is left for the cluster to show NotReady.
	DeleteNode func(ctx context.Context, cluster, node string) error
	// Devices records the device records and events the joiner changes,
	// inside its own transactions (the devices service); required.
	Devices devices.Recorder
	Now     func() time.Time
	Log     *slog.Logger
	// Registerer gets the joiner's metrics; nil keeps them unexported.
	Registerer prometheus.Registerer
}

// Service is the joiner.
type Service struct {
	store   core.Store
	nodes   nodeIndex // node name -> member, per cluster (observe.go)
	keys    *secretbox.Keyring
	devices devices.Recorder
	opts    Options
	rules   []compiledRule
	now     func() time.Time
	log     *slog.Logger
	metrics *metrics

	mu    sync.RWMutex
	cache map[string]*clusterKeys // opened cluster secrets by cluster id

	// bindKick asks the sweeper loop to create a cluster's admin binding.
	bindKick chan string

	// reportDerived: ReportURL was not configured but follows the base.
	reportDerived bool

	reportLog *ratelimit.Keyed // refused reports, logged at most once per address a while
	// csrLog bounds the refused certificate requests recorded per device:
	// a device re-sending a bad one until its secret expires must not
	// cycle the audit trail.
	csrLog *ratelimit.Keyed
	// enrollmentRefusals bounds the enrollment.refused events per
	// enrollment: a replayed secret must not be able to cycle the audit trail.
	enrollmentRefusals *ratelimit.Keyed
}

// New builds the service over an opened store and keyring.
func New(store core.Store, keys *secretbox.Keyring, opts Options) (*Service, error) {
	if store == nil || keys == nil || opts.Devices == nil {
		return nil, errors.New("joiner: store, keyring and device recorder are required")
	}
	if opts.EnrollmentTTL <= 0 {
		opts.EnrollmentTTL = DefaultEnrollmentTTL
	}
	if opts.TokenTTL <= 0 {
		opts.TokenTTL = 24 * time.Hour
	}
	if opts.ReissueWindow <= 0 {
		opts.ReissueWindow = 15 * time.Minute
	}
	if opts.EtcdProbe == nil {
		opts.EtcdProbe = probeEtcdHealth
	}
	if opts.ReportTTL <= 0 {
		opts.ReportTTL = 7 * 24 * time.Hour
	}
	opts.BaseURL = strings.TrimSuffix(opts.BaseURL, "/")
	if opts.DevicePins == nil {
		opts.SecureBaseURL = nil
	}
	reportDerived := opts.ReportURL == ""
	if opts.ReportURL == "" && opts.BaseURL != "" {
		opts.ReportURL = opts.BaseURL + reportPath
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
	return &Service{reportDerived: reportDerived, reportLog: ratelimit.New(1, refusalLogEvery, 4096), csrLog: ratelimit.New(3, refusalLogEvery, 4096),
		enrollmentRefusals: ratelimit.New(3, refusalLogEvery, 4096), store: store, keys: keys, devices: opts.Devices, opts: opts, rules: rules, now: opts.Now, log: opts.Log,
		metrics: newMetrics(opts.Registerer), cache: map[string]*clusterKeys{}, bindKick: make(chan string, 64)}, nil
}

// secureBase is the device HTTPS listener's base, "" without it.
func (s *Service) secureBase() string {
	if s.opts.SecureBaseURL == nil {
		return ""
	}
	return strings.TrimSuffix(s.opts.SecureBaseURL(), "/")
}

// reportTarget is where the device whose request ctx serves reports, and
// the pins its client must check ("" over plain HTTP). With the device
// HTTPS listener every device reads its report credential over that
// listener (a switch in its join answer, a VM in its join data), so it
// reports there too, pinned, and the credential travels only inside TLS;
// an operator's report_url is kept as given.
func (s *Service) reportTarget(ctx context.Context) (url, pin string) {
	_, secure, report := s.deviceURLs(ctx)
	if s.reportDerived && secure != "" {
		return secure + reportPath, s.opts.DevicePins()
	}
	return report, ""
}

// reportPath is where joinhttp takes nodes' join reports, under the base.
const reportPath = "/join/report"

// deviceURLs are the device-facing bases and report URL for the device
// whose request ctx serves (see Options.BasesFor).
func (s *Service) deviceURLs(ctx context.Context) (base, secure, report string) {
	base, secure, report = s.opts.BaseURL, s.secureBase(), s.opts.ReportURL
	if s.opts.BasesFor == nil {
		return base, secure, report
	}
	b, sec := s.opts.BasesFor(ctx)
	if b != "" {
		base = strings.TrimSuffix(b, "/")
		if s.reportDerived {
			report = base + reportPath
		}
	}
	if sec != "" && secure != "" {
		secure = strings.TrimSuffix(sec, "/")
	}
	return base, secure, report
}

// DefaultEnrollmentTTL is how long an enrollment secret lives. It need
// only cover one ZTP run from the ztp.json that carries it to the join
// plugin's last try: a firmware section before the join (download,
// install, reboot; SONiC ZTP resumes with the ztp.json it saved) takes
// some 15 minutes, and the plugin waits up to 30 for admission. A device
// that fetches its ztp.json again gets a fresh secret.
const DefaultEnrollmentTTL = 45 * time.Minute

// secretsOwner names a cluster's key material in the Secrets repository;
// it is also the sealing context.
func secretsOwner(cluster string) string { return "cluster/" + cluster }

// clusterSecrets is the sealed key material of one cluster.
type clusterSecrets struct {
	CA pki.SealedCA `json:"ca"`
	// EtcdCA is the etcd CA of a cluster built with etcd nodes (external
	// etcd), sealed as the cluster CA is; nil for stacked etcd.
	EtcdCA    *pki.SealedCA `json:"etcd_ca,omitempty"`
	CertKey   []byte        `json:"certificate_key"` // sealed hex certificate key
	TokenSeed []byte        `json:"token_seed"`      // sealed 32 random bytes
	// External is set, and the fields above empty, for a cluster ztpd did
	// not build (ExternalManaged): it holds no CA key for it.
	External *externalSecrets `json:"external,omitempty"`
}

// clusterKeys is clusterSecrets opened, held in memory while the process runs.
type clusterKeys struct {
	ca      *pki.CA
	certKey tokens.CertificateKey
	seed    []byte
	ext     *externalKeys // an external cluster's (ca and certKey unset)
	etcdCA  *pki.CA       // a cluster with etcd nodes'
	etcdProbeState
}

// tokenRecord is a stored token as the tokens package checks it.
func tokenRecord(t core.Token) tokens.Record {
	return tokens.Record{ID: t.ID, Kind: tokens.Kind(t.Kind), SecretHash: hexDecode(t.SecretHash),
		ExpiresAt: t.Expires, UsedAt: t.UsedAt, Revoked: t.Revoked, SingleUse: t.Kind == string(tokens.KindEnrollment)}
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
		raw, ok, err := tx.Secrets().Get(secretsOwner(clusterID))
		if err == nil && !ok {
			err = fmt.Errorf("cluster %s has no PKI: %w", clusterID, core.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if err := json.Unmarshal(raw, &sec); err != nil {
			return fmt.Errorf("cluster %s key material: %w", clusterID, err)
		}
		return nil
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
	if sec.External != nil {
		return s.openExternal(clusterID, sec.External)
	}
	ctx := secretsOwner(clusterID)
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
	k := &clusterKeys{ca: ca, certKey: certKey, seed: seed}
	if sec.EtcdCA != nil {
		if k.etcdCA, err = pki.OpenCA(*sec.EtcdCA, s.keys, etcdCAOwner(clusterID)); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// etcdCAOwner binds a cluster's sealed etcd CA key to that cluster and to
// its use, so it cannot be swapped with the cluster CA's.
func etcdCAOwner(clusterID string) string { return secretsOwner(clusterID) + "/etcd-ca" }

func (s *Service) forget(clusterID string) {
	s.mu.Lock()
	delete(s.cache, clusterID)
	s.mu.Unlock()
}

// event records what happened inside tx through the devices service, the
// event log's owner.
func (s *Service) event(tx core.Tx, now time.Time, typ, device, cluster, msg string, fields map[string]string) error {
	return s.devices.Record(tx, core.Event{Time: now.UTC(), Type: typ, Device: device, Cluster: cluster, Message: msg, Fields: fields})
}

// joinState is the joiner's bookkeeping of cluster.
func joinState(tx core.Tx, cluster string) (core.JoinState, error) {
	rt, err := tx.Clusters().JoinState(cluster)
	if errors.Is(err, core.ErrNotFound) {
		err = fmt.Errorf("cluster %s is not set up for joining: %w", cluster, core.ErrNotFound)
	}
	return rt, err
}

// clusterState reads a cluster (by id or name) and the joiner's state of
// it in one snapshot.
func (s *Service) clusterState(ref string) (c core.Cluster, rt core.JoinState, err error) {
	err = s.store.View(func(tx core.Tx) error {
		if c, err = clusters.ByRef(tx, ref); err != nil {
			return err
		}
		rt, err = joinState(tx, c.ID)
		return err
	})
	return c, rt, err
}
