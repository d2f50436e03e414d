package halab

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ztpd/ztpd/internal/ha"
	"github.com/ztpd/ztpd/testenv/lab"
	"github.com/ztpd/ztpd/testenv/netns"
	"github.com/ztpd/ztpd/testenv/promtext"
	"github.com/ztpd/ztpd/testenv/testpki"
)

// The lab: a bridge namespace with one port per appliance and one for the
// fleet. Appliance i is 10.99.0.1<i>/16 (ha0) in its own namespace; the
// fleet is 10.99.0.2/16, a relay whose helper address is the link's
// broadcast, so every appliance receives every DISCOVER and REQUEST (what
// load balancing needs) and answers the relay by unicast. The pool's /24s
// are local routes in the fleet's namespace (each switch talks HTTP from
// the address it leased) and routed to the relay from every appliance.
const (
	// RelayAddr is the fleet's address, the giaddr of every relayed request.
	RelayAddr = "10.99.0.2"
	// BroadcastAddr is the relay's helper address.
	BroadcastAddr = "255.255.255.255"
	// SessionTTL is every appliance's store.session_ttl: the bound on how
	// long a dead or cut-off appliance's clients go unanswered.
	SessionTTL = 3 * time.Second
	// poolFirst is the pool's first /24 (10.99.<poolFirst>.0).
	poolFirst = 1
)

// Options says what Start builds.
type Options struct {
	// Prefix names the namespaces: <Prefix>-br (the bridge), <Prefix>-cl
	// (the fleet), <Prefix>-a<i> (appliance i). It must be unique to the
	// caller: CleanupStale removes namespaces by prefix.
	Prefix string
	// Work holds every appliance's configuration, data and ztpd.out, the
	// group's CA and the storm's profiles.
	Work string
	// Bin is the ztpd binary.
	Bin string
	// Appliances is how many `ztpd serve` the group has (1-9).
	Appliances int
	// PoolLast is the pool's last /24: 10.99.1.0 - 10.99.<PoolLast>.254
	// (default 12).
	PoolLast int
	// Clusters is how many storm profiles there are: storm-<c> matches
	// serial STORM-<c>-* (default StormClusters).
	Clusters int
	// LogLevel is every appliance's log level (default info).
	LogLevel string
	// ServerCPUs, if set, pins every appliance to these CPUs (a taskset
	// list).
	ServerCPUs string
	// Pprof serves net/http/pprof on every appliance's <ip>:6060 (see
	// Appliance.CPUProfile).
	Pprof bool
	// Logf, if set, receives what the lab did (start-up times, statuses).
	Logf func(format string, args ...any)
	// IPv6 adds the DHCPv6 lab (v6.go): appliance i's ha0 also has
	// fd99:0:a::1<i>/64 and every appliance serves Subnet6 beside the
	// IPv4 subnet; DHCPv6 clients join the bridge with AddClient6.
	IPv6 bool
}

// Appliance is one `ztpd serve` of the group.
type Appliance struct {
	Name, IP string
	// LinkLocal is ha0's link-local address (IPv6 lab): the source of
	// the appliance's DHCPv6 replies.
	LinkLocal netip.Addr
	NS        *netns.NS
	Work      string
	App       *lab.Appliance
	http      *http.Client
}

// Group is the lab: the namespaces, the appliances, the fleet's namespace.
type Group struct {
	Apps  []*Appliance
	Fleet *netns.NS // the fleet's namespace: the relay's address is local here
	Work  string

	o     Options
	br    *netns.NS
	procs []*lab.Proc
	nss   []*netns.NS // the appliances' and the fleet's
}

// Start builds the lab and starts o.Appliances appliances, and returns once
// every bucket is answered by exactly one of them. On an error what it made
// is removed again.
func Start(ctx context.Context, o Options) (_ *Group, err error) {
	if o.Appliances < 1 || o.Appliances > 9 {
		return nil, fmt.Errorf("halab: %d appliances, want 1-9", o.Appliances)
	}
	if o.PoolLast == 0 {
		o.PoolLast = 12
	}
	if o.PoolLast < poolFirst || o.PoolLast > 254 {
		return nil, fmt.Errorf("halab: pool's last /24 %d outside %d-254", o.PoolLast, poolFirst)
	}
	if o.Clusters == 0 {
		o.Clusters = StormClusters
	}
	if o.LogLevel == "" {
		o.LogLevel = "info"
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	g := &Group{Work: o.Work, o: o}
	defer func() {
		if err != nil {
			g.Close()
		}
	}()
	if g.br, err = netns.Add(o.Prefix + "-br"); err != nil {
		return nil, err
	}
	if err := g.br.IP("link", "add", "br0", "type", "bridge"); err != nil {
		return nil, err
	}
	if err := g.br.IP("link", "set", "br0", "up"); err != nil {
		return nil, err
	}
	if g.Fleet, err = g.plug("cl", RelayAddr+"/16"); err != nil {
		return nil, err
	}
	var local, via []string // `ip -batch` lines: one process per namespace, not one per route
	for i := poolFirst; i <= o.PoolLast; i++ {
		local = append(local, fmt.Sprintf("route add local 10.99.%d.0/24 dev lo", i))
		via = append(via, fmt.Sprintf("route add 10.99.%d.0/24 via %s", i, RelayAddr))
	}
	if err := ipBatch(g.Fleet, local); err != nil {
		return nil, err
	}
	for i := 1; i <= o.Appliances; i++ {
		a := &Appliance{Name: fmt.Sprintf("a%d", i), IP: fmt.Sprintf("10.99.0.1%d", i)}
		a.Work = filepath.Join(g.Work, a.Name)
		if err := os.MkdirAll(a.Work, 0o755); err != nil {
			return nil, err
		}
		addrs := a.IP + "/16"
		if o.IPv6 {
			addrs += " " + applianceAddr6(i) + "/64"
		}
		if a.NS, err = g.plug(a.Name, addrs); err != nil {
			return nil, err
		}
		if o.IPv6 {
			if a.LinkLocal, err = linkLocal(a.NS, "ha0"); err != nil {
				return nil, err
			}
		}
		if err := ipBatch(a.NS, via); err != nil {
			return nil, err
		}
		a.http = lab.NSClient(a.NS)
		a.http.Timeout = 3 * time.Second
		g.Apps = append(g.Apps, a)
	}
	if err := g.writeShared(); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	errs := make(chan error, len(g.Apps))
	for _, a := range g.Apps {
		go func(a *Appliance) {
			var err error
			a.App, err = lab.StartAppliance(sctx, a.NS, o.Bin, a.Work, g.config(a), "http://"+a.IP+":8080")
			if err != nil {
				err = fmt.Errorf("%s: %w", a.Name, err)
			} else if o.ServerCPUs != "" {
				if out, perr := lab.Pin(a.App.Proc, o.ServerCPUs); perr != nil {
					err = fmt.Errorf("%s: taskset: %v %s", a.Name, perr, out)
				}
			}
			errs <- err
		}(a)
	}
	var failed []error
	for range g.Apps {
		if err := <-errs; err != nil {
			failed = append(failed, err)
		}
	}
	if len(failed) > 0 {
		return nil, errors.Join(failed...)
	}
	start := time.Now()
	if err := g.WaitBuckets(60*time.Second, g.Apps, nil); err != nil {
		return nil, fmt.Errorf("the buckets never settled: %w\n%s", err, g.LogTails(30))
	}
	o.Logf("%d appliances up; every bucket answered once %.1fs after the last became healthy: %s",
		len(g.Apps), time.Since(start).Seconds(), g.StatusLine(g.Apps))
	return g, nil
}

// ipBatch runs `ip -n <ns> -batch -` over lines.
func ipBatch(ns *netns.NS, lines []string) error {
	if len(lines) == 0 {
		return nil
	}
	cmd := exec.Command("ip", "-n", ns.Name, "-batch", "-")
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ip -n %s -batch: %v: %s", ns.Name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// plug makes namespace <prefix>-<name> with ha0 on the bridge holding
// addrs (CIDR notation, space-separated). Duplicate address detection is
// off there, so IPv6 addresses (link-local too) are usable at once.
func (g *Group) plug(name, addrs string) (*netns.NS, error) {
	ns, err := netns.Add(g.o.Prefix + "-" + name)
	if err != nil {
		return nil, err
	}
	g.nss = append(g.nss, ns)
	if err := noDAD(ns); err != nil {
		return nil, err
	}
	port := "p" + name
	if err := netns.Veth(ns, "ha0", addrs, g.br, port, ""); err != nil {
		return nil, err
	}
	return ns, g.br.IP("link", "set", port, "master", "br0")
}

// Close stops what the lab runs (the appliances gracefully) and removes
// the namespaces.
func (g *Group) Close() {
	for _, p := range g.procs {
		p.Stop(3 * time.Second)
	}
	g.procs = nil
	for _, a := range g.Apps {
		if a.App != nil {
			a.App.Proc.Stop(10 * time.Second)
		}
	}
	for _, ns := range g.nss {
		ns.Close()
	}
	g.nss = nil
	if g.br != nil {
		g.br.Close()
		g.br = nil
	}
}

// LogTails is the last n lines of every appliance's ztpd.out, without the
// per-device state changes (what the group did, for a failure's report).
func (g *Group) LogTails(n int) string {
	var b strings.Builder
	for _, a := range g.Apps {
		out, err := os.ReadFile(filepath.Join(a.Work, "ztpd.out"))
		if err != nil {
			continue
		}
		var keep []string
		for _, l := range strings.Split(string(out), "\n") {
			if !strings.Contains(l, "device state changed") && !strings.Contains(l, "Failed to watch") {
				keep = append(keep, l)
			}
		}
		fmt.Fprintf(&b, "%s %s (tail):\n%s\n", a.Name, filepath.Join(a.Work, "ztpd.out"), TailLines(strings.Join(keep, "\n"), n))
	}
	return b.String()
}

// CleanupStale removes the namespaces named <prefix><hex pid>... of earlier
// runs whose process (an executable whose path ends in exe) is gone (a run
// killed before its cleanups), and stops what still runs inside them.
func CleanupStale(prefix, exe string) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], prefix) {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(f[0][len(prefix):], "%x", &pid); err != nil || pid == os.Getpid()&0xffff {
			continue
		}
		if procAlive(pid, exe) {
			continue
		}
		if pids, err := exec.Command("ip", "netns", "pids", f[0]).Output(); err == nil {
			for _, p := range strings.Fields(string(pids)) {
				var n int
				if _, err := fmt.Sscanf(p, "%d", &n); err == nil && n > 1 {
					_ = syscall.Kill(n, syscall.SIGKILL)
				}
			}
		}
		_ = exec.Command("ip", "netns", "del", f[0]).Run()
	}
}

// procAlive reports whether a process whose pid ends in the 16 bits
// recorded in a namespace name may still run: any process of exe whose
// pid matches keeps its namespaces.
func procAlive(pid16 int, exe string) bool {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, e := range ents {
		var p int
		if _, err := fmt.Sscanf(e.Name(), "%d", &p); err != nil || p&0xffff != pid16 {
			continue
		}
		if path, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p)); err == nil && strings.HasSuffix(path, exe) {
			return true
		}
	}
	return false
}

// writeShared writes the group's CA, every appliance's certificate (its
// address and loopback as SANs, server and client use), the shared at-rest
// key (each appliance gets a copy) and the boot storm's profiles, as
// bench/ha/appliance.sh does with openssl.
func (g *Group) writeShared() error {
	ca, err := testpki.Create(g.Work, "ztpd appliances")
	if err != nil {
		return err
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return err
	}
	for _, a := range g.Apps {
		if _, err := ca.IssueFiles(filepath.Join(a.Work, "cert.pem"), filepath.Join(a.Work, "key.pem"), a.Name,
			net.ParseIP(a.IP), net.IPv4(127, 0, 0, 1)); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(a.Work, "secret.key"), secret, 0o600); err != nil {
			return err
		}
	}
	var prof strings.Builder
	for c := 0; c < g.o.Clusters; c++ {
		fmt.Fprintf(&prof, "---\nname: storm-%02d\nmatch:\n  serial: \"STORM-%02d-*\"\nhostname: 'sw-{{ .Serial | lower }}'\ncluster: storm-%02d\nrole: sonic\n", c, c, c)
	}
	if err := os.MkdirAll(filepath.Join(g.Work, "profiles"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(g.Work, "profiles", "storm.yaml"), []byte(prof.String()), 0o644)
}

// config is appliance a's configuration: the boot storm's (bench
// bootstorm) with the store of bench/ha/appliance.sh.
func (g *Group) config(a *Appliance) string {
	debug := ""
	if g.o.Pprof {
		debug = fmt.Sprintf("debug: {pprof_addr: \"%s:6060\"}\n", a.IP)
	}
	var peers strings.Builder
	for _, m := range g.Apps {
		fmt.Fprintf(&peers, "    - {name: %s, url: \"https://%s:2380\"}\n", m.Name, m.IP)
	}
	return fmt.Sprintf(`data_dir: %[1]s/data
key_file: %[1]s/secret.key
advertise_addr: %[2]s
log: {level: %[11]s, format: json}
http: {addr: "%[2]s:8080"}
dhcp:
  interfaces: [ha0]
  relays: [{address: 10.99.0.2}] # the fleet relays from its own address
  lease_time: 1h
  subnets:
    - {name: lab, subnet: 10.99.0.0/16, interface: ha0, pools: ["10.99.%[3]d.0-10.99.%[4]d.254"], router: %[5]s}
%[13]sprofiles: [%[6]s]
joiner:
  auto_approve: [{subnets: [10.99.0.0/16], roles: [control-plane, worker]}]
events: {keep: 1000000}
store:
  backend: etcd-embedded
  name: %[7]s
  session_ttl: %[8]s
  client_url: https://127.0.0.1:2379
  peer_addr: %[2]s:8444
  tls: {cert_file: %[1]s/cert.pem, key_file: %[1]s/key.pem, ca_file: %[9]s}
  peers:
%[10]s%[12]s`, a.Work, a.IP, poolFirst, g.o.PoolLast, RelayAddr, filepath.Join(g.Work, "profiles"), a.Name, SessionTTL,
		filepath.Join(g.Work, "ca.pem"), peers.String(), g.o.LogLevel, debug, g.subnet6())
}

// Health is the group part of a's /healthz.
func (a *Appliance) Health() (ha.Status, error) {
	resp, err := a.http.Get("http://" + a.IP + ":8080/healthz")
	if err != nil {
		return ha.Status{}, err
	}
	defer resp.Body.Close()
	var body struct {
		Group *ha.Status `json:"group"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return ha.Status{}, fmt.Errorf("%s /healthz: %w", a.Name, err)
	}
	if body.Group == nil {
		return ha.Status{}, fmt.Errorf("%s /healthz has no group", a.Name)
	}
	return *body.Group, nil
}

// CPUProfile writes a's CPU profile of the next d to path (the group
// must have been started with Pprof).
func (a *Appliance) CPUProfile(path string, d time.Duration) error {
	c := lab.NSClient(a.NS)
	c.Timeout = d + 30*time.Second
	resp, err := c.Get(fmt.Sprintf("http://%s:6060/debug/pprof/profile?seconds=%d", a.IP, int(d.Seconds())))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s pprof: HTTP %d", a.Name, resp.StatusCode)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Primaries counts the buckets whose primary is a (its share when all are
// alive).
func (g *Group) Primaries(a *Appliance) int {
	names := g.Names()
	n := 0
	for b := 0; b < ha.Buckets; b++ {
		if ha.Primary(names, b) == a.Name {
			n++
		}
	}
	return n
}

// Names are the appliances' names, in order.
func (g *Group) Names() []string {
	var out []string
	for _, a := range g.Apps {
		out = append(out, a.Name)
	}
	return out
}

// Others is every appliance but a.
func (g *Group) Others(a *Appliance) []*Appliance {
	var out []*Appliance
	for _, o := range g.Apps {
		if o != a {
			out = append(out, o)
		}
	}
	return out
}

// WaitBuckets waits until the appliances of set answer every bucket
// between them (their /healthz buckets sum to 256, each sees exactly set
// live) and check, if given, holds for the statuses.
func (g *Group) WaitBuckets(limit time.Duration, set []*Appliance, check func(map[string]ha.Status) error) error {
	deadline := time.Now().Add(limit)
	var last error
	for time.Now().Before(deadline) {
		last = g.bucketsOnce(set, check)
		if last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return last
}

func (g *Group) bucketsOnce(set []*Appliance, check func(map[string]ha.Status) error) error {
	sum := 0
	sts := map[string]ha.Status{}
	var want []string
	for _, a := range set {
		want = append(want, a.Name)
	}
	for _, a := range set {
		st, err := a.Health()
		if err != nil {
			return err
		}
		if !st.Alive {
			return fmt.Errorf("%s: session not alive", a.Name)
		}
		if strings.Join(st.Live, ",") != strings.Join(want, ",") {
			return fmt.Errorf("%s sees %v live, want %v", a.Name, st.Live, want)
		}
		sum += st.Buckets
		sts[a.Name] = st
	}
	if sum != ha.Buckets {
		return fmt.Errorf("buckets answered sum to %d (%s)", sum, g.fmtStatus(sts))
	}
	if check != nil {
		return check(sts)
	}
	return nil
}

// StatusLine says how many buckets each appliance of set answers and
// which one leads the group.
func (g *Group) StatusLine(set []*Appliance) string {
	sts := map[string]ha.Status{}
	for _, a := range set {
		if st, err := a.Health(); err == nil {
			sts[a.Name] = st
		}
	}
	return g.fmtStatus(sts)
}

func (g *Group) fmtStatus(sts map[string]ha.Status) string {
	var parts []string
	for _, n := range g.Names() {
		if st, ok := sts[n]; ok {
			lead := ""
			if st.IsLeader {
				lead = " leader"
			}
			parts = append(parts, fmt.Sprintf("%s=%d buckets%s", n, st.Buckets, lead))
		}
	}
	return strings.Join(parts, ", ")
}

// Capture runs tcpdump in the fleet's namespace, writing every DHCP reply
// (UDP from port 67) to path, and returns a function that stops it and
// reports how many packets the kernel dropped.
func (g *Group) Capture(path string) (stop func() (dropped int), err error) {
	stopOne, err := g.capture(g.Fleet, "16384", path, "udp and src port 67")
	if err != nil {
		return nil, err
	}
	return func() int {
		time.Sleep(time.Second) // the last replies in flight
		return stopOne()
	}, nil
}

// capture runs tcpdump on ha0 in ns (kernel buffer bufKiB) writing what
// filter keeps to path, once it listens; stop ends it and reports the
// packets the kernel dropped.
func (g *Group) capture(ns *netns.NS, bufKiB, path, filter string) (stop func() (dropped int), err error) {
	errPath := path + ".err"
	ef, err := os.Create(errPath)
	if err != nil {
		return nil, err
	}
	defer ef.Close()
	cmd := ns.Command(context.Background(), "tcpdump", "-i", "ha0", "-n", "-U", "-B", bufKiB, "-s", "1500", "-w", path, filter)
	cmd.Stdout, cmd.Stderr = ef, ef
	p, err := lab.StartProc(cmd)
	if err != nil {
		return nil, err
	}
	g.procs = append(g.procs, p)
	for i := 0; i < 100; i++ {
		if b, _ := os.ReadFile(errPath); strings.Contains(string(b), "listening on") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return func() int {
		_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGINT)
		select {
		case <-p.Done():
		case <-time.After(5 * time.Second):
			p.Stop(time.Second)
		}
		b, _ := os.ReadFile(errPath)
		var dropped int
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "dropped by kernel") {
				fmt.Sscanf(strings.TrimSpace(line), "%d", &dropped)
			}
		}
		return dropped
	}, nil
}

// Kill ends appliance a with SIGKILL (`ip netns exec` execs ztpd in
// place: the process is ztpd itself) and waits until it is gone.
func (a *Appliance) Kill() error {
	if err := a.App.Proc.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-a.App.Proc.Done()
	return nil
}

// TailLines is the last n lines of s.
func TailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Metrics reads the unlabelled samples of a's /metrics (ztpd's and its
// embedded etcd member's; /metrics reads no store, so it answers while the
// appliance is cut off).
func (a *Appliance) Metrics() (map[string]float64, error) {
	return promtext.Unlabelled(a.http, "http://"+a.IP+":8080/metrics")
}

// RaftLeader is the appliance whose etcd member leads the cluster.
func (g *Group) RaftLeader() (*Appliance, error) {
	for i := 0; i < 50; i++ {
		for _, a := range g.Apps {
			if m, err := a.Metrics(); err == nil && m["etcd_server_is_leader"] == 1 {
				return a, nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, errors.New("no appliance's etcd member leads the cluster")
}

// Roles says which of the group's leaderships a holds.
func (g *Group) Roles(a *Appliance) string {
	var r []string
	if m, err := a.Metrics(); err == nil && m["etcd_server_is_leader"] == 1 {
		r = append(r, "etcd leader")
	}
	if st, err := a.Health(); err == nil && st.IsLeader {
		r = append(r, "group leader")
	}
	if len(r) == 0 {
		return "no leader"
	}
	return strings.Join(r, ", ")
}
