package content

// Preview: what a device would fetch, computed without serving, by the
// same selection and rendering code as serving (`ztpd profile check`).
// Each kind of device fetches its own documents: a SONiC switch ztp.json,
// its firmware and config_db.json; an ONIE switch one installer image; a
// CloudStack VM meta-data and user-data. A preview shows those and only
// those, for the facts that kind of device tells ztpd.

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/positions"
	"github.com/ztpd/ztpd/internal/profile"
	"github.com/ztpd/ztpd/ztp/endpoints"
)

// PreviewOptions say how a preview chooses and where it looks.
type PreviewOptions struct {
	DefaultProfile string // ztp.default_profile
	ProfileName    string // render this profile instead of the one chosen
	Base           string // URL prefix handed to devices (Endpoints.Base)
	// SecureBase and TLSPin are the device HTTPS listener's URL prefix and
	// pins, as templates get them; empty without the listener.
	SecureBase, TLSPin string
	// MetadataBase is where VMs fetch meta-data and user-data: the DHCP
	// server's address on port 80, or http.metadata_addr.
	MetadataBase string
	// Plan is the cabling plan: a device whose record names a position is
	// previewed as that position's device. Nil without one.
	Plan *positions.Plan
	// Images is the image store, read only; nil when it is not consulted
	// (firmware and installer choices are then described, not made).
	Images Images
}

// env is what the preview's templates are given, as serving gives them.
func (opt PreviewOptions) env() profile.Env {
	return profile.Env{BaseURL: opt.Base, SecureBaseURL: opt.SecureBase, TLSPin: opt.TLSPin}
}

// Fetch is one thing a device asks ztpd for.
type Fetch struct {
	What string `json:"what"`
	URL  string `json:"url"`
}

// Preview is what device d would fetch under a profile set.
type Preview struct {
	Kind      core.DeviceKind
	Profile   string // "" when none matches
	ByDefault bool   // chosen as ztp.default_profile
	Result    *profile.Result
	// Fetches are what the device asks for, in order.
	Fetches []Fetch
	// SONiC switches (and devices of unknown kind that ask): ztp.json and
	// config_db.json (nil when the profile's config_db mode is none).
	ZTPJSON, ConfigDB []byte
	// ONIE switches: the installer image (nil when the store was not
	// consulted or has none).
	Installer *core.Image
	// VMs: meta-data entries (MetadataKeys) and user-data.
	Metadata map[string]string
	UserData []byte
	// Notes say what serving adds that a preview cannot know (join
	// sections, secrets); Warnings what would fail when the device asks.
	Notes    []string
	Warnings []string
}

// SampleDevice is the device previewed when no flag gives a fact: what a
// device of kind tells ztpd about itself. A SONiC switch reports serial,
// product and SONiC version in its ZTP headers; an ONIE switch its serial
// and platform (no product, no SONiC version); a CloudStack VM and a device
// of unknown kind only what DHCP shows (MAC, address, subnet).
func SampleDevice(kind core.DeviceKind) core.Device {
	f := profile.SampleFacts()
	d := core.Device{ID: f.ID, MAC: f.MAC, Kind: kind, IP: f.IP, Subnet: f.Subnet}
	switch kind {
	case core.KindSONiC:
		d.Serial, d.Product, d.Platform, d.SONiCVer = f.Serial, f.Product, f.Platform, f.SONiCVersion
		d.VendorClass, d.Hostname = f.VendorClass, f.DHCPHostname
	case core.KindONIE:
		d.Serial, d.Platform, d.VendorClass = f.Serial, f.Platform, "onie_vendor:"+f.Platform
	case core.KindVM:
		d.ID, d.MAC = "1e:00:42:00:00:07", "1e:00:42:00:00:07"
	}
	return d
}

// KindFacts are the facts a device of kind can have; a preview of another
// fact (a VM's serial number) describes no device that exists.
func KindFacts(kind core.DeviceKind) []string {
	switch kind {
	case core.KindSONiC:
		return []string{"mac", "ip", "subnet", "serial", "product", "platform", "sonic-version"}
	case core.KindONIE:
		return []string{"mac", "ip", "subnet", "serial", "platform"}
	}
	return []string{"mac", "ip", "subnet"}
}

// PreviewDevice previews what d would fetch.
func PreviewDevice(set *profile.Set, d *core.Device, opt PreviewOptions) (*Preview, error) {
	f := FactsAt(d, opt.Plan)
	pv := &Preview{Kind: d.Kind}
	if err := placed(opt.Plan, d); err != nil {
		pv.warn("its content would be refused: %s", refusal(err))
	}
	var p *profile.Profile
	if opt.ProfileName != "" {
		if p = set.Get(opt.ProfileName); p == nil {
			return nil, fmt.Errorf("no profile named %q", opt.ProfileName)
		}
	} else {
		var err error
		p, pv.ByDefault, err = Pick(set, opt.DefaultProfile, f)
		if err != nil {
			if opt.DefaultProfile != "" && set.Get(opt.DefaultProfile) == nil {
				return nil, fmt.Errorf("ztp.default_profile: no profile named %q", opt.DefaultProfile)
			}
			p = nil
		}
	}
	if p != nil {
		pv.Profile = p.Name
	} else {
		// Why none matched, profile by profile: the answer to "my switch
		// gets no config" when its facts are the recorded ones.
		for _, q := range set.Profiles() {
			pv.note("profile %s does not match: %s", q.Name, strings.Join(q.WhyNot(f), "; "))
		}
	}
	switch d.Kind {
	case core.KindONIE:
		return pv, previewONIE(pv, p, d, f, opt)
	case core.KindVM:
		return pv, previewVM(pv, p, d, f, opt)
	}
	return pv, previewSwitch(pv, p, d, f, opt)
}

func (pv *Preview) note(format string, args ...any) {
	pv.Notes = append(pv.Notes, fmt.Sprintf(format, args...))
}

func (pv *Preview) warn(format string, args ...any) {
	pv.Warnings = append(pv.Warnings, fmt.Sprintf(format, args...))
}

// refusal is what a device reads of a serving error (its reason).
func refusal(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return fmt.Sprintf("HTTP %d: %s", e.Status, e.Reason)
	}
	return err.Error()
}

// previewSwitch: a SONiC switch fetches ztp.json (DHCP option 67), then
// what its sections name: the firmware image when its version differs,
// config_db.json unless the profile's config_db mode is none.
func previewSwitch(pv *Preview, p *profile.Profile, d *core.Device, f *profile.Facts, opt PreviewOptions) error {
	if d.Kind != core.KindSONiC {
		pv.note("DHCP gives a device of kind %s no ztp.json URL (option 67) and no ONIE URL (option 114): it fetches nothing unless it asks by itself; what follows is what it gets if it asks for ztp.json (with SONiC headers it becomes kind sonic: preview with --kind sonic)", d.Kind)
	}
	ztpURL := opt.Base + endpoints.ZTPJSONPath
	if p == nil {
		pv.Fetches = append(pv.Fetches, Fetch{"ztp.json", ztpURL})
		pv.note("no profile matches this device and no default profile is configured: ztp.json gets a 404")
		return nil
	}
	r, err := p.Render(f, opt.env(), profile.RenderAll)
	if err != nil {
		return err
	}
	pv.Result = r
	pv.Fetches = append(pv.Fetches, Fetch{"ztp.json", ztpURL})
	in := ZTPInput{DeviceID: d.ID, BaseURL: opt.Base, ReportedVersion: d.SONiCVer}
	if NeedsFirmware(r, d.SONiCVer) {
		what := "firmware: SONiC " + r.SONiC.Version
		switch {
		case opt.Images == nil:
			ref := r.SONiC.Image
			if ref == "" {
				ref = "{sonic-installer:" + r.SONiC.Version + "}"
				pv.note("firmware: at serve time the newest stored sonic-installer of version %s for platform %q is used (image store not consulted)", r.SONiC.Version, f.Platform)
			} else {
				pv.note("firmware: served by sha256 at serve time; image %q (image store not consulted)", ref)
			}
			in.FirmwareURL = opt.Base + endpoints.ImagesPath + ref
		default:
			im, err := sonicImage(opt.Images, opt.Images.Resolve, r, f)
			if err != nil {
				pv.warn("ztp.json would be refused: %s", refusal(err))
				in.FirmwareURL = opt.Base + endpoints.ImagesPath + "{missing}"
			} else {
				in.FirmwareURL = opt.Base + endpoints.ImagesPath + im.SHA256
				what += ", image " + firstNonEmpty([]string{r.SONiC.Image, im.Name})
			}
		}
		pv.Fetches = append(pv.Fetches, Fetch{what, in.FirmwareURL})
	} else if r.SONiC != nil {
		pv.note("firmware: the switch reports SONiC %s, the version its profile pins: no firmware section", profile.BuildVersion(d.SONiCVer))
	}
	if r.Cluster != "" {
		pv.note("cluster %q (role %s): at serve time the joiner adds its join section to ztp.json and KUBERNETES_MASTER to config_db.json", r.Cluster, dash(r.Role))
	}
	if pv.ZTPJSON, err = BuildZTPJSON(r, in); err != nil {
		return err
	}
	if r.ConfigMode == profile.ModeNone {
		pv.note("config_db mode none: ztp.json names no config_db.json, the switch keeps its own configuration")
		return nil
	}
	pv.Fetches = append(pv.Fetches, Fetch{"config_db.json (" + r.ConfigMode + ")", ConfigURL(opt.Base, d.ID)})
	pv.ConfigDB, err = BuildConfigDB(r, f, nil)
	return err
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// previewONIE: an ONIE switch fetches one installer (DHCP option 114, or
// ONIE's TFTP file names), chosen by its profile's pinned SONiC image or
// version, else by its platform. It never fetches ztp.json.
func previewONIE(pv *Preview, p *profile.Profile, d *core.Device, f *profile.Facts, opt PreviewOptions) error {
	url := opt.Base + endpoints.ONIEInstallerPath
	plats := oniePlatforms(onieOf(f.Platform), "", f.Platform)
	var sc *profile.SONiC
	if p != nil {
		sc = p.SONiC()
	}
	how := "by platform " + firstNonEmpty(plats)
	switch {
	case p == nil:
		pv.note("no profile matches this device: installers are chosen by platform for any ONIE switch")
	case sc == nil:
		pv.note("profile %q pins no SONiC image: the installer is chosen by platform", p.Name)
	case sc.Image != "":
		how = "image " + sc.Image + " pinned by profile " + p.Name
	default:
		how = "SONiC " + sc.Version + " pinned by profile " + p.Name + ", for platform " + f.Platform
	}
	pv.note("after installing, the switch boots SONiC and fetches ztp.json as a SONiC switch: preview that with --kind sonic")
	if opt.Images == nil {
		pv.Fetches = append(pv.Fetches, Fetch{"ONIE installer (" + how + "; image store not consulted)", url})
		return nil
	}
	var im core.Image
	var err error
	if sc != nil {
		im, err = sonicImage(opt.Images, opt.Images.Resolve, &profile.Result{Profile: p.Name, SONiC: sc}, f)
	} else if im, err = pickInstaller(opt.Images, plats, func(core.Image) bool { return true }); err != nil {
		err = noInstaller(plats)
	}
	if err != nil {
		pv.Fetches = append(pv.Fetches, Fetch{"ONIE installer (" + how + ")", url})
		pv.warn("the installer request would be refused: %s", refusal(err))
		return nil
	}
	pv.Installer = &im
	desc := fmt.Sprintf("ONIE installer: image %s (%s", im.Name, im.Kind)
	if im.Version != "" {
		desc += ", version " + im.Version
	}
	if im.Platform != "" {
		desc += ", platform " + im.Platform
	}
	pv.Fetches = append(pv.Fetches, Fetch{desc + ", " + how + ")", url})
	return nil
}

// onieOf is the ONIE header set of a platform string
// (<arch>-<machine>[-r<rev>]), as an ONIE switch of that platform sends it.
func onieOf(platform string) *ONIE {
	arch, machine, ok := strings.Cut(platform, "-")
	if !ok || arch == "" || machine == "" {
		return nil
	}
	o := &ONIE{Arch: arch, Machine: machine}
	if i := strings.LastIndex(machine, "-r"); i > 0 && i+2 < len(machine) && strings.Trim(machine[i+2:], "0123456789") == "" {
		o.Machine, o.MachineRev = machine[:i], machine[i+2:]
	}
	return o
}

// previewVM: cloud-init's CloudStack data source fetches the meta-data
// index and each entry, then user-data, from the DHCP server's address.
func previewVM(pv *Preview, p *profile.Profile, d *core.Device, f *profile.Facts, opt PreviewOptions) error {
	base := opt.MetadataBase
	pv.Fetches = append(pv.Fetches, Fetch{"meta-data (index and each entry)", base + endpoints.MetadataPath},
		Fetch{"user-data", base + endpoints.UserDataPath})
	if p == nil {
		pv.note("no profile matches this device and no default profile is configured: meta-data and user-data get a 404")
		return nil
	}
	r, err := p.Render(f, opt.env(), profile.RenderUserData)
	if err != nil {
		return err
	}
	pv.Result = r
	pv.Metadata = map[string]string{}
	for _, k := range MetadataKeys {
		pv.Metadata[k], _ = MetadataValue(k, d, r)
	}
	switch {
	case r.Cluster != "":
		pv.note("cluster %q (role %s): at serve time user-data is the joiner's cloud-config that joins it, not the one below", r.Cluster, dash(r.Role))
		pv.UserData = r.UserData
		if pv.UserData == nil {
			pv.UserData = DefaultUserData(r.Hostname)
		}
	case r.UserData != nil:
		pv.UserData = r.UserData
	default:
		pv.UserData = DefaultUserData(r.Hostname)
	}
	return nil
}

// desiredReferences are the images a profile's desired: block names
// (the target image, the hooks' scripts) that the image store lacks.
// Loading the profile checks only their form: the store changes while
// profiles stay loaded, so a missing one is a warning, and where it is
// used (the agent's document) it is left out.
func desiredReferences(p *profile.Profile, images Images) []string {
	ds, ok := p.Desired()
	if !ok {
		return nil
	}
	var out []string
	if ds.Image != "" {
		if _, err := images.Resolve(ds.Image); err != nil {
			out = append(out, fmt.Sprintf("%s: profile %q: desired image %q is not in the image store: its devices' agents are given no target image until it is (ztpd image add FILE --name %s --kind sonic-installer)",
				p.Where("desired.image"), p.Name, ds.Image, ds.Image))
		}
	}
	for _, phase := range core.HookPhases {
		img, ok := ds.Hooks[phase]
		if !ok {
			continue
		}
		if _, err := images.Resolve(img); err != nil {
			out = append(out, fmt.Sprintf("%s: profile %q: hook %s script %q is not in the image store (ztpd image add FILE --name %s --kind file)",
				p.Where("desired.hooks."+phase), p.Name, phase, img, img))
		}
	}
	return out
}

// ClusterRef is a cluster that exists, by the names a profile may use.
type ClusterRef struct{ ID, Name string }

// CheckReferences lists what profiles name that the store lacks: clusters
// that do not exist, SONiC images that are not stored, SONiC versions no
// stored installer has. Each warning names the profile (file:line), what is
// missing, what fails at serve time and how to fix it. images or clusters
// nil: that part is not checked.
func CheckReferences(set *profile.Set, images Images, clusters []ClusterRef) []string {
	var out []string
	var names []string
	known := map[string]bool{}
	for _, c := range clusters {
		known[c.ID], known[c.Name] = true, true
		names = append(names, c.Name)
	}
	for _, p := range set.Profiles() {
		if c := p.Cluster; c != "" && clusters != nil && !known[c] {
			hint := ""
			if s := profile.Suggest(c, names); s != "" {
				hint = fmt.Sprintf(" (did you mean %q?)", s)
			}
			out = append(out, fmt.Sprintf("%s: profile %q: cluster %q does not exist%s: its devices get a 503 for ztp.json, config_db.json and user-data until it does (ztpd cluster create %s ...)",
				p.Where("cluster"), p.Name, c, hint, c))
		}
		if images != nil {
			out = append(out, desiredReferences(p, images)...)
		}
		sc := p.SONiC()
		if sc == nil || images == nil {
			continue
		}
		if sc.Image != "" {
			if _, err := images.Resolve(sc.Image); err != nil {
				out = append(out, fmt.Sprintf("%s: profile %q: SONiC image %q is not in the image store: switches that need it get a 503 for ztp.json and for the ONIE installer (ztpd image add FILE --name %s --kind sonic-installer --version %s)",
					p.Where("sonic.image"), p.Name, sc.Image, sc.Image, sc.Version))
			}
			continue
		}
		var versions []string
		found := false
		for _, k := range []string{"sonic-installer", "onie-installer"} {
			l, err := images.List(k)
			if err != nil {
				return append(out, fmt.Sprintf("image store: %v", err))
			}
			for _, im := range l {
				if profile.BuildVersion(im.Version) == sc.Version {
					found = true
				} else if im.Version != "" {
					versions = append(versions, im.Version)
				}
			}
		}
		if !found {
			have := "none is stored"
			if len(versions) > 0 {
				sort.Strings(versions)
				have = "stored: " + strings.Join(versions, ", ")
			}
			out = append(out, fmt.Sprintf("%s: profile %q: no sonic-installer image of SONiC version %s is stored (%s): switches that need it get a 503 for ztp.json and for the ONIE installer (ztpd image add FILE --kind sonic-installer --version %s)",
				p.Where("sonic.version"), p.Name, sc.Version, have, sc.Version))
		}
	}
	return out
}
