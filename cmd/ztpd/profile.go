package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/app"
	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/hosturl"
	"github.com/ztpd/ztpd/internal/positions"
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
	device                                                     string // --device: a recorded device's facts
	position                                                   string // --position: a planned slot's device
}

type checkResult struct {
	Profiles  []string          `json:"profiles"` // in precedence order
	Device    profile.Facts     `json:"device"`
	Matched   string            `json:"matched"`
	Default   bool              `json:"default,omitempty"` // matched through ztp.default_profile
	Fetches   []content.Fetch   `json:"fetches"`
	ZTPJSON   json.RawMessage   `json:"ztp_json,omitempty"`
	ConfigDB  json.RawMessage   `json:"config_db,omitempty"`
	Installer *core.Image       `json:"installer,omitempty"`
	UserData  string            `json:"user_data,omitempty"`
	Metadata  map[string]string `json:"meta_data,omitempty"`
	Store     string            `json:"store"` // where clusters and images were read, or why not
	// Position is the planned slot the device is previewed at (--position,
	// or the one a recorded device was leased through).
	Position *client.Position `json:"position,omitempty"`
	Notes    []string         `json:"notes,omitempty"`
	Warnings []string         `json:"warnings,omitempty"`
}

func newProfileCheckCmd(opts *rootOptions) *cobra.Command {
	f := &checkFlags{}
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Validate all profiles and preview what a device of each kind fetches",
		Long: `Load every profile named by the configuration (or --profiles) and report
every problem of every file at once, each as

  FILE:LINE:COLUMN: profile "NAME": FIELD: PROBLEM

with the field named as written in YAML and "did you mean" for misspelt
fields, template fields ({{ .Serail }}) and template functions. Then pick
the profile for a sample device and show exactly what that kind of device
fetches, with the facts that kind of device has:

  --kind sonic  (default) ztp.json (DHCP option 67), the firmware image when
                its SONiC version differs, config_db.json; facts: serial,
                product, platform, SONiC version, mac, ip, subnet
  --kind onie   the installer image (DHCP option 114, /onie/installer); facts:
                serial, platform, mac, ip, subnet
  --kind vm     CloudStack meta-data entries and user-data (cloud-init);
                facts: mac, ip, subnet
  --kind unknown  DHCP points it nowhere; what it would get if it asked

A fact flag a kind of device never reports (--serial with --kind vm) is an
error. Facts not given by flags come from a sample device of the kind
(serial SAMPLE0001, Accton-AS7712-32X, 192.0.2.10), or, with --device MAC or
SERIAL, from what ztpd recorded of that device: the facts serving matches on,
so a switch that gets no config shows which profile misses it and why.
With --position NAME the device is the one plugged into that slot of the
cabling plan: it has the slot's relay information, reserved address and
expected serial, and gets the slot's name, profile, cluster and role, as
serving gives them (the plan is the running server's, else the plan files
and the positions stored in the data directory's store).

When the data directory has a store (a running server's admin socket, or
the store opened read-only in-process), the check also warns about every
profile naming a cluster that does not exist or a SONiC image or version
that is not in the image store, and shows which stored image a switch
would get. Nothing is written. Join sections and secrets, made at serve
time, are left out.

Exit status 1 when a profile is invalid or fails to render for the device;
warnings do not change it.`,
		Example: `  ztpd profile check --config /etc/ztpd/ztpd.yaml
  ztpd profile check --device LEAF0001      # why does this switch get what it gets (or nothing)?
  ztpd profile check --position leaf-07a    # what the switch plugged into that slot gets
  ztpd profile check --profiles examples/profiles --serial LEAF0010 \
      --product Accton-AS7712-32X --ip 10.99.40.10 --sonic-version SONiC.202311.1
  ztpd profile check --profiles examples/profiles --kind onie --ip 10.99.40.10
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
			st := profileCheckStore(opts, cfg)
			defer st.close()
			var recorded *core.Device
			if f.device != "" {
				if recorded, err = checkRecordedDevice(st, f.device); err != nil {
					return err
				}
			}
			d, err := checkDevice(f, cmd, recorded)
			if err != nil {
				return err
			}
			var plan *positions.Plan
			if f.position != "" || d.Position != "" {
				if plan, err = checkPlan(st, cfg); err != nil {
					return err
				}
			}
			if f.position != "" {
				if err := placeDevice(&d, plan, f, cmd, recorded != nil); err != nil {
					return err
				}
			}
			res, err := checkProfiles(set, d, f.profileName, cfg, st, plan)
			if err != nil {
				return err
			}
			return printResult(opts, os.Stdout, res, func(tw *tabwriter.Writer) { printCheck(tw, os.Stdout, res) })
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&f.profiles, "profiles", nil, "profile file or directory (repeatable; default: profiles of --config)")
	fl.StringVar(&f.serial, "serial", "", "device serial number (sonic, onie)")
	fl.StringVar(&f.mac, "mac", "", "device MAC address (its id)")
	fl.StringVar(&f.product, "product", "", "SONiC product name (sonic)")
	fl.StringVar(&f.kind, "kind", "sonic", "sonic, onie, vm or unknown")
	fl.StringVar(&f.platform, "platform", "", "ONIE platform, e.g. x86_64-accton_as7712_32x-r0 (sonic, onie)")
	fl.StringVar(&f.ip, "ip", "", "device address")
	fl.StringVar(&f.subnet, "subnet", "", "DHCP subnet name")
	fl.StringVar(&f.sonicVer, "sonic-version", "", "SONiC-VERSION the switch reports, N.A = unknown (sonic)")
	fl.StringVar(&f.profileName, "profile", "", "render this profile instead of the matching one")
	fl.StringVar(&f.device, "device", "", "preview for this device ztpd has seen (MAC or serial), with its recorded facts; fact flags override them")
	fl.StringVar(&f.position, "position", "", "preview the device plugged into this position of the cabling plan")
	return cmd
}

// checkDevice is the previewed device: the recorded device (--device), else
// the sample of its kind, with the flags' facts over it. A fact its kind
// never reports is an error.
func checkDevice(f *checkFlags, cmd *cobra.Command, recorded *core.Device) (core.Device, error) {
	kind := core.DeviceKind(f.kind)
	if recorded != nil && !cmd.Flags().Changed("kind") {
		kind = recorded.Kind
	}
	switch kind {
	case core.KindSONiC, core.KindONIE, core.KindVM, core.KindUnknown:
	default:
		return core.Device{}, fmt.Errorf("--kind %q: use sonic, onie, vm or unknown", f.kind)
	}
	d := content.SampleDevice(kind)
	if recorded != nil {
		d = *recorded
		d.Kind = kind
	}
	has := map[string]bool{}
	for _, k := range content.KindFacts(kind) {
		has[k] = true
	}
	for _, fact := range []struct {
		flag string
		dst  *string
		v    string
	}{{"serial", &d.Serial, f.serial}, {"product", &d.Product, f.product}, {"platform", &d.Platform, f.platform},
		{"ip", &d.IP, f.ip}, {"subnet", &d.Subnet, f.subnet}, {"sonic-version", &d.SONiCVer, f.sonicVer}} {
		if !cmd.Flags().Changed(fact.flag) {
			continue
		}
		if !has[fact.flag] {
			return d, fmt.Errorf("--%s: a device of kind %s does not report it (its facts: %s)", fact.flag, kind, strings.Join(content.KindFacts(kind), ", "))
		}
		*fact.dst = fact.v
	}
	if kind == core.KindONIE && cmd.Flags().Changed("platform") {
		d.VendorClass = "onie_vendor:" + d.Platform // what ONIE's DHCP request says
	}
	if cmd.Flags().Changed("mac") {
		m, err := core.NormalizeMAC(f.mac)
		if err != nil {
			return d, err
		}
		d.MAC, d.ID = m, m
	}
	return d, nil
}

// checkRecordedDevice reads the record of a device ztpd has seen (MAC or
// serial), whose facts are what serving matches profiles on: "why does my
// switch get no config" is answered with its own facts, not a sample's.
func checkRecordedDevice(st *profileCheckStoreAccess, ref string) (*core.Device, error) {
	if st.images == nil {
		return nil, fmt.Errorf("--device %s: the device records are in the data directory's store, which was %s", ref, strings.TrimPrefix(st.where, "not consulted: "))
	}
	var rec client.Device
	if err := st.images.s.do("GET", "/api/v1/devices/"+url.PathEscape(ref), nil, &rec); err != nil {
		return nil, fmt.Errorf("--device %s: %w (ztpd device list shows the devices ztpd has seen)", ref, err)
	}
	d := recordedDevice(rec)
	return &d, nil
}

// recordedDevice is the device a REST view shows, as the preview reads it
// (its refusal is no fact, so it stays out).
func recordedDevice(v client.Device) core.Device {
	d := core.Device{ID: v.ID, Kind: v.Kind, MAC: v.MAC, Serial: v.Serial, Product: v.Product, Platform: v.Platform,
		Hostname: v.Hostname, ClientID: v.ClientID, VendorClass: v.VendorClass, SONiCVer: v.SONiCVer, IP: v.IP, Subnet: v.Subnet,
		RelayAddr: v.RelayAddr, CircuitID: v.CircuitID, RemoteID: v.RemoteID, Position: v.Position, BaseMAC: v.BaseMAC, FixedIP: v.FixedIP,
		State: v.State, Approved: v.Approved, Cluster: v.Cluster, Role: v.Role, Profile: v.Profile, Labels: v.Labels,
		FirstSeen: v.FirstSeen, LastSeen: v.LastSeen, UpdatedAt: v.UpdatedAt}
	if c := v.SerialConflict; c != nil {
		d.SerialConflict = &core.SerialConflict{Serial: c.Serial, With: c.With}
	}
	return d
}

// profileCheckStore is read access to the data directory's clusters and
// images: through a running server's admin socket, else the store opened
// in-process, else nothing (no store there yet).
type profileCheckStoreAccess struct {
	images   *profileCheckImages // nil: not consulted
	clusters []content.ClusterRef
	where    string // what was consulted, or why nothing was
	close    func() error
}

func profileCheckStore(opts *rootOptions, cfg config.Config) *profileCheckStoreAccess {
	st := &profileCheckStoreAccess{close: func() error { return nil }}
	sock := filepath.Join(cfg.DataDir, app.AdminSocketName)
	running := serverRunning(cfg.DataDir)
	if deniedDataDir(cfg.DataDir) != nil {
		st.where = fmt.Sprintf("not consulted: not readable by this user (permission denied on the data directory %s: run the command with sudo; "+
			"clusters and images not checked)", cfg.DataDir)
		return st
	}
	if !running && !app.HasStore(cfg) {
		st.where = fmt.Sprintf("not consulted: no store in data directory %s (clusters and images not checked)", cfg.DataDir)
		return st
	}
	s, err := openAdmin(opts)
	if err != nil {
		st.where = fmt.Sprintf("not consulted: data directory %s: %v (clusters and images not checked)", cfg.DataDir, err)
		return st
	}
	st.close = s.close
	var views []client.Image
	if err := s.do("GET", "/admin/images", nil, &views); err != nil {
		st.where = fmt.Sprintf("not consulted: image list: %v", err)
		return st
	}
	var imgs []core.Image
	for _, v := range views {
		imgs = append(imgs, imageOf(v))
	}
	var clusters []content.ClusterRef
	cursor := ""
	for {
		var page client.Page[client.Cluster]
		q := url.Values{"listall": {"true"}, "limit": {"1000"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		if err := s.do("GET", "/api/v1/clusters?"+q.Encode(), nil, &page); err != nil {
			st.where = fmt.Sprintf("not consulted: cluster list: %v", err)
			return st
		}
		for _, c := range page.Items {
			clusters = append(clusters, content.ClusterRef{ID: c.ID, Name: c.Name})
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if clusters == nil {
		clusters = []content.ClusterRef{}
	}
	st.images, st.clusters = &profileCheckImages{s: s, list: imgs}, clusters
	st.where = fmt.Sprintf("data directory %s (%d images, %d clusters)", cfg.DataDir, len(imgs), len(clusters))
	if running {
		st.where = fmt.Sprintf("running server at %s (%d images, %d clusters)", sock, len(imgs), len(clusters))
	}
	return st
}

// profileCheckImages is the image store read through an admin session:
// references resolve as serving resolves them (any name of an image), the
// list is the admin image list.
type profileCheckImages struct {
	s    *adminSession
	list []core.Image
}

func (im *profileCheckImages) Resolve(ref string) (core.Image, error) {
	var out client.Image
	if err := im.s.do("GET", "/admin/images/"+url.PathEscape(ref), nil, &out); err != nil {
		return core.Image{}, fmt.Errorf("image %q: %w", ref, err)
	}
	return imageOf(out), nil
}

// imageOf is the image an admin answer shows, as the preview reads it.
func imageOf(v client.Image) core.Image {
	return core.Image{SHA256: v.SHA256, Name: v.Name, Kind: v.Kind, Platform: v.Platform, Version: v.Version, Size: v.Size, Created: v.Created}
}

func (im *profileCheckImages) List(kind string) ([]core.Image, error) {
	var out []core.Image
	for _, i := range im.list {
		if kind == "" || i.Kind == kind {
			out = append(out, i)
		}
	}
	return out, nil
}

func (im *profileCheckImages) OpenContext(context.Context, core.Image) (*os.File, error) {
	return nil, errors.New("profile check reads no image content")
}

// checkProfiles previews what device d would fetch, through the same
// selection and rendering as the server (content.PreviewDevice), and lists
// what the profiles name that the store lacks.
func checkProfiles(set *profile.Set, d core.Device, profileName string, cfg config.Config, st *profileCheckStoreAccess, plan *positions.Plan) (*checkResult, error) {
	res := &checkResult{Device: *content.Facts(&d), Store: st.where}
	if p := plan.Get(d.Position); p != nil {
		v := positionView(p)
		res.Position = &v
	}
	for _, p := range set.Profiles() {
		res.Profiles = append(res.Profiles, p.Name)
	}
	mdBase, mdNote := checkMetadataBase(cfg.HTTP.MetadataAddr, cfg.HTTP.Addr)
	opt := content.PreviewOptions{DefaultProfile: cfg.ZTP.DefaultProfile, ProfileName: profileName,
		Base: checkBaseURL(cfg.AdvertiseAddr, cfg.HTTP.Addr), MetadataBase: mdBase, Plan: plan}
	if st.images != nil {
		opt.Images = st.images
	}
	pv, err := content.PreviewDevice(set, &d, opt)
	if err != nil {
		return nil, err
	}
	res.Matched, res.Default, res.Notes, res.Warnings = pv.Profile, pv.ByDefault, pv.Notes, pv.Warnings
	res.Fetches, res.Installer, res.Metadata = pv.Fetches, pv.Installer, pv.Metadata
	res.ZTPJSON, res.ConfigDB, res.UserData = pv.ZTPJSON, pv.ConfigDB, string(pv.UserData)
	if d.Kind == core.KindVM && mdNote != "" {
		res.Notes = append(res.Notes, mdNote)
	}
	if n := unknownKindNote(d, cfg.DHCP.VM); n != "" {
		res.Notes = append(res.Notes, n)
	}
	if st.images != nil {
		res.Warnings = append(res.Warnings, content.CheckReferences(set, st.images, st.clusters)...)
	}
	return res, nil
}

// unknownKindNote names the setting that would make a device of kind
// unknown a VM: DHCP decides the kind at the lease, and a CloudStack guest
// whose MAC no dhcp.vm.mac_prefixes entry covers gets no VM content.
func unknownKindNote(d core.Device, vm config.VMMatch) string {
	if d.Kind != core.KindUnknown {
		return ""
	}
	hw, err := net.ParseMAC(d.MAC)
	if err != nil || len(hw) < 2 {
		return ""
	}
	for _, p := range vm.MACPrefixes {
		if pre, err := config.ParseMACPrefix(p); err == nil && bytes.HasPrefix(hw, pre) {
			return fmt.Sprintf("kind unknown, yet dhcp.vm.mac_prefixes %q covers %s: the configuration changed after its lease, and its next DHCP request makes it a vm", vm.MACPrefixes, d.MAC)
		}
	}
	return fmt.Sprintf("kind unknown: neither SONiC's user class, ONIE's vendor class nor a VM match marked it at its lease; if it is a VM, add its MAC prefix %q to dhcp.vm.mac_prefixes (now %q) or its DHCP vendor class to dhcp.vm.vendor_classes, and it is a vm at its next DHCP request",
		hw[:2].String(), vm.MACPrefixes)
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

// checkMetadataBase is where a VM's cloud-init asks for meta-data: the DHCP
// server's address on port 80, which ztpd answers on http.metadata_addr (or
// http.addr when that is on port 80).
func checkMetadataBase(metadataAddr, httpAddr string) (base, note string) {
	for _, a := range []string{metadataAddr, httpAddr} {
		host, port, err := net.SplitHostPort(a)
		if err != nil || port != "80" {
			continue
		}
		if ip, err := netip.ParseAddr(host); err == nil && !ip.IsUnspecified() {
			return hosturl.Base("http", host, ""), ""
		}
		return "http://<dhcp-server-addr>", ""
	}
	return "http://<dhcp-server-addr>", "cloud-init asks the DHCP server's address on port 80, and ztpd listens there only with http.metadata_addr (or http.addr on port 80): set one for VMs to get this"
}

func printCheck(tw *tabwriter.Writer, w io.Writer, res *checkResult) {
	row(tw, "profiles (precedence order)", strings.Join(res.Profiles, ", "))
	d := res.Device
	facts := []string{"kind=" + d.Kind}
	for _, k := range content.KindFacts(core.DeviceKind(d.Kind)) {
		v := map[string]string{"mac": d.MAC, "ip": d.IP, "subnet": d.Subnet, "serial": d.Serial, "product": d.Product,
			"platform": d.Platform, "sonic-version": d.SONiCVersion}[k]
		facts = append(facts, k+"="+v)
	}
	row(tw, "device", strings.Join(facts, " "))
	matched := res.Matched
	if matched == "" {
		matched = "(none)"
	} else if res.Default {
		matched += " (ztp.default_profile)"
	}
	row(tw, "matched", matched)
	if p := res.Position; p != nil {
		at := "position " + p.Name + " (" + p.Source + "): relay " + p.Relay
		if p.CircuitID != "" {
			at += " circuit-id " + p.CircuitID
		}
		if p.RemoteID != "" {
			at += " remote-id " + p.RemoteID
		}
		row(tw, "plugged into", at)
		dhcp := "host name " + p.Name + ", "
		if p.Address != "" {
			dhcp += "address " + p.Address + " (reserved for the position)"
		} else {
			dhcp += "a pool address"
		}
		row(tw, "dhcp gives", dhcp)
	}
	row(tw, "store", res.Store)
	for i, f := range res.Fetches {
		label := ""
		if i == 0 {
			label = "fetches"
		}
		row(tw, label, f.URL+"  "+f.What)
	}
	for _, n := range res.Notes {
		row(tw, "note", n)
	}
	for _, n := range res.Warnings {
		row(tw, "warning", n)
	}
	tw.Flush()
	if res.ZTPJSON != nil {
		fmt.Fprintf(w, "\n--- ztp.json\n%s", res.ZTPJSON)
	}
	if res.ConfigDB != nil {
		fmt.Fprintf(w, "\n--- config_db.json\n%s", res.ConfigDB)
	}
	if res.Metadata != nil {
		fmt.Fprintln(w, "\n--- meta-data")
		for _, k := range content.MetadataKeys {
			fmt.Fprintf(w, "%s: %s\n", k, res.Metadata[k])
		}
		fmt.Fprintf(w, "\n--- user-data\n%s", res.UserData)
	}
}

// checkPlan is the cabling plan a preview places devices by: the running
// server's (or, with the store opened in-process, the plan files and the
// stored positions), else the plan files alone.
func checkPlan(st *profileCheckStoreAccess, cfg config.Config) (*positions.Plan, error) {
	if st.images == nil {
		pl, err := positions.Load(cfg.Positions, nil)
		if err != nil {
			return nil, fmt.Errorf("positions: %w", err)
		}
		return pl, nil
	}
	var page client.Page[client.Position]
	if err := st.images.s.do("GET", "/api/v1/positions", nil, &page); err != nil {
		return nil, fmt.Errorf("positions: %w", err)
	}
	ps := make([]*positions.Position, 0, len(page.Items))
	for _, v := range page.Items {
		p := &positions.Position{Name: v.Name, CircuitID: v.CircuitID, RemoteID: v.RemoteID, InterfaceID: v.InterfaceID,
			Role: v.Role, Cluster: v.Cluster, Profile: v.Profile, Serial: v.Serial, Rack: v.Rack, Port: v.Port,
			Labels: v.Labels, Fields: v.Fields}
		p.Relay, _ = netip.ParseAddr(v.Relay)
		p.Address, _ = netip.ParseAddr(v.Address)
		if i := strings.LastIndexByte(v.Source, ':'); i > 0 && v.Source != "api" {
			p.File = v.Source[:i]
			fmt.Sscan(v.Source[i+1:], &p.Line)
		}
		ps = append(ps, p)
	}
	pl, errs := positions.Build(ps)
	if len(errs) > 0 {
		return nil, fmt.Errorf("positions: %w", errs)
	}
	return pl, nil
}

// placeDevice puts d into the position f.position names: the relay
// information it arrives with, the address DHCP gives it there, and, for
// a sample device, the serial the slot expects.
func placeDevice(d *core.Device, plan *positions.Plan, f *checkFlags, cmd *cobra.Command, recorded bool) error {
	p := plan.Get(f.position)
	if p == nil {
		names := make([]string, 0, 8)
		for _, q := range plan.List() {
			if len(names) == 8 {
				names = append(names, "...")
				break
			}
			names = append(names, q.Name)
		}
		return fmt.Errorf("--position %s: no such position in the cabling plan (positions: %s; ztpd position list)", f.position, strings.Join(names, ", "))
	}
	d.Position, d.RelayAddr, d.CircuitID, d.RemoteID = p.Name, p.Relay.String(), p.CircuitID, p.RemoteID
	if p.Address.IsValid() && !cmd.Flags().Changed("ip") {
		d.IP = p.Address.String()
	}
	if p.Serial != "" && !recorded && !cmd.Flags().Changed("serial") && d.Kind != core.KindVM && d.Kind != core.KindUnknown {
		d.Serial = p.Serial
	}
	return nil
}

// positionView is a planned position as the check shows it.
func positionView(p *positions.Position) client.Position {
	v := client.Position{Name: p.Name, Relay: p.Relay.String(), CircuitID: p.CircuitID, RemoteID: p.RemoteID,
		InterfaceID: p.InterfaceID, Role: p.Role, Cluster: p.Cluster, Profile: p.Profile, Serial: p.Serial,
		Rack: p.Rack, Port: p.Port, Labels: p.Labels, Fields: p.Fields, Source: p.Where()}
	if p.Address.IsValid() {
		v.Address = p.Address.String()
	}
	return v
}
