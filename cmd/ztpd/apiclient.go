package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
	"golang.org/x/term"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/app"
	"github.com/ztpd/ztpd/internal/config"
)

// apiFlags are the connection flags of the API command groups (cluster,
// version, device, token, lease).
type apiFlags struct {
	url      string
	key      string
	secret   string
	caFile   string
	insecure bool
	timeout  time.Duration
	noWait   bool
	// closers end local sessions (an in-process store) when the command
	// is done.
	closers []func() error
}

const apiFlagsHelp = `
Connection (flag, else environment, else ~/.config/ztpd/cli.yaml):
  --api-url     ZTPD_API_URL     default: https://<api.addr>; with no api.addr,
                                 http://<http.addr> on loopback, else https://<http host>:8443
  --api-key     ZTPD_API_KEY
  --secret-key  ZTPD_SECRET_KEY
  --api-ca      ZTPD_API_CA      CA or certificate to trust; <data-dir>/api-tls/cert.pem
                                 is trusted automatically for the local self-signed one
cli.yaml holds the same keys: api_url, api_key, secret_key, api_ca, insecure.
Requests are signed like CloudStack's (HMAC-SHA1, signatureversion 3, 5-minute expiry).
On the appliance itself, with no API key and no API URL given, commands go through
the data directory's admin socket (<data-dir>/ztpd.sock, mode 0600) as the local
administrator, or open the store directly when ztpd is not running.`

func addAPIFlags(cmd *cobra.Command, f *apiFlags) {
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.url, "api-url", "", "API base URL, e.g. https://10.99.0.1:8443 (env ZTPD_API_URL)")
	pf.StringVar(&f.key, "api-key", "", "API key (env ZTPD_API_KEY)")
	pf.StringVar(&f.secret, "secret-key", "", "secret key (env ZTPD_SECRET_KEY)")
	pf.StringVar(&f.caFile, "api-ca", "", "PEM certificate or CA to trust for https (env ZTPD_API_CA)")
	pf.BoolVar(&f.insecure, "insecure", false, "do not verify the server certificate")
	pf.DurationVar(&f.timeout, "wait-timeout", 10*time.Minute, "how long to wait for asynchronous jobs")
	pf.BoolVar(&f.noWait, "no-wait", false, "print the job ID instead of waiting for asynchronous jobs")
	cmd.Long += "\n" + apiFlagsHelp
	// A local session that opened the store in-process is closed when the
	// command is done (its queued records flushed, the store unlocked).
	next := cmd.PersistentPostRunE
	cmd.PersistentPostRunE = func(c *cobra.Command, args []string) error {
		var errs []error
		for _, fn := range f.closers {
			errs = append(errs, fn())
		}
		f.closers = nil
		if next != nil {
			errs = append(errs, next(c, args))
		}
		return errors.Join(errs...)
	}
}

// cliFile is ~/.config/ztpd/cli.yaml.
type cliFile struct {
	APIURL    string `yaml:"api_url"`
	APIKey    string `yaml:"api_key"`
	SecretKey string `yaml:"secret_key"`
	APICA     string `yaml:"api_ca"`
	Insecure  bool   `yaml:"insecure"`
}

func readCLIFile() (cliFile, error) {
	var f cliFile
	dir, err := os.UserConfigDir()
	if err != nil {
		return f, nil
	}
	path := filepath.Join(dir, "ztpd", "cli.yaml")
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return f, nil
	} else if err != nil {
		return f, err
	}
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
		fmt.Fprintf(os.Stderr, "ztpd: warning: %s holds a secret key and is readable by others (chmod 600 it)\n", path)
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return f, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// apiClient is the CLI's connection to the ztpd API: the client package's
// Client (over the network with a signed API key, or through the data
// directory's admin socket, which serves the same API as the local
// administrator without signatures), and how the CLI waits for jobs.
type apiClient struct {
	*client.Client
	flags *apiFlags
	opts  *rootOptions
}

// newLocalAPIClient reaches the API through the admin socket of cfg's data
// directory (mode 0600: the socket's owner only), or, when no server runs,
// through the same handlers on the store opened in-process.
func newLocalAPIClient(opts *rootOptions, f *apiFlags, cfg config.Config) (*apiClient, error) {
	// Not the appliance (no store, no socket): an API command must not
	// create an empty data directory and answer from it.
	if err := deniedDataDir(cfg.DataDir); err != nil {
		return nil, err
	}
	if !app.HasStore(cfg) && !fileExists(filepath.Join(cfg.DataDir, app.AdminSocketName)) {
		return nil, fmt.Errorf("no API credentials, and no ztpd data directory at %s to use locally: on the appliance pass --data-dir or --config; "+
			"elsewhere pass --api-url, --api-key and --secret-key (or ZTPD_API_URL, ZTPD_API_KEY, ZTPD_SECRET_KEY, ~/.config/ztpd/cli.yaml)", cfg.DataDir)
	}
	if f.noWait && !serverRunning(cfg.DataDir) {
		// Without a server the job runs inside this command, which closes
		// the store when it exits: it must wait for the job to finish.
		fmt.Fprintln(os.Stderr, "ztpd: --no-wait ignored: no server runs on "+cfg.DataDir+", so the job runs in this command and ends with it")
		f.noWait = false
	}
	hc, closeFn, err := app.AdminClient(cfg, newLogger(cfg))
	if err != nil {
		return nil, fmt.Errorf("no API credentials given, and the local admin socket of %s cannot be used: %w "+
			"(run this on the appliance as the user ztpd runs as, or pass --api-key and --secret-key)", cfg.DataDir, err)
	}
	f.closers = append(f.closers, closeFn)
	return &apiClient{Client: client.NewLocal(hc), flags: f, opts: opts}, nil
}

func firstOf(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

func newAPIClient(opts *rootOptions, f *apiFlags) (*apiClient, error) {
	if err := checkOutputFormat(opts); err != nil {
		return nil, err
	}
	file, err := readCLIFile()
	if err != nil {
		return nil, err
	}
	cfg, err := loadConfig(opts)
	if err != nil {
		return nil, err
	}
	// Where the server puts the API with this configuration: on http.addr
	// (loopback), or its own listener, with TLS off loopback.
	def := "http://" + cfg.HTTP.Addr
	if addr, useTLS := cfg.APIListener(); addr != "" {
		scheme := "http"
		if useTLS {
			scheme = "https"
		}
		host, port, _ := net.SplitHostPort(addr)
		if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
			host = "127.0.0.1"
		}
		def = scheme + "://" + net.JoinHostPort(host, port)
	}
	explicitURL := firstOf(f.url, os.Getenv("ZTPD_API_URL"), file.APIURL)
	c := &apiClient{flags: f, opts: opts, Client: client.New(firstOf(explicitURL, def),
		firstOf(f.key, os.Getenv("ZTPD_API_KEY"), file.APIKey),
		[]byte(firstOf(f.secret, os.Getenv("ZTPD_SECRET_KEY"), file.SecretKey)), nil)}
	if c.Key == "" && len(c.Secret) == 0 && explicitURL == "" {
		// On the appliance: the same API through the admin socket.
		return newLocalAPIClient(opts, f, cfg)
	}
	if c.Key == "" || len(c.Secret) == 0 {
		return nil, errors.New("no API credentials: pass --api-key and --secret-key, set ZTPD_API_KEY and ZTPD_SECRET_KEY, or write ~/.config/ztpd/cli.yaml (create a key with: ztpd apikey create --role admin); on the appliance itself, without --api-url, commands use the data directory's admin socket and need no key")
	}
	u, err := url.Parse(c.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--api-url %q: use http(s)://host:port", c.BaseURL)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if u.Scheme == "https" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: f.insecure || file.Insecure}
		ca := firstOf(f.caFile, os.Getenv("ZTPD_API_CA"), file.APICA)
		if ca == "" {
			if local := filepath.Join(cfg.DataDir, "api-tls", "cert.pem"); fileExists(local) {
				ca = local
			}
		}
		if ca != "" {
			pem, err := os.ReadFile(ca)
			if err != nil {
				return nil, fmt.Errorf("--api-ca: %w", err)
			}
			pool, _ := x509.SystemCertPool()
			if pool == nil {
				pool = x509.NewCertPool()
			}
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--api-ca %s holds no PEM certificate", ca)
			}
			tc.RootCAs = pool
		}
		tr.TLSClientConfig = tc
	}
	c.HTTP = &http.Client{Transport: tlsHinting{tr}, Timeout: time.Minute}
	return c, nil
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// tlsHint adds what to do when the server's certificate is not trusted.
func tlsHint(err error) error {
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	if errors.As(err, &ua) || errors.As(err, &hn) {
		return fmt.Errorf("%w (trust the server with --api-ca FILE, e.g. the server's <data-dir>/api-tls/cert.pem, or pass --data-dir on the server host)", err)
	}
	return err
}

// tlsHinting adds tlsHint to its transport's errors.
type tlsHinting struct{ http.RoundTripper }

func (t tlsHinting) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.RoundTripper.RoundTrip(req)
	if err != nil {
		return nil, tlsHint(err)
	}
	return resp, nil
}

// async starts an asynchronous command and waits for its job (unless
// --no-wait), showing a spinner on a terminal. It returns the job result.
func (c *apiClient) async(command string, params url.Values, what string) (json.RawMessage, string, error) {
	jobID, err := c.CSStart(command, params)
	if err != nil {
		return nil, "", err
	}
	if c.flags.noWait {
		return nil, jobID, nil
	}
	res, err := c.waitJob(command, jobID, what)
	return res, jobID, err
}

// waitJob waits for an asynchronous job (started through either API) by
// CloudStack's queryAsyncJobResult, showing a spinner on a terminal, and
// returns its result.
func (c *apiClient) waitJob(command, jobID, what string) (json.RawMessage, error) {
	var bar *progressbar.ProgressBar
	if term.IsTerminal(int(os.Stderr.Fd())) && c.opts.output != "json" {
		bar = progressbar.NewOptions(-1, progressbar.OptionSetWriter(os.Stderr), progressbar.OptionSpinnerType(14),
			progressbar.OptionSetDescription(what), progressbar.OptionClearOnFinish())
		defer bar.Finish()
	}
	deadline := time.Now().Add(c.flags.timeout)
	for delay := 100 * time.Millisecond; ; delay = min(delay*2, 2*time.Second) {
		status, result, err := c.QueryJob(jobID)
		switch {
		case status == client.JobFailed:
			return nil, fmt.Errorf("%s job %s failed: %w", command, jobID, err)
		case err != nil:
			return nil, err
		case status == client.JobSucceeded:
			return result, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s job %s still running after %s; check later with the job ID", command, jobID, c.flags.timeout)
		}
		if bar != nil {
			_ = bar.Add(1)
		}
		time.Sleep(delay)
	}
}

// printJob prints the job ID for --no-wait runs.
func printJob(opts *rootOptions, command, jobID string) error {
	return printResult(opts, os.Stdout, map[string]string{"jobid": jobID, "command": command}, func(tw *tabwriter.Writer) {
		row(tw, "job", jobID)
		row(tw, "note", "running in the background; ztpd records its outcome (queryAsyncJobResult)")
	})
}
