// Package agent is ztpd's on-device agent for day-2 operations (protocol
// v1): the python3 script, its systemd service and timer, and the
// files a device receives at join to run it. The join plugin (SONiC) and
// the cloud-config (VMs) install what Files returns, then enable the timer
// (TimerUnit).
//
// The agent polls GET <url>/desired over TLS pinned to the appliance CA,
// runs the current operation's steps (hooks, kubeadm upgrade, kube reset,
// SONiC image install, reboot, join) with state kept across kills and
// reboots, and reports each step to POST <url>/report.
package agent

import (
	"bytes"
	"crypto/x509"
	_ "embed"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ztpd/ztpd/joiner/bundle"
)

// Where the agent's files go on a device.
const (
	ScriptPath  = "/usr/local/bin/ztpd-agent"
	ServicePath = "/etc/systemd/system/ztpd-agent.service"
	TimerPath   = "/etc/systemd/system/ztpd-agent.timer"
	ConfigPath  = "/etc/ztpd/agent.json"
	CAPath      = "/etc/ztpd/appliance-ca.pem"
	StateDir    = "/var/lib/ztpd-agent"
	// TimerUnit is what the installer enables (`systemctl enable --now`).
	TimerUnit = "ztpd-agent.timer"
	// DefaultInterval is the poll interval when InstallConfig leaves it zero.
	DefaultInterval = time.Minute
	// OperationTimeout is what systemd allows a run for its operation.
	OperationTimeout = 4 * time.Hour
	// LingerMax is how long a run polls on at most while ztpd asks for
	// faster polls (its device is in a running rollout). A run that ends
	// it lets the timer's overdue tick start the next at once, so the
	// bound costs a rollout nothing; it keeps a ztpd that asks for ever
	// from holding the run lock for ever. The service's TimeoutStartSec is
	// OperationTimeout + LingerMax + the interval: an operation may start
	// at the end of the polling on.
	LingerMax = time.Hour
)

//go:embed ztpd-agent.py
var script []byte

//go:embed ztpd-agent.service
var serviceUnit string

//go:embed ztpd-agent.timer
var timerUnit string

// Script is the agent (python3, standard library only).
func Script() []byte { return bytes.Clone(script) }

// InstallConfig is what one device's agent needs.
type InstallConfig struct {
	URL        string // https base URL of the agent API, e.g. https://10.99.0.1:8443/agent/v1
	Credential string // the device's agent credential (a secret)
	CAPEM      string // the appliance certificate(s) the agent pins
	Device     string // the device ID ztpd knows it by (informational)
	Interval   time.Duration
}

// config is /etc/ztpd/agent.json.
type config struct {
	URL        string `json:"url"`
	Credential string `json:"credential"`
	CAFile     string `json:"ca_file"`
	Device     string `json:"device"`
	StateDir   string `json:"state_dir"`
	Interval   int    `json:"interval"`
	LingerMax  int    `json:"linger_max"` // seconds
}

// Files are the files to install on a device for its agent: the script,
// the service and timer, the configuration (secret: it holds the
// credential) and the pinned CA. The install runs `systemctl daemon-reload`
// and `systemctl enable --now ztpd-agent.timer` after writing them.
func Files(cfg InstallConfig) ([]bundle.File, error) {
	if err := checkURL(cfg.URL); err != nil {
		return nil, err
	}
	if cfg.Credential == "" {
		return nil, errors.New("agent: credential is empty")
	}
	if strings.ContainsFunc(cfg.Credential, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
		return nil, errors.New("agent: credential has spaces or non-printable characters")
	}
	if p := checkedCA.Load(); p == nil || *p != cfg.CAPEM {
		if err := checkCA(cfg.CAPEM); err != nil {
			return nil, err
		}
		checkedCA.Store(&cfg.CAPEM)
	}
	interval := cfg.Interval
	if interval == 0 {
		interval = DefaultInterval
	}
	if interval < 10*time.Second || interval > 24*time.Hour {
		return nil, fmt.Errorf("agent: interval %v is outside 10s..24h", interval)
	}
	seconds := int(interval.Round(time.Second) / time.Second)
	doc, err := json.MarshalIndent(config{
		URL: strings.TrimRight(cfg.URL, "/"), Credential: cfg.Credential, CAFile: CAPath,
		Device: cfg.Device, StateDir: StateDir, Interval: seconds, LingerMax: int(LingerMax / time.Second),
	}, "", "  ")
	if err != nil {
		return nil, err
	}
	timer := strings.NewReplacer("@INTERVAL@", strconv.Itoa(seconds), "@JITTER@", strconv.Itoa(max(seconds/2, 1))).Replace(timerUnit)
	service := strings.ReplaceAll(serviceUnit, "@TIMEOUT@", strconv.Itoa(int((OperationTimeout+LingerMax)/time.Second)+seconds))
	return []bundle.File{
		{Path: ScriptPath, Mode: 0o755, Content: bytes.Clone(script)},
		{Path: ServicePath, Mode: 0o644, Content: []byte(service)},
		{Path: TimerPath, Mode: 0o644, Content: []byte(timer)},
		{Path: ConfigPath, Mode: 0o600, Content: append(doc, '\n'), Secret: true},
		{Path: CAPath, Mode: 0o644, Content: []byte(cfg.CAPEM)},
	}, nil
}

func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("agent: url: %w", err)
	}
	if u.Scheme != "https" || u.Hostname() == "" {
		return fmt.Errorf("agent: url %q: the agent talks only https://host", raw)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("agent: url %q: no user, query or fragment", raw)
	}
	return nil
}

// checkedCA is the CA PEM checkCA accepted last: Files runs for every
// bundle with the same certificate, and parsing it each time was 1.4 % of a
// boot storm's CPU.
var checkedCA atomic.Pointer[string]

// checkCA requires one or more PEM certificates and nothing else.
func checkCA(p string) error {
	rest := []byte(p)
	n := 0
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return fmt.Errorf("agent: CA PEM holds a %s block, want only certificates", block.Type)
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return fmt.Errorf("agent: CA PEM: %w", err)
		}
		n++
	}
	if n == 0 || strings.TrimSpace(string(rest)) != "" {
		return errors.New("agent: CA PEM is not a list of certificates")
	}
	return nil
}
