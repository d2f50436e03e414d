package lab

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/ztpd/ztpd/testenv/netns"
)

// DHCPLease is what a real DHCP client got, as its hook script saw it:
// dhclient's new_* variables or udhcpc's variables, keyed without prefix.
type DHCPLease map[string]string

// IP is the leased address.
func (l DHCPLease) IP() string { return l["ip_address"] }

// hookScript records the client's environment on a bound lease and
// configures the interface the way the real hook scripts do. It serves
// dhclient (reason=BOUND, new_* vars; BOUND6 for dhclient -6) and udhcpc
// ($1=bound, plain vars). An IPv4 lease flushes IPv4 addresses only: a
// dual-stack device's link-local address is what dhclient -6 sends from.
const hookScript = `#!/bin/sh
out="%s"
case "${reason:-$1}" in
BOUND|RENEW|REBIND|REBOOT)
  env | grep '^new_' | sed 's/^new_//' > "$out.tmp"
  ip -4 addr flush dev "$interface"
  ip addr add "$new_ip_address/$new_subnet_mask" dev "$interface"
  for r in $new_routers; do ip route replace default via "$r"; break; done
  mv "$out.tmp" "$out" ;;
BOUND6|RENEW6|REBIND6)
  # dhclient -6 gives a /128 (the on-link prefix comes from the routers'
  # Router Advertisements, which the lab plays: see Dhclient6).
  { env | grep '^new_' | sed 's/^new_//' ; echo "ip_address=$new_ip6_address"; } > "$out.tmp"
  ip -6 addr replace "$new_ip6_address/128" dev "$interface" nodad
  mv "$out.tmp" "$out" ;;
bound|renew)
  { env | grep -E '^(ip|subnet|router|dns|hostname|domain|serverid|lease|boottime|opt[0-9]+|bootfile|tftp|siaddr|sname|boot_file|staticroutes)=' ; echo "ip_address=$ip"; echo "server_identifier=$serverid"; echo "host_name=$hostname"; } > "$out.tmp"
  ip -4 addr flush dev "$interface"
  ip addr add "$ip/$subnet" dev "$interface"
  for r in $router; do ip route replace default via "$r"; break; done
  mv "$out.tmp" "$out" ;;
esac
exit 0
`

// SONiCDhclientConf is dhclient.conf as SONiC writes it when ZTP is on
// (sonic-buildimage files/dhcp/dhclient.conf.j2): raw-text user class and
// client id, and requests for 67, 239 and 66.
func SONiCDhclientConf(product, serial string) string {
	return fmt.Sprintf(`option rfc3442-classless-static-routes code 121 = array of unsigned integer 8;
option ztp_provisioning_script_url code 239 = text;
option ztp_json_url code 67 = text;
option snmp-community code 224 = text;
send user-class "SONiC-ZTP";
send dhcp-client-identifier "SONiC##%s##%s";
send host-name "sonic";
request subnet-mask, broadcast-address, routers, domain-name, domain-name-servers,
        domain-search, host-name, ntp-servers, log-servers, interface-mtu,
        rfc3442-classless-static-routes, tftp-server-name, ztp_json_url,
        ztp_provisioning_script_url, snmp-community;
timeout 30;
retry 2;
`, product, serial)
}

// ONIEDhclientConf asks for option 114 with ONIE's vendor class.
func ONIEDhclientConf(platform string) string {
	return fmt.Sprintf(`option onie_default_url code 114 = text;
send vendor-class-identifier "onie_vendor:%s";
request subnet-mask, routers, domain-name-servers, host-name, log-servers,
        tftp-server-name, bootfile-name, onie_default_url;
timeout 30;
retry 2;
`, platform)
}

// Dhclient runs ISC dhclient in ns on eth0 with conf until it binds, then
// stops it (the address stays configured).
func Dhclient(ctx context.Context, ns *netns.NS, dir, conf string) (DHCPLease, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cf, script, out := filepath.Join(dir, "dhclient.conf"), filepath.Join(dir, "hook.sh"), filepath.Join(dir, "lease.env")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	if err := writeHook(script, out); err != nil {
		return nil, err
	}
	cmd := ns.Command(ctx, "dhclient", "-4", "-d", "-1", "-v", "-cf", cf, "-sf", script,
		"-lf", filepath.Join(dir, "dhclient.leases"), "-pf", filepath.Join(dir, "dhclient.pid"), "eth0")
	return runUntilLease(ctx, cmd, dir, out, "dhclient")
}

// Udhcpc runs busybox udhcpc in ns on eth0 (hostname and vendor class
// optional) until it binds; -q makes it exit once bound.
func Udhcpc(ctx context.Context, ns *netns.NS, dir, hostname, vendorClass string) (DHCPLease, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	script, out := filepath.Join(dir, "hook.sh"), filepath.Join(dir, "lease.env")
	if err := writeHook(script, out); err != nil {
		return nil, err
	}
	args := []string{"udhcpc", "-f", "-q", "-n", "-t", "6", "-T", "2", "-i", "eth0", "-s", script,
		"-O", "hostname", "-O", "staticroutes"}
	if hostname != "" {
		args = append(args, "-x", "hostname:"+hostname)
	}
	if vendorClass != "" {
		args = append(args, "-V", vendorClass)
	}
	cmd := ns.Command(ctx, "busybox", args...)
	return runUntilLease(ctx, cmd, dir, out, "udhcpc")
}

// writeHook writes the hook with its output path baked in: dhclient runs
// hooks with a cleaned environment.
func writeHook(script, out string) error {
	os.Remove(out)
	return os.WriteFile(script, []byte(fmt.Sprintf(hookScript, out)), 0o755)
}

func runUntilLease(ctx context.Context, cmd *exec.Cmd, dir, out, name string) (DHCPLease, error) {
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	p, err := StartProc(cmd)
	if err != nil {
		return nil, err
	}
	defer p.Stop(2 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if l, err := readLease(out); err == nil {
			return l, nil
		}
		select {
		case <-p.Done():
			if l, rerr := readLease(out); rerr == nil {
				return l, nil
			}
			log, _ := os.ReadFile(filepath.Join(dir, name+".log"))
			return nil, fmt.Errorf("%s exited without a lease (%v): %s", name, p.Err(), tail(string(log), 600))
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: %w", name, ctx.Err())
		case <-tick.C:
		}
	}
}

func readLease(path string) (DHCPLease, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	l := DHCPLease{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if ok {
			l[k] = v
		}
	}
	if l.IP() == "" {
		return nil, fmt.Errorf("no address in %s", path)
	}
	return l, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
