package core

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Device identity, the one rule every device-facing path applies (content
// over HTTP and TFTP, cloud-init metadata, joins, progress records):
//
// A device is the holder of the address it asks from. An address is held by
//  1. the client with an active, unexpired lease on it (or a reservation's
//     lease, which does not expire), else
//  2. an operator-declared binding of the address: a DHCP reservation (by
//     MAC, serial or client id) for a device that addresses itself
//     statically, or an approved device record with a fixed address.
//
// Anything a device says about itself (serial, base MAC, product headers)
// only selects among what its address is entitled to: a value that
// disagrees with the holder's record is refused and never written over it.
// An address that nobody holds gets nothing and creates no record.

// Binding is an operator-declared address: the device entitled to IP when it
// holds no lease there. At least one of MAC, Serial and ClientID is set.
type Binding struct {
	IP       netip.Addr
	MAC      string // normalised; "" when declared by serial or client id only
	Serial   string
	ClientID string
	Hostname string
	Kind     DeviceKind
}

// Bindings answers which binding, if any, declares an address. The
// configuration's DHCP reservations implement it.
type Bindings interface {
	BindingFor(ip netip.Addr) (Binding, bool)
}

// Holder is who an address belongs to right now.
type Holder struct {
	Addr netip.Addr
	// MAC is the holder's hardware address: the lease's, the binding's, or
	// the fixed-address device's. Empty only for a binding declared by
	// serial or client id that no device record claims yet.
	MAC     string
	Lease   *Lease   // the active lease, when held by one
	Binding *Binding // the declaring binding, when held by one
	Device  *Device  // the stored record of an approved fixed-address device
}

// ByLease reports whether the address is held through a DHCP lease.
func (h Holder) ByLease() bool { return h.Lease != nil }

// ErrNoHolder means nobody is entitled to the address: no active lease and
// no operator-declared binding.
var ErrNoHolder = errors.New("address holds no active lease and no operator-declared binding")

// LeaseHolds reports whether l entitles its client to its address at now:
// active and unexpired, or a reservation.
func LeaseHolds(l Lease, now time.Time) bool {
	if l.State != LeaseActive || l.MAC == "" {
		return false
	}
	return l.Reserved || l.Expiry.IsZero() || now.Before(l.Expiry)
}

// HolderOf returns who holds ip at now (see the rule above). b may be nil.
// It reads the lease and the fixed-address device inside tx.
func HolderOf(tx Tx, ip netip.Addr, now time.Time, b Bindings) (Holder, error) {
	ip = ip.Unmap()
	h := Holder{Addr: ip}
	if !ip.IsValid() {
		return h, ErrNoHolder
	}
	l, err := tx.Leases().Get(ip.String())
	switch {
	case err == nil && LeaseHolds(l, now):
		h.Lease, h.MAC = &l, l.MAC
		return h, nil
	case err != nil && !errors.Is(err, ErrNotFound):
		return h, err
	}
	if b != nil {
		if bd, ok := b.BindingFor(ip); ok {
			h.Binding, h.MAC = &bd, bd.MAC
			return h, nil
		}
	}
	d, err := tx.Devices().ByFixedIP(ip.String())
	if err != nil && !errors.Is(err, ErrNotFound) {
		return h, err
	}
	if err == nil && d.Approved && d.FixedIP == ip.String() {
		h.Device, h.MAC = &d, d.MAC
		return h, nil
	}
	return h, ErrNoHolder
}

// Device facts come from the devices themselves (DHCP options, HTTP headers,
// join requests). Each is checked against a strict character set before it
// is stored or rendered, so a hostile value is refused at the edge instead
// of relying on every document that later carries it.

// FactError names a device-supplied value that is not acceptable.
type FactError struct {
	Fact  string // e.g. "serial"
	Value string // quoted when shown
	Want  string // what is allowed
}

func (e *FactError) Error() string {
	v := e.Value
	if len(v) > 64 {
		v = v[:64] + "..."
	}
	return fmt.Sprintf("%s %q is not acceptable: %s", e.Fact, v, e.Want)
}

type charset struct {
	max   int
	extra string // allowed besides letters and digits (never first)
	want  string
}

var (
	serialChars   = charset{64, "._-/:+", "1-64 letters, digits and . _ - / : +, starting with a letter or digit"}
	productChars  = charset{64, "._-/:+ ()", "1-64 letters, digits, spaces and . _ - / : + ( ), starting with a letter or digit"}
	platformChars = charset{128, "._-", "1-128 letters, digits and . _ -, starting with a letter or digit"}
	versionChars  = charset{100, "._+-/", "1-100 letters, digits and . _ + - /, starting with a letter or digit"}
)

func (cs charset) check(fact, v string) error {
	bad := len(v) == 0 || len(v) > cs.max || !isAlnum(v[0]) || v[len(v)-1] == ' '
	for i := 0; i < len(v) && !bad; i++ {
		bad = !isAlnum(v[i]) && strings.IndexByte(cs.extra, v[i]) < 0
	}
	if bad {
		return &FactError{Fact: fact, Value: v, Want: cs.want}
	}
	return nil
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// CheckSerial validates a serial number (SONiC SERIAL-NUMBER, option 61,
// ONIE-SERIAL-NUMBER, join requests).
func CheckSerial(v string) error { return serialChars.check("serial", v) }

// CheckProduct validates a product name (PRODUCT-NAME, option 61).
func CheckProduct(v string) error { return productChars.check("product", v) }

// CheckPlatform validates an ONIE platform (onie_vendor:<platform>, ONIE-*
// headers), e.g. x86_64-accton_as7712_32x-r0.
func CheckPlatform(v string) error { return platformChars.check("platform", v) }

// CheckVersion validates a software version (SONiC-VERSION, ONIE-VERSION).
func CheckVersion(v string) error { return versionChars.check("version", v) }

// CheckHostname validates a host name (DHCP option 12, join requests): RFC
// 1123 labels of letters, digits and hyphens, dot-separated, at most 253.
func CheckHostname(v string) error {
	bad := v == "" || len(v) > 253
	label := 0
	for i := 0; i <= len(v) && !bad; i++ {
		if i == len(v) || v[i] == '.' {
			bad = label == 0 || label > 63 || v[i-1] == '-' || v[i-label] == '-'
			label = 0
			continue
		}
		bad = !isAlnum(v[i]) && v[i] != '-'
		label++
	}
	if bad {
		return &FactError{Fact: "hostname", Value: v, Want: "RFC 1123 labels of letters, digits and -, dot-separated, at most 253 characters"}
	}
	return nil
}

// AmbiguousSerial is the refusal to resolve a serial several devices
// stated: an operator's action by serial could reach the wrong one (a
// device that states a victim's serial). It names every candidate so the
// operator can act by MAC instead.
func AmbiguousSerial(serial string, candidates []Device) error {
	var b strings.Builder
	fmt.Fprintf(&b, "serial %q is ambiguous: %d devices stated it; act on one by its MAC:", serial, len(candidates))
	for i, d := range candidates {
		if i > 0 {
			b.WriteByte(';')
		}
		ip := d.IP
		if ip == "" {
			ip = "no address"
		}
		seen := "never seen"
		if !d.LastSeen.IsZero() {
			seen = "last seen " + d.LastSeen.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(&b, " %s (%s, %s", d.MAC, ip, seen)
		if d.Serial == serial {
			b.WriteString(", holds the serial")
		}
		b.WriteByte(')')
	}
	return Errorf(KindConflict, "%s", b.String())
}
