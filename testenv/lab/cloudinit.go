package lab

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/testenv/netns"
)

//go:embed scripts/cloudstack_datasource.py
var cloudStackDatasourcePy []byte

// CloudInitPython is the interpreter that has Debian's cloud-init (the
// package installs into the system Python, not into a pyenv on PATH).
const CloudInitPython = "/usr/bin/python3"

// HaveCloudInit reports whether Debian's cloud-init can be imported.
func HaveCloudInit() bool {
	return exec.Command(CloudInitPython, "-c", "import cloudinit.sources.DataSourceCloudStack").Run() == nil
}

// CloudInitResult is what cloud-init's CloudStack datasource read.
type CloudInitResult struct {
	InstanceID       string         `json:"instance_id"`
	AvailabilityZone string         `json:"availability_zone"`
	Metadata         map[string]any `json:"metadata"`
	PasswordConfig   map[string]any `json:"password_cfg"`
	// PasswordServer is {"answer": <password or null>} when the password
	// server (port 8080, DomU_Request) answered, {"error": ...} when not.
	PasswordServer map[string]any `json:"password_server"`
	UserData       []byte         `json:"-"`
}

// CloudInitCloudStack runs cloud-init's own CloudStack datasource in ns
// against the virtual router vr (the VM's DHCP server): the meta-data crawl,
// user-data and the password server on port 8080.
func CloudInitCloudStack(ctx context.Context, ns *netns.NS, dir, vr string) (*CloudInitResult, error) {
	work := filepath.Join(dir, "cloud-init")
	if err := os.MkdirAll(work, 0o700); err != nil {
		return nil, err
	}
	script := filepath.Join(work, "cloudstack_datasource.py")
	if err := os.WriteFile(script, cloudStackDatasourcePy, 0o700); err != nil {
		return nil, err
	}
	out, err := ns.Command(ctx, CloudInitPython, script, vr, work).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("cloud-init CloudStack datasource: %v: %s", err, tail(string(out), 1500))
	}
	b, err := os.ReadFile(filepath.Join(work, "metadata.json"))
	if err != nil {
		return nil, err
	}
	var r CloudInitResult
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("cloud-init result: %w", err)
	}
	if r.UserData, err = os.ReadFile(filepath.Join(work, "user-data")); err != nil {
		return nil, err
	}
	if _, ok := r.PasswordServer["answer"]; !ok {
		return nil, fmt.Errorf("cloud-init: the password server at %s:8080 did not answer: %v", vr, r.PasswordServer["error"])
	}
	return &r, nil
}

// CloudInitSchema runs cloud-init's own schema check on a user-data file
// (`cloud-init schema -c FILE`), as cloud-init would validate it.
func CloudInitSchema(ctx context.Context, path string) error {
	out, err := exec.CommandContext(ctx, "cloud-init", "schema", "-c", path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("cloud-init schema -c %s: %v: %s", path, err, tail(string(out), 1500))
	}
	return nil
}

// JoinWaiterOf is the join waiter's configuration a VM's public user-data
// writes: the https URL of its join data and the pins; ok is false for
// user-data without the waiter (the device HTTPS listener is off).
func JoinWaiterOf(userData []byte) (url, pins string, ok bool) {
	var cc struct {
		WriteFiles []struct {
			Path    string `yaml:"path"`
			Content string `yaml:"content"`
		} `yaml:"write_files"`
	}
	if yaml.Unmarshal(userData, &cc) != nil {
		return "", "", false
	}
	for _, f := range cc.WriteFiles {
		if f.Path != bundle.JoinWaitConfigPath {
			continue
		}
		var cfg struct {
			URL string `json:"url"`
			Pin string `json:"pin"`
		}
		if json.Unmarshal([]byte(f.Content), &cfg) != nil || cfg.URL == "" {
			return "", "", false
		}
		return cfg.URL, cfg.Pin, true
	}
	return "", "", false
}

// AskJoinData asks once for a VM's join data, as its waiter does (curl
// pinned to pins, from the VM's namespace), and returns the HTTP status.
func AskJoinData(ctx context.Context, ns *netns.NS, url, pins string) (int, error) {
	out, err := ns.Command(ctx, "curl", "-sS", "-k", "--pinnedpubkey", pins, "--max-time", "30",
		"-o", "/dev/null", "-w", "%{http_code}", "--", url).Output()
	if err != nil {
		return 0, fmt.Errorf("curl %s: %v", url, err)
	}
	return strconv.Atoi(strings.TrimSpace(string(out)))
}
