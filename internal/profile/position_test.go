package profile

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const positionProfiles = `name: rack7
match: {circuit_id: "rack7/*", remote_id: "mgmt-*"}
cluster: fabric-1
role: control-plane
labels: {tier: profile, keep: yes}
config_db:
  inline: |
    {"DEVICE_METADATA": {"localhost": {"hostname": "{{ .Hostname }}", "rack": "{{ .Position.Rack }}",
     "loopback": {{ index .Position.Fields "loopback" }}, "circuit": "{{ .CircuitID }}"}}}
vm:
  user_data:
    inline: |
      #cloud-config
      position: {{ .Position.Name }}
      port: "{{ .Position.Port }}"
      fqdn: {{ .Position.Rack }}
---
name: other
`

func loadPositionProfiles(t *testing.T) *Set {
	t.Helper()
	ps, errs := Parse("p.yaml", []byte(positionProfiles))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	set, errs := NewSet(ps)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return set
}

// TestMatchOnRelayInformation: circuit_id and remote_id globs select a
// profile without a plan, as serial globs do.
func TestMatchOnRelayInformation(t *testing.T) {
	set := loadPositionProfiles(t)
	f := SampleFacts()
	f.CircuitID, f.RemoteID = "rack7/Ethernet3", "mgmt-07"
	if p := set.Match(f); p == nil || p.Name != "rack7" {
		t.Fatalf("matched %v", p)
	}
	f.RemoteID = "core-1"
	if p := set.Match(f); p == nil || p.Name != "other" {
		t.Fatalf("matched %v with another remote id", p)
	}
	why := set.Get("rack7").WhyNot(f)
	if len(why) != 1 || !strings.Contains(why[0], `match.remote_id: the device's "core-1" is not "mgmt-*"`) {
		t.Fatalf("why not: %q", why)
	}
	f.CircuitID, f.RemoteID = "", ""
	if p := set.Match(f); p.Name != "other" {
		t.Fatalf("a device without relay information matched %s", p.Name)
	}
}

// TestPositionRendered: a device at a planned position is named by it,
// takes its cluster, role and labels, and its templates see .Position,
// every value escaped for the document it lands in.
func TestPositionRendered(t *testing.T) {
	p := loadPositionProfiles(t).Get("rack7")
	f := SampleFacts()
	f.Labels = map[string]string{"keep": "device"}
	f.CircuitID = hostile
	f.Position = &Position{Name: "leaf-07a", Rack: hostile, Port: "a: [b]\n- c", Cluster: "fabric-2", Role: "worker",
		Labels: map[string]string{"tier": "leaf", "rack": "7"}, Fields: map[string]string{"loopback": "10.255.0.7"}}
	r, err := p.Render(f, Env{BaseURL: "http://192.0.2.1"}, RenderAll)
	if err != nil {
		t.Fatal(err)
	}
	if r.Hostname != "leaf-07a" || r.Cluster != "fabric-2" || r.Role != "worker" {
		t.Fatalf("rendered %s in %s as %s", r.Hostname, r.Cluster, r.Role)
	}
	if r.Labels["tier"] != "leaf" || r.Labels["keep"] != "device" || r.Labels["rack"] != "7" {
		t.Fatalf("labels %v", r.Labels)
	}
	md := r.ConfigDB["DEVICE_METADATA"].(map[string]any)["localhost"].(map[string]any)
	if md["rack"] != hostile || md["circuit"] != hostile || md["hostname"] != "leaf-07a" || md["loopback"] != "10.255.0.7" {
		t.Fatalf("config_db %v", md)
	}
	if _, injected := r.ConfigDB["TACPLUS_SERVER"]; injected {
		t.Fatal("a hostile rack value injected a config_db table")
	}
	var ud map[string]string
	if err := yaml.Unmarshal(r.UserData, &ud); err != nil {
		t.Fatalf("user data %s: %v", r.UserData, err)
	}
	if ud["position"] != "leaf-07a" || ud["port"] != "a: [b]\n- c" || ud["fqdn"] != hostile || len(ud) != 3 {
		t.Fatalf("user data %q", ud)
	}

	// Without a cluster of its own, the plan keeps the profile's.
	f.Position = &Position{Name: "leaf-07b"}
	r, err = p.Render(f, Env{}, 0)
	if err != nil || r.Hostname != "leaf-07b" || r.Cluster != "fabric-1" || r.Role != "control-plane" {
		t.Fatalf("rendered %+v, %v", r, err)
	}
}
