package positions

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

const planYAML = `positions:
  - name: leaf-07a
    relay: 10.0.7.1
    circuit_id: Ethernet12
    remote_id: mgmt-07
    address: 10.0.7.21
    profile: leaf
    cluster: fabric-2
    role: worker
    serial: SN07A
    rack: "7"
    port: Ethernet12
    labels: {tier: leaf}
    fields: {loopback: 10.255.0.7}
  - name: leaf-07b
    relay: 10.0.7.1
    circuit_id: Ethernet13
`

func TestParseYAMLAndMatch(t *testing.T) {
	ps, errs := Parse("plan.yaml", []byte(planYAML))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	pl, errs := Build(ps)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	relay := [4]byte{10, 0, 7, 1}
	if p := pl.Match4(relay, []byte("Ethernet12"), []byte("mgmt-07")); p == nil || p.Name != "leaf-07a" || p.Line != 2 {
		t.Fatalf("match = %+v", p)
	}
	// The remote id must match where the plan names one.
	if p := pl.Match4(relay, []byte("Ethernet12"), []byte("other")); p != nil {
		t.Fatalf("matched %s with another remote id", p.Name)
	}
	// A position without a remote id matches whatever remote id comes.
	if p := pl.Match4(relay, []byte("Ethernet13"), []byte("anything")); p == nil || p.Name != "leaf-07b" {
		t.Fatalf("match = %+v", p)
	}
	if p := pl.Match4(relay, []byte("Ethernet13"), nil); p == nil || p.Name != "leaf-07b" {
		t.Fatalf("match = %+v", p)
	}
	// Relay information that matches no position is no position's.
	for _, c := range [][]byte{[]byte("Ethernet14"), nil, []byte("Ethernet1")} {
		if p := pl.Match4(relay, c, nil); p != nil {
			t.Fatalf("circuit %q matched %s", c, p.Name)
		}
	}
	if p := pl.Match4([4]byte{10, 0, 8, 1}, []byte("Ethernet13"), nil); p != nil {
		t.Fatalf("another relay matched %s", p.Name)
	}
	p := pl.Get("leaf-07a")
	if p.Fields["loopback"] != "10.255.0.7" || p.Labels["tier"] != "leaf" || p.Address != netip.MustParseAddr("10.0.7.21") {
		t.Fatalf("position = %+v", p)
	}
	if pl.ExpectingSerial("SN07A") != p {
		t.Fatal("serial index")
	}
}

func TestMatchAllocatesNothing(t *testing.T) {
	ps, _ := Parse("plan.yaml", []byte(planYAML))
	pl, _ := Build(ps)
	c, r := []byte("Ethernet13"), []byte("x")
	if n := testing.AllocsPerRun(100, func() { pl.Match4([4]byte{10, 0, 7, 1}, c, r) }); n != 0 {
		t.Fatalf("Match4 allocates %v times", n)
	}
}

func TestCSV(t *testing.T) {
	src := "# the rack 7 plan\nname,relay,circuit_id,address,rack,port,labels,uplink\n" +
		"leaf-07a,10.0.7.1,Ethernet12,10.0.7.21,7,Ethernet12,tier=leaf;zone=a,spine-1:Ethernet1\n" +
		"leaf-07b,10.0.7.1,Ethernet13,,7,Ethernet13,,\n"
	ps, errs := Parse("rack7.csv", []byte(src))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	pl, errs := Build(ps)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	a := pl.Get("leaf-07a")
	if a.Line != 3 || a.Labels["zone"] != "a" || a.Fields["uplink"] != "spine-1:Ethernet1" || a.Rack != "7" {
		t.Fatalf("leaf-07a = %+v", a)
	}
	if b := pl.Get("leaf-07b"); b.Line != 4 || b.Address.IsValid() || b.Fields != nil {
		t.Fatalf("leaf-07b = %+v", b)
	}
}

// Two positions a request could match both are a load error naming both
// lines.
func TestIndistinguishable(t *testing.T) {
	for _, c := range []struct{ a, b string }{
		{"circuit_id: E1", "circuit_id: E1"},
		{"circuit_id: E1\n    remote_id: R", "circuit_id: E1"},
		{"circuit_id: E1", "remote_id: R"},
		{"circuit_id: E1\n    remote_id: R", "remote_id: R"},
		{"circuit_id: E1", "circuit_id: \"hex:4531\""},
		{"remote_id: R", "{}"},
	} {
		b := c.b
		if b == "{}" {
			b = "rack: x"
		}
		src := fmt.Sprintf("positions:\n  - name: a\n    relay: 10.0.0.1\n    %s\n  - name: b\n    relay: 10.0.0.1\n    %s\n", c.a, b)
		ps, errs := Parse("p.yaml", []byte(src))
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		_, errs = Build(ps)
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), "p.yaml:") || !strings.Contains(errs[0].Error(), "cannot tell it apart") ||
			!strings.Contains(errs[0].Error(), `position "a" at p.yaml:2`) {
			t.Fatalf("%q / %q: errors %v", c.a, c.b, errs)
		}
	}
	// Told apart: another circuit, another relay, both ids differing.
	for _, c := range []struct{ a, b string }{
		{"circuit_id: E1", "circuit_id: E2"},
		{"circuit_id: E1\n    remote_id: R1", "circuit_id: E1\n    remote_id: R2"},
		{"remote_id: R1", "remote_id: R2"},
	} {
		src := fmt.Sprintf("positions:\n  - name: a\n    relay: 10.0.0.1\n    %s\n  - name: b\n    relay: 10.0.0.1\n    %s\n", c.a, c.b)
		ps, _ := Parse("p.yaml", []byte(src))
		if _, errs := Build(ps); len(errs) > 0 {
			t.Fatalf("%q / %q: %v", c.a, c.b, errs)
		}
	}
}

func TestErrorsAtTheirLines(t *testing.T) {
	src := `positions:
  - name: Leaf_1
    relay: 10.0.0.1
  - name: b
    relay: nowhere
  - name: c
    relay: 10.0.0.2
    circuit_id: "bad\u0001id"
    rol: worker
  - name: d
    relay: 10.0.0.3
    circuit_id: "` + strings.Repeat("x", 254) + `"
`
	ps, perrs := Parse("p.yaml", []byte(src))
	_, berrs := Build(ps)
	all := append(perrs, berrs...)
	sortErrors(all)
	got := all.Error()
	for _, want := range []string{
		`p.yaml:2: position "Leaf_1": name: "Leaf_1" is not a host name label`,
		`p.yaml:5: position "b": relay: "nowhere" is not an IP address`,
		`p.yaml:9: position "c": rol: unknown field (did you mean role?)`,
		`p.yaml:10: position "d": circuit_id: 254 bytes: option 82 carries at most 253`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
	// c left out because of its unknown field; its bad id would be
	// reported once it decodes.
	ps, _ = Parse("p.yaml", []byte("positions:\n  - name: c\n    relay: 10.0.0.2\n    circuit_id: \"bad\\u0001id\"\n"))
	if _, errs := Build(ps); len(errs) != 1 || !strings.Contains(errs[0].Error(), "p.yaml:2") || !strings.Contains(errs[0].Error(), "hex:") {
		t.Fatalf("errors %v", errs)
	}
	var e *Error
	if !errors.As(all[0], &e) || e.File != "p.yaml" {
		t.Fatalf("first error %v", all[0])
	}
}

func TestDuplicates(t *testing.T) {
	src := "name,relay,circuit_id,address,serial\na,10.0.0.1,E1,10.0.0.5,S1\na,10.0.0.1,E2,,\nb,10.0.0.1,E3,10.0.0.5,\nc,10.0.0.1,E4,,S1\n"
	ps, _ := Parse("p.csv", []byte(src))
	_, errs := Build(ps)
	got := errs.Error()
	for _, want := range []string{
		`p.csv:3: position "a": name: defined twice, as position "a" at p.csv:2`,
		`p.csv:4: position "b": address: 10.0.0.5 reserved twice, as position "a" at p.csv:2`,
		`p.csv:5: position "c": serial: serial "S1" expected twice, as position "a" at p.csv:2`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
}

func TestIDForms(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string
	}{{"Ethernet12", "Ethernet12"}, {"00:06:65", "\x00\x06e"}, {"hex:00ff", "\x00\xff"}, {"41:42", "41:42"}} {
		b, err := ParseID(c.in)
		if err != nil || string(b) != c.want {
			t.Errorf("ParseID(%q) = %q, %v", c.in, b, err)
		}
		if back, _ := ParseID(IDText(b)); string(back) != string(b) {
			t.Errorf("IDText(%q) = %q does not read back", b, IDText(b))
		}
	}
	for _, bad := range []string{"é", "a\nb", "hex:zz", "hex:" + strings.Repeat("00", 254)} {
		if _, err := ParseID(bad); err == nil {
			t.Errorf("ParseID(%q) accepted", bad)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add("plan.yaml", []byte(planYAML))
	f.Add("plan.csv", []byte("name,relay,circuit_id,labels,x\na,10.0.0.1,E1,k=v,y\n"))
	f.Add("plan.yaml", []byte("- name: a\n  relay: ::1\n  remote_id: \"00:ff\"\n"))
	f.Fuzz(func(t *testing.T, name string, raw []byte) {
		file := "f.yaml"
		if strings.HasSuffix(name, "csv") {
			file = "f.csv"
		}
		ps, _ := Parse(file, raw)
		pl, _ := Build(ps)
		for _, p := range pl.List() {
			if len(p.circuit) > MaxIDLen || len(p.remote) > MaxIDLen {
				t.Fatalf("%s: id longer than option 82 allows", p.Name)
			}
			for _, s := range []string{p.Name, p.Rack, p.Port, p.Cluster, p.Role} {
				if checkText(s) != nil {
					t.Fatalf("unchecked text %q", s)
				}
			}
			if p.Relay.Is4() {
				if got := pl.Match4(p.Relay.As4(), p.circuit, p.remote); got != p {
					t.Fatalf("%s does not match its own proof (got %v)", p.Name, got)
				}
			}
		}
	})
}
