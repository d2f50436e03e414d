package positions

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

const policyYAML = `defaults:
  replace: auto
  cabling: strict
positions:
  - name: leaf-07a
    relay: 10.0.7.1
    circuit_id: Ethernet12
    neighbors:
      - {port: eth0, remote_system: mgmt-sw-1, remote_port: Ethernet12}
      - {port: Ethernet0, remote_system: spine-1}
  - name: leaf-07b
    relay: 10.0.7.1
    circuit_id: Ethernet13
    replace: approve
    moved: wait
    cabling: warn
`

// TestPolicies: a plan file's defaults reach the positions that set none;
// a position's own setting wins; expected neighbours are read from YAML
// and CSV; nothing set is the safe default (approve, refuse, warn).
func TestPolicies(t *testing.T) {
	ps, errs := Parse("plan.yaml", []byte(policyYAML))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	pl, errs := Build(ps)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	a, b := pl.Get("leaf-07a"), pl.Get("leaf-07b")
	if a.ReplacePolicy() != ReplaceAuto || a.CablingPolicy() != CablingStrict || a.MovedPolicy() != MovedRefuse {
		t.Fatalf("defaulted position: %s %s %s", a.ReplacePolicy(), a.CablingPolicy(), a.MovedPolicy())
	}
	if b.ReplacePolicy() != ReplaceApprove || b.CablingPolicy() != CablingWarn || b.MovedPolicy() != MovedWait {
		t.Fatalf("position's own: %s %s %s", b.ReplacePolicy(), b.CablingPolicy(), b.MovedPolicy())
	}
	want := []Neighbor{{"eth0", "mgmt-sw-1", "Ethernet12"}, {"Ethernet0", "spine-1", ""}}
	if !slices.Equal(a.Neighbors, want) {
		t.Fatalf("neighbours %+v", a.Neighbors)
	}
	if (&Position{}).ReplacePolicy() != ReplaceApprove || (&Position{}).CablingPolicy() != CablingWarn {
		t.Fatal("defaults without a plan's")
	}

	csv := "name,relay,circuit_id,replace,cabling,neighbors\nleaf-1,10.0.7.1,E1,auto,strict,eth0=mgmt-sw-1/Ethernet1/1; Ethernet0=spine-1/Ethernet4\n"
	ps, errs = Parse("plan.csv", []byte(csv))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	pl, errs = Build(ps)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	p := pl.Get("leaf-1")
	if p.ReplacePolicy() != ReplaceAuto || !slices.Equal(p.Neighbors, []Neighbor{{"eth0", "mgmt-sw-1", "Ethernet1/1"}, {"Ethernet0", "spine-1", "Ethernet4"}}) {
		t.Fatalf("CSV position %+v", p)
	}
	// Stored through the API: the policies survive JSON.
	raw, _ := json.Marshal(p)
	var back Position
	if err := json.Unmarshal(raw, &back); err != nil || back.Cabling != CablingStrict || len(back.Neighbors) != 2 {
		t.Fatalf("JSON round trip: %s %v", raw, err)
	}
}

// TestPolicyErrors: bad policies and neighbours are load errors at their
// lines, every one in one pass.
func TestPolicyErrors(t *testing.T) {
	bad := `defaults: {replace: sometimes}
positions:
  - name: a
    relay: 10.0.7.1
    circuit_id: E1
    cabling: loose
  - name: b
    relay: 10.0.7.1
    circuit_id: E2
    neighbors:
      - {port: eth0, remote_system: x}
      - {port: eth0, remote_system: y}
  - name: c
    relay: 10.0.7.1
    circuit_id: E3
    neighbors:
      - {remote_system: x}
  - name: d
    relay: 10.0.7.1
    circuit_id: E4
    neighbors: [{port: eth0, remote_host: x}]
`
	ps, errs := Parse("p.yaml", []byte(bad))
	_, berrs := Build(ps)
	errs = append(errs, berrs...)
	msg := errs.Error()
	for _, want := range []string{
		`p.yaml:1: defaults.replace: "sometimes" is not one of auto, approve`,
		`p.yaml:3: position "a": cabling: "loose" is not one of warn, strict`,
		`p.yaml:7: position "b": neighbors: port "eth0" expected twice`,
		`p.yaml:13: position "c": neighbors: neighbour 1: port required`,
		`unknown key "remote_host"`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("errors do not say %q:\n%s", want, msg)
		}
	}
	ps, errs = Parse("p.yaml", []byte("defaults: {replace: auto, colour: red}\npositions: []\n"))
	if len(errs) != 1 || !strings.Contains(errs.Error(), "defaults.colour: unknown default") {
		t.Fatalf("unknown default: %v %v", ps, errs)
	}
}

// TestCablingMismatches: ports the plan names are judged, others not;
// an empty expected field matches any; no report judges nothing; several
// neighbours behind one port match if any does.
func TestCablingMismatches(t *testing.T) {
	exp := []Neighbor{{"eth0", "mgmt-sw-1", "Ethernet12"}, {"Ethernet0", "spine-1", ""}}
	for _, c := range []struct {
		seen []Neighbor
		want []string
	}{
		{nil, nil},
		{[]Neighbor{{"eth0", "MGMT-SW-1", "Ethernet12"}, {"Ethernet0", "spine-1", "Ethernet9"}, {"Ethernet4", "x", "y"}}, nil},
		{[]Neighbor{{"eth0", "mgmt-sw-2", "Ethernet3"}}, []string{"eth0: expected mgmt-sw-1 Ethernet12, seen mgmt-sw-2 Ethernet3", "Ethernet0: expected spine-1, seen no neighbour"}},
		{[]Neighbor{{"eth0", "hub", "1"}, {"eth0", "mgmt-sw-1", "Ethernet12"}, {"Ethernet0", "spine-1", "E1"}}, nil},
		{[]Neighbor{{"eth0", "mgmt-sw-1", "Ethernet13"}, {"Ethernet0", "spine-1", "E1"}}, []string{"eth0: expected mgmt-sw-1 Ethernet12, seen mgmt-sw-1 Ethernet13"}},
	} {
		if got := CablingMismatches(exp, c.seen); !slices.Equal(got, c.want) {
			t.Errorf("seen %v: %q, want %q", c.seen, got, c.want)
		}
	}
	if CablingMismatches(nil, []Neighbor{{"eth0", "a", "b"}}) != nil {
		t.Fatal("a position without expected neighbours judged")
	}
}

// FuzzNeighbors: whatever a device reports or a CSV column says, what is
// accepted is printable and bounded, and comparing never fails.
func FuzzNeighbors(f *testing.F) {
	f.Add("eth0=mgmt-sw-1/Ethernet12;Ethernet0=spine-1/Ethernet1/1", `[{"port":"eth0","remote_system":"x","remote_port":"y"}]`)
	f.Add("a=b", `[{"port":"\u0000","remote_system":"\ufffd"}]`)
	f.Fuzz(func(t *testing.T, column, report string) {
		exp, err := ParseNeighborList(column)
		if err == nil && CheckNeighbors(exp) != nil {
			exp = nil
		}
		var seen []Neighbor
		if json.Unmarshal([]byte(report), &seen) != nil || CheckNeighbors(seen) != nil {
			seen = nil
		}
		for _, n := range append(slices.Clone(exp), seen...) {
			for _, v := range []string{n.Port, n.RemoteSystem, n.RemotePort} {
				if checkText(v) != nil {
					t.Fatalf("accepted %q", v)
				}
			}
		}
		for _, m := range CablingMismatches(exp, seen) {
			if checkText(m) != nil && len(m) < 800 {
				t.Fatalf("mismatch text %q", m)
			}
		}
	})
}
