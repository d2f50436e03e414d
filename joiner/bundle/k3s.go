package bundle

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/ztpd/ztpd/joiner/tokens"
)

// K3sConfigPath is where a k3s agent reads its configuration file.
const K3sConfigPath = "/etc/rancher/k3s/config.yaml"

// K3sAgentParams describe one k3s agent's join.
type K3sAgentParams struct {
	ServerURL  string // https://host:6443
	Token      tokens.K3sToken
	NodeName   string
	NodeLabels []string // key=value
}

// K3sAgent is an agent's join material: the config file k3s reads
// (keys are its command-line flag names) and the same as the environment
// the k3s install script takes.
type K3sAgent struct {
	Config File
	Env    File
}

// RenderK3sAgent renders the agent's configuration. The token must pin the
// server CA (K10<hash>::...): the agent then checks the server before it
// sends credentials.
func RenderK3sAgent(p K3sAgentParams) (K3sAgent, error) {
	u, err := url.Parse(p.ServerURL)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.User != nil {
		// k3s itself refuses anything but https:// server URLs.
		return K3sAgent{}, fmt.Errorf("k3s server URL %q must be https://host:port", p.ServerURL)
	}
	if p.Token.CAHash() == "" {
		return K3sAgent{}, errors.New("k3s agent token pins no CA hash; ztpd hands out only K10<hash>:: tokens")
	}
	if p.NodeName != "" && !validNodeName(p.NodeName) {
		return K3sAgent{}, fmt.Errorf("k3s node name %q is not a valid node name", p.NodeName)
	}
	for _, l := range p.NodeLabels {
		if k, _, ok := strings.Cut(l, "="); !ok || k == "" || strings.ContainsAny(l, "\n\r\"'") {
			return K3sAgent{}, fmt.Errorf("k3s node label %q must be key=value", l)
		}
	}
	cfg := struct {
		Server    string   `json:"server"`
		Token     string   `json:"token"`
		NodeName  string   `json:"node-name,omitempty"`
		NodeLabel []string `json:"node-label,omitempty"`
	}{p.ServerURL, p.Token.Reveal(), p.NodeName, p.NodeLabels}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return K3sAgent{}, err
	}
	env := "K3S_URL=" + shellQuote(p.ServerURL) + "\nK3S_TOKEN=" + shellQuote(p.Token.Reveal()) + "\n"
	if p.NodeName != "" {
		env += "K3S_NODE_NAME=" + shellQuote(p.NodeName) + "\n"
	}
	return K3sAgent{
		Config: File{Path: K3sConfigPath, Mode: 0o600, Content: b, Secret: true},
		Env:    File{Path: "/etc/rancher/k3s/ztpd-agent.env", Mode: 0o600, Content: []byte(env), Secret: true},
	}, nil
}
