package devices

import (
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/ztpd/ztpd/internal/core"
)

// The one merge rule for what parts learn about a device. A device's
// statements (DHCP options, ZTP headers, join requests) fill in facts its
// record lacks; they never replace an identity fact the record holds (kind,
// serial, product, platform) and never take a serial another device holds.
// A contradiction is an event on the device, the record is kept.

var factConflicts = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "ztpd_device_fact_conflicts_total",
	Help: "Device statements that contradicted the device's record and were not applied, by fact (kind, serial, product, platform).",
}, []string{"fact"})

// Event types of the merge rule.
const (
	// EventFactConflict: a device stated a kind, serial, product or
	// platform that contradicts its record; the record is kept.
	EventFactConflict = "device.fact_conflict"
	// EventSerialConflict: a device stated a serial another device holds;
	// the serial stays with its holder and both records note the conflict.
	EventSerialConflict = "device.serial_conflict"
)

// Source is who states a fact, for the kind rule.
type Source int

const (
	// SourceDevice is the device itself: DHCP options, ZTP headers, a join
	// request. It refines a kind, never changes one.
	SourceDevice Source = iota
	// SourceOperator is an operator's declaration (a reservation's kind):
	// it sets the kind.
	SourceOperator
)

// MergeKind is the kind a record holding old takes when src states stated,
// and whether the statement contradicts the record (then old is kept). An
// unknown kind is refined to any; ONIE is refined to SONiC (ONIE installed
// SONiC on the switch); nothing a device states turns a SONiC switch into
// ONIE, or a switch into a VM or back. An operator's declaration wins.
func MergeKind(old, stated core.DeviceKind, src Source) (kind core.DeviceKind, conflict bool) {
	switch {
	case stated == "" || stated == core.KindUnknown:
		if old == "" {
			return core.KindUnknown, false
		}
		return old, false
	case old == "" || old == core.KindUnknown || old == stated:
		return stated, false
	case src == SourceOperator:
		return stated, false
	case old == core.KindONIE && stated == core.KindSONiC:
		return core.KindSONiC, false
	}
	return old, true
}

// samePlatform reports whether two statements of an ONIE platform name the
// same one: ONIE-MACHINE may carry a revision suffix ("-r0") the DHCP
// vendor class omits.
func samePlatform(a, b string) bool {
	return a == b || isRevisionOf(a, b) || isRevisionOf(b, a)
}

func isRevisionOf(long, short string) bool {
	rest, ok := strings.CutPrefix(long, short+"-r")
	return ok && rest != "" && strings.Trim(rest, "0123456789") == ""
}

// conflicts collects the contradictions one merge meets.
type conflicts struct {
	events []core.Event
}

func (c *conflicts) note(d *core.Device, now time.Time, fact, recorded, stated, source string) {
	factConflicts.WithLabelValues(fact).Inc()
	c.events = append(c.events, core.Event{Time: now, Type: EventFactConflict, Device: d.ID,
		Message: "device " + d.ID + " stated " + fact + " " + quote(stated) + " but its record holds " + quote(recorded) + "; the record is kept",
		Fields:  map[string]string{"fact": fact, "recorded": recorded, "stated": stated, "source": source}})
}

func quote(s string) string { return `"` + s + `"` }

// mergeKind applies MergeKind to cur, noting a contradiction.
func (c *conflicts) mergeKind(cur *core.Device, stated core.DeviceKind, src Source, now time.Time, source string) {
	k, conflict := MergeKind(cur.Kind, stated, src)
	if conflict && c != nil {
		c.note(cur, now, "kind", string(cur.Kind), string(stated), source)
	}
	cur.Kind = k
}

// mergeFact fills *dst with stated when it is empty; a different stated
// value is a contradiction (same decides what differs).
func (c *conflicts) mergeFact(cur *core.Device, dst *string, fact, stated string, same func(a, b string) bool, now time.Time, source string) {
	switch {
	case stated == "" || *dst == stated:
	case *dst == "":
		*dst = stated
	case same != nil && same(*dst, stated):
	default:
		if c != nil {
			c.note(cur, now, fact, *dst, stated, source)
		}
	}
}

// settleSerial decides whether d, which had no serial before this merge
// (before) and now states one, takes it. A serial another device's record
// holds stays with that device: d does not take it, both records carry the
// conflict (SerialConflict) and each gets an event once. The other record
// is written here; d is written by the caller.
func settleSerial(tx core.Tx, d *core.Device, before string, now time.Time, out *conflicts) error {
	if before != "" || d.Serial == "" {
		return nil
	}
	stated := d.Serial
	holder, held, err := tx.Devices().SerialHolder(stated)
	if err != nil || !held || holder == d.ID {
		return err
	}
	d.Serial = ""
	other, err := tx.Devices().Get(holder)
	if err != nil {
		return err
	}
	newHere := addConflict(d, stated, holder)
	if addConflict(&other, stated, d.ID) {
		other.UpdatedAt = now
		if err := tx.Devices().Put(other); err != nil {
			return err
		}
	}
	if !newHere {
		return nil
	}
	factConflicts.WithLabelValues("serial").Inc()
	msg := "devices " + holder + " (holds it) and " + d.ID + " (stated it) both claim serial " + quote(stated) +
		"; the serial stays with " + holder + ", actions by this serial are refused until an operator resolves it"
	for _, id := range []string{holder, d.ID} {
		out.events = append(out.events, core.Event{Time: now, Type: EventSerialConflict, Device: id, Message: msg,
			Fields: map[string]string{"serial": stated, "holder": holder, "claimant": d.ID}})
	}
	return nil
}

// addConflict notes on d that device other stated serial too; it reports
// whether that is new. The record's SerialConflict is replaced, never
// changed (it may be shared with a cache).
func addConflict(d *core.Device, serial, other string) bool {
	c := d.SerialConflict
	if c != nil && c.Serial == serial && slices.Contains(c.With, other) {
		return false
	}
	n := &core.SerialConflict{Serial: serial}
	if c != nil && c.Serial == serial {
		n.With = slices.Clone(c.With)
	}
	n.With = append(n.With, other)
	d.SerialConflict = n
	return true
}
