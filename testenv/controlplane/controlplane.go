// Package controlplane runs a real Kubernetes control plane from the
// kubeadm configuration a ztpd first-control-plane bundle carries, without a
// kubelet: the real `kubeadm init phase` steps write the certificates (from
// the cluster CA ztpd pre-generated), kubeconfigs and static pod manifests;
// etcd, kube-apiserver and kube-controller-manager then run as processes with
// exactly the command lines kubeadm wrote into those manifests; kubeadm's
// upload-config and bootstrap-token phases and the bundle's extra manifests
// complete the cluster as `kubeadm init` would. JoinDiscovery runs a worker's
// real `kubeadm join` discovery against it.
//
// # Isolation
//
// kubeadm writes to fixed paths: /etc/kubernetes (kubeconfigs, manifests,
// and the pki directory ztpd's ClusterConfiguration names) and, for a join,
// /var/lib/kubelet. Its flags cannot redirect all of them (there is no flag
// for the static pod directory, and the init phases bootstrap admin.conf's
// ClusterRoleBinding through super-admin.conf only when --kubeconfig keeps
// its default /etc/kubernetes/admin.conf). So every kubeadm run and every
// component runs under `unshare --mount` with <dir>/etc-kubernetes bind-
// mounted on /etc/kubernetes (and <dir>/var-lib-kubelet on /var/lib/kubelet
// for a join): kubeadm's configuration and the components' flags stay
// exactly as kubeadm writes them, and each control plane has its own files.
// The only flag rewritten is etcd's --data-dir (/var/lib/etcd in kubeadm's
// manifest), which goes to <dir>/etcd-data; kube-apiserver gets a bounded
// --shutdown-watch-termination-grace-period when kubeadm's manifest sets
// none (see apiServerWatchGrace). Empty mount points
// /etc/kubernetes and /var/lib/kubelet are created on the host if missing;
// nothing is written through them outside a private mount namespace.
//
// This needs root (mount namespaces). Run it in a network namespace of its
// own (Config.Run) so the fixed ports (6443, 2379, 2380, 10257) and the
// configuration's addresses do not collide with anything else.
package controlplane

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/testenv/kubebin"
)

// Runner makes the command that runs name with args, e.g. inside a network
// namespace (netns.NS.Command). The command's PID must be the one of the
// program it ends up running (`ip netns exec` execs; it does not fork).
type Runner func(ctx context.Context, name string, args ...string) *exec.Cmd

// DialFunc dials the API server from this process, e.g. from inside the
// control plane's network namespace (see NetnsDial).
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Config describes one control plane.
type Config struct {
	Kubernetes kubebin.Set // kubeadm, kube-apiserver, kube-controller-manager
	Etcd       string      // etcd binary
	// Scheduler is the kube-scheduler binary of the same version
	// (kubebin.HollowSet.Scheduler), run from kubeadm's manifest like the
	// others. Empty: no scheduler runs, and pods stay unscheduled unless
	// they name their node (enough for kubelets that only register).
	Scheduler string

	// KubeadmConfig is the InitConfiguration and ClusterConfiguration YAML of
	// the bundle (bundle.PlanInit's KubeadmPlan.Config). Its
	// certificatesDir must lie under /etc/kubernetes.
	KubeadmConfig []byte
	// CACert and CAKey are the cluster CA ztpd generated (PEM). kubeadm
	// finds them in certificatesDir and signs every certificate with them.
	CACert, CAKey []byte
	// Manifests are applied with kubectl as the admin after init (e.g. the
	// bundle's RBAC).
	Manifests [][]byte
	// ExternalEtcd are the API server's files for a configuration with
	// etcd.external (a cluster with etcd nodes): no etcd runs here, and
	// kube-apiserver uses the etcd the configuration names.
	ExternalEtcd *ExternalEtcdFiles

	Dir string // work directory: files, etcd data, logs (Dir/logs)

	Run  Runner   // nil: exec.CommandContext (this host's network)
	Dial DialFunc // nil: net.Dialer; must reach the configuration's endpoint

	// StartTimeout bounds each wait of Start (API server ready,
	// cluster-info signed). 0: 3 minutes.
	StartTimeout time.Duration
}

// ExternalEtcdFiles are the external etcd's CA and the API server's client
// certificate and key (PEM), written where the configuration names them
// (bundle.EtcdCAFile, EtcdAPIServerCert, EtcdAPIServerKey).
type ExternalEtcdFiles struct {
	CACert, ClientCert, ClientKey []byte
}

// Components, by the names of kubeadm's static pod manifests.
const (
	Etcd              = "etcd"
	APIServer         = "kube-apiserver"
	ControllerManager = "kube-controller-manager"
	Scheduler         = "kube-scheduler"
)

// components lists the components this plane runs, in start order.
func (cp *ControlPlane) components() []string {
	cs := []string{Etcd, APIServer, ControllerManager}
	if cp.cfg.ExternalEtcd != nil {
		cs = cs[1:]
	}
	if cp.cfg.Scheduler != "" {
		cs = append(cs, Scheduler)
	}
	return cs
}

// ControlPlane is a running control plane.
type ControlPlane struct {
	cfg      Config
	etcKube  string // Dir/etc-kubernetes, bound on /etc/kubernetes
	url      string
	tokenIDs []string // bootstrap tokens that get a cluster-info signature
	client   *http.Client
	argv     map[string][]string
	runCtx   context.Context
	cancel   context.CancelFunc

	mu    sync.Mutex
	procs map[string]*component

	// StartDuration is how long Start took, from kubeadm's first phase to a
	// ready API server with cluster-info signed for every token.
	StartDuration time.Duration
}

// Check reports why a control plane cannot run here (not root, a missing
// tool), or nil.
func Check() error {
	if os.Geteuid() != 0 {
		return errors.New("controlplane: needs root (mount namespaces for kubeadm's /etc/kubernetes)")
	}
	for _, tool := range []string{"unshare", "mount", "sh", "kubectl"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("controlplane: %s is not installed", tool)
		}
	}
	return nil
}

// Start brings up the control plane and returns once the API server is
// ready, kubeadm's upload-config and bootstrap-token phases and the extra
// manifests are applied, and kube-controller-manager's bootstrapsigner has
// signed cluster-info for every signing token of the InitConfiguration.
// On error everything started is stopped again.
func Start(ctx context.Context, cfg Config) (*ControlPlane, error) {
	begin := time.Now()
	if err := Check(); err != nil {
		return nil, err
	}
	if cfg.Dir == "" || cfg.Etcd == "" || cfg.Kubernetes.Kubeadm == "" {
		return nil, errors.New("controlplane: Dir, Etcd and Kubernetes binaries are required")
	}
	if cfg.Run == nil {
		cfg.Run = exec.CommandContext
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 3 * time.Minute
	}
	ic, err := parseKubeadmConfig(cfg.KubeadmConfig)
	if err != nil {
		return nil, err
	}
	if ic.externalEtcd != (cfg.ExternalEtcd != nil) {
		return nil, errors.New("controlplane: a configuration with etcd.external needs ExternalEtcd files, and only it")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(cfg.CACert) {
		return nil, errors.New("controlplane: CACert holds no PEM certificate")
	}
	if len(cfg.CAKey) == 0 {
		return nil, errors.New("controlplane: CAKey is empty (kubeadm would make a CA of its own)")
	}
	cp := &ControlPlane{
		cfg:      cfg,
		etcKube:  filepath.Join(cfg.Dir, "etc-kubernetes"),
		tokenIDs: ic.signingTokenIDs,
		procs:    map[string]*component{},
		argv:     map[string][]string{},
	}
	cp.runCtx, cp.cancel = context.WithCancel(context.Background())
	dial := cfg.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	cp.client = &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext:       dial,
			TLSClientConfig:   &tls.Config{RootCAs: pool},
			DisableKeepAlives: true,
		},
	}
	if err := cp.start(ctx, ic); err != nil {
		cp.Stop()
		return nil, err
	}
	cp.StartDuration = time.Since(begin)
	return cp, nil
}

func (cp *ControlPlane) start(ctx context.Context, ic initConfig) error {
	cfg := cp.cfg
	pki := filepath.Join(cp.etcKube, strings.TrimPrefix(ic.certificatesDir, "/etc/kubernetes"))
	for _, d := range []string{pki, cp.logDir(), filepath.Join(cfg.Dir, "etcd-data")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if err := ensureMountPoints("/etc/kubernetes"); err != nil {
		return err
	}
	files := map[string][]byte{
		filepath.Join(pki, "ca.crt"):           cfg.CACert,
		filepath.Join(pki, "ca.key"):           cfg.CAKey,
		filepath.Join(cfg.Dir, "kubeadm.yaml"): cfg.KubeadmConfig,
	}
	if e := cfg.ExternalEtcd; e != nil {
		under := func(p string) string { return filepath.Join(cp.etcKube, strings.TrimPrefix(p, "/etc/kubernetes")) }
		files[under(bundle.EtcdCAFile)] = e.CACert
		files[under(bundle.EtcdAPIServerCert)] = e.ClientCert
		files[under(bundle.EtcdAPIServerKey)] = e.ClientKey
	}
	for p, b := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			return err
		}
	}
	kcfg := filepath.Join(cfg.Dir, "kubeadm.yaml")
	for _, phase := range [][]string{
		{"certs", "all"},
		{"kubeconfig", "all"},
		{"etcd", "local"},
		{"control-plane", "all"},
	} {
		if err := cp.kubeadm(ctx, append(append([]string{"init", "phase"}, phase...), "--config", kcfg)...); err != nil {
			return err
		}
	}
	url, err := kubeconfigServer(filepath.Join(cp.etcKube, "admin.conf"))
	if err != nil {
		return err
	}
	cp.url = url
	for _, c := range cp.components() {
		argv, err := manifestCommand(filepath.Join(cp.etcKube, "manifests", c+".yaml"))
		if err != nil {
			return err
		}
		switch c {
		case Etcd:
			argv[0] = cfg.Etcd
			argv = setFlag(argv, "data-dir", filepath.Join(cfg.Dir, "etcd-data"))
		case APIServer:
			argv[0] = cfg.Kubernetes.APIServer
			argv = withDefaultFlag(argv, "shutdown-watch-termination-grace-period", apiServerWatchGrace)
		case ControllerManager:
			argv[0] = cfg.Kubernetes.ControllerManager
		case Scheduler:
			argv[0] = cfg.Scheduler
		}
		cp.argv[c] = argv
		if err := cp.startProc(c); err != nil {
			return err
		}
	}
	if err := cp.WaitReady(ctx); err != nil {
		return err
	}
	phases := [][]string{{"upload-config", "all"}}
	if ic.certificateKey {
		phases = append(phases, []string{"upload-certs", "--upload-certs"})
	}
	phases = append(phases, []string{"bootstrap-token"})
	for _, phase := range phases {
		if err := cp.kubeadm(ctx, append(append([]string{"init", "phase"}, phase...), "--config", kcfg)...); err != nil {
			return err
		}
	}
	for i, m := range cfg.Manifests {
		p := filepath.Join(cfg.Dir, fmt.Sprintf("manifest-%02d.yaml", i))
		if err := os.WriteFile(p, m, 0o600); err != nil {
			return err
		}
		// Applied as kubeadm's deploy script does, while the cluster's
		// first watchers may create the same objects (ztpd creates its
		// admin binding once the API server answers): kubectl apply's
		// read-then-create loses that race with AlreadyExists, and a second
		// apply then updates what is there.
		out, err := cp.Kubectl(ctx, "apply", "-f", p)
		if err != nil && strings.Contains(string(out), "AlreadyExists") {
			out, err = cp.Kubectl(ctx, "apply", "-f", p)
		}
		if err != nil {
			return fmt.Errorf("controlplane: kubectl apply %s: %w\n%s", p, err, out)
		}
	}
	return cp.waitClusterInfoSigned(ctx)
}

// MarkControlPlane runs the real `kubeadm init phase mark-control-plane`
// with the plane's configuration: it labels and taints the Node named by
// nodeRegistration.name as a control plane, as `kubeadm init` does once
// the kubelet registered it (kubeadm waits for the Node to appear).
func (cp *ControlPlane) MarkControlPlane(ctx context.Context) error {
	return cp.kubeadm(ctx, "init", "phase", "mark-control-plane", "--config", filepath.Join(cp.cfg.Dir, "kubeadm.yaml"))
}

// URL is the API server's URL as the kubeconfigs name it
// (https://<controlPlaneEndpoint>).
func (cp *ControlPlane) URL() string { return cp.url }

// AdminKubeconfig is the path of kubeadm's admin.conf (group
// kubeadm:cluster-admins, bound to cluster-admin by kubeadm).
func (cp *ControlPlane) AdminKubeconfig() string {
	return filepath.Join(cp.etcKube, "admin.conf")
}

// KubernetesDir is the directory bound on /etc/kubernetes for this control
// plane (pki/, manifests/, *.conf).
func (cp *ControlPlane) KubernetesDir() string { return cp.etcKube }

// LogFile is the log of a component (Etcd, APIServer, ControllerManager) or
// of "kubeadm" and "kubectl".
func (cp *ControlPlane) LogFile(name string) string {
	return filepath.Join(cp.logDir(), name+".log")
}

// Command is the command line a component runs with: kubeadm's manifest's,
// with our binary and, for etcd, the data directory.
func (cp *ControlPlane) Command(component string) []string {
	return append([]string(nil), cp.argv[component]...)
}

func (cp *ControlPlane) logDir() string { return filepath.Join(cp.cfg.Dir, "logs") }

// Kubectl runs kubectl as the admin (through Config.Run) and returns its
// standard output; on error the output includes standard error.
func (cp *ControlPlane) Kubectl(ctx context.Context, args ...string) ([]byte, error) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		return nil, err
	}
	cmd := cp.cfg.Run(ctx, kubectl, append([]string{"--kubeconfig", cp.AdminKubeconfig()}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if err != nil {
		return append(stdout.Bytes(), stderr.Bytes()...), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return stdout.Bytes(), nil
}

// WaitReady waits until the API server answers /readyz with 200, failing
// early when a component has exited.
func (cp *ControlPlane) WaitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, cp.cfg.StartTimeout)
	defer cancel()
	var last string
	for {
		code, body, err := cp.get(ctx, "/readyz")
		if err == nil && code == http.StatusOK {
			return nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("HTTP %d: %s", code, body)
		}
		if err := cp.exited(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("controlplane: API server %s not ready: %s (log %s)", cp.url, last, cp.LogFile(APIServer))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Healthy reports whether the API server answers /readyz with 200 now.
func (cp *ControlPlane) Healthy(ctx context.Context) bool {
	code, _, err := cp.get(ctx, "/readyz")
	return err == nil && code == http.StatusOK
}

// get does an anonymous GET (kubeadm's RBAC lets anyone read /readyz and
// cluster-info), verifying the server with the cluster CA.
func (cp *ControlPlane) get(ctx context.Context, path string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cp.url+path, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := cp.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, err
}

// waitClusterInfoSigned waits until kube-controller-manager's
// bootstrapsigner has added a jws-kubeconfig-<id> key to cluster-info for
// every signing token (but those with a TTL under 2 minutes), so a join
// can start at once.
func (cp *ControlPlane) waitClusterInfoSigned(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, cp.cfg.StartTimeout)
	defer cancel()
	var missing []string
	for {
		code, body, err := cp.get(ctx, "/api/v1/namespaces/kube-public/configmaps/cluster-info")
		if err == nil && code == http.StatusOK {
			var cm struct {
				Data map[string]string `json:"data"`
			}
			if err := json.Unmarshal(body, &cm); err != nil {
				return fmt.Errorf("controlplane: cluster-info: %w", err)
			}
			missing = missing[:0]
			for _, id := range cp.tokenIDs {
				if cm.Data["jws-kubeconfig-"+id] == "" {
					missing = append(missing, id)
				}
			}
			if len(missing) == 0 {
				return nil
			}
		}
		if err := cp.exited(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("controlplane: cluster-info not signed for tokens %v (bootstrapsigner; log %s)", missing, cp.LogFile(ControllerManager))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// StopAPIServer stops kube-apiserver (SIGTERM, then SIGKILL after 15 s,
// reported as an error); etcd and kube-controller-manager keep running.
func (cp *ControlPlane) StopAPIServer() error { return cp.stopProc(APIServer) }

// StartAPIServer starts kube-apiserver again with the same command line and
// waits until it is ready.
func (cp *ControlPlane) StartAPIServer(ctx context.Context) error {
	if err := cp.startProc(APIServer); err != nil {
		return err
	}
	return cp.WaitReady(ctx)
}

// RestartAPIServer stops and starts kube-apiserver.
func (cp *ControlPlane) RestartAPIServer(ctx context.Context) error {
	if err := cp.StopAPIServer(); err != nil {
		return err
	}
	return cp.StartAPIServer(ctx)
}

// Stop stops every component (scheduler, controller manager, API server,
// etcd) and waits for them to exit. It can be called more than once.
func (cp *ControlPlane) Stop() error {
	cp.mu.Lock()
	for _, c := range cp.procs {
		c.want = false // no restarts while stopping
	}
	cp.mu.Unlock()
	var errs []error
	for _, c := range slices.Backward(cp.components()) {
		if err := cp.stopProc(c); err != nil {
			errs = append(errs, err)
		}
	}
	cp.cancel()
	return errors.Join(errs...)
}

// component is one supervised component. Like the kubelet with a static
// pod, the supervisor restarts a component that exits while it is wanted
// (kube-controller-manager exits when it cannot renew its leader lease,
// e.g. while the API server is stopped), with a backoff of 1 s doubling
// up to 10 s.
type component struct {
	want     bool  // should be running
	cur      *proc // the current or last process
	exits    int   // unexpected exits
	restarts int
}

// proc is one process of a component.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, valid after done
}

func (p *proc) running() bool {
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (cp *ControlPlane) comp(name string) *component {
	c := cp.procs[name]
	if c == nil {
		c = &component{}
		cp.procs[name] = c
	}
	return c
}

func (cp *ControlPlane) startProc(name string) error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	c := cp.comp(name)
	if c.cur.running() {
		return fmt.Errorf("controlplane: %s is already running", name)
	}
	c.want = true
	return cp.spawnLocked(name, c)
}

// spawnLocked starts a process for c; cp.mu is held.
func (cp *ControlPlane) spawnLocked(name string, c *component) error {
	log, err := os.OpenFile(cp.LogFile(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "=== %s: %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(cp.argv[name], " "))
	cmd := cp.isolated(cp.runCtx, cp.binds(), cp.argv[name]...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := startCmd(cmd); err != nil {
		log.Close()
		return fmt.Errorf("controlplane: start %s: %w", name, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	c.cur = p
	go func() {
		p.err = cmd.Wait()
		fmt.Fprintf(log, "=== %s: exited: %v\n", time.Now().Format(time.RFC3339Nano), p.err)
		log.Close()
		close(p.done)
		cp.mu.Lock()
		defer cp.mu.Unlock()
		if !c.want || c.cur != p {
			return
		}
		c.exits++
		backoff := min(time.Second<<min(c.exits-1, 4), 10*time.Second)
		time.AfterFunc(backoff, func() {
			cp.mu.Lock()
			defer cp.mu.Unlock()
			if c.want && c.cur == p && cp.runCtx.Err() == nil {
				c.restarts++
				_ = cp.spawnLocked(name, c) // a failure to start shows as a stopped component
			}
		})
	}()
	return nil
}

// stopProc stops a component: SIGTERM, and SIGKILL after 15 s, which is
// an error (the component did not shut down as it should).
func (cp *ControlPlane) stopProc(name string) error {
	killed, err := cp.terminate(name, 15*time.Second)
	if err == nil && killed {
		err = fmt.Errorf("controlplane: %s ignored SIGTERM for 15 s and was killed (log %s, which a test's temporary folder does not keep; its end:)\n%s",
			name, cp.LogFile(name), tail(cp.LogFile(name), 6144))
	}
	return err
}

// terminate stops a component and keeps it stopped: SIGTERM to its process
// group, SIGKILL once grace is over. It reports whether SIGKILL was needed;
// only a process that survives SIGKILL is an error.
func (cp *ControlPlane) terminate(name string, grace time.Duration) (killed bool, err error) {
	cp.mu.Lock()
	c := cp.comp(name)
	c.want = false
	p := c.cur
	cp.mu.Unlock()
	if !p.running() {
		return false, nil
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
		return false, nil
	case <-time.After(grace):
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	select {
	case <-p.done:
		return true, nil
	case <-time.After(10 * time.Second):
		return true, fmt.Errorf("controlplane: %s (pid %d) did not exit after SIGKILL", name, pgid)
	}
}

// exited reports a component that keeps exiting (three times or more),
// with the end of its log.
func (cp *ControlPlane) exited() error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for name, c := range cp.procs {
		if c.want && c.exits >= 3 {
			return fmt.Errorf("controlplane: %s keeps exiting (%d times, last: %v): %s", name, c.exits, c.cur.err, tail(cp.LogFile(name), 2048))
		}
	}
	return nil
}

// Running lists the components whose processes are running.
func (cp *ControlPlane) Running() []string {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var out []string
	for _, name := range cp.components() {
		if c := cp.procs[name]; c != nil && c.cur.running() {
			out = append(out, name)
		}
	}
	return out
}

// PID is the process id of a running component, or 0.
func (cp *ControlPlane) PID(component string) int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if c := cp.procs[component]; c != nil && c.cur.running() {
		return c.cur.cmd.Process.Pid
	}
	return 0
}

// Restarts is how often the supervisor restarted a component after it
// exited on its own.
func (cp *ControlPlane) Restarts(component string) int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if c := cp.procs[component]; c != nil {
		return c.restarts
	}
	return 0
}

func (cp *ControlPlane) binds() []bind {
	return []bind{{cp.etcKube, "/etc/kubernetes"}}
}

// kubeadm runs one kubeadm command in the control plane's mount namespace,
// logging its output to logs/kubeadm.log.
func (cp *ControlPlane) kubeadm(ctx context.Context, args ...string) error {
	out, err := runIsolated(ctx, cp.cfg.Run, cp.binds(), append([]string{cp.cfg.Kubernetes.Kubeadm}, args...)...)
	if f, ferr := os.OpenFile(cp.LogFile("kubeadm"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); ferr == nil {
		fmt.Fprintf(f, "=== kubeadm %s\n%s", strings.Join(args, " "), out)
		f.Close()
	}
	if err != nil {
		return fmt.Errorf("controlplane: kubeadm %s: %w\n%s", strings.Join(args, " "), err, lastBytes(out, 4096))
	}
	return nil
}

func (cp *ControlPlane) isolated(ctx context.Context, binds []bind, argv ...string) *exec.Cmd {
	return isolatedCmd(ctx, cp.cfg.Run, binds, argv...)
}

// bind is a bind mount made in the private mount namespace.
type bind struct{ src, dst string }

// mountScript does the bind mounts ($2 $3, $4 $5, ... up to "--") with
// mount ($1), then execs the rest, so the final program keeps the PID.
const mountScript = `m=$1; shift
while [ "$1" != -- ]; do "$m" --bind "$1" "$2" || exit 125; shift 2; done
shift
exec "$@"`

// isolatedCmd makes the command that runs argv in a new private mount
// namespace with binds mounted, through run. The process gets a process
// group of its own (Stop signals the group) and dies with this process.
// PATH is emptied: kubeadm then finds no init system to restart a kubelet
// with, and nothing else it runs here needs one.
func isolatedCmd(ctx context.Context, run Runner, binds []bind, argv ...string) *exec.Cmd {
	unshare, _ := exec.LookPath("unshare")
	sh, _ := exec.LookPath("sh")
	mount, _ := exec.LookPath("mount")
	args := []string{"--mount", "--propagation", "private", sh, "-c", mountScript, "sh", mount}
	for _, b := range binds {
		args = append(args, b.src, b.dst)
	}
	args = append(args, "--")
	args = append(args, argv...)
	cmd := run(ctx, unshare, args...)
	cmd.Env = append(envWithout(os.Environ(), "PATH"), "PATH=/nonexistent")
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	return cmd
}

// spawnRequests carry commands to the spawner thread.
var (
	spawnOnce     sync.Once
	spawnRequests chan func()
)

// startCmd starts cmd from one OS thread that never exits. The processes
// get PR_SET_PDEATHSIG (SIGKILL), which the kernel sends when the thread
// that forked them exits, not the process; Go ends threads whenever a
// goroutine locked to one returns (netns.NS.Do does this on every dial),
// so forking from an arbitrary thread would kill components at random.
func startCmd(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnRequests = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked: this thread stays
			for f := range spawnRequests {
				f()
			}
		}()
	})
	errc := make(chan error, 1)
	spawnRequests <- func() { errc <- cmd.Start() }
	return <-errc
}

// runIsolated runs argv to completion (see isolatedCmd) and returns its
// combined output.
func runIsolated(ctx context.Context, run Runner, binds []bind, argv ...string) ([]byte, error) {
	cmd := isolatedCmd(ctx, run, binds, argv...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if cmd.Cancel != nil { // made with a context: kill the whole group when it ends
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	}
	if err := startCmd(cmd); err != nil {
		return nil, err
	}
	err := cmd.Wait()
	return out.Bytes(), err
}

func envWithout(env []string, key string) []string {
	out := env[:0:0]
	for _, e := range env {
		if !strings.HasPrefix(e, key+"=") {
			out = append(out, e)
		}
	}
	return out
}

// ensureMountPoints creates empty directories to bind-mount on, if
// missing.
func ensureMountPoints(dirs ...string) error {
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("controlplane: mount point %s: %w", d, err)
		}
	}
	return nil
}

// initConfig is what Start needs from the kubeadm configuration.
type initConfig struct {
	certificatesDir string
	signingTokenIDs []string
	certificateKey  bool
	externalEtcd    bool // etcd.external: kube-apiserver uses etcd nodes
}

func parseKubeadmConfig(b []byte) (initConfig, error) {
	var ic initConfig
	var haveInit, haveCluster bool
	for _, doc := range splitYAML(b) {
		var meta struct {
			Kind            string `json:"kind"`
			CertificatesDir string `json:"certificatesDir"`
			CertificateKey  string `json:"certificateKey"`
			Etcd            struct {
				External *struct{} `json:"external"`
			} `json:"etcd"`
			BootstrapTokens []struct {
				Token  string   `json:"token"`
				TTL    string   `json:"ttl"`
				Usages []string `json:"usages"`
			} `json:"bootstrapTokens"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return ic, fmt.Errorf("controlplane: kubeadm configuration: %w", err)
		}
		switch meta.Kind {
		case "InitConfiguration":
			haveInit = true
			ic.certificateKey = meta.CertificateKey != ""
			for _, t := range meta.BootstrapTokens {
				id, _, ok := strings.Cut(t.Token, ".")
				if !ok {
					return ic, errors.New("controlplane: InitConfiguration has a malformed bootstrap token")
				}
				// A token about to expire may be gone before Start looks.
				ttl, _ := time.ParseDuration(t.TTL)
				if ttl > 0 && ttl < 2*time.Minute {
					continue
				}
				if len(t.Usages) == 0 || slices.Contains(t.Usages, "signing") {
					ic.signingTokenIDs = append(ic.signingTokenIDs, id)
				}
			}
		case "ClusterConfiguration":
			haveCluster = true
			ic.certificatesDir = meta.CertificatesDir
			ic.externalEtcd = meta.Etcd.External != nil
		}
	}
	if !haveInit || !haveCluster {
		return ic, errors.New("controlplane: the kubeadm configuration needs an InitConfiguration and a ClusterConfiguration")
	}
	if ic.certificatesDir == "" {
		ic.certificatesDir = "/etc/kubernetes/pki"
	}
	ic.certificatesDir = filepath.Clean(ic.certificatesDir)
	if ic.certificatesDir != "/etc/kubernetes" && !strings.HasPrefix(ic.certificatesDir, "/etc/kubernetes/") {
		return ic, fmt.Errorf("controlplane: certificatesDir %q is outside /etc/kubernetes, the only directory bound per control plane", ic.certificatesDir)
	}
	return ic, nil
}

// splitYAML splits a multi-document YAML stream at "---" lines.
func splitYAML(b []byte) [][]byte {
	var docs [][]byte
	var cur []byte
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		if t := bytes.TrimRight(line, " \t\r\n"); bytes.Equal(t, []byte("---")) {
			docs = append(docs, cur)
			cur = nil
			continue
		}
		cur = append(cur, line...)
	}
	docs = append(docs, cur)
	out := docs[:0]
	for _, d := range docs {
		if len(bytes.TrimSpace(d)) > 0 {
			out = append(out, d)
		}
	}
	return out
}

// manifestCommand reads the command line of a static pod manifest's first
// container.
func manifestCommand(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("controlplane: kubeadm's manifest: %w", err)
	}
	var pod struct {
		Spec struct {
			Containers []struct {
				Command []string `json:"command"`
				Args    []string `json:"args"`
			} `json:"containers"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &pod); err != nil {
		return nil, fmt.Errorf("controlplane: %s: %w", path, err)
	}
	if len(pod.Spec.Containers) == 0 || len(pod.Spec.Containers[0].Command) == 0 {
		return nil, fmt.Errorf("controlplane: %s has no container command", path)
	}
	c := pod.Spec.Containers[0]
	return append(append([]string(nil), c.Command...), c.Args...), nil
}

// apiServerWatchGrace is kube-apiserver's
// --shutdown-watch-termination-grace-period. Without it (kubeadm sets
// none), SIGTERM closes the listener at once but the process then waits
// for the open watches (the controller manager's and kubelets' informers,
// ztpd's) to end, bounded only by its shutdown timeout: one kubectl watch
// kept it alive past 15 s while clients got "connection refused". With it,
// the server ends the watches (clients watch again) and exits in about a
// second.
const apiServerWatchGrace = "2s"

// withDefaultFlag adds --name=value to argv unless argv sets the flag.
func withDefaultFlag(argv []string, name, value string) []string {
	for _, a := range argv {
		if a == "--"+name || strings.HasPrefix(a, "--"+name+"=") {
			return argv
		}
	}
	return append(argv, "--"+name+"="+value)
}

// setFlag replaces the value of --name=... in argv (or appends it).
func setFlag(argv []string, name, value string) []string {
	prefix := "--" + name + "="
	for i, a := range argv {
		if strings.HasPrefix(a, prefix) {
			argv[i] = prefix + value
			return argv
		}
	}
	return append(argv, prefix+value)
}

// kubeconfigServer reads the server URL of a kubeconfig's first cluster.
func kubeconfigServer(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("controlplane: %w", err)
	}
	var kc struct {
		Clusters []struct {
			Cluster struct {
				Server string `json:"server"`
			} `json:"cluster"`
		} `json:"clusters"`
	}
	if err := yaml.Unmarshal(b, &kc); err != nil {
		return "", fmt.Errorf("controlplane: %s: %w", path, err)
	}
	if len(kc.Clusters) == 0 || kc.Clusters[0].Cluster.Server == "" {
		return "", fmt.Errorf("controlplane: %s names no server", path)
	}
	return strings.TrimRight(kc.Clusters[0].Cluster.Server, "/"), nil
}

// tail returns up to n bytes from the end of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return string(lastBytes(b, n))
}

func lastBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// InputsFromRoot reads the first control plane's inputs from the files its
// cloud-config wrote under root (a VM's root file system): the kubeadm
// configuration (bundle.KubeadmConfigPath), the cluster CA
// (/etc/kubernetes/pki/ca.crt, ca.key) and the manifests
// (/etc/ztpd/manifests/*.yaml, in name order), for Config's KubeadmConfig,
// CACert, CAKey and Manifests.
func InputsFromRoot(root string) (kubeadmConfig, caCert, caKey []byte, manifests [][]byte, err error) {
	read := func(p string) ([]byte, error) { return os.ReadFile(filepath.Join(root, p)) }
	if kubeadmConfig, err = read(bundle.KubeadmConfigPath); err != nil {
		return nil, nil, nil, nil, err
	}
	if caCert, err = read("/etc/kubernetes/pki/ca.crt"); err != nil {
		return nil, nil, nil, nil, err
	}
	if caKey, err = read("/etc/kubernetes/pki/ca.key"); err != nil {
		return nil, nil, nil, nil, err
	}
	paths, _ := filepath.Glob(filepath.Join(root, "etc/ztpd/manifests/*.yaml")) // the pattern is well-formed
	slices.Sort(paths)
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		manifests = append(manifests, b)
	}
	return kubeadmConfig, caCert, caKey, manifests, nil
}
