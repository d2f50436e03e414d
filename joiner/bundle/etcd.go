package bundle

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// An etcd node of a cluster built with external etcd runs etcd as a
// systemd unit, its client and peer traffic on TLS with the cluster's etcd
// CA, its keys made by the node itself (their requests went with its join).
// The unit's start script starts a new etcd cluster on the first member;
// a later member adds itself through a member that answers (etcd's member
// add, authenticated by its own peer certificate) and starts with
// initial-cluster-state existing, so no member needs the others' addresses
// in advance. A restarted member finds its data directory and rejoins as
// it was.

// Where an etcd node keeps its files (kubeadm's layout for etcd's).
const (
	EtcdPKIDir          = "/etc/kubernetes/pki/etcd"
	EtcdServerCert      = EtcdPKIDir + "/server.crt"
	EtcdServerKey       = EtcdPKIDir + "/server.key"
	EtcdPeerCert        = EtcdPKIDir + "/peer.crt"
	EtcdPeerKey         = EtcdPKIDir + "/peer.key"
	EtcdMemberConfig    = "/etc/ztpd/etcd-member.json"
	EtcdStartScriptPath = "/usr/local/sbin/ztpd-etcd-start"
	EtcdUnitPath        = "/etc/systemd/system/ztpd-etcd.service"
	// EtcdUnit is the member's systemd unit.
	EtcdUnit = "ztpd-etcd.service"
	// EtcdDataDir is the member's data directory.
	EtcdDataDir = "/var/lib/etcd"
	// EtcdBinary is where the node's image puts etcd.
	EtcdBinary = "/usr/local/bin/etcd"
)

// etcdStartScript starts the member (python3, standard library).
//
//go:embed ztpd-etcd-start.py
var etcdStartScript string

// EtcdStartScript is the etcd member's start script.
func EtcdStartScript() string { return etcdStartScript }

const etcdUnit = `[Unit]
Description=etcd member of this node's Kubernetes cluster (ztpd)
Wants=network-online.target
After=network-online.target

[Service]
Type=notify
ExecStart=/usr/bin/python3 ` + EtcdStartScriptPath + `
Restart=on-failure
RestartSec=10
LimitNOFILE=65536
TimeoutStartSec=120

[Install]
WantedBy=multi-user.target
`

// EtcdMemberParams describe one etcd node's setup.
type EtcdMemberParams struct {
	// Name is the member's name (its node name) and Addr the address it
	// held when it joined, on which it serves clients (2379) and peers
	// (2380): the names its certificates carry.
	Name string
	Addr string
	// CACertPEM is the cluster's etcd CA; ServerCertPEM and PeerCertPEM
	// the member's certificates, signed for the keys it made.
	CACertPEM, ServerCertPEM, PeerCertPEM []byte
	// New: this member starts the etcd cluster. Otherwise JoinEndpoints
	// are client host:port of members that answered ztpd, through which it
	// adds itself.
	New           bool
	JoinEndpoints []string
	Report        *Report
	Agent         []File
}

// etcdMemberConfig is EtcdMemberConfig, what the start script reads.
type etcdMemberConfig struct {
	Name          string   `json:"name"`
	Addr          string   `json:"addr"`
	New           bool     `json:"new"`
	JoinEndpoints []string `json:"join_endpoints,omitempty"`
	DataDir       string   `json:"data_dir"`
}

// BuildEtcdMember checks p and builds the etcd node's files and commands.
func BuildEtcdMember(p EtcdMemberParams) (*Node, error) {
	if p.Name == "" || strings.ContainsAny(p.Name, "=, \t\r\n/") {
		return nil, fmt.Errorf("etcd member: bad name %q", p.Name)
	}
	a, err := netip.ParseAddr(p.Addr)
	if err != nil || a.Zone() != "" {
		return nil, fmt.Errorf("etcd member: address %q is no plain IP address", p.Addr)
	}
	if len(p.CACertPEM) == 0 || len(p.ServerCertPEM) == 0 || len(p.PeerCertPEM) == 0 {
		return nil, errors.New("etcd member: the etcd CA and the member's server and peer certificates are needed")
	}
	if !p.New && len(p.JoinEndpoints) == 0 {
		return nil, errors.New("etcd member: a member that does not start the cluster needs a member to join through")
	}
	for _, ep := range p.JoinEndpoints {
		if err := validateEndpoint("etcd join endpoint", ep); err != nil {
			return nil, err
		}
	}
	cfg, err := json.MarshalIndent(etcdMemberConfig{Name: p.Name, Addr: a.String(), New: p.New, JoinEndpoints: p.JoinEndpoints,
		DataDir: EtcdDataDir}, "", "  ")
	if err != nil {
		return nil, err
	}
	cc := cloudConfig{}
	cc.WriteFiles = append(cc.WriteFiles,
		writeFile{Path: EtcdPKIDir + "/ca.crt", Permissions: "0644", Owner: "root:root", Content: string(p.CACertPEM)},
		writeFile{Path: EtcdServerCert, Permissions: "0644", Owner: "root:root", Content: string(p.ServerCertPEM)},
		writeFile{Path: EtcdPeerCert, Permissions: "0644", Owner: "root:root", Content: string(p.PeerCertPEM)},
		writeFile{Path: EtcdMemberConfig, Permissions: "0644", Owner: "root:root", Content: string(cfg) + "\n"},
		writeFile{Path: EtcdStartScriptPath, Permissions: "0755", Owner: "root:root", Content: etcdStartScript, static: true},
		writeFile{Path: EtcdUnitPath, Permissions: "0644", Owner: "root:root", Content: etcdUnit, static: true},
	)
	if p.Report != nil {
		env := "ZTPD_REPORT_URL=" + shellQuote(p.Report.URL) + "\nZTPD_REPORT_TOKEN=" + shellQuote(p.Report.Token) + "\n"
		if p.Report.Pin != "" {
			env += "ZTPD_REPORT_PIN=" + shellQuote(p.Report.Pin) + "\n"
		}
		cc.WriteFiles = append(cc.WriteFiles, writeFile{Path: reportEnvPath, Permissions: "0600", Owner: "root:root", Content: env, secret: true})
	}
	for _, f := range p.Agent {
		if !strings.HasPrefix(f.Path, "/") || strings.ContainsAny(f.Path, "\n\r") {
			return nil, fmt.Errorf("etcd member: bad agent file path %q", f.Path)
		}
		cc.WriteFiles = append(cc.WriteFiles, writeFile{Path: f.Path, Permissions: fmt.Sprintf("%04o", f.Mode), Owner: "root:root", Content: string(f.Content), secret: f.Secret})
	}
	cc.RunCmd = append(cc.RunCmd, "systemctl daemon-reload", "systemctl enable --now "+EtcdUnit)
	if len(p.Agent) > 0 {
		cc.RunCmd = append(cc.RunCmd, "systemctl enable --now ztpd-agent.timer")
	}
	return &Node{cc: cc}, nil
}

// EtcdClientFiles are what the first control plane of a cluster with etcd
// nodes writes for its API server's etcd client: the etcd CA and its
// apiserver-etcd-client certificate (the key is its own, at
// EtcdAPIServerKey already). kubeadm init --upload-certs hands all three
// to the control planes that join after it.
type EtcdClientFiles struct {
	CACertPEM []byte
	CertPEM   []byte
}
