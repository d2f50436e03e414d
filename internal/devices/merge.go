package devices

import (
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ztpd/ztpd/internal/core"
)

// The one merge rule for what parts learn about a device. A device's
// statements (DHCP options, ZTP headers, join requests, agent reports) reach
// this package as Facts, each with its Source, and Merge is the only code
// that applies them to a record: they fill in facts its record lacks; they
// never replace an identity fact the record holds (kind, serial, product,
// platform, base MAC) and never take a serial another device holds. A
// contradiction is an event on the device, the record is kept.

// Event types of the merge rule.
const (
	// EventFactConflict: a device stated a kind, serial, product, platform
	// or base MAC that contradicts its record; the record is kept.
	EventFactConflict = "device.fact_conflict"
	// EventSerialConflict: a device stated a serial another device holds;
	// the serial stays with its holder and both records note the conflict.
	EventSerialConflict = "device.serial_conflict"
)

// Source is who states a fact: one of the parts that hear devices, or an
// operator.
type Source int

const (
	// SourceDHCP: a lease exchange (options 12, 60, 61, 82, a
	// reservation's kind when Facts.KindDeclared). The zero Source is
	// none: Facts that state nothing need not name one.
	SourceDHCP Source = iota + 1
	// SourceContent: a ZTP request (SONiC and ONIE headers), over HTTP or
	// TFTP.
	SourceContent
	// SourceJoin: a join request. Its kind says which bundle the device
	// asks for: it classifies a device nothing classified and is otherwise
	// not a statement about the record.
	SourceJoin
	// SourceAgent: the node agent's reports.
	SourceAgent
	// SourceOperator: an operator's declaration (a reservation's or a
	// binding's kind). It sets the kind.
	SourceOperator
)

// Sources is every Source, for tables.
var Sources = []Source{SourceDHCP, SourceContent, SourceJoin, SourceAgent, SourceOperator}

// String is the source as events name it (Fields["source"]).
func (s Source) String() string {
	switch s {
	case SourceDHCP:
		return "dhcp"
	case SourceContent:
		return "ztp"
	case SourceJoin:
		return "join"
	case SourceAgent:
		return "agent"
	case SourceOperator:
		return "operator"
	}
	return "unknown"
}

// MergeKind is the kind a record holding old takes when src states stated,
// and whether the statement contradicts the record (then old is kept).
// The rule, for every source:
//   - stating no kind (or unknown) changes nothing; a record without one
//     is unknown;
//   - an unknown (or missing) kind takes the stated one, and stating the
//     recorded kind changes nothing;
//   - an operator's declaration (SourceOperator) sets the kind;
//   - a join request's kind (SourceJoin) classifies only an unknown
//     device: for a classified one it is neither taken nor a conflict;
//   - the device's own statements (SourceDHCP, SourceContent,
//     SourceAgent) refine ONIE to SONiC (ONIE installed SONiC on the
//     switch); every other change they state is a conflict and the record
//     keeps its kind: nothing a device states turns a SONiC switch into
//     ONIE, or a switch into a VM or back.
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
	case src == SourceJoin:
		return old, false
	case old == core.KindONIE && stated == core.KindSONiC:
		return core.KindSONiC, false
	}
	return old, true
}

// Facts is what one report states about a device: the value type every
// part that hears devices hands in, never a record. Empty fields state
// nothing. Each is checked at the edge it enters (Check); Merge applies
// them.
type Facts struct {
	// Source is who states them.
	Source Source
	// KindDeclared: Kind is an operator's declaration (a DHCP reservation's
	// kind), not the device's statement (MergeKind with SourceOperator).
	KindDeclared bool

	// Identity facts: they fill in a record that lacks them and never
	// replace what it holds.
	Kind     core.DeviceKind
	Serial   string
	Product  string
	Platform string
	BaseMAC  string // normalised

	// Facts that follow the device: the latest statement wins.
	Hostname    string
	SONiCVer    string
	IP          string
	Subnet      string
	ClientID    string
	VendorClass string
	RelayAddr   string
	CircuitID   string
	RemoteID    string
	Position    string // the cabling plan's slot its lease came through
}

// FactsOf is what a view of a device d (what a part knows of it) states,
// as src states it: for records learnt from such a view.
func FactsOf(d *core.Device, src Source) Facts {
	f := Facts{Source: src, Kind: d.Kind, Serial: d.Serial, Product: d.Product, Platform: d.Platform,
		BaseMAC: d.BaseMAC, Hostname: d.Hostname, SONiCVer: d.SONiCVer, IP: d.IP, Subnet: d.Subnet,
		ClientID: d.ClientID, VendorClass: d.VendorClass, RelayAddr: d.RelayAddr, CircuitID: d.CircuitID,
		RemoteID: d.RemoteID, Position: d.Position}
	if c := d.SerialConflict; f.Serial == "" && c != nil {
		f.Serial = c.Serial // claimed, settled by the devices service
	}
	return f
}

// asViewOf is f, what a view of device d states (FactsOf: what a part
// knew of it when it answered), as far as it may teach d's record: its
// identity facts by the rule (Merge: they fill in, a contradiction is
// noted), the facts that follow the device only where d has none. A view
// can be older than what d's record learnt since it was taken (a join's
// hostname written before the fetch that was answered from the view): those
// facts follow the device's own statements, never an older view of it.
func (f Facts) asViewOf(d *core.Device) Facts {
	for _, p := range [...]struct {
		have string
		v    *string
	}{
		{d.Hostname, &f.Hostname}, {d.SONiCVer, &f.SONiCVer}, {d.IP, &f.IP}, {d.Subnet, &f.Subnet},
		{d.ClientID, &f.ClientID}, {d.VendorClass, &f.VendorClass}, {d.RelayAddr, &f.RelayAddr},
		{d.CircuitID, &f.CircuitID}, {d.RemoteID, &f.RemoteID}, {d.Position, &f.Position},
	} {
		if p.have != "" {
			*p.v = ""
		}
	}
	return f
}

// Update makes f the latest statement of each fact: every fact newer
// states replaces f's (a reporter that coalesces several statements of one
// device before handing them in, as DHCP between two commits). Unlike
// Merge it judges nothing: the record's rule applies when f is merged.
func (f *Facts) Update(newer *Facts) {
	f.Source = newer.Source
	if newer.Kind != "" {
		f.Kind, f.KindDeclared = newer.Kind, newer.KindDeclared
	}
	for _, p := range [...]struct{ dst, v *string }{
		{&f.Serial, &newer.Serial}, {&f.Product, &newer.Product}, {&f.Platform, &newer.Platform},
		{&f.BaseMAC, &newer.BaseMAC}, {&f.Hostname, &newer.Hostname}, {&f.SONiCVer, &newer.SONiCVer},
		{&f.IP, &newer.IP}, {&f.Subnet, &newer.Subnet}, {&f.ClientID, &newer.ClientID},
		{&f.VendorClass, &newer.VendorClass}, {&f.RelayAddr, &newer.RelayAddr}, {&f.CircuitID, &newer.CircuitID},
		{&f.RemoteID, &newer.RemoteID}, {&f.Position, &newer.Position},
	} {
		follow(p.dst, *p.v)
	}
}

// FactSet is a set of identity facts, e.g. those a statement contradicts.
type FactSet uint8

// The identity facts.
const (
	FactKind FactSet = 1 << iota
	FactSerial
	FactProduct
	FactPlatform
	FactBaseMAC
)

// Has reports whether s holds any of t.
func (s FactSet) Has(t FactSet) bool { return s&t != 0 }

// factNames are the identity facts by bit, as events and metrics name
// them.
var factNames = [...]string{"kind", "serial", "product", "platform", "base_mac"}

func (f *Facts) kindSource() Source {
	if f.KindDeclared {
		return SourceOperator
	}
	return f.Source
}

// Contradicts is the set of identity facts f states that d holds
// otherwise (Merge keeps d's). A platform named with and without its
// revision suffix is the same one.
func Contradicts(d *core.Device, f *Facts) FactSet {
	var s FactSet
	if _, conflict := MergeKind(d.Kind, f.Kind, f.kindSource()); conflict {
		s |= FactKind
	}
	differs := func(have, stated string) bool { return have != "" && stated != "" && have != stated }
	if differs(d.Serial, f.Serial) {
		s |= FactSerial
	}
	if differs(d.Product, f.Product) {
		s |= FactProduct
	}
	if differs(d.Platform, f.Platform) && !samePlatform(d.Platform, f.Platform) {
		s |= FactPlatform
	}
	if differs(d.BaseMAC, f.BaseMAC) {
		s |= FactBaseMAC
	}
	return s
}

// Merge applies f to d by the one rule and returns the facts it did not
// apply because they contradict d (Contradicts): the kind by MergeKind,
// other identity facts only where d has none, the rest follow the device.
// It is pure: the devices service, and parts keeping a view of a device
// for their answers (DHCP's cache, content's rendering), call it alike. A
// serial taken here is settled against other records by the devices
// service when it writes.
func Merge(d *core.Device, f *Facts) (contradicted FactSet) {
	contradicted = Contradicts(d, f)
	d.Kind, _ = MergeKind(d.Kind, f.Kind, f.kindSource())
	fill(&d.Serial, f.Serial)
	fill(&d.Product, f.Product)
	fill(&d.Platform, f.Platform)
	fill(&d.BaseMAC, f.BaseMAC)
	follow(&d.Hostname, f.Hostname)
	follow(&d.SONiCVer, f.SONiCVer)
	follow(&d.IP, f.IP)
	follow(&d.Subnet, f.Subnet)
	follow(&d.ClientID, f.ClientID)
	follow(&d.VendorClass, f.VendorClass)
	follow(&d.RelayAddr, f.RelayAddr)
	follow(&d.CircuitID, f.CircuitID)
	follow(&d.RemoteID, f.RemoteID)
	follow(&d.Position, f.Position)
	if d.MAC == "" {
		d.MAC = d.ID
	}
	return contradicted
}

// fill sets an identity fact a record lacks; follow one that follows the
// device.
func fill(dst *string, v string) {
	if *dst == "" {
		*dst = v
	}
}

func follow(dst *string, v string) {
	if v != "" {
		*dst = v
	}
}

// CheckFact validates one fact a device states, by its name ("serial",
// "product", "platform", "hostname", "version") with core's character
// sets: the one check of device-stated facts, run at the edge each enters
// (a DHCP exchange, a ZTP request's headers, a join request).
func CheckFact(fact, v string) error {
	switch fact {
	case "serial":
		return core.CheckSerial(v)
	case "product":
		return core.CheckProduct(v)
	case "platform":
		return core.CheckPlatform(v)
	case "hostname":
		return core.CheckHostname(v)
	case "version":
		return core.CheckVersion(v)
	}
	return &core.FactError{Fact: fact, Value: v, Want: "a known fact"}
}

// Check validates every fact f states (CheckFact). Each that fails is
// cleared and, when refused is not nil, handed to it; Check returns the
// first failure (a *core.FactError), nil when all pass.
func (f *Facts) Check(refused func(fact string, err error)) error {
	var first error
	// Names and fields apart: a pointer beside a name that leaks would
	// make f escape (DHCP checks on its hot path).
	names := [...]string{"serial", "product", "platform", "hostname", "version"}
	for i, v := range [...]*string{&f.Serial, &f.Product, &f.Platform, &f.Hostname, &f.SONiCVer} {
		if *v == "" {
			continue
		}
		if err := CheckFact(names[i], *v); err != nil {
			*v = ""
			if refused != nil {
				refused(names[i], err)
			}
			if first == nil {
				first = err
			}
		}
	}
	return first
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
	// counted is ztpd_device_fact_conflicts_total, by fact (nil: not
	// counted, a Batch its Service did not fill).
	counted *prometheus.CounterVec
}

func (c *conflicts) count(fact string) {
	if c.counted != nil {
		c.counted.WithLabelValues(fact).Inc()
	}
}

func (c *conflicts) note(d *core.Device, now time.Time, fact, recorded, stated, source string) {
	c.count(fact)
	c.events = append(c.events, core.Event{Time: now, Type: EventFactConflict, Device: d.ID,
		Message: "device " + d.ID + " stated " + fact + " " + quote(stated) + " but its record holds " + quote(recorded) + "; the record is kept",
		Fields:  map[string]string{"fact": fact, "recorded": recorded, "stated": stated, "source": source}})
}

func quote(s string) string { return `"` + s + `"` }

// merge applies f to cur (Merge), noting each contradiction; the record
// kept its own value of each.
func (c *conflicts) merge(cur *core.Device, f *Facts, now time.Time) {
	bad := Merge(cur, f)
	if bad == 0 || c == nil {
		return
	}
	for i, name := range factNames {
		fact := FactSet(1) << i
		if !bad.Has(fact) {
			continue
		}
		recorded, stated := cur.BaseMAC, f.BaseMAC
		switch fact {
		case FactKind:
			recorded, stated = string(cur.Kind), string(f.Kind)
		case FactSerial:
			recorded, stated = cur.Serial, f.Serial
		case FactProduct:
			recorded, stated = cur.Product, f.Product
		case FactPlatform:
			recorded, stated = cur.Platform, f.Platform
		}
		c.note(cur, now, name, recorded, stated, f.Source.String())
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
	out.count("serial")
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
