package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/profile"
	"github.com/ztpd/ztpd/ztp/content"
	"github.com/ztpd/ztpd/ztp/endpoints"
)

func init() { register(newProfileCmd) }

func newProfileCmd(opts *rootOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "profile",
		Short: "Validate device profiles and preview what a device gets",
		Long: `Profiles are YAML files that match devices and say what they get: host
name, management address, SONiC image, config_db template, extra ztp.json
sections, cluster and role, cloud-init data for VMs. They are listed under
"profiles:" in the configuration (files or directories).

Precedence: higher priority first, then more match fields set, then name;
the first profile whose every match field matches wins. See
examples/profiles/ for annotated samples.`,
	}
	cmd.AddCommand(newProfileCheckCmd(opts))
	return cmd
}

type checkFlags struct {
	profiles                                                   []string
	serial, mac, product, kind, platform, ip, subnet, sonicVer string
	profileName                                                string
}

type checkResult struct {
	Profiles []string          `json:"profiles"` // in precedence order
	Device   profile.Facts     `json:"device"`
	Matched  string            `json:"matched"`
	Default  bool              `json:"default,omitempty"` // matched through ztp.default_profile
	ZTPJSON  json.RawMessage   `json:"ztp_json,omitempty"`
	ConfigDB json.RawMessage   `json:"config_db,omitempty"`
	UserData string            `json:"user_data,omitempty"`
	Metadata map[string]string `json:"meta_data,omitempty"`
	Notes    []string          `json:"notes,omitempty"`
}

func newProfileCheckCmd(opts *rootOptions) *cobra.Command {
	f := &checkFlags{}
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Validate all profiles and render them for a sample device",
		Long: `Load every profile named by the configuration (or --profiles), report
every error with its file, line, profile and field, then pick the profile
for a sample device and print the ztp.json and config_db.json it would get
(user-data and meta-data for a VM).

Device facts not given by flags come from a built-in sample switch
(serial SAMPLE0001, Accton-AS7712-32X, 192.0.2.10). Nothing is written and no
running server is needed; the image store is not consulted, so firmware URLs
name the profile's image rather than its sha256, and the joiner's section is
left out.

Exit status 1 when a profile is invalid or fails to render for the device.`,
		Example: `  ztpd profile check --config /etc/ztpd/ztpd.yaml
  ztpd profile check --profiles examples/profiles --serial LEAF0010 \
      --product Accton-AS7712-32X --ip 10.99.40.10 --sonic-version SONiC.202311.1
  ztpd profile check --profiles examples/profiles --kind vm --mac 1e:00:42:00:00:07 --ip 10.99.42.7 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutputFormat(opts); err != nil {
				return err
			}
			cfg, err := loadConfig(opts)
			if err != nil {
				return err
			}
			paths := cfg.Profiles
			if cmd.Flags().Changed("profiles") {
				paths = f.profiles
			}
			if len(paths) == 0 {
				return fmt.Errorf("no profiles: list them under \"profiles:\" in --config or pass --profiles")
			}
			set, err := profile.Load(paths)
			if err != nil {
				return err
			}
			res, err := checkProfiles(set, f, cmd, cfg.AdvertiseAddr, cfg.HTTP.Addr, cfg.ZTP.DefaultProfile)
			if err != nil {
				return err
			}
			return printResult(opts, os.Stdout, res, func(tw *tabwriter.Writer) { printCheck(tw, os.Stdout, res) })
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&f.profiles, "profiles", nil, "profile file or directory (repeatable; default: profiles of --config)")
	fl.StringVar(&f.serial, "serial", "", "device serial number")
	fl.StringVar(&f.mac, "mac", "", "device MAC address (its id)")
	fl.StringVar(&f.product, "product", "", "SONiC product name")
	fl.StringVar(&f.kind, "kind", "", "sonic, onie, vm or unknown")
	fl.StringVar(&f.platform, "platform", "", "ONIE platform, e.g. x86_64-accton_as7712_32x-r0")
	fl.StringVar(&f.ip, "ip", "", "device address")
	fl.StringVar(&f.subnet, "subnet", "", "DHCP subnet name")
	fl.StringVar(&f.sonicVer, "sonic-version", "", "SONiC-VERSION the switch reports (N.A = unknown)")
	fl.StringVar(&f.profileName, "profile", "", "render this profile instead of the matching one")
	return cmd
}

// checkProfiles previews what the described device would be served, through
// the same selection and rendering as the server (content.PreviewDevice).
func checkProfiles(set *profile.Set, f *checkFlags, cmd *cobra.Command, advertise, httpAddr, defaultProfile string) (*checkResult, error) {
	facts := profile.SampleFacts()
	set1 := func(name string, dst *string, v string) {
		if cmd.Flags().Changed(name) {
			*dst = v
		}
	}
	set1("serial", &facts.Serial, f.serial)
	set1("product", &facts.Product, f.product)
	set1("kind", &facts.Kind, f.kind)
	set1("platform", &facts.Platform, f.platform)
	set1("ip", &facts.IP, f.ip)
	set1("subnet", &facts.Subnet, f.subnet)
	set1("sonic-version", &facts.SONiCVersion, f.sonicVer)
	if cmd.Flags().Changed("mac") {
		m, err := core.NormalizeMAC(f.mac)
		if err != nil {
			return nil, err
		}
		facts.MAC, facts.ID = m, m
	}
	// The device record these facts come from (content.Facts is its inverse).
	d := core.Device{ID: facts.ID, MAC: facts.MAC, Serial: facts.Serial, Product: facts.Product, Platform: facts.Platform,
		Kind: core.DeviceKind(facts.Kind), IP: facts.IP, Subnet: facts.Subnet, SONiCVer: facts.SONiCVersion,
		VendorClass: facts.VendorClass, Hostname: facts.DHCPHostname, Labels: facts.Labels}
	res := &checkResult{Device: *content.Facts(&d)}
	for _, p := range set.Profiles() {
		res.Profiles = append(res.Profiles, p.Name)
	}
	pv, err := content.PreviewDevice(set, defaultProfile, f.profileName, &d, checkBaseURL(advertise, httpAddr))
	if err != nil {
		return nil, err
	}
	res.Matched, res.Default, res.Notes = pv.Profile, pv.ByDefault, pv.Notes
	res.ZTPJSON, res.ConfigDB, res.UserData, res.Metadata = pv.ZTPJSON, pv.ConfigDB, string(pv.UserData), pv.Metadata
	return res, nil
}

// checkBaseURL is the base URL devices are told, built as the server builds
// it (endpoints); when neither advertise_addr nor http.addr names an address
// a placeholder stands for the address a request arrives on.
func checkBaseURL(advertise, httpAddr string) string {
	ep, err := endpoints.New(advertise, httpAddr)
	if err != nil {
		return "http://<advertise-addr>"
	}
	host, _, _ := net.SplitHostPort(httpAddr)
	if a, err := netip.ParseAddr(host); advertise == "" && (host == "" || err == nil && a.IsUnspecified()) {
		return strings.Replace(ep.Base(netip.Addr{}), "127.0.0.1", "<advertise-addr>", 1)
	}
	return ep.Base(netip.Addr{})
}

func printCheck(tw *tabwriter.Writer, w io.Writer, res *checkResult) {
	row(tw, "profiles (precedence order)", strings.Join(res.Profiles, ", "))
	d := res.Device
	row(tw, "device", fmt.Sprintf("kind=%s serial=%s mac=%s product=%s platform=%s ip=%s subnet=%s sonic-version=%s",
		d.Kind, d.Serial, d.MAC, d.Product, d.Platform, d.IP, d.Subnet, d.SONiCVersion))
	matched := res.Matched
	if matched == "" {
		matched = "(none)"
	} else if res.Default {
		matched += " (ztp.default_profile)"
	}
	row(tw, "matched", matched)
	for _, n := range res.Notes {
		row(tw, "note", n)
	}
	tw.Flush()
	if res.ZTPJSON != nil {
		fmt.Fprintf(w, "\n--- ztp.json\n%s", res.ZTPJSON)
		fmt.Fprintf(w, "\n--- config_db.json\n%s", res.ConfigDB)
	}
	if res.Metadata != nil {
		fmt.Fprintln(w, "\n--- meta-data")
		for _, k := range content.MetadataPreviewKeys {
			fmt.Fprintf(w, "%s: %s\n", k, res.Metadata[k])
		}
		fmt.Fprintf(w, "\n--- user-data\n%s", res.UserData)
	}
}
