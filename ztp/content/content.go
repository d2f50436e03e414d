// Package content is the ZTP content service: it identifies the device behind
// a request, picks its profile, renders what it gets (ztp.json,
// config_db.json, ONIE installer, cloud-init metadata) and records its
// progress. The HTTP and TFTP transports are thin front ends over it, so both
// serve exactly the same documents.
//
// Identification is the one rule of core.HolderOf: the device is the holder
// of the address the request comes from (an active lease, or an
// operator-declared binding for a static device). The SONiC headers
// (SERIAL-NUMBER, BASE-MAC-ADDRESS, PRODUCT-NAME, SONiC-VERSION) and ONIE
// headers only add facts the record does not have yet; a header that
// contradicts the record is refused (403), and one outside its character
// set too (400). A request from an address nobody holds gets a 403, is
// counted and logged, and creates no record.
//
// Per-device documents are bound to their device: /ztp/config/<id>/... is
// only answered to the holder of device <id>'s address.
package content

import (
	"context"
	"crypto/sha1"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/internal/profile"
	"github.com/ztpd/ztpd/internal/safepath"
	"github.com/ztpd/ztpd/ztp/endpoints"
)

// JoinProvider supplies cluster-join material; the joiner implements it. A
// nil provider means profiles that name a cluster get no join section.
type JoinProvider interface {
	// ZTPSection returns the body of the ztp.json section that joins dev to
	// r.Cluster (a section with a "plugin" url), or nil for none. It is named
	// "NN-join" and runs last.
	ZTPSection(ctx context.Context, dev core.Device, r profile.Result) (map[string]any, error)
	// KubernetesMaster returns the API server for config_db's
	// KUBERNETES_MASTER|SERVER when dev joins by the SONiC (ctrmgrd) method,
	// or nil when it joins otherwise.
	KubernetesMaster(ctx context.Context, dev core.Device, r profile.Result) (*KubeMaster, error)
	// UserData returns the cloud-config that joins a VM to r.Cluster.
	UserData(ctx context.Context, dev core.Device, r profile.Result) ([]byte, error)
}

// Images is the part of the image store the service uses.
type Images interface {
	Resolve(ref string) (core.Image, error)
	List(kind string) ([]core.Image, error)
	Open(im core.Image) (*os.File, error)
}

// Options configure a Service: resolved values and the parts it uses.
type Options struct {
	Store core.Store
	// Devices records each fetch (device progress and events).
	Devices *devices.Service
	Images  Images
	// Join supplies cluster-join sections; nil: profiles that name a
	// cluster get no join section.
	Join JoinProvider
	// Pending answers what the DHCP server knows of a device before its
	// record is committed; nil without DHCP.
	Pending core.DeviceFinder
	Log     *slog.Logger
	// Endpoints builds every URL handed to devices.
	Endpoints endpoints.Endpoints
	// DefaultProfile is given to devices no profile matches; "" = 404.
	DefaultProfile string
	// FilesDir is served read-only by name (TFTP <path>, HTTP /files/<path>);
	// "" disables it.
	FilesDir string
	// Bindings are the operator-declared addresses (DHCP reservations) that
	// identify static devices without a lease; nil for none.
	Bindings core.Bindings
}

// Service renders and serves ZTP content.
type Service struct {
	opt      Options
	log      *slog.Logger
	profiles atomic.Pointer[profile.Set]
	imgs     imageCache
	files    *os.Root
	now      func() time.Time

	logRefusal rateLimit
}

// New builds a Service. Profiles are set with SetProfiles.
func New(opt Options) (*Service, error) {
	s := &Service{opt: opt, log: opt.Log, now: func() time.Time { return time.Now().UTC() }}
	if s.log == nil {
		s.log = slog.Default()
	}
	if opt.Store != nil && opt.Devices == nil {
		return nil, errors.New("content: a devices service is required to record fetches")
	}
	if opt.FilesDir != "" {
		var err error
		if err := os.MkdirAll(opt.FilesDir, 0o755); err != nil {
			return nil, fmt.Errorf("files directory: %w", err)
		}
		if s.files, err = os.OpenRoot(opt.FilesDir); err != nil {
			return nil, fmt.Errorf("files directory: %w", err)
		}
	}
	s.profiles.Store(&profile.Set{})
	return s, nil
}

// Close releases the files root. (What is still queued is recorded by the
// devices service, which closes after its reporters.)
func (s *Service) Close() error {
	if s.files != nil {
		return s.files.Close()
	}
	return nil
}

// SetProfiles swaps in a loaded profile set; it checks that the default
// profile exists in it.
func (s *Service) SetProfiles(set *profile.Set) error {
	if s.opt.DefaultProfile != "" && set.Get(s.opt.DefaultProfile) == nil {
		return fmt.Errorf("ztp.default_profile: no profile named %q is loaded", s.opt.DefaultProfile)
	}
	s.profiles.Store(set)
	return nil
}

// Profiles returns the current profile set.
func (s *Service) Profiles() *profile.Set { return s.profiles.Load() }

// Client is who is asking: addresses and whatever it said about itself.
type Client struct {
	Addr      netip.Addr // source address
	Local     netip.Addr // address the request arrived on
	Transport string     // "http" or "tftp"
	// SONiC ZTP headers.
	Serial, BaseMAC, Product, SONiCVersion string
	// ONIE headers.
	ONIE *ONIE
}

// ONIE is what the ONIE installer tells about itself in its HTTP headers.
type ONIE struct {
	Serial, MAC, Vendor, Machine, MachineRev, Arch, Version string
}

// Platform is the ONIE platform string, <arch>-<machine>-r<rev> as ONIE's
// onie_platform; empty when arch or machine is missing.
func (o *ONIE) Platform() string {
	if o == nil || o.Arch == "" || o.Machine == "" {
		return ""
	}
	p := o.Arch + "-" + o.Machine
	if o.MachineRev != "" {
		p += "-r" + o.MachineRev
	}
	return p
}

func (c *Client) hasSONiCHeaders() bool {
	return c.Serial != "" || c.BaseMAC != "" || c.Product != "" || c.SONiCVersion != ""
}

// Error is a refusal with an HTTP status and a reason for the client.
type Error struct {
	Status int
	Reason string
	Kind   string // why, for metrics and logs: one of the Refused* values or ""
}

// Why identity refused a request.
const (
	RefusedNoHolder = "no-holder" // the address holds no lease and no binding
	RefusedMismatch = "mismatch"  // a stated fact contradicts the device's record
	RefusedFact     = "bad-fact"  // a stated fact is outside its character set
)

func (e *Error) Error() string { return e.Reason }

// ErrorKind is the refusal in the one error model (core.ErrorKind), whose
// HTTP status (httpserve.StatusOf) is e.Status: 400 invalid, 403 refused,
// 404 not found, 503 unavailable.
func (e *Error) ErrorKind() core.ErrorKind {
	switch e.Status {
	case 400:
		return core.KindInvalid
	case 403:
		return core.KindRefused
	case 404:
		return core.KindNotFound
	case 503:
		return core.KindUnavailable
	}
	return core.KindInternal
}

// Unwrap makes core.KindOf (and errors.As to *core.Error) see the
// classified refusal.
func (e *Error) Unwrap() error { return &core.Error{Kind: e.ErrorKind(), Msg: e.Reason} }

func notFound(format string, args ...any) error {
	return &Error{Status: 404, Reason: fmt.Sprintf(format, args...)}
}

func forbidden(format string, args ...any) error {
	return &Error{Status: 403, Reason: fmt.Sprintf(format, args...)}
}

// unavailable is a server-side problem the operator must fix (missing image,
// failing joiner); the switch retries later.
func unavailable(format string, args ...any) error {
	return &Error{Status: 503, Reason: fmt.Sprintf(format, args...)}
}

// BaseURL is the http://host[:port] prefix of URLs handed to c.
func (s *Service) BaseURL(c *Client) string {
	var local netip.Addr
	if c != nil {
		local = c.Local
	}
	return s.opt.Endpoints.Base(local)
}

// identify finds the device behind c inside tx by the one identity rule
// (see core.HolderOf): the holder of the address c asks from. stored
// reports whether its record exists yet (false for a first contact whose
// DHCP record is still being committed, or a static device's first fetch).
// What c says about itself is then checked against that device (check):
// headers select, they never widen.
func (s *Service) identify(tx core.Tx, c *Client) (dev core.Device, stored bool, err error) {
	h, err := core.HolderOf(tx, c.Addr, s.now(), s.opt.Bindings)
	if err != nil {
		if errors.Is(err, core.ErrNoHolder) {
			return dev, false, &Error{Status: 403, Kind: RefusedNoHolder,
				Reason: fmt.Sprintf("%s holds no lease here and no operator-declared binding: devices are served at the address they lease", addrString(c.Addr))}
		}
		return dev, false, err
	}
	switch {
	case h.Device != nil:
		dev, stored = *h.Device, true
	case h.MAC != "":
		dev, err = tx.Devices().Get(h.MAC)
		switch {
		case err == nil:
			stored = true
		case !errors.Is(err, core.ErrNotFound):
			return dev, false, err
		default:
			dev, err = s.firstContact(h)
		}
	default:
		// A binding by serial or client id only: the device record that
		// carries that serial, else the device names its MAC itself.
		dev, stored, err = s.boundBySerial(tx, h.Binding, c)
	}
	if err != nil {
		return dev, stored, err
	}
	return dev, stored, check(&dev, h.Binding, c)
}

// firstContact is the record of a holder the store does not know yet: what
// the DHCP server knows in memory, else what the lease or binding says.
func (s *Service) firstContact(h core.Holder) (core.Device, error) {
	if f := s.opt.Pending; f != nil {
		if d, ok := f.DeviceByIP(h.Addr); ok && d.MAC == h.MAC {
			return d, nil
		}
	}
	d := core.Device{ID: h.MAC, MAC: h.MAC, IP: h.Addr.String(), Kind: core.KindUnknown}
	if l := h.Lease; l != nil {
		d.Subnet, d.Hostname = l.Subnet, l.Hostname
	}
	if b := h.Binding; b != nil {
		d.Serial, d.Hostname = b.Serial, b.Hostname
		if b.Kind != "" {
			d.Kind = b.Kind
		}
	}
	return d, nil
}

// boundBySerial identifies the device of a binding declared without a MAC.
func (s *Service) boundBySerial(tx core.Tx, b *core.Binding, c *Client) (core.Device, bool, error) {
	if b.Serial != "" {
		d, err := tx.Devices().BySerial(b.Serial)
		if err == nil {
			return d, true, nil
		}
		if !errors.Is(err, core.ErrNotFound) {
			return d, false, err
		}
	}
	mac := c.BaseMAC
	if mac == "" && c.ONIE != nil {
		mac = c.ONIE.MAC
	}
	nm, err := core.NormalizeMAC(mac)
	if err != nil {
		return core.Device{}, false, &Error{Status: 403, Kind: RefusedFact,
			Reason: fmt.Sprintf("%s is reserved for serial %q; the request must name the device's MAC (BASE-MAC-ADDRESS)", b.IP, b.Serial)}
	}
	d := core.Device{ID: nm, MAC: nm, IP: b.IP.String(), Serial: b.Serial, Hostname: b.Hostname, Kind: core.KindUnknown}
	if b.Kind != "" {
		d.Kind = b.Kind
	}
	return d, false, nil
}

// check refuses a request whose self-description contradicts the device it
// comes from (or the binding of its address), and any stated fact outside
// its character set. Facts the record does not have yet are learnt later
// (learn); none is ever replaced.
func check(d *core.Device, b *core.Binding, c *Client) error {
	type claim struct {
		fact, header, v, have string
		valid                 func(string) error
	}
	claims := []claim{
		{"serial", "SERIAL-NUMBER", c.Serial, d.Serial, core.CheckSerial},
		{"product", "PRODUCT-NAME", c.Product, d.Product, core.CheckProduct},
		{"version", "SONiC-VERSION", c.SONiCVersion, "", checkSONiCVersion},
	}
	if o := c.ONIE; o != nil {
		claims = append(claims,
			claim{"serial", "ONIE-SERIAL-NUMBER", o.Serial, d.Serial, core.CheckSerial},
			claim{"platform", "ONIE-MACHINE", o.Platform(), d.Platform, core.CheckPlatform},
			claim{"version", "ONIE-VERSION", o.Version, "", core.CheckVersion})
	}
	if b != nil && b.Serial != "" {
		claims = append(claims, claim{"serial", "SERIAL-NUMBER", c.Serial, b.Serial, core.CheckSerial})
	}
	for _, cl := range claims {
		if cl.v == "" {
			continue
		}
		if err := cl.valid(cl.v); err != nil {
			return &Error{Status: 400, Kind: RefusedFact, Reason: cl.header + ": " + err.Error()}
		}
		if cl.have != "" && cl.have != cl.v && !(cl.fact == "platform" && platformIs(cl.have, cl.v)) {
			return mismatch(d, cl.header, cl.have, cl.v)
		}
	}
	for _, m := range []struct{ header, v string }{{"BASE-MAC-ADDRESS", c.BaseMAC}, {"ONIE-ETH-ADDR", onieMAC(c)}} {
		if m.v == "" {
			continue
		}
		nm, err := core.NormalizeMAC(m.v)
		if err != nil {
			return &Error{Status: 400, Kind: RefusedFact, Reason: m.header + ": " + err.Error()}
		}
		if d.BaseMAC != "" && d.BaseMAC != nm {
			return mismatch(d, m.header, d.BaseMAC, nm)
		}
	}
	return nil
}

func onieMAC(c *Client) string {
	if c.ONIE == nil {
		return ""
	}
	return c.ONIE.MAC
}

func checkSONiCVersion(v string) error {
	if strings.EqualFold(v, "N.A") || strings.EqualFold(v, "N/A") {
		return nil
	}
	return core.CheckVersion(v)
}

func mismatch(d *core.Device, header, have, claimed string) error {
	return &Error{Status: 403, Kind: RefusedMismatch,
		Reason: fmt.Sprintf("%s %q does not match device %s (recorded %q): a device cannot speak for another", header, claimed, d.ID, have)}
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return "(no address)"
	}
	return a.Unmap().String()
}

// learn adds to d what c says about itself and d does not know yet; check
// has already refused anything that contradicts d. The SONiC version is the
// one fact that follows the device (it changes with each image).
func learn(d *core.Device, c *Client) {
	if c.hasSONiCHeaders() && (d.Kind == "" || d.Kind == core.KindUnknown || d.Kind == core.KindONIE) {
		d.Kind = core.KindSONiC // ONIE installed SONiC on this switch
	}
	setEmpty(&d.Serial, c.Serial)
	setEmpty(&d.Product, c.Product)
	if v := strings.TrimSpace(c.SONiCVersion); v != "" && profile.BuildVersion(v) != "" {
		d.SONiCVer = v
	}
	if c.BaseMAC != "" {
		if nm, err := core.NormalizeMAC(c.BaseMAC); err == nil {
			setEmpty(&d.BaseMAC, nm)
		}
	}
	if o := c.ONIE; o != nil {
		if d.Kind == "" || d.Kind == core.KindUnknown {
			d.Kind = core.KindONIE
		}
		setEmpty(&d.Serial, o.Serial)
		setEmpty(&d.Platform, o.Platform())
		if nm, err := core.NormalizeMAC(o.MAC); err == nil {
			setEmpty(&d.BaseMAC, nm)
		}
	}
	if d.Kind == "" {
		d.Kind = core.KindUnknown
	}
	if d.MAC == "" {
		d.MAC = d.ID
	}
	if c.Addr.IsValid() {
		d.IP = c.Addr.Unmap().String() // identify proved it holds this address
	}
}

func setEmpty(dst *string, v string) {
	if *dst == "" {
		*dst = v
	}
}

// Facts turns a device record into template facts.
func Facts(d *core.Device) *profile.Facts {
	f := &profile.Facts{ID: d.ID, MAC: d.MAC, Serial: d.Serial, Product: d.Product, Platform: d.Platform,
		Kind: string(d.Kind), IP: d.IP, Subnet: d.Subnet, SONiCVersion: d.SONiCVer, VendorClass: d.VendorClass,
		DHCPHostname: d.Hostname, Labels: d.Labels}
	if f.Platform == "" {
		if p, ok := strings.CutPrefix(d.VendorClass, "onie_vendor:"); ok {
			f.Platform = p
		}
	}
	return f
}

// pick returns the profile for f: the first match, else the default.
func (s *Service) pick(f *profile.Facts) (*profile.Profile, error) {
	set := s.profiles.Load()
	if p := set.Match(f); p != nil {
		return p, nil
	}
	if s.opt.DefaultProfile != "" {
		if p := set.Get(s.opt.DefaultProfile); p != nil {
			return p, nil
		}
	}
	return nil, notFound("no profile matches device %s (kind %s, serial %q, product %q, platform %q, ip %s, subnet %q) and no default profile is configured",
		f.ID, f.Kind, f.Serial, f.Product, f.Platform, f.IP, f.Subnet)
}

// resolve identifies c, applies what it says about itself and picks its
// profile.
func (s *Service) resolve(c *Client) (core.Device, bool, *profile.Profile, error) {
	var dev core.Device
	var stored bool
	err := s.opt.Store.View(func(tx core.Tx) error {
		var err error
		dev, stored, err = s.identify(tx, c)
		return err
	})
	if err != nil {
		return dev, stored, nil, err
	}
	learn(&dev, c)
	p, err := s.pick(Facts(&dev))
	return dev, stored, p, err
}

// Served is a rendered document and who it was for.
type Served struct {
	Body    []byte
	Device  core.Device
	Profile string
}

// ZTPJSON renders the ztp.json for the switch behind c.
func (s *Service) ZTPJSON(ctx context.Context, c *Client) (*Served, error) {
	dev, _, p, err := s.resolve(c)
	if err != nil {
		s.refused(c, dev, "ztp.json", err)
		return nil, err
	}
	f := Facts(&dev)
	base := s.BaseURL(c)
	r, err := p.Render(f, profile.Env{BaseURL: base}, profile.RenderSections)
	if err != nil {
		return nil, err
	}
	in := ZTPInput{DeviceID: dev.ID, BaseURL: base, ReportedVersion: dev.SONiCVer}
	if c.SONiCVersion != "" { // "N.A" says unknown now, whatever was stored
		in.ReportedVersion = c.SONiCVersion
	}
	if NeedsFirmware(r, in.ReportedVersion) {
		im, err := s.sonicImage(r, f)
		if err != nil {
			return nil, err
		}
		in.FirmwareURL = base + endpoints.ImagesPath + im.SHA256
	}
	if r.Cluster != "" && s.opt.Join != nil {
		// The join section carries an enrollment secret; identify has
		// established that c holds the device's address.
		if in.Join, err = s.opt.Join.ZTPSection(ctx, dev, *r); err != nil {
			return nil, unavailable("join section for cluster %q: %v", r.Cluster, err)
		}
	}
	body, err := BuildZTPJSON(r, in)
	if err != nil {
		return nil, err
	}
	s.progress(c, dev, p.Name, core.StateZTPServed, "ztp.json.served", nil)
	return &Served{Body: body, Device: dev, Profile: p.Name}, nil
}

// sonicImage finds the stored SONiC installer a profile asks for: by name,
// else the newest sonic-installer (or onie-installer) of that version for the
// device's platform or for no platform.
func (s *Service) sonicImage(r *profile.Result, f *profile.Facts) (core.Image, error) {
	if s.opt.Images == nil {
		return core.Image{}, unavailable("no image store")
	}
	if r.SONiC.Image != "" {
		im, err := s.imgs.resolve(s.opt.Images, r.SONiC.Image)
		if err != nil {
			return im, unavailable("profile %q wants SONiC image %q, which is not in the image store (ztpd image add)", r.Profile, r.SONiC.Image)
		}
		return im, nil
	}
	im, err := s.pickInstaller([]string{f.Platform}, func(im core.Image) bool {
		return profile.BuildVersion(im.Version) == r.SONiC.Version
	})
	if err != nil {
		return im, unavailable("profile %q wants SONiC %s, but no sonic-installer image with --version %s for platform %q is stored",
			r.Profile, r.SONiC.Version, r.SONiC.Version, f.Platform)
	}
	return im, nil
}

// pickInstaller chooses among sonic-installer and onie-installer images: an
// exact platform match (candidates in order, onie-installer before
// sonic-installer) beats an image without a platform; newest wins a tie.
func (s *Service) pickInstaller(platforms []string, ok func(core.Image) bool) (core.Image, error) {
	var all []core.Image
	for _, k := range []string{"onie-installer", "sonic-installer"} {
		l, err := s.opt.Images.List(k)
		if err != nil {
			return core.Image{}, err
		}
		all = append(all, l...)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].Created.After(all[j].Created) })
	for _, plat := range platforms {
		if plat == "" {
			continue
		}
		for _, k := range []string{"onie-installer", "sonic-installer"} {
			for _, im := range all {
				if im.Kind == k && platformIs(im.Platform, plat) && ok(im) {
					return im, nil
				}
			}
		}
	}
	for _, k := range []string{"onie-installer", "sonic-installer"} {
		for _, im := range all {
			if im.Kind == k && im.Platform == "" && ok(im) {
				return im, nil
			}
		}
	}
	return core.Image{}, core.ErrNotFound
}

// ConfigDB renders config_db.json of device id for the requester c, which
// must be that device.
func (s *Service) ConfigDB(ctx context.Context, c *Client, id string) (*Served, error) {
	nid, err := core.NormalizeMAC(id)
	if err != nil {
		return nil, notFound("no device %q", id)
	}
	var target core.Device
	err = s.opt.Store.View(func(tx core.Tx) error {
		var err error
		target, _, err = s.identify(tx, c)
		return err
	})
	if err != nil {
		s.refused(c, target, "config_db.json", err)
		return nil, err
	}
	if target.ID != nid {
		err := forbidden("config of device %s is served only to that device, not to device %s at %s", nid, target.ID, addrString(c.Addr))
		s.refused(c, target, "config_db.json", err)
		return nil, err
	}
	learn(&target, c)
	f := Facts(&target)
	p, err := s.pick(f)
	if err != nil {
		return nil, err
	}
	r, err := p.Render(f, profile.Env{BaseURL: s.BaseURL(c)}, profile.RenderConfigDB)
	if err != nil {
		return nil, err
	}
	var km *KubeMaster
	if r.Cluster != "" && s.opt.Join != nil {
		if km, err = s.opt.Join.KubernetesMaster(ctx, target, *r); err != nil {
			return nil, unavailable("kubernetes master for cluster %q: %v", r.Cluster, err)
		}
	}
	body, err := BuildConfigDB(r, f, km)
	if err != nil {
		return nil, err
	}
	s.progress(c, target, p.Name, core.StateConfigServed, "ztp.config.served", nil)
	return &Served{Body: body, Device: target, Profile: p.Name}, nil
}

// ONIEInstallerName reports whether name is one of the file names ONIE's
// discovery waterfall asks for when DHCP gave it no option 114
// (onie-installer-<arch>-<vendor>_<machine>[-r<rev>], onie-installer-<vendor>_<machine>,
// onie-installer-<arch>, onie-installer, each optionally with .bin), and
// returns the platform part as a hint for ONIEInstaller.
func ONIEInstallerName(name string) (hint string, ok bool) {
	rest, ok := strings.CutPrefix(strings.TrimSuffix(name, ".bin"), "onie-installer")
	if !ok || (rest != "" && rest[0] != '-') {
		return "", false
	}
	return strings.TrimPrefix(rest, "-"), true
}

// ONIEInstaller picks the installer for the ONIE switch behind c. hint is a
// platform named by the request itself (a TFTP onie-installer-<platform>
// file name). A profile that pins a SONiC image or version wins; otherwise
// the platform from the ONIE headers, the hint, or the DHCP vendor class
// selects it.
func (s *Service) ONIEInstaller(ctx context.Context, c *Client, hint string) (core.Image, core.Device, error) {
	// Installers are public images: a switch nobody holds an address for
	// (or without a matching profile) still gets one by platform, it is
	// just not recorded.
	dev, _, p, err := s.resolve(c)
	var idErr *Error
	if err != nil && !(errors.As(err, &idErr) && (idErr.Status == 404 || idErr.Kind == RefusedNoHolder)) {
		s.refused(c, dev, "onie-installer", err)
		return core.Image{}, dev, err
	}
	f := Facts(&dev)
	if p != nil && dev.ID != "" {
		if sc := p.SONiC(); sc != nil {
			im, ierr := s.sonicImage(&profile.Result{Profile: p.Name, SONiC: sc}, f)
			if ierr != nil {
				return im, dev, ierr
			}
			s.progress(c, dev, p.Name, core.StateImageServed, "onie.installer.served", map[string]string{"image": im.Name})
			return im, dev, nil
		}
	}
	var plats []string
	if o := c.ONIE; o != nil {
		plats = append(plats, o.Platform())
		if o.MachineRev != "" {
			plats = append(plats, (&ONIE{Arch: o.Arch, Machine: o.Machine}).Platform())
		}
	}
	plats = append(plats, hint, f.Platform)
	im, err := s.pickInstaller(plats, func(core.Image) bool { return true })
	if err != nil {
		return im, dev, notFound("no ONIE installer stored for platform %q (ztpd image add FILE --kind onie-installer --platform P)", firstNonEmpty(plats))
	}
	if dev.ID != "" {
		name := ""
		if p != nil {
			name = p.Name
		}
		s.progress(c, dev, name, core.StateImageServed, "onie.installer.served", map[string]string{"image": im.Name})
	}
	return im, dev, nil
}

// platformIs matches a stored platform against a requested one; a request
// without the machine revision ("x86_64-accton_as7712_32x", as in ONIE's
// fallback file names) matches every revision.
func platformIs(stored, want string) bool {
	if stored == want {
		return true
	}
	rest, ok := strings.CutPrefix(stored, want+"-r")
	return ok && rest != "" && strings.Trim(rest, "0123456789") == ""
}

func firstNonEmpty(l []string) string {
	for _, s := range l {
		if s != "" {
			return s
		}
	}
	return ""
}

// Image resolves a stored image by sha256, unique prefix or name; kind, when
// not empty, restricts it.
func (s *Service) Image(ref, kind string) (core.Image, *os.File, error) {
	if s.opt.Images == nil {
		return core.Image{}, nil, notFound("no image store")
	}
	im, err := s.opt.Images.Resolve(ref)
	if err != nil {
		if errors.Is(err, core.ErrNotFound) {
			return im, nil, notFound("no image %q", ref)
		}
		return im, nil, &Error{Status: 400, Reason: err.Error()}
	}
	if kind != "" && im.Kind != kind {
		return im, nil, notFound("no %s %q", kind, ref)
	}
	f, err := s.opt.Images.Open(im)
	if err != nil {
		return im, nil, unavailable("image %s: content missing: %v", im.Name, err)
	}
	return im, f, nil
}

// RecordImage notes that the device behind c fetched im (known devices only).
func (s *Service) RecordImage(c *Client, im core.Image) {
	var dev core.Device
	var stored bool
	_ = s.opt.Store.View(func(tx core.Tx) error {
		var err error
		dev, stored, err = s.identify(tx, c)
		return err
	})
	if !stored {
		return
	}
	learn(&dev, c)
	s.progress(c, dev, "", core.StateImageServed, "image.served", map[string]string{"image": im.Name, "sha256": im.SHA256})
}

// OpenFile opens a file of the files directory by a client-supplied name.
func (s *Service) OpenFile(name string) (*os.File, error) {
	if s.files == nil {
		return nil, notFound("no file %q", name)
	}
	f, err := safepath.Open(s.files, name)
	if err != nil {
		if errors.Is(err, safepath.ErrUnsafe) {
			return nil, forbidden("%v", err)
		}
		return nil, notFound("no file %q", name)
	}
	return f, nil
}

// progress moves the device forward to next and appends an event (through
// the recorder's group commit).
func (s *Service) progress(c *Client, dev core.Device, profileName string, next core.DeviceState, evType string, fields map[string]string) {
	ev := core.Event{Time: s.now(), Type: evType, Device: dev.ID, Fields: make(map[string]string, len(fields)+4)}
	ev.Fields["transport"] = c.Transport
	ev.Fields["addr"] = addrString(c.Addr)
	if profileName != "" {
		ev.Fields["profile"] = profileName
	}
	for k, v := range fields {
		ev.Fields[k] = v
	}
	s.opt.Devices.Progress(devices.Progress{Device: dev, Profile: profileName, Next: next, Event: ev})
}

// refused accounts for a request that got no content: a metric by reason,
// an info log (at most one per address every refuseLogEvery), and an event
// on the device's record when the device is known (it holds the address).
// A request from an address nobody holds is counted and logged, never
// stored: made-up devices must not fill the store or push out events.
func (s *Service) refused(c *Client, dev core.Device, what string, reason error) {
	var e *Error
	if !errors.As(reason, &e) || e.Status >= 500 {
		return
	}
	why := e.Kind
	if why == "" {
		why = "forbidden"
		if e.Status == 404 {
			why = "no-profile"
		}
	}
	refusedTotal.WithLabelValues(what, why).Inc()
	if s.logRefusal.allow(c.Addr, s.now()) {
		s.log.Info("device refused", "what", what, "addr", addrString(c.Addr), "transport", c.Transport,
			"device", dev.ID, "reason", e.Reason)
	}
	if dev.ID == "" || why == RefusedNoHolder {
		return
	}
	typ := "ztp.refused"
	if e.Status == 404 {
		typ = "ztp.unknown"
	}
	ev := core.Event{Time: s.now(), Type: typ, Device: dev.ID, Message: e.Reason,
		Fields: map[string]string{"what": what, "transport": c.Transport, "addr": addrString(c.Addr)}}
	s.opt.Devices.Progress(devices.Progress{Event: ev})
}

// Flush waits until every fetch so far is recorded in the store.
func (s *Service) Flush() { s.opt.Devices.Flush() }

// InstanceID is the stable cloud-init instance id of a VM: its
// "instance-id" label, else a name-based UUID (version 5) of its MAC.
func InstanceID(d *core.Device) string {
	if v := d.Labels["instance-id"]; v != "" {
		return v
	}
	h := sha1.Sum([]byte("ztpd-instance:" + d.ID))
	h[6] = h[6]&0x0f | 0x50
	h[8] = h[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}
