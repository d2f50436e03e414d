// Package clusters is the domain service for Kubernetes versions and
// clusters, shared by every front end (the CloudStack-compatible API, the
// REST API and, through them, the CLI). It owns CloudStack's rules and state
// machine, persists every state change, and runs the slow part of each
// operation as an asynchronous job whose record survives restarts.
//
// Cluster operations drive the joiner through the Membership interface. The
// defined effect of each operation on membership and tokens:
//
//	create   Created -> Starting: Provision allocates the cluster CA
//	         and join tokens; devices then join over time, up to the desired
//	         size (controlnodes + size). Provision failing leaves Error.
//	scale    the desired size changes; Resize admits waiting devices or marks
//	         surplus members leaving. Created/Stopped clusters only change the
//	         record (a Stopped cluster may change its offering, not its size).
//	upgrade  Running -> Upgrading -> Running: SetVersion tells every member the
//	         Kubernetes version (and binaries ISO) to run.
//	stop     Running -> Stopping -> Stopped: Stop suspends the cluster's join
//	         tokens, so no device joins; existing members are kept as they are.
//	start    Stopped -> Starting -> Running (or Alert -> Recovering -> Running):
//	         Start re-enables the tokens and admits waiting devices up to size.
//	delete   -> Destroying -> Destroyed: Destroy revokes every token, moves
//	         every membership to left and destroys the CA key; the record is
//	         then removed, freeing the name. With DeleteOptions.Force a
//	         ForceDestroyer goes on when its members could not be taken off
//	         their nodes, and the job names them (abandoned).
//
// The joiner is built first and handed to New. Without one (nil: tests and
// tools that only need the records) the same transitions happen on the
// records alone; Kubeconfig fails with "cluster CA not provisioned" and the
// device and token operations, which are the joiner's, fail as unavailable.
//
// Tenancy: a cluster belongs to the account of the key that created it
// (core.ClusterAccount). A non-admin caller sees and operates only its
// account's clusters; any other is reported exactly like one that does not
// exist. Admins may operate on every cluster and list them all with
// ClusterFilter.ListAll (CloudStack's listall=true). Every accepted write
// appends an "api.write" event naming the key, its name and account.
package clusters

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// Membership is how cluster operations drive the joiner (PKI, tokens,
// memberships). Each method must be idempotent: a retried operation calls it
// again with the same cluster.
type Membership interface {
	// Provision allocates the cluster CA and its join tokens.
	Provision(ctx context.Context, c core.Cluster) error
	// Resize applies a changed desired size (c.Size workers, c.ControlNodes
	// control-plane nodes): admit waiting devices or mark surplus members leaving.
	Resize(ctx context.Context, c core.Cluster) error
	// SetVersion tells the cluster's members to run v; c.VersionID is v.ID.
	SetVersion(ctx context.Context, c core.Cluster, v core.Version) error
	// Stop suspends the cluster's join tokens; members are kept.
	Stop(ctx context.Context, c core.Cluster) error
	// Start re-enables the join tokens and admits waiting devices up to size.
	Start(ctx context.Context, c core.Cluster) error
	// Destroy revokes the tokens, moves memberships to left and destroys the CA key.
	Destroy(ctx context.Context, c core.Cluster) error
	// Kubeconfig issues a kubeconfig for the cluster: a client certificate
	// from the cluster CA for req.User in group req.Group, valid for
	// req.Validity, with the binding that makes the group cluster-admin.
	Kubeconfig(ctx context.Context, c core.Cluster, req KubeconfigRequest) (IssuedKubeconfig, error)
	// Approve admits a waiting device, into clusterID when not empty.
	Approve(ctx context.Context, deviceID, clusterID string) (core.Device, error)
	// ResetDevice ends a device's membership and revokes its credentials,
	// so that its next fetch is issued join material again (a re-install).
	ResetDevice(ctx context.Context, deviceID string) (core.Device, error)
	// RevokeToken revokes one join token by its ID.
	RevokeToken(ctx context.Context, tokenID string) error
}

// ForceDestroyer is a Membership whose Destroy first takes the cluster's
// members out of it on their nodes (the app's: a remove rollout), and
// fails when that fails. DestroyForce still tries that, but when it fails
// destroys the cluster all the same and returns the members it could not
// take out; its error is only the destruction's own. The clusters service
// calls it for a delete with DeleteOptions.Force; a Membership without it
// gets Destroy.
type ForceDestroyer interface {
	DestroyForce(ctx context.Context, c core.Cluster) (abandoned []core.AbandonedNode, err error)
}

// NamedRemover takes the named worker members out of a cluster (a
// scale-down with CloudStack's nodeids); c.Size is already the new size.
type NamedRemover interface {
	RemoveMembers(ctx context.Context, c core.Cluster, devices []string) error
}

// ImageRemover deletes a binaries ISO from the image store (deleteiso=true).
type ImageRemover interface {
	Remove(ref string) (core.Image, error)
}

// Caller is who asks for an operation (the one caller type of every
// service, defined in core so services below clusters take it too).
type Caller = core.Caller

// LocalAdmin is the caller of operations made through the admin socket.
var LocalAdmin = Caller{APIKey: "local", Name: "local-admin", Account: core.AdminAccount, Admin: true}

// KubeconfigGroup is the group (certificate O) of every kubeconfig ztpd
// issues; ztpd binds it to the cluster-admin ClusterRole in each cluster
// (not system:masters, which nothing can take away), so deleting that
// binding cuts off every kubeconfig ztpd ever issued for the cluster.
const KubeconfigGroup = "ztpd:cluster-admins"

// KubeconfigRequest says whom a kubeconfig is for.
type KubeconfigRequest struct {
	User     string // certificate CN
	Group    string // certificate O
	Validity time.Duration
}

// IssuedKubeconfig is a kubeconfig and what identifies its certificate.
type IssuedKubeconfig struct {
	Config   []byte
	User     string
	Group    string
	Serial   string // hex
	NotAfter time.Time
}

// kubeconfigUser is the certificate CN for a caller: the key's name, else
// its API key; a system: name (Kubernetes' own identities, refused for new
// keys) is prefixed so it cannot pose as one.
func kubeconfigUser(c Caller) string {
	u := c.Name
	if u == "" {
		u = "apikey:" + c.APIKey
	}
	if strings.HasPrefix(strings.ToLower(u), "system:") {
		u = "ztpd:" + u
	}
	if len(u) > 64 { // the most a certificate's CN may hold
		u = u[:64]
	}
	return u
}

// appendWrite records an accepted API write with who asked for it.
func appendWrite(tx core.Tx, caller Caller, command, cluster, device, message string, extra map[string]string) error {
	f := caller.AuditFields()
	f["command"] = command
	for k, v := range extra {
		f[k] = v
	}
	_, err := tx.Events().Append(core.Event{Type: "api.write", Cluster: cluster, Device: device, Message: message, Fields: f})
	return err
}

// Options configure the Service.
type Options struct {
	Log *slog.Logger
	// OpTimeout bounds each Membership call of a job. Default 2 minutes.
	OpTimeout time.Duration
	// JobRetention is how long finished jobs stay queryable. Default 7 days.
	JobRetention time.Duration
	// Images removes ISOs for deleteKubernetesSupportedVersion&deleteiso=true.
	Images ImageRemover
	// KubeconfigTTL is how long issued kubeconfigs are valid. Default 24h.
	KubeconfigTTL time.Duration
	// AlertAfter is how long a Running cluster may be unhealthy (API server
	// not answering, fewer Ready Nodes than desired) before it moves to
	// Alert. Default 5 minutes.
	AlertAfter time.Duration
	// StartTimeout is how long a cluster may stay Starting before it moves
	// to Alert (CloudStack's cloud.kubernetes.cluster.start.timeout).
	// Default 1 hour.
	StartTimeout time.Duration
	// Now is the clock the start timeout is measured by; default time.Now.
	Now func() time.Time
	// Appliance names this appliance when several share the store: its
	// jobs carry it, and Recover touches only its own.
	Appliance string
	// CNI applies clusters' CNI configurations through their API servers
	// (nil: they are recorded, never applied).
	CNI ManifestApplier
	// Profiles are the loaded profiles a node template may name (nil:
	// node templates are refused).
	Profiles ProfileCatalog
}

// Service is the clusters and versions domain service.
type Service struct {
	st   core.Store
	log  *slog.Logger
	opts Options

	mem Membership // the joiner; nil: records only

	zone   Zone
	domain Domain

	members memberCache // of views: see views

	ctx    context.Context
	cancel context.CancelFunc
	jobsWG sync.WaitGroup
	doneMu sync.Mutex
	done   map[string]chan struct{} // job id -> closed when the job ends

	cniApplying sync.Map // cluster id -> struct{}: a CNI apply under way
}

// New builds the Service over st, driving mem (the joiner; nil for records
// only), and makes sure the appliance's zone exists.
func New(st core.Store, mem Membership, opts Options) (*Service, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.OpTimeout <= 0 {
		opts.OpTimeout = 2 * time.Minute
	}
	if opts.JobRetention <= 0 {
		opts.JobRetention = 7 * 24 * time.Hour
	}
	if opts.KubeconfigTTL <= 0 {
		opts.KubeconfigTTL = 24 * time.Hour
	}
	if opts.AlertAfter <= 0 {
		opts.AlertAfter = 5 * time.Minute
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = time.Hour
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Service{st: st, mem: mem, log: opts.Log, opts: opts, done: map[string]chan struct{}{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	z, err := ensureZone(st)
	if err != nil {
		return nil, err
	}
	s.zone, s.domain = z, rootDomain(z)
	return s, nil
}

// viewAggregates are every repository a cluster view is read from:
// clusters, versions, memberships (with their rosters) and the member
// devices.
var viewAggregates = []core.Aggregate{core.AggClusters, core.AggVersions, core.AggMemberships, core.AggDevices}

// ViewsGeneration returns a number that changes whenever anything cluster
// views (ListClusters, GetCluster, View) are built from may have changed;
// ok is false when the store does not count writes, and then views must
// not be cached. Read it before listing: what was built from a listing
// made after reading g is current for as long as ViewsGeneration returns g.
func (s *Service) ViewsGeneration() (gen uint64, ok bool) {
	g, ok := s.st.(core.Generations)
	if !ok {
		return 0, false
	}
	return g.Generation(viewAggregates...), true
}

// Close cancels running jobs' Membership calls and waits for the jobs to
// record their outcome (bounded by ctx). A job still running when ctx ends
// stays pending and is marked failed by the next Recover.
func (s *Service) Close(ctx context.Context) error {
	s.cancel()
	ch := make(chan struct{})
	go func() { s.jobsWG.Wait(); close(ch) }()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Zone is the single availability zone ztpd presents to CloudStack clients.
func (s *Service) Zone() Zone { return s.zone }

// newUUID returns a random (version 4) UUID, the ID form CloudStack uses.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func now() time.Time { return time.Now().UTC() }
