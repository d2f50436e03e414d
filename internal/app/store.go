package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"

	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/store"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/internal/store/etcdstore"
)

// LockFileName locks the data directory of an appliance whose store is in
// etcd (a bbolt store locks its own file).
const LockFileName = "ztpd.lock"

// EtcdDirName holds the embedded etcd member's data in the data directory.
const EtcdDirName = "etcd"

// quorumWait bounds how long opening an embedded member waits for its
// peers (it logs every few seconds meanwhile).
var quorumWait = 10 * time.Minute

// OpenStore opens the configured store: the bbolt file in the data
// directory, or etcd (external, or this appliance's embedded member).
// Closing it closes the client, the member and the directory lock too.
func OpenStore(cfg config.Config, log *slog.Logger) (store.Store, error) {
	return openStore(cfg, log, false, nil)
}

// OpenEtcdForCopy opens the configured etcd store as the source or the
// destination of `ztpd store migrate`: an empty prefix is left empty.
func OpenEtcdForCopy(cfg config.Config, log *slog.Logger) (EtcdCopyStore, error) {
	if cfg.Store.Backend != store.BackendEtcd && cfg.Store.Backend != store.BackendEtcdEmbedded {
		return nil, fmt.Errorf("store.backend is %q: the configuration names no etcd store (backend etcd or etcd-embedded)", cfg.Store.Backend)
	}
	st, err := openStore(cfg, log, true, nil)
	if err != nil {
		return nil, err
	}
	return st.(*closingStore), nil
}

// EtcdCopyStore is an etcd store opened for a copy.
type EtcdCopyStore interface {
	store.Store
	Empty() (bool, error)
	Clear() (int64, error)
	Loader() *etcdstore.Loader
}

// openStore opens the configured store; its metrics register on reg (nil:
// kept, not exported).
func openStore(cfg config.Config, log *slog.Logger, forCopy bool, reg prometheus.Registerer) (store.Store, error) {
	sc := cfg.Store
	switch sc.Backend {
	case "", store.BackendBolt:
		return boltstore.Open(cfg.DataDir, boltstore.Options{Registerer: reg})
	case store.BackendEtcd, store.BackendEtcdEmbedded:
	default:
		return nil, fmt.Errorf("store.backend %q is not one of bolt, etcd, etcd-embedded", sc.Backend)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	unlock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	closers := []func() error{unlock}
	fail := func(err error) (store.Store, error) {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
		return nil, err
	}
	opts := etcdstore.Options{Prefix: sc.Prefix, Name: applianceName(sc), TempDir: cfg.DataDir, MaxTxnOps: sc.MaxTxnOps,
		Log: log.With("part", "store"), Registerer: reg}
	if g := sc.Group(); g != nil {
		opts.SequenceID = slices.Index(g, sc.Name)
	}
	switch {
	case forCopy:
		opts.Init = etcdstore.InitNone
	case sc.Backend == store.BackendEtcdEmbedded && len(sc.Peers) > 0 && sc.Peers[0].Name != sc.Name:
		// The first peer creates the store; the others wait for it, so
		// three appliances started together share one first-start state
		// (its admin key, its at-rest key fingerprint).
		opts.Init = etcdstore.InitWait
	}
	if sc.Backend == store.BackendEtcdEmbedded {
		peers := map[string]string{}
		for _, p := range sc.Peers {
			peers[p.Name] = p.URL
		}
		ctx, cancel := context.WithTimeout(context.Background(), quorumWait)
		m, err := etcdstore.StartMember(ctx, etcdstore.MemberConfig{Name: sc.Name, Dir: filepath.Join(cfg.DataDir, EtcdDirName),
			Peers: peers, ClientURL: sc.ClientURL, CertFile: sc.TLS.CertFile, KeyFile: sc.TLS.KeyFile, CAFile: sc.TLS.CAFile,
			MaxTxnOps: sc.MaxTxnOps, Log: log.With("part", "etcd")})
		cancel()
		if err != nil {
			return fail(err)
		}
		closers = append(closers, m.Close)
		opts.Client, opts.LocalMember, opts.MaxTxnOps = m.Client, true, m.Config().MaxTxnOps
	} else {
		cli, err := etcdClient(sc)
		if err != nil {
			return fail(err)
		}
		closers = append(closers, cli.Close)
		opts.Client = cli
	}
	st, err := etcdstore.Open(opts)
	if err != nil {
		return fail(err)
	}
	return &closingStore{Store: st, after: closers}, nil
}

// applianceName is store.name, or the host's name.
func applianceName(sc config.Store) string {
	if sc.Name != "" {
		return sc.Name
	}
	h, _ := os.Hostname()
	return h
}

// etcdClient connects to the external etcd cluster.
func etcdClient(sc config.Store) (*clientv3.Client, error) {
	cc := clientv3.Config{Endpoints: sc.Endpoints, DialTimeout: 5 * time.Second, DialKeepAliveTime: 10 * time.Second}
	if sc.TLS.Enabled() {
		cert, err := tls.LoadX509KeyPair(sc.TLS.CertFile, sc.TLS.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("store.tls: %w", err)
		}
		pem, err := os.ReadFile(sc.TLS.CAFile)
		if err != nil {
			return nil, fmt.Errorf("store.tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("store.tls.ca_file %s holds no PEM certificate", sc.TLS.CAFile)
		}
		cc.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	cli, err := clientv3.New(cc)
	if err != nil {
		return nil, fmt.Errorf("etcd %s: %w", strings.Join(sc.Endpoints, ","), err)
	}
	// Fail now, with the endpoints named, rather than at the first read.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Get(ctx, "health-check"); err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcd %s does not answer: %w", strings.Join(sc.Endpoints, ","), err)
	}
	return cli, nil
}

// lockDataDir takes the data directory's lock, or says who holds it.
func lockDataDir(dir string) (func() error, error) {
	path := filepath.Join(dir, LockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock data directory: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			hint := ""
			if pid := strings.TrimSpace(string(holder)); pid != "" {
				hint = " (held by pid " + pid + ")"
			}
			return nil, fmt.Errorf("%w: %s%s (stop it, or use another --data-dir)", boltstore.ErrLocked, dir, hint)
		}
		return nil, fmt.Errorf("lock data directory: %w", err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() error {
		_ = f.Truncate(0)
		return f.Close() // releases the lock
	}, nil
}

// closingStore closes what the store stands on after the store.
type closingStore struct {
	*etcdstore.Store
	after []func() error
}

func (c *closingStore) Close() error {
	errs := []error{c.Store.Close()}
	for i := len(c.after) - 1; i >= 0; i-- {
		errs = append(errs, c.after[i]())
	}
	return errors.Join(errs...)
}

// HasStore reports whether cfg names a store this host can open without
// creating one: the bbolt file exists, or the store is in etcd and the
// data directory has been set up.
func HasStore(cfg config.Config) bool {
	if cfg.Store.Backend == store.BackendEtcd || cfg.Store.Backend == store.BackendEtcdEmbedded {
		_, err := os.Stat(filepath.Join(cfg.DataDir, LockFileName))
		return err == nil
	}
	_, err := os.Stat(filepath.Join(cfg.DataDir, boltstore.FileName))
	return err == nil
}

// EtcdMemberClient connects to this appliance's embedded etcd member
// through its client URL (store.client_url) with the appliance's
// certificate, for membership commands run beside `ztpd serve`.
func EtcdMemberClient(cfg config.Config) (*clientv3.Client, error) {
	sc := cfg.Store
	if sc.Backend != store.BackendEtcdEmbedded {
		return nil, fmt.Errorf("store.backend is %q: member commands are for etcd-embedded appliances (an external etcd cluster's members are managed with etcdctl)", sc.Backend)
	}
	u := sc.ClientURL
	if u == "" {
		u = etcdstore.DefaultClientURL(sc.TLS.Enabled())
	}
	sc.Endpoints = []string{u}
	return etcdClient(sc)
}
