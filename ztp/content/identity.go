package content

// Identity: which device a request comes from (the holder of its address),
// and what it may add to that device's record.

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/internal/profile"
)

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
	if err := check(&dev, h.Binding, c); err != nil {
		return dev, stored, err
	}
	return dev, stored, noteSerialHolder(tx, &dev, c)
}

// noteSerialHolder notes in c which device holds the serial c states, when
// dev has none yet: learn gives dev only a serial nobody else holds.
func noteSerialHolder(tx core.Tx, dev *core.Device, c *Client) error {
	c.serialHolder = ""
	serial := c.Serial
	if serial == "" && c.ONIE != nil {
		serial = c.ONIE.Serial
	}
	if serial == "" || dev.Serial != "" {
		return nil
	}
	holder, held, err := tx.Devices().SerialHolder(serial)
	if err != nil {
		return err
	}
	if held && holder != dev.ID {
		c.serialHolder = holder
	}
	return nil
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
		if core.KindOf(err) == core.KindConflict {
			return d, false, &Error{Status: 403, Kind: RefusedMismatch,
				Reason: fmt.Sprintf("%s is reserved for serial %q, which several devices stated: an operator must resolve it", b.IP, b.Serial)}
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
	if c.hasSONiCHeaders() {
		d.Kind, _ = devices.MergeKind(d.Kind, core.KindSONiC, devices.SourceDevice) // ONIE installed SONiC
	}
	learnSerial(d, c, c.Serial)
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
		d.Kind, _ = devices.MergeKind(d.Kind, core.KindONIE, devices.SourceDevice)
		learnSerial(d, c, o.Serial)
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

// learnSerial gives d the serial its request stated when d has none and no
// other device holds it (identify looked: c.serialHolder). A serial
// another device holds is not d's: it selects nothing here (no profile or
// binding of that serial), and it is carried as a claim (SerialConflict)
// for the devices service to record the conflict on both records.
func learnSerial(d *core.Device, c *Client, serial string) {
	if serial == "" || d.Serial != "" {
		return
	}
	if h := c.serialHolder; h != "" && h != d.ID {
		d.SerialConflict = &core.SerialConflict{Serial: serial, With: []string{h}}
		return
	}
	d.Serial = serial
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
