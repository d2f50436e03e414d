package bundle

import (
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
)

// A VM's user-data is fetched in clear (CloudStack's metadata service is
// plain HTTP) and at every boot, and cloud-init runs it once per instance
// whatever it held. So with the device HTTPS listener, a VM's user-data
// carries no secret and never waits: it installs the join waiter, which
// asks ztpd's device listener, pinned to the key its user-data names,
// for the node's join data (its files and commands) until the VM is
// admitted, then writes and runs them.

// Where the join waiter lives on a VM.
const (
	JoinWaitScriptPath = "/usr/local/sbin/ztpd-join-wait"
	JoinWaitConfigPath = "/etc/ztpd/join-wait.json"
	JoinWaitUnitPath   = "/etc/systemd/system/ztpd-join-wait.service"
	// JoinWaitUnit is what the user-data starts.
	JoinWaitUnit = "ztpd-join-wait.service"
	// JoinWaitDone marks a node whose join data is installed: the waiter
	// does not run again.
	JoinWaitDone = "/var/lib/ztpd/join-data"
)

// joinWaitScript is the waiter (python3, standard library, and curl for
// the pinned connection as the SONiC join plugin does).
//
//go:embed ztpd-join-wait.py
var joinWaitScript string

// JoinWaitScript is the join waiter's script.
func JoinWaitScript() string { return joinWaitScript }

const joinWaitUnit = `[Unit]
Description=Fetch this node's join data from ztpd over pinned TLS, then join (ztpd)
Wants=network-online.target
After=network-online.target
ConditionPathExists=!` + JoinWaitDone + `

[Service]
Type=simple
ExecStart=/usr/bin/python3 ` + JoinWaitScriptPath + `
Restart=on-failure
RestartSec=30
# 3: the waiter stopped for a reason it logged (the server's key matches
# no pin, the join data was already handed out): retrying changes nothing.
RestartPreventExitStatus=3

[Install]
WantedBy=multi-user.target
`

// WaiterParams describe one VM's public user-data.
type WaiterParams struct {
	// URL is the https URL of the VM's join data on the device listener.
	URL string
	// Pins are the listener's curl --pinnedpubkey pins.
	Pins string
	// Hostname is the VM's host name ("" leaves it to cloud-init).
	Hostname string
	// EtcdKeys: the VM's cluster has etcd nodes, so the waiter makes the
	// etcd keys a role there may need and sends their requests.
	EtcdKeys bool
}

// waiterConfig is JoinWaitConfigPath.
type waiterConfig struct {
	URL      string `json:"url"`
	Pin      string `json:"pin"`
	EtcdKeys bool   `json:"etcd_keys,omitempty"`
}

// RenderWaiterCloudConfig renders the user-data of a VM that fetches its
// join data over pinned TLS: the waiter, its configuration (the URL and
// the pins, nothing secret) and its unit, started without holding up the
// boot. It is the same before and after approval, so cloud-init may run
// it at the first boot whatever ztpd decided by then.
func RenderWaiterCloudConfig(p WaiterParams) ([]byte, error) {
	u, err := url.Parse(p.URL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("waiter cloud-config: join data URL %q must be an https URL with a host", p.URL)
	}
	if !ValidPins(p.Pins) {
		return nil, fmt.Errorf("waiter cloud-config: pins %q are not sha256//<base64>[;...]", p.Pins)
	}
	cfg, err := json.MarshalIndent(waiterConfig{URL: p.URL, Pin: p.Pins, EtcdKeys: p.EtcdKeys}, "", "  ")
	if err != nil {
		return nil, err
	}
	var w yamlWriter
	w.b.Grow(len(joinWaitScript) + 2048)
	w.b.WriteString("#cloud-config\n# ztpd: this node's join data (its secrets) is fetched by " + JoinWaitUnit + "\n# over TLS pinned to the key below, once ztpd admits the node.\n")
	if p.Hostname != "" {
		w.kv(0, "hostname", p.Hostname)
		w.kvRaw(0, "preserve_hostname", "false")
	}
	w.key(0, "write_files")
	for _, f := range []writeFile{
		{Path: JoinWaitConfigPath, Permissions: "0644", Owner: "root:root", Content: string(cfg) + "\n"},
		{Path: JoinWaitScriptPath, Permissions: "0755", Owner: "root:root", Content: joinWaitScript},
		{Path: JoinWaitUnitPath, Permissions: "0644", Owner: "root:root", Content: joinWaitUnit},
	} {
		w.b.WriteString("  - ")
		w.kv(0, "path", f.Path)
		w.kv(4, "permissions", f.Permissions)
		w.kv(4, "owner", f.Owner)
		w.block(4, "content", f.Content)
	}
	w.key(0, "runcmd")
	// --no-block: cloud-init's final stage must not wait for admission.
	w.item(2, "systemctl daemon-reload")
	w.item(2, "systemctl enable --now --no-block "+JoinWaitUnit)
	return []byte(w.String()), nil
}

// ValidPins reports whether pins is one or more curl public key pins,
// "sha256//<base64 of 32 bytes>", joined by ";".
func ValidPins(pins string) bool {
	if pins == "" {
		return false
	}
	for _, p := range strings.Split(pins, ";") {
		b64, ok := strings.CutPrefix(p, "sha256//")
		if !ok {
			return false
		}
		if raw, err := base64.StdEncoding.DecodeString(b64); err != nil || len(raw) != 32 {
			return false
		}
	}
	return true
}
