package joiner

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// asker is who a request says it is: the device a credential was issued
// to (an agent's, a report's), or for a join what the request states (its
// MAC and serial). Nothing in it is proof of an address.
type asker struct {
	device string // the credential's device; "" for a join
	mac    string // stated (a join)
	serial string // stated (a join)
}

// holderOf is the device that holds addr at now, the one check of every
// joiner door (joins, node reports, agent credentials): a device is the
// holder of an active lease at the address it asks from, or of an
// operator-declared binding of that address (core.HolderOf). Only what the
// network proves names the device: a lease, a binding by MAC, an approved
// device's fixed address. What a request says (its MAC, its serial)
// selects among what the address is entitled to; it never widens it and
// never takes another device's identity.
//
// A binding declared by serial only names no MAC, and a serial is
// something a device says: it may select, never prove. The address is the
// binding's; the binding's device is the record that holds its serial
// (devices settles a serial on the device that stated it first and never
// moves it). A request stating another serial is not that device. While
// no record holds the serial, the binding has no device yet: a join that
// states the binding's serial selects it and names its own MAC (the first
// contact of a static device, as content serves it); a credential's device
// is not the binding's.
//
// It returns the holder and its device. A request from an address nobody
// holds is ErrNotHolder; a credential's device that is not the holder is
// ErrWrongHolder; a join whose statements do not select the binding is
// ErrBindingMismatch.
func holderOf(tx core.Tx, addr netip.Addr, now time.Time, b core.Bindings, a asker) (core.Holder, string, error) {
	addr = addr.Unmap()
	h, err := core.HolderOf(tx, addr, now, b)
	if errors.Is(err, core.ErrNoHolder) {
		return h, "", fmt.Errorf("%w: %s", ErrNotHolder, addr)
	}
	if err != nil {
		return h, "", err
	}
	device := h.MAC
	if device == "" {
		if device, err = bindingDevice(tx, h.Binding, a); err != nil {
			return h, "", err
		}
	}
	if a.device != "" && device != a.device {
		return h, "", &wrongHolderError{addr: addr, holder: device}
	}
	return h, device, nil
}

// bindingDevice is the device of a binding declared without a MAC (see
// holderOf): the record holding its serial, else for a join stating that
// serial the MAC it names; "" when it has none yet.
func bindingDevice(tx core.Tx, bd *core.Binding, a asker) (string, error) {
	if bd == nil || bd.Serial == "" {
		// By client id only: nothing a request says here is checked
		// against it, so nothing selects it.
		if a.device != "" {
			return "", nil
		}
		return "", ErrBindingMismatch
	}
	if a.serial != "" && a.serial != bd.Serial {
		return "", ErrBindingMismatch
	}
	holder, held, err := tx.Devices().SerialHolder(bd.Serial)
	if err != nil {
		return "", err
	}
	switch {
	case held:
		return holder, nil
	case a.device != "":
		return "", nil
	case a.mac == "" || a.serial == "":
		return "", ErrBindingMismatch
	}
	return a.mac, nil
}

// wrongHolderError is ErrWrongHolder saying who holds the address.
type wrongHolderError struct {
	addr   netip.Addr
	holder string // its device; "" for a binding without one
}

func (e *wrongHolderError) Error() string { return ErrWrongHolder.Error() + ": " + e.detail() }

func (e *wrongHolderError) Unwrap() error { return ErrWrongHolder }

// detail says from where the request came and who holds that address.
func (e *wrongHolderError) detail() string {
	who := "a binding without a device"
	if e.holder != "" {
		who = "device " + e.holder
	}
	return fmt.Sprintf("asked from %s, which %s holds", e.addr, who)
}
