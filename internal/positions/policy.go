package positions

import (
	"fmt"
	"strings"
)

// Policies a position (or a plan file's defaults) sets for what arrives
// there.
const (
	// ReplaceAuto gives a new box at a slot whose previous member is
	// known the predecessor's identity at once: the old membership ends,
	// its Node is deleted, its credentials are revoked, and the new box
	// joins under the same node name.
	ReplaceAuto = "auto"
	// ReplaceApprove holds such a box waiting until an operator approves
	// it (ztpd device approve); the default.
	ReplaceApprove = "approve"

	// MovedRefuse refuses a box that is a member at one slot and asks to
	// join from another (the default); MovedWait holds it waiting for an
	// operator instead.
	MovedRefuse = "refuse"
	MovedWait   = "wait"

	// CablingWarn records a neighbour mismatch (an event and the device's
	// warning) and lets the join go on (the default); CablingStrict also
	// holds the join until the cabling matches the plan.
	CablingWarn   = "warn"
	CablingStrict = "strict"
)

// MaxNeighbors bounds the neighbours a position names and a device
// reports: a switch's management and uplink ports, not a whole fabric.
const MaxNeighbors = 64

// Neighbor is one LLDP neighbour: on the device's local port, the remote
// system (its LLDP system name) and that system's port.
type Neighbor struct {
	Port         string `json:"port"`
	RemoteSystem string `json:"remote_system"`
	RemotePort   string `json:"remote_port"`
}

func (n Neighbor) String() string {
	return n.Port + " -> " + n.RemoteSystem + " " + n.RemotePort
}

// ReplacePolicy is what a new box at p does when p's previous member is
// known: ReplaceAuto or ReplaceApprove.
func (p *Position) ReplacePolicy() string {
	if p.Replace == "" {
		return ReplaceApprove
	}
	return p.Replace
}

// TakesAddress reports whether a box asking DHCP through p takes p's
// address from the box whose lease holds it: the relay proves the asker is
// cabled to the slot, a slot holds one box, and p's address is only given
// through it, so the holder is the box the asker replaces. The same box
// under another client identity (ONIE, then the SONiC it installed) keeps
// it under any policy; another box takes it under ReplaceAuto, and under
// ReplaceApprove is served from the pool while its join waits.
func (p *Position) TakesAddress(sameBox bool) bool {
	return sameBox || p.ReplacePolicy() == ReplaceAuto
}

// MovedPolicy is what a member of another slot asking to join from p
// meets: MovedRefuse or MovedWait.
func (p *Position) MovedPolicy() string {
	if p.Moved == "" {
		return MovedRefuse
	}
	return p.Moved
}

// CablingPolicy is what a neighbour mismatch at p does: CablingWarn or
// CablingStrict.
func (p *Position) CablingPolicy() string {
	if p.Cabling == "" {
		return CablingWarn
	}
	return p.Cabling
}

// checkPolicies validates the policies and the expected neighbours of p.
func (p *Position) checkPolicies(bad func(field string, err error)) {
	for _, f := range []struct {
		name, v string
		allowed []string
	}{
		{"replace", p.Replace, []string{ReplaceAuto, ReplaceApprove}},
		{"moved", p.Moved, []string{MovedRefuse, MovedWait}},
		{"cabling", p.Cabling, []string{CablingWarn, CablingStrict}},
	} {
		if f.v != "" && f.v != f.allowed[0] && f.v != f.allowed[1] {
			bad(f.name, fmt.Errorf("%q is not one of %s", visible(f.v), strings.Join(f.allowed, ", ")))
		}
	}
	if err := CheckNeighbors(p.Neighbors); err != nil {
		bad("neighbors", err)
		return
	}
	seen := make(map[string]bool, len(p.Neighbors))
	for _, n := range p.Neighbors {
		if seen[n.Port] {
			bad("neighbors", fmt.Errorf("port %q expected twice", visible(n.Port)))
		}
		seen[n.Port] = true
	}
}

// CheckNeighbors validates a list of neighbours, as a plan names them or
// a device reports them: at most MaxNeighbors, each with a local port and
// printable values. A report may name a port twice (several neighbours
// behind one port); a plan may not (checkPolicies).
func CheckNeighbors(ns []Neighbor) error {
	if len(ns) > MaxNeighbors {
		return fmt.Errorf("%d neighbours: at most %d", len(ns), MaxNeighbors)
	}
	for i, n := range ns {
		if n.Port == "" {
			return fmt.Errorf("neighbour %d: port required (the local port, e.g. eth0)", i+1)
		}
		for _, v := range []string{n.Port, n.RemoteSystem, n.RemotePort} {
			if err := checkText(v); err != nil {
				return fmt.Errorf("neighbour %d: %w", i+1, err)
			}
		}
	}
	return nil
}

// CablingMismatches compares the neighbours a device reports with those
// its position expects, port by port: an expected port with no neighbour
// seen, or with another system or remote port, is a mismatch. Ports the
// plan does not name are not judged, and an expected remote system or
// port left empty matches any. No report at all (seen empty: the switch
// has no LLDP) judges nothing. Each mismatch says what was expected and
// what was seen.
func CablingMismatches(expected, seen []Neighbor) []string {
	if len(expected) == 0 || len(seen) == 0 {
		return nil
	}
	var out []string
	for _, e := range expected {
		var got []Neighbor
		for _, s := range seen {
			if s.Port == e.Port {
				got = append(got, s)
			}
		}
		ok := false
		for _, s := range got {
			if (e.RemoteSystem == "" || strings.EqualFold(e.RemoteSystem, s.RemoteSystem)) &&
				(e.RemotePort == "" || e.RemotePort == s.RemotePort) {
				ok = true
				break
			}
		}
		if ok {
			continue
		}
		want := strings.TrimSpace(e.RemoteSystem + " " + e.RemotePort)
		if len(got) == 0 {
			out = append(out, fmt.Sprintf("%s: expected %s, seen no neighbour", e.Port, want))
			continue
		}
		saw := make([]string, len(got))
		for i, s := range got {
			saw[i] = strings.TrimSpace(s.RemoteSystem + " " + s.RemotePort)
		}
		out = append(out, fmt.Sprintf("%s: expected %s, seen %s", e.Port, want, strings.Join(saw, ", ")))
	}
	return out
}

// ParseNeighborList reads neighbours as a CSV column writes them:
// "eth0=mgmt-sw-1/Ethernet12;Ethernet0=spine-1/Ethernet4". The remote
// system ends at the first "/" (system names are host names), so remote
// ports may hold "/" ("Ethernet1/1").
func ParseNeighborList(s string) ([]Neighbor, error) {
	var out []Neighbor
	for _, item := range strings.Split(s, ";") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		port, remote, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not port=remote_system/remote_port", visible(item))
		}
		sys, rport, _ := strings.Cut(strings.TrimSpace(remote), "/")
		out = append(out, Neighbor{Port: strings.TrimSpace(port), RemoteSystem: strings.TrimSpace(sys), RemotePort: strings.TrimSpace(rport)})
	}
	return out, nil
}
