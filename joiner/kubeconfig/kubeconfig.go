// Package kubeconfig writes kubeconfig files with client-go's clientcmd, so
// the output is exactly what kubectl and kubeadm read. Only tools/clientcmd
// and its api packages are used, keeping the package graph small.
package kubeconfig

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Credentials describe a kubeconfig with one cluster, one user
// authenticated by a client certificate, and one context joining them.
type Credentials struct {
	ClusterName   string // e.g. the cluster's name; "kubernetes" when empty
	Server        string // https://host:port
	CAPEM         []byte // cluster CA certificate(s)
	UserName      string // e.g. "kubernetes-admin"
	ClientCertPEM []byte
	ClientKeyPEM  []byte
	// NotAfter and Serial (hex) describe the client certificate; they are
	// not written into the kubeconfig.
	NotAfter time.Time
	Serial   string
}

// String never shows the key.
func (c Credentials) String() string {
	return fmt.Sprintf("kubeconfig(%s@%s %s, key=<redacted>)", c.UserName, c.clusterName(), c.Server)
}

// GoString keeps %#v from printing the key.
func (c Credentials) GoString() string { return c.String() }

// MarshalJSON emits the public parts only; use Marshal for the kubeconfig.
func (c Credentials) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		ClusterName string `json:"clusterName"`
		Server      string `json:"server"`
		UserName    string `json:"userName"`
		CertPEM     string `json:"clientCertPEM"`
	}{c.clusterName(), c.Server, c.UserName, string(c.ClientCertPEM)})
}

func (c Credentials) clusterName() string {
	if c.ClusterName == "" {
		return "kubernetes"
	}
	return c.ClusterName
}

// ContextName is kubeadm's naming: "<user>@<cluster>".
func (c Credentials) ContextName() string { return c.UserName + "@" + c.clusterName() }

// Config builds the clientcmd configuration and validates it.
func (c Credentials) Config() (*clientcmdapi.Config, error) {
	u, err := url.Parse(c.Server)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("kubeconfig: server %q must be an https:// URL with a host", c.Server)
	}
	if len(c.CAPEM) == 0 {
		return nil, errors.New("kubeconfig: no CA certificate")
	}
	if c.UserName == "" || len(c.ClientCertPEM) == 0 || len(c.ClientKeyPEM) == 0 {
		return nil, errors.New("kubeconfig: user name, client certificate and key are required")
	}
	cfg := clientcmdapi.NewConfig()
	cluster := clientcmdapi.NewCluster()
	cluster.Server = c.Server
	cluster.CertificateAuthorityData = c.CAPEM
	cfg.Clusters[c.clusterName()] = cluster
	user := clientcmdapi.NewAuthInfo()
	user.ClientCertificateData = c.ClientCertPEM
	user.ClientKeyData = c.ClientKeyPEM
	cfg.AuthInfos[c.UserName] = user
	ctx := clientcmdapi.NewContext()
	ctx.Cluster = c.clusterName()
	ctx.AuthInfo = c.UserName
	cfg.Contexts[c.ContextName()] = ctx
	cfg.CurrentContext = c.ContextName()
	if err := clientcmd.Validate(*cfg); err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return cfg, nil
}

// Marshal renders the kubeconfig YAML with clientcmd.Write.
func (c Credentials) Marshal() ([]byte, error) {
	cfg, err := c.Config()
	if err != nil {
		return nil, err
	}
	return clientcmd.Write(*cfg)
}

// WriteFile writes the kubeconfig with mode 0600. It writes a temporary
// file in the same directory and renames it, so a crash never leaves a
// half-written kubeconfig and an existing file's looser mode is not kept.
func (c Credentials) WriteFile(path string) error {
	b, err := c.Marshal()
	if err != nil {
		return err
	}
	return writeFileAtomic(path, b, 0o600)
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	dir := filepath.Dir(path)
	var suffix [6]byte
	rand.Read(suffix[:])
	tmp := filepath.Join(dir, "."+filepath.Base(path)+"."+hex.EncodeToString(suffix[:])+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	_, werr := f.Write(data)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("kubeconfig: write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("kubeconfig: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
