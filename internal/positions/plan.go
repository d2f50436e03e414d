// Package positions owns the cabling plan: the operator's table of
// positions, each naming how the network proves a device is plugged in
// there (the relay that forwarded its DHCP request and the relay agent
// information that relay added) and what the device there is (its name,
// role, cluster, profile, reserved address, labels, optionally its
// expected serial, and where it stands: rack and port).
//
// A plan is read from YAML and CSV files beside the profiles and from the
// positions added through the API; every problem is reported at its
// file:line in one pass. Two positions a request could match both (the
// same relay, and circuit and remote ids that are equal or left out on
// either side) are a load error naming both lines: the network must be
// able to tell every slot apart, so a request is never guessed into one.
//
// A position's circuit_id and remote_id are written as device records
// show them: the text itself when every byte is printable ASCII, else
// colon-separated hex ("00:06:65:74:68:31:32"), or "hex:0006657468..." for
// any bytes. What a relay sends is compared byte for byte.
package positions

import (
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// MaxIDLen is the longest circuit or remote id option 82 can carry: the
// option holds at most 255 bytes, and a sub-option's code and length take
// two of them.
const MaxIDLen = 253

// Position is one slot of the plan.
type Position struct {
	Name string `json:"name"` // the slot's name, which is also its device's host name

	// How the network proves the slot: the relay's address (giaddr on
	// IPv4) and the relay agent information it adds. An id left empty is
	// not compared.
	Relay     netip.Addr `json:"relay"`
	CircuitID string     `json:"circuit_id,omitempty"` // option 82 sub-option 1, in its stored form
	RemoteID  string     `json:"remote_id,omitempty"`  // option 82 sub-option 2, in its stored form
	// InterfaceID is a DHCPv6 relay's interface-id (option 18): what a
	// position behind an IPv6 relay names in place of a circuit id (option
	// 82 is IPv4's). Its remote_id is then option 37's id (after the
	// enterprise number).
	InterfaceID string `json:"interface_id,omitempty"`

	// What the device there is.
	Role    string            `json:"role,omitempty"`
	Cluster string            `json:"cluster,omitempty"`
	Profile string            `json:"profile,omitempty"`
	Address netip.Addr        `json:"address,omitzero"` // reserved for the slot, not for a MAC
	Serial  string            `json:"serial,omitempty"` // the box expected there, when known
	Labels  map[string]string `json:"labels,omitempty"`
	Rack    string            `json:"rack,omitempty"`
	Port    string            `json:"port,omitempty"`
	Fields  map[string]string `json:"fields,omitempty"` // the plan's own columns, for templates

	// What a box arriving there meets (policy.go): a replacement of the
	// slot's known member, a member of another slot moved here, and
	// LLDP neighbours other than Neighbors. Empty: the defaults.
	Replace   string     `json:"replace,omitempty"`
	Moved     string     `json:"moved,omitempty"`
	Cabling   string     `json:"cabling,omitempty"`
	Neighbors []Neighbor `json:"neighbors,omitempty"`

	File string `json:"file,omitempty"` // where it is defined; "" for positions stored through the API
	Line int    `json:"line,omitempty"`

	circuit, remote []byte // the ids as sent on the wire
}

// Where is file:line of the position's definition, or "the API" for one
// stored through it.
func (p *Position) Where() string {
	if p.File == "" {
		return "the API"
	}
	return fmt.Sprintf("%s:%d", p.File, p.Line)
}

// CircuitBytes and RemoteBytes are the ids as a relay sends them.
func (p *Position) CircuitBytes() []byte { return p.circuit }
func (p *Position) RemoteBytes() []byte  { return p.remote }

// Proof says how the network proves the slot, for messages.
func (p *Position) Proof() string {
	s := "relay " + p.Relay.String()
	if p.CircuitID != "" {
		s += fmt.Sprintf(" circuit-id %q", p.CircuitID)
	}
	if p.InterfaceID != "" {
		s += fmt.Sprintf(" interface-id %q", p.InterfaceID)
	}
	if p.RemoteID != "" {
		s += fmt.Sprintf(" remote-id %q", p.RemoteID)
	}
	return s
}

var (
	nameRE    = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	clusterRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	labelRE   = regexp.MustCompile(`^([a-z0-9A-Z]([a-zA-Z0-9._-]{0,251}[a-zA-Z0-9])?/)?[a-zA-Z0-9]([a-zA-Z0-9._-]{0,61}[a-zA-Z0-9])?$`)
	fieldRE   = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)
	serialRE  = regexp.MustCompile(`^[A-Za-z0-9._/-]{1,64}$`)
)

// Check validates p and fills in its wire form of the ids. Each problem is
// reported through bad with the field it concerns, so one call reports
// every problem of a position.
func (p *Position) Check(bad func(field string, err error)) {
	fail := func(field, format string, args ...any) { bad(field, fmt.Errorf(format, args...)) }
	if p.Name == "" {
		fail("name", "required: the slot's name, also its device's host name (e.g. leaf-07a)")
	} else if !nameRE.MatchString(p.Name) {
		fail("name", "%q is not a host name label: 1-63 lower-case letters, digits and -, not starting or ending with -", visible(p.Name))
	}
	switch {
	case !p.Relay.IsValid():
		fail("relay", "required: the address of the relay that forwards the slot's requests (its giaddr)")
	case p.Relay.IsUnspecified() || p.Relay.IsMulticast():
		fail("relay", "%s is not a relay's address", p.Relay)
	}
	p.Relay = p.Relay.Unmap()
	var err error
	if p.circuit, err = ParseID(p.CircuitID); err != nil {
		bad("circuit_id", err)
	}
	if p.remote, err = ParseID(p.RemoteID); err != nil {
		bad("remote_id", err)
	}
	iface, err := ParseID(p.InterfaceID)
	if err != nil {
		bad("interface_id", err)
	}
	// Behind an IPv6 relay the interface-id takes the circuit id's place
	// in the index, so the checks that every slot can be told apart hold
	// for both families.
	if p.Relay.Is6() {
		if p.CircuitID != "" {
			fail("circuit_id", "option 82 is IPv4's: a position behind an IPv6 relay names interface_id (option 18)")
		}
		p.circuit = iface
	} else if p.InterfaceID != "" && p.Relay.IsValid() {
		fail("interface_id", "option 18 is DHCPv6's: a position behind an IPv4 relay names circuit_id")
	}
	switch p.Role {
	case "", "control-plane", "worker", "sonic":
	default:
		fail("role", "%q is not one of control-plane, worker, sonic", visible(p.Role))
	}
	if p.Role != "" && p.Role != "sonic" && p.Cluster == "" {
		fail("role", "role without a cluster")
	}
	if p.Cluster != "" && !clusterRE.MatchString(strings.ToLower(p.Cluster)) {
		fail("cluster", "%q is not a cluster name", visible(p.Cluster))
	}
	if p.Profile != "" && !clusterRE.MatchString(p.Profile) {
		fail("profile", "%q is not a profile name", visible(p.Profile))
	}
	if p.Address.IsValid() {
		p.Address = p.Address.Unmap()
		if p.Address.IsUnspecified() || p.Address.IsMulticast() || p.Address.IsLoopback() {
			fail("address", "%s cannot be a device's address", p.Address)
		}
	}
	if p.Serial != "" && !serialRE.MatchString(p.Serial) {
		fail("serial", "%q is not a serial number (letters, digits and . _ / -, up to 64)", visible(p.Serial))
	}
	for _, f := range []struct{ name, v string }{{"rack", p.Rack}, {"port", p.Port}} {
		if err := checkText(f.v); err != nil {
			bad(f.name, err)
		}
	}
	p.checkPolicies(bad)
	for _, k := range sortedKeys(p.Labels) {
		if !labelRE.MatchString(k) {
			fail("labels."+visible(k), "not a label key")
		} else if err := checkText(p.Labels[k]); err != nil || len(p.Labels[k]) > 63 {
			fail("labels."+k, "%q is not a label value (printable, up to 63 characters)", visible(p.Labels[k]))
		}
	}
	for _, k := range sortedKeys(p.Fields) {
		if !fieldRE.MatchString(k) {
			fail("fields."+visible(k), "not a field name: lower-case letters, digits and _, starting with a letter")
		} else if err := checkText(p.Fields[k]); err != nil {
			bad("fields."+k, err)
		}
	}
}

// checkText accepts printable text (no control characters, valid UTF-8)
// of at most 255 bytes: plan values reach templates, logs and terminals.
func checkText(s string) error {
	if len(s) > 255 {
		return fmt.Errorf("%d bytes: at most 255", len(s))
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) || r == 0xfffd {
			return fmt.Errorf("%q holds a control character or is not UTF-8", visible(s))
		}
	}
	return nil
}

// visible is s cut and made printable for an error message.
func visible(s string) string {
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// ParseID turns an id as the plan writes it into the bytes a relay sends:
// "hex:..." is hex, colon-separated hex that holds a byte outside
// printable ASCII is those bytes (the form device records show such ids
// in; a lone byte is written hex:.., as "E1" is text), anything else is the text itself, which must be printable ASCII.
func ParseID(s string) ([]byte, error) {
	if s == "" {
		return nil, nil
	}
	if h, ok := strings.CutPrefix(s, "hex:"); ok {
		b, err := hex.DecodeString(strings.ReplaceAll(h, ":", ""))
		if err != nil || len(b) == 0 {
			return nil, fmt.Errorf("%q is not hex", visible(s))
		}
		if len(b) > MaxIDLen {
			return nil, fmt.Errorf("%d bytes: option 82 carries at most %d", len(b), MaxIDLen)
		}
		return b, nil
	}
	if b, ok := parseHexColon(s); ok && len(b) > 1 && !printableASCII(b) {
		if len(b) > MaxIDLen {
			return nil, fmt.Errorf("%d bytes: option 82 carries at most %d", len(b), MaxIDLen)
		}
		return b, nil
	}
	if !printableASCII([]byte(s)) {
		return nil, fmt.Errorf("%q holds bytes outside printable ASCII: write them as hex (hex:...)", visible(s))
	}
	if len(s) > MaxIDLen {
		return nil, fmt.Errorf("%d bytes: option 82 carries at most %d", len(s), MaxIDLen)
	}
	return []byte(s), nil
}

// IDText is the stored form of an id a relay sent (what ParseID reads
// back): the text when every byte is printable ASCII, else colon hex.
func IDText(b []byte) string {
	if printableASCII(b) {
		return string(b)
	}
	var sb strings.Builder
	for i, c := range b {
		if i > 0 {
			sb.WriteByte(':')
		}
		sb.WriteString(hex.EncodeToString([]byte{c}))
	}
	return sb.String()
}

func printableASCII(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

func parseHexColon(s string) ([]byte, bool) {
	if s == "" || (len(s)+1)%3 != 0 {
		return nil, false
	}
	out := make([]byte, 0, (len(s)+1)/3)
	for i := 0; i < len(s); i += 3 {
		if i+2 < len(s) && s[i+2] != ':' {
			return nil, false
		}
		v, err := hex.DecodeString(s[i : i+2])
		if err != nil {
			return nil, false
		}
		out = append(out, v[0])
	}
	return out, true
}

// Plan is a checked set of positions and the index the DHCP path looks
// them up in. It is immutable once built: a reload builds a new one.
type Plan struct {
	list   []*Position
	byName map[string]*Position
	// byProof maps a proof key (relay, circuit id, remote id, each
	// length-prefixed; an id left out is empty) to its position. A
	// request is looked up with both ids, then with each left out, then
	// with neither: the load check guarantees at most one of these hits.
	byProof  map[string]*Position
	bySerial map[string]*Position
}

// Len is the number of positions.
func (pl *Plan) Len() int {
	if pl == nil {
		return 0
	}
	return len(pl.list)
}

// List returns the positions by name.
func (pl *Plan) List() []*Position {
	if pl == nil {
		return nil
	}
	return pl.list
}

// Get returns the position called name, or nil.
func (pl *Plan) Get(name string) *Position {
	if pl == nil {
		return nil
	}
	return pl.byName[name]
}

// ExpectingSerial returns the position whose plan names serial, or nil.
func (pl *Plan) ExpectingSerial(serial string) *Position {
	if pl == nil || serial == "" {
		return nil
	}
	return pl.bySerial[serial]
}

// proofKey appends the lookup key of (relay, circuit, remote) to b.
func proofKey(b []byte, relay []byte, circuit, remote []byte) []byte {
	b = append(b, byte(len(relay)))
	b = append(b, relay...)
	b = append(b, byte(len(circuit)))
	b = append(b, circuit...)
	b = append(b, byte(len(remote)))
	return append(b, remote...)
}

// Match4 returns the position a request relayed by relay (its giaddr)
// with these option 82 circuit and remote ids proves, or nil: relay
// information that matches no position is no position's. It allocates
// nothing: it sits on the DHCP request path.
func (pl *Plan) Match4(relay [4]byte, circuit, remote []byte) *Position {
	return pl.match(relay[:], circuit, remote)
}

// Match6 returns the position a DHCPv6 request proves: relayed by the
// relay whose Relay-Forw states link (its link address, the giaddr's
// counterpart) with this interface-id (option 18) and remote-id (option
// 37's id, without the enterprise number), or nil. It allocates nothing.
func (pl *Plan) Match6(link [16]byte, interfaceID, remoteID []byte) *Position {
	return pl.match(link[:], interfaceID, remoteID)
}

func (pl *Plan) match(relay, circuit, remote []byte) *Position {
	if pl == nil || len(pl.byProof) == 0 || len(circuit) > MaxIDLen+2 || len(remote) > MaxIDLen+2 {
		return nil
	}
	var buf [3 + 16 + 2*(MaxIDLen+2)]byte
	try := func(c, r []byte) *Position { return pl.byProof[string(proofKey(buf[:0], relay, c, r))] }
	// Each distinct key once: an id the request lacks is already left out.
	p := try(circuit, remote)
	if p == nil && len(remote) > 0 {
		p = try(circuit, nil)
	}
	if p == nil && len(circuit) > 0 {
		p = try(nil, remote)
	}
	if p == nil && len(circuit) > 0 && len(remote) > 0 {
		p = try(nil, nil)
	}
	return p
}

// relayBytes is a relay address as the key holds it.
func relayBytes(a netip.Addr) []byte {
	if a.Is4() {
		b := a.As4()
		return b[:]
	}
	b := a.As16()
	return b[:]
}

// Build checks ps and indexes them. It reports every problem: a
// position's own (Check), and every pair the network cannot tell apart,
// two slots of one name, address or expected serial, each naming both
// definitions. Positions with problems are left out of the plan.
func Build(ps []*Position) (*Plan, Errors) {
	var errs Errors
	pl := &Plan{byName: map[string]*Position{}, byProof: map[string]*Position{}, bySerial: map[string]*Position{}}
	// The indexes a new position is checked against: every existing
	// position it could share a request with (see collide).
	type relayCircuit struct{ relay, id string }
	var (
		full        = map[string]*Position{}       // both ids
		circuitOnly = map[relayCircuit]*Position{} // circuit id, no remote id
		remoteOnly  = map[relayCircuit]*Position{}
		neither     = map[string]*Position{} // relay alone
		anyCircuit  = map[relayCircuit]*Position{}
		anyRemote   = map[relayCircuit]*Position{}
		firstCOnly  = map[string]*Position{}
		firstROnly  = map[string]*Position{}
		anyOnRelay  = map[string]*Position{}
		byAddr      = map[netip.Addr]*Position{}
	)
	for _, p := range ps {
		ok := true
		p.Check(func(field string, err error) {
			ok = false
			errs = append(errs, &Error{File: p.File, Line: p.Line, Position: p.Name, Field: field, Err: err})
		})
		if !ok {
			continue
		}
		other := func(o *Position, field, format string, args ...any) {
			ok = false
			errs = append(errs, &Error{File: p.File, Line: p.Line, Position: p.Name, Field: field,
				Err: fmt.Errorf("%s, as position %q at %s", fmt.Sprintf(format, args...), o.Name, o.Where())})
		}
		if o := pl.byName[p.Name]; o != nil {
			other(o, "name", "defined twice")
			continue
		}
		relay := string(relayBytes(p.Relay))
		c, r := relayCircuit{relay, string(p.circuit)}, relayCircuit{relay, string(p.remote)}
		key := string(proofKey(nil, relayBytes(p.Relay), p.circuit, p.remote))
		var twin *Position
		switch {
		case len(p.circuit) > 0 && len(p.remote) > 0:
			twin = first(full[key], circuitOnly[c], remoteOnly[r], neither[relay])
		case len(p.circuit) > 0:
			twin = first(anyCircuit[c], firstROnly[relay], neither[relay])
		case len(p.remote) > 0:
			twin = first(anyRemote[r], firstCOnly[relay], neither[relay])
		default:
			twin = anyOnRelay[relay]
		}
		if twin != nil {
			other(twin, "relay", "the network cannot tell it apart (%s; a request through %s matches both)", p.Proof(), twin.Proof())
			continue
		}
		if p.Address.IsValid() {
			if o := byAddr[p.Address]; o != nil {
				other(o, "address", "%s reserved twice", p.Address)
				continue
			}
		}
		if p.Serial != "" {
			if o := pl.bySerial[p.Serial]; o != nil {
				other(o, "serial", "serial %q expected twice", p.Serial)
				continue
			}
		}
		switch {
		case len(p.circuit) > 0 && len(p.remote) > 0:
			full[key] = p
		case len(p.circuit) > 0:
			circuitOnly[c] = p
			setFirst(firstCOnly, relay, p)
		case len(p.remote) > 0:
			remoteOnly[r] = p
			setFirst(firstROnly, relay, p)
		default:
			neither[relay] = p
		}
		if len(p.circuit) > 0 {
			setFirst(anyCircuit, c, p)
		}
		if len(p.remote) > 0 {
			setFirst(anyRemote, r, p)
		}
		setFirst(anyOnRelay, relay, p)
		if p.Address.IsValid() {
			byAddr[p.Address] = p
		}
		if p.Serial != "" {
			pl.bySerial[p.Serial] = p
		}
		pl.byName[p.Name] = p
		pl.byProof[key] = p
		pl.list = append(pl.list, p)
	}
	sort.Slice(pl.list, func(i, j int) bool { return pl.list[i].Name < pl.list[j].Name })
	sortErrors(errs)
	return pl, errs
}

func first(ps ...*Position) *Position {
	for _, p := range ps {
		if p != nil {
			return p
		}
	}
	return nil
}

func setFirst[K comparable](m map[K]*Position, k K, p *Position) {
	if _, ok := m[k]; !ok {
		m[k] = p
	}
}

// Clone is a copy of p that shares nothing with it.
func (p *Position) Clone() *Position {
	c := *p
	c.Labels = maps.Clone(p.Labels)
	c.Fields = maps.Clone(p.Fields)
	c.Neighbors = slices.Clone(p.Neighbors)
	c.circuit, c.remote = append([]byte(nil), p.circuit...), append([]byte(nil), p.remote...)
	return &c
}
