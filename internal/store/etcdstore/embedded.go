package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
)

// MemberConfig is one appliance's embedded etcd member (store backend
// etcd-embedded): three appliances, each running one, form the cluster.
type MemberConfig struct {
	// Name is this member's name, one of Peers' keys.
	Name string
	// Dir holds the member's data (WAL and snapshots).
	Dir string
	// Peers maps every member's name to its peer URL
	// (https://<address>:2380); this member listens on its own.
	Peers map[string]string
	// ClientURL is where the member also serves etcd's client API, for
	// etcdctl and backups (default https://127.0.0.1:2379; this process
	// itself talks to the member in memory).
	ClientURL string
	// CertFile, KeyFile and CAFile are the appliance's certificate, its
	// key and the appliances' CA: peers and clients must present a
	// certificate the CA signed (mutual TLS). Without them (tests on
	// loopback only) the member speaks plain HTTP.
	CertFile, KeyFile, CAFile string
	// Token names this cluster, so members of another never join it.
	Token string
	// MaxTxnOps and MaxRequestBytes are the member's transaction limits;
	// every member must have the same.
	MaxTxnOps       int
	MaxRequestBytes int
	// QuotaBytes is the backend's size limit (default 8 GiB).
	QuotaBytes int64
	Log        *slog.Logger
}

// Member is a running embedded etcd member and this process's client of it.
type Member struct {
	etcd   *embed.Etcd
	Client *clientv3.Client
	cfg    MemberConfig
	once   sync.Once
}

// Embedded defaults: transactions big enough for a group commit of a boot
// storm's leases and devices.
const (
	EmbeddedMaxTxnOps       = 16384
	EmbeddedMaxRequestBytes = 32 << 20
	embeddedQuota           = 8 << 30
)

// DefaultClientURL is where a member serves etcd's client API when no
// client URL is configured: loopback, https when certificates are set.
func DefaultClientURL(secure bool) string {
	if secure {
		return "https://127.0.0.1:2379"
	}
	return "http://127.0.0.1:2379"
}

func (c *MemberConfig) check() error {
	if c.Name == "" {
		return errors.New("embedded etcd: no member name")
	}
	if _, ok := c.Peers[c.Name]; !ok {
		return fmt.Errorf("embedded etcd: member %q is not among the peers (%s)", c.Name, strings.Join(names(c.Peers), ", "))
	}
	tls := c.CertFile != "" || c.KeyFile != "" || c.CAFile != ""
	if tls && (c.CertFile == "" || c.KeyFile == "" || c.CAFile == "") {
		return errors.New("embedded etcd: cert_file, key_file and ca_file go together")
	}
	for n, u := range c.Peers {
		pu, err := url.Parse(u)
		if err != nil || pu.Host == "" || (pu.Scheme != "https" && pu.Scheme != "http") {
			return fmt.Errorf("embedded etcd: peer %s: %q is not an http(s)://host:port URL", n, u)
		}
		if tls != (pu.Scheme == "https") {
			return fmt.Errorf("embedded etcd: peer %s: %q must be https:// exactly when certificates are configured", n, u)
		}
	}
	return nil
}

func names(m map[string]string) []string {
	var out []string
	for n := range m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// StartMember starts (or restarts, from Dir) this appliance's member and
// waits until it has joined a quorum or ctx ends; progress is logged while
// it waits for its peers.
func StartMember(ctx context.Context, c MemberConfig) (*Member, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.MaxTxnOps <= 0 {
		c.MaxTxnOps = EmbeddedMaxTxnOps
	}
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = EmbeddedMaxRequestBytes
	}
	if c.QuotaBytes <= 0 {
		c.QuotaBytes = embeddedQuota
	}
	if c.Token == "" {
		c.Token = "ztpd"
	}
	secure := c.CertFile != ""
	if c.ClientURL == "" {
		c.ClientURL = DefaultClientURL(secure)
	}
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Name = c.Name
	cfg.Dir = c.Dir
	peer, _ := url.Parse(c.Peers[c.Name])
	client, err := url.Parse(c.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: client URL %q: %w", c.ClientURL, err)
	}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	var ic []string
	for _, n := range names(c.Peers) {
		ic = append(ic, n+"="+c.Peers[n])
	}
	cfg.InitialCluster = strings.Join(ic, ",")
	cfg.InitialClusterToken = c.Token
	cfg.ClusterState = embed.ClusterStateFlagNew
	if !hasData(c.Dir) && len(c.Peers) > 1 {
		if cfg.ClusterState, err = peerState(c); err != nil {
			return nil, err
		}
	}
	cfg.MaxTxnOps = uint(c.MaxTxnOps)
	cfg.MaxRequestBytes = uint(c.MaxRequestBytes)
	cfg.QuotaBackendBytes = c.QuotaBytes
	// Old revisions go after an hour: long enough for any transaction or
	// backup, short enough that the backend does not grow without bound.
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = "1h"
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{filepath.Join(c.Dir, "etcd.log")}
	if secure {
		tls := transport.TLSInfo{CertFile: c.CertFile, KeyFile: c.KeyFile, TrustedCAFile: c.CAFile, ClientCertAuth: true}
		cfg.PeerTLSInfo, cfg.ClientTLSInfo = tls, tls
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd member %s: %w (its log: %s)", c.Name, err, cfg.LogOutputs[0])
	}
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	start := time.Now()
	for {
		select {
		case <-e.Server.ReadyNotify():
			c.Log.Info("etcd member ready", "member", c.Name, "cluster", cfg.InitialCluster, "after", time.Since(start).Round(time.Millisecond))
			return &Member{etcd: e, Client: v3client.New(e.Server), cfg: c}, nil
		case err := <-e.Err():
			e.Close()
			return nil, fmt.Errorf("embedded etcd member %s: %w", c.Name, err)
		case <-tick.C:
			c.Log.Info("etcd member waiting for a quorum of its peers", "member", c.Name, "peers", cfg.InitialCluster,
				"waited", time.Since(start).Round(time.Second))
		case <-ctx.Done():
			e.Close()
			return nil, fmt.Errorf("embedded etcd member %s: no quorum: %w", c.Name, ctx.Err())
		}
	}
}

// Config is what the member was started with (defaults filled in).
func (m *Member) Config() MemberConfig { return m.cfg }

// IsLeader reports whether this member is the raft leader right now.
func (m *Member) IsLeader() bool { return m.etcd.Server.Leader() == m.etcd.Server.MemberID() }

// Err delivers a fatal error of the member.
func (m *Member) Err() <-chan error { return m.etcd.Err() }

// Close stops the client and the member.
func (m *Member) Close() error {
	m.once.Do(func() {
		m.Client.Close()
		m.etcd.Close()
	})
	return nil
}
