package lab

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	ztpdconfig "github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/joiner"
	"github.com/ztpd/ztpd/joiner/tokens"
	"github.com/ztpd/ztpd/testenv/kubebin"
	"github.com/ztpd/ztpd/testenv/wirecapture"
)

// TestNoSecretsOnTheWire: tcpdump on every interface of the appliance's
// namespace (its bridge, each device's port on it, the relay's uplink
// that carries subnet B, and loopback) records a whole lab run: 2 SONiC
// switches and 1 ONIE switch, 3 CloudStack VMs whose first is the real
// control plane of the cluster, the cluster's rolling upgrade to the
// newest Kubernetes, and a scale-down that takes a worker VM out. The
// capture is reassembled and scanned (testenv/wirecapture): no private
// key, bootstrap or k3s token, ztpd credential, or secret the test knows
// by value (the API server's bootstrap tokens, every secret the devices
// hold on disk, the cluster's CA key on its control plane) may cross in
// clear. A switch's enrollment reference in its ztp.json may, and is
// judged worthless to a listener instead.
func TestNoSecretsOnTheWire(t *testing.T) {
	if err := wirecapture.Available(); err != nil {
		t.Skip(err)
	}
	bin, ksim := requireLabFleet(t)
	from, to, err := UpgradeVersions()
	if err != nil {
		t.Skip(err)
	}
	kubebin.Require(t, from)
	work := t.TempDir()
	pcap := filepath.Join(work, "wire.pcap")
	var capture *wirecapture.Capture
	var log strings.Builder
	l, err := Open(context.Background(), Scenario{Switches: 2, ONIE: 1, VMs: 3, Clusters: 1, Upgrade: true},
		Options{Prefix: "zlw", Octet: 174, WorkDir: work, Bin: bin, Kubeletsim: ksim, Out: &log, Timeout: 8 * time.Minute,
			// ztpd serves and the cluster exists (created over the API's
			// TLS listener); no device has booted yet.
			OnStarted: func(l *Lab) error {
				var err error
				capture, err = wirecapture.Start(l.Topo.App, "any", pcap)
				return err
			}})
	defer func() {
		if capture != nil {
			capture.Stop()
		}
		if l != nil {
			l.Close()
		}
	}()
	t.Log("progress:\n" + tail(log.String(), 6000))
	if err != nil {
		for _, f := range []string{"ztpd.out", "agent-vm1.out", "agent-sw1.out"} {
			if b, rerr := os.ReadFile(filepath.Join(work, f)); rerr == nil {
				t.Logf("%s (tail):\n%s", f, tail(string(b), 3000))
			}
		}
		t.Fatal(err)
	}
	if l.Result.UpgradedTo != to {
		t.Fatalf("upgraded to %q, want %s", l.Result.UpgradedTo, to)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// The scale-down: vm2, a worker, taken out by name.
	c, err := l.Cluster(ctx, "lab-0")
	if err != nil {
		t.Fatal(err)
	}
	worker := l.device(t, "vm2")
	started := time.Now()
	if _, err := l.App.CloudStack(ctx, "scaleKubernetesCluster", url.Values{"id": {c.ID}, "nodeids": {worker}}); err != nil {
		t.Fatalf("scale-down taking vm2 out: %v", err)
	}
	if st := l.deviceState(ctx, t, worker); st != "left" {
		t.Fatalf("after the scale-down vm2 is %q, want left", st)
	}
	t.Logf("scale-down: vm2 left the cluster in %s", time.Since(started).Round(100*time.Millisecond))

	known := labSecrets(ctx, t, l)
	// What crossed last (the scale-down's final reports) is on the wire
	// before the capture stops.
	time.Sleep(time.Second)
	stats, err := capture.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if stats.Dropped > 0 {
		t.Fatalf("tcpdump: %d of %d packets dropped by the kernel: the capture is not the whole run", stats.Dropped, stats.Captured)
	}
	report, err := wirecapture.ScanFile(pcap, wirecapture.NewScanner(known))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("tcpdump captured %d packets; %d secrets known by value\n%s", stats.Captured, len(known), report.Table())
	if report.Conns == 0 {
		t.Fatal("the capture holds no TCP connection")
	}
	var leaks []string
	var references []wirecapture.Finding
	for _, f := range report.Findings {
		// An enrollment reference in a switch's ztp.json is what that
		// document may carry in clear: judged below.
		if f.Kind == wirecapture.EnrollmentSecret && enrollmentPlace.MatchString(wirecapture.Place(f)) {
			references = append(references, f)
			continue
		}
		leaks = append(leaks, f.String())
	}
	if len(leaks) > 0 {
		t.Errorf("%d secrets in clear on the management network:\n  %s", len(leaks), strings.Join(leaks, "\n  "))
	}
	judgeEnrollmentReferences(ctx, t, l, references)
}

// enrollmentPlace is where a switch's enrollment reference travels in
// clear: the join section of its ztp.json.
var enrollmentPlace = regexp.MustCompile(`^8080→\* HTTP response to GET /ztp/ztp\.json body$`)

// judgeEnrollmentReferences shows the enrollment references a listener
// collected from the switches' ztp.json are worth nothing to it. Each,
// replayed from another host on the management network (the relay's
// address on subnet A) while ztpd runs, is refused; then, ztpd stopped,
// its record in the store shows it was bound to the address and MAC of
// the device that held that address, lived no longer than
// joiner.enrollment_ttl, and was used at most once, and the store holds
// the enrollment.refused audit event of the replay.
func judgeEnrollmentReferences(ctx context.Context, t *testing.T, l *Lab, refs []wirecapture.Finding) {
	t.Helper()
	secrets := map[string]bool{}
	for _, f := range refs {
		secrets[f.Secret] = true
	}
	if len(secrets) == 0 {
		t.Fatal("no enrollment reference in any ztp.json on the wire: the switches joined without one?")
	}
	joinURL := "http://" + net.JoinHostPort(l.Topo.AppAddr.String(), "8080") + "/join"
	from := l.Topo.RelayUp.String()
	for secret := range secrets {
		// The MAC a listener read beside it in the same section: any
		// claim fails the same way, the address is what binds it.
		body := fmt.Sprintf(`{"enrollment":%q,"mac":"02:00:00:00:00:99"}`, secret)
		out, err := l.Topo.Relay.Command(ctx, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "20",
			"-X", "POST", "-H", "Content-Type: application/json", "--data", body, "--", joinURL).CombinedOutput()
		if err != nil {
			t.Fatalf("replaying an enrollment reference from %s: %v %s", from, err, out)
		}
		if code := strings.TrimSpace(string(out)); code != "403" {
			t.Errorf("an enrollment reference replayed from %s: HTTP %s, want 403", from, code)
		}
	}
	// The store is the appliance's, locked while it runs.
	l.App.Close()
	st, err := boltstore.Open(filepath.Join(l.Topo.WorkDir, "data"), boltstore.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("the appliance's store: %v", err)
	}
	defer st.Close()
	ttl := ztpdconfig.Default().Joiner.EnrollmentTTL.D()
	used := 0
	err = st.View(func(tx core.Tx) error {
		for secret := range secrets {
			id := strings.Split(secret, ".")[1]
			enr, err := tx.Tokens().Get(string(tokens.KindEnrollment), id)
			if err != nil {
				t.Errorf("enrollment %s seen on the wire is not in the store: %v", id, err)
				continue
			}
			dev, err := tx.Devices().Get(enr.Device)
			if err != nil {
				t.Errorf("enrollment %s names device %q: %v", id, enr.Device, err)
				continue
			}
			switch {
			case enr.BindIP == "" || enr.BindIP != dev.IP:
				t.Errorf("enrollment %s of %s is bound to address %q, want the address its device holds (%s)", id, dev.ID, enr.BindIP, dev.IP)
			case enr.BindMAC == "" || enr.BindMAC != dev.MAC:
				t.Errorf("enrollment %s of %s is bound to MAC %q, want %s", id, dev.ID, enr.BindMAC, dev.MAC)
			case enr.Expires.IsZero() || enr.Expires.Sub(enr.Created) > ttl:
				t.Errorf("enrollment %s of %s lives from %s to %s: longer than joiner.enrollment_ttl %s", id, dev.ID, enr.Created, enr.Expires, ttl)
			}
			if !enr.UsedAt.IsZero() {
				used++
			}
			refused := false
			err = tx.Events().ListDevice(core.StreamOf(joiner.EnrollmentRefused), enr.Device, 0, func(e core.Event) (bool, error) {
				refused = refused || e.Type == joiner.EnrollmentRefused && e.Fields["enrollment"] == id && e.Fields["remote"] == from
				return !refused, nil
			})
			if err != nil {
				return err
			}
			if !refused {
				t.Errorf("enrollment %s of %s replayed from %s: no %s audit event", id, dev.ID, from, joiner.EnrollmentRefused)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d enrollment references in clear (%d redeemed by their switch): each bound to its holder's address and MAC, "+
		"at most %s, refused from %s with an audit event", len(secrets), used, ttl, from)
}

// labSecrets are the secrets the test knows the run issued, by value: the
// bootstrap tokens the cluster's API server holds (kube-system Secrets),
// every secret the devices hold on disk and the control plane's keys
// (the cluster CA's among them), and the lab's own API secret key. ztpd's
// store keeps its tokens and credentials hashed and the CA keys sealed, so
// they are read where they were delivered.
func labSecrets(ctx context.Context, t *testing.T, l *Lab) []wirecapture.Secret {
	t.Helper()
	var out []wirecapture.Secret
	raw, err := l.Kubectl(ctx, "lab-0", "get", "secrets", "-n", "kube-system",
		"--field-selector", "type=bootstrap.kubernetes.io/token", "-o", "json")
	if err != nil {
		t.Fatalf("kubectl get bootstrap token secrets: %v %s", err, raw)
	}
	var list struct {
		Items []struct {
			Data map[string]string `json:"data"`
		} `json:"items"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		id, _ := base64.StdEncoding.DecodeString(s.Data["token-id"])
		secret, _ := base64.StdEncoding.DecodeString(s.Data["token-secret"])
		if len(id) > 0 && len(secret) > 0 {
			out = append(out, wirecapture.Secret{Label: "bootstrap token " + string(id) + " (API server)", Value: string(id) + "." + string(secret)})
		}
	}
	apiTokens := len(out)
	dirs := []string{filepath.Join(l.Topo.WorkDir, "devices")}
	for _, p := range l.Kube.Planes() {
		dirs = append(dirs, p.CP.KubernetesDir())
	}
	files := 0
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return nil
			}
			if info, err := d.Info(); err != nil || info.Size() > 1<<20 {
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return nil
			}
			rel, _ := filepath.Rel(l.Topo.WorkDir, path)
			found := wirecapture.SecretsIn(b)
			if len(found) > 0 {
				files++
			}
			for _, s := range found {
				out = append(out, wirecapture.Secret{Label: s.Label + " in " + rel, Value: s.Value})
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	out = append(out, wirecapture.Secret{Label: "the lab's API secret key", Value: string(l.App.secret)})
	t.Logf("known secrets: %d bootstrap tokens from the API server, %d from %d files on the devices and the control plane, the API secret key",
		apiTokens, len(out)-apiTokens-1, files)
	return out
}
