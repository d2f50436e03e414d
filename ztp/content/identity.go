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
	c.stated, c.serialHolder = devices.Facts{}, ""
	h, err := core.HolderOf(tx, c.Addr, s.now(), s.opt.Bindings)
	if errors.Is(err, core.ErrNoHolder) && c.neighborHolds && c.Neighbor != "" && c.Addr.IsLinkLocalUnicast() {
		h, err = core.Holder{Addr: c.Addr, MAC: c.Neighbor}, nil
	}
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
	c.stated = statedFacts(c)
	return dev, stored, noteSerialHolder(tx, &dev, c)
}

// noteSerialHolder notes in c which device holds the serial c states, when
// dev has none yet: learn gives dev only a serial nobody else holds.
func noteSerialHolder(tx core.Tx, dev *core.Device, c *Client) error {
	serial := c.stated.Serial
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
	if h.Lease == nil && h.Binding == nil && h.Device == nil {
		// A link-local neighbour asking for an installer (identify): ONIE,
		// as DHCP classifies an ONIE client.
		d.Kind = core.KindONIE
	}
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

// statedFacts is what c's headers state about its device, as the facts
// the devices service merges: the SONiC headers' serial and base MAC before
// the ONIE headers', a kind of SONiC when any SONiC header is present,
// else ONIE. A MAC that is not one and a SONiC version that names no build
// state nothing (check refuses the former).
func statedFacts(c *Client) devices.Facts {
	f := devices.Facts{Source: devices.SourceContent, Serial: c.Serial, Product: c.Product}
	if c.hasSONiCHeaders() {
		f.Kind = core.KindSONiC
	}
	if v := strings.TrimSpace(c.SONiCVersion); v != "" && profile.BuildVersion(v) != "" {
		f.SONiCVer = v
	}
	if nm, err := core.NormalizeMAC(c.BaseMAC); c.BaseMAC != "" && err == nil {
		f.BaseMAC = nm
	}
	if o := c.ONIE; o != nil {
		if f.Kind == "" {
			f.Kind = core.KindONIE
		}
		if f.Serial == "" {
			f.Serial = o.Serial
		}
		f.Platform = o.Platform()
		if nm, err := core.NormalizeMAC(o.MAC); f.BaseMAC == "" && err == nil {
			f.BaseMAC = nm
		}
	}
	if c.Addr.IsValid() {
		f.IP = c.Addr.Unmap().String() // identify proved it holds this address
	}
	return f
}

// check refuses a request whose self-description contradicts the device it
// comes from (or the binding of its address) by the merge rule
// (devices.Contradicts), and any stated fact outside its character set
// (devices.CheckFact), naming the header that carried it. Facts the record
// does not have yet are learnt later (learn); none is ever replaced.
func check(d *core.Device, b *core.Binding, c *Client) error {
	type claim struct {
		fact, header, v string
		as              devices.Facts // v as the identity fact it states (none for a version)
	}
	claims := []claim{
		{"serial", "SERIAL-NUMBER", c.Serial, devices.Facts{Serial: c.Serial}},
		{"product", "PRODUCT-NAME", c.Product, devices.Facts{Product: c.Product}},
		{"version", "SONiC-VERSION", sonicVersion(c.SONiCVersion), devices.Facts{}},
	}
	if o := c.ONIE; o != nil {
		claims = append(claims,
			claim{"serial", "ONIE-SERIAL-NUMBER", o.Serial, devices.Facts{Serial: o.Serial}},
			claim{"platform", "ONIE-MACHINE", o.Platform(), devices.Facts{Platform: o.Platform()}},
			claim{"version", "ONIE-VERSION", o.Version, devices.Facts{}})
	}
	for _, cl := range claims {
		if cl.v == "" {
			continue
		}
		if err := devices.CheckFact(cl.fact, cl.v); err != nil {
			return &Error{Status: 400, Kind: RefusedFact, Reason: cl.header + ": " + err.Error()}
		}
		if bad := devices.Contradicts(d, &cl.as); bad != 0 {
			return mismatch(d, cl.header, recorded(d, bad), cl.v)
		}
		if b != nil && b.Serial != "" && cl.header == "SERIAL-NUMBER" && b.Serial != cl.v {
			return mismatch(d, cl.header, b.Serial, cl.v)
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
		if devices.Contradicts(d, &devices.Facts{BaseMAC: nm}) != 0 {
			return mismatch(d, m.header, d.BaseMAC, nm)
		}
	}
	return nil
}

// recorded is d's value of the identity fact f.
func recorded(d *core.Device, f devices.FactSet) string {
	switch f {
	case devices.FactSerial:
		return d.Serial
	case devices.FactProduct:
		return d.Product
	case devices.FactPlatform:
		return d.Platform
	}
	return ""
}

func onieMAC(c *Client) string {
	if c.ONIE == nil {
		return ""
	}
	return c.ONIE.MAC
}

// sonicVersion is the SONiC-VERSION a device states: "N.A" (a build that
// names none) states nothing.
func sonicVersion(v string) string {
	if strings.EqualFold(v, "N.A") || strings.EqualFold(v, "N/A") {
		return ""
	}
	return v
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

// learn merges what c states about its device (identify checked it) into
// d, the view the request is answered from, by the one rule
// (devices.Merge): check has already refused anything that contradicts d.
// A serial another device holds (identify looked: c.serialHolder) is not
// d's: it selects nothing here (no profile or binding of that serial), and
// d carries it as a claim (SerialConflict); the devices service records
// the conflict on both records.
func learn(d *core.Device, c *Client) {
	f := c.stated
	if h := c.serialHolder; h != "" && h != d.ID && d.Serial == "" && f.Serial != "" {
		d.SerialConflict = &core.SerialConflict{Serial: f.Serial, With: []string{h}}
		f.Serial = ""
	}
	devices.Merge(d, &f)
}

// Facts turns a device record into template facts.
func Facts(d *core.Device) *profile.Facts {
	f := &profile.Facts{ID: d.ID, MAC: d.MAC, Serial: d.Serial, Product: d.Product, Platform: d.Platform,
		Kind: string(d.Kind), IP: d.IP, Subnet: d.Subnet, SONiCVersion: d.SONiCVer, VendorClass: d.VendorClass,
		DHCPHostname: d.Hostname, Labels: d.Labels, CircuitID: d.CircuitID, RemoteID: d.RemoteID}
	if f.Platform == "" {
		if p, ok := strings.CutPrefix(d.VendorClass, "onie_vendor:"); ok {
			f.Platform = p
		}
	}
	return f
}
