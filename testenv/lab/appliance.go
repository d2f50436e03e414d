package lab

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/ztpd/ztpd/api/client"
	ztpdconfig "github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/testenv/hermetic"
	"github.com/ztpd/ztpd/testenv/netns"
)

// Appliance is a real `ztpd serve` running in the lab's app namespace.
type Appliance struct {
	Bin     string
	DataDir string
	Config  string
	Base    string // http://<app addr>:8080
	// APIBase is where the API answers: https://<app addr>:8443 when the
	// ZTP listener is not on loopback (the API then has its own TLS
	// listener, self-signed, trusted through <data dir>/api-tls/cert.pem),
	// else Base.
	APIBase string
	Proc    *Proc

	ns     *netns.NS
	home   string // HOME of ztpd's processes: no user's ~/.config/ztpd
	http   *http.Client
	api    *http.Client
	key    string
	secret []byte
}

// NSClient is an HTTP client whose connections are opened inside ns, so a
// process in the root namespace can talk to servers in the lab.
func NSClient(ns *netns.NS) *http.Client {
	return nsClient(ns, nil)
}

// nsClient is NSClient with TLS trusting roots (nil: the system's).
func nsClient(ns *netns.NS, roots *x509.CertPool) *http.Client {
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := ns.Do(func() error {
				var d net.Dialer
				var err error
				c, err = d.DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
		MaxIdleConnsPerHost: 64,
		MaxIdleConns:        0, // no total cap: a closed idle connection costs a new namespace thread
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// StartAppliance writes config to <work>/ztpd.yaml and starts `bin serve`
// in the lab's app namespace; Close stops it with the lab.
func (t *Topology) StartAppliance(ctx context.Context, bin, config string) (*Appliance, error) {
	host := t.AppAddr.String()
	if t.Family == IPv6 {
		host = "[" + t.AppAddr6.String() + "]"
	}
	a, err := StartAppliance(ctx, t.App, bin, t.WorkDir, config, "http://"+host+":8080")
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.procs = append(t.procs, a.Proc)
	t.mu.Unlock()
	return a, nil
}

// StartAppliance starts `bin serve --config <work>/ztpd.yaml` in ns and waits
// until base answers /healthz. Its output goes to <work>/ztpd.out.
func StartAppliance(ctx context.Context, ns *netns.NS, bin, work, config, base string) (*Appliance, error) {
	a := &Appliance{Bin: bin, DataDir: filepath.Join(work, "data"), Config: filepath.Join(work, "ztpd.yaml"),
		Base: base, ns: ns, home: filepath.Join(work, "home"), http: NSClient(ns)}
	if err := os.WriteFile(a.Config, []byte(config), 0o644); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(a.home, 0o700); err != nil {
		return nil, err
	}
	logPath := filepath.Join(work, "ztpd.out")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := ns.Command(context.Background(), bin, "serve", "--config", a.Config)
	cmd.Env = hermetic.Env(a.home) // only the lab's configuration, not the host's
	cmd.Stdout, cmd.Stderr = logf, logf
	if a.Proc, err = StartProc(cmd); err != nil {
		return nil, err
	}
	cfg, err := ztpdconfig.Load(a.Config)
	if err != nil {
		return nil, err
	}
	apiAddr, apiTLS := cfg.APIListener()
	a.APIBase, a.api = a.Base, a.http
	if apiAddr != "" {
		scheme := "http"
		if apiTLS {
			scheme = "https"
		}
		a.APIBase = scheme + "://" + apiAddr
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := a.http.Get(a.Base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 && a.apiReady(cfg, apiTLS) {
				return a, nil
			}
		}
		select {
		case <-a.Proc.Done():
			log, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("ztpd exited: %v\n%s", a.Proc.Err(), tail(string(log), 2000))
		case <-ctx.Done():
			a.Close()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			a.Close()
			return nil, fmt.Errorf("ztpd not healthy after 30s")
		}
	}
}

// apiReady reports whether the API answers at APIBase, first trusting the
// self-signed certificate the server wrote into its data directory.
func (a *Appliance) apiReady(cfg ztpdconfig.Config, useTLS bool) bool {
	if a.APIBase == a.Base {
		return true
	}
	if useTLS && a.api == a.http {
		dir := cfg.DataDir
		if dir == "" {
			dir = a.DataDir
		}
		pem, err := os.ReadFile(filepath.Join(dir, "api-tls", "cert.pem"))
		if err != nil {
			return false
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return false
		}
		a.api = nsClient(a.ns, roots)
	}
	resp, err := a.api.Get(a.APIBase + "/api/v1/")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return true
}

// Close stops the appliance (SIGTERM, graceful).
func (a *Appliance) Close() { a.Proc.Stop(15 * time.Second) }

// CLI runs a ztpd subcommand against the appliance's data directory (it
// reaches the server through the admin socket) and returns stdout.
func (a *Appliance) CLI(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, a.Bin, append([]string{"--config", a.Config}, args...)...)
	cmd.Env = hermetic.Env(a.home)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("ztpd %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// UseAdminKey creates an admin API key and uses it for API calls.
func (a *Appliance) UseAdminKey(ctx context.Context) error {
	key, secret, err := a.CreateAPIKey(ctx, "admin", "lab")
	if err != nil {
		return err
	}
	a.key, a.secret = key, []byte(secret)
	return nil
}

// CreateAPIKey creates an API key of role named name with `ztpd apikey
// create` and returns it and its secret.
func (a *Appliance) CreateAPIKey(ctx context.Context, role, name string) (key, secret string, err error) {
	out, err := a.CLI(ctx, "apikey", "create", "--role", role, "--name", name, "-o", "json")
	if err != nil {
		return "", "", err
	}
	var k struct {
		APIKey    string `json:"api_key"`
		SecretKey string `json:"secret_key"`
	}
	if err := json.Unmarshal(out, &k); err != nil || k.APIKey == "" {
		return "", "", fmt.Errorf("apikey create answered %q: %v", out, err)
	}
	return k.APIKey, k.SecretKey, nil
}

// CloudStack calls a command on /client/api, signed, and returns the inner
// object of its response envelope. Async commands are polled to completion
// and their jobresult is returned.
func (a *Appliance) CloudStack(ctx context.Context, command string, params url.Values) (map[string]json.RawMessage, error) {
	inner, err := a.csOnce(ctx, command, params)
	if err != nil {
		return nil, err
	}
	raw, async := inner["jobid"]
	if !async {
		return inner, nil
	}
	var job string
	json.Unmarshal(raw, &job)
	for {
		res, err := a.csOnce(ctx, "queryAsyncJobResult", url.Values{"jobid": {job}})
		if err != nil {
			return nil, err
		}
		var status int
		json.Unmarshal(res["jobstatus"], &status)
		switch status {
		case 1:
			var out map[string]json.RawMessage
			return out, json.Unmarshal(res["jobresult"], &out)
		case 2:
			return nil, fmt.Errorf("%s failed: %s", command, res["jobresult"])
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (a *Appliance) csOnce(ctx context.Context, command string, params url.Values) (map[string]json.RawMessage, error) {
	q := url.Values{}
	for k, v := range params {
		q[k] = v
	}
	return a.APIClient().CSContext(ctx, command, q)
}

// APIClient is a client of the appliance's API signing with the lab's key.
func (a *Appliance) APIClient() *client.Client {
	return client.New(a.APIBase, a.key, a.secret, a.api)
}

// REST does a signed GET on /api/v1 and decodes the answer into out.
func (a *Appliance) REST(ctx context.Context, path string, query url.Values, out any) error {
	return a.APIClient().RESTContext(ctx, "GET", path, query, nil, out)
}

// APICLI runs a ztpd CLI command that talks to the API (token, cluster,
// ...) from the appliance's namespace, with the lab's admin key and the
// API's self-signed certificate, and returns its standard output.
func (a *Appliance) APICLI(ctx context.Context, args ...string) ([]byte, error) {
	cmd := a.ns.Command(ctx, a.Bin, append([]string{"--config", a.Config}, args...)...)
	cmd.Env = hermetic.Env(a.home, "ZTPD_API_URL="+a.APIBase, "ZTPD_API_KEY="+a.key, "ZTPD_SECRET_KEY="+string(a.secret),
		"ZTPD_API_CA="+filepath.Join(a.DataDir, "api-tls", "cert.pem"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("ztpd %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
