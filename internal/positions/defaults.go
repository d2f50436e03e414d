package positions

import (
	"fmt"

	"go.yaml.in/yaml/v3"
)

// policyKeys are the settings a YAML plan file's `defaults:` gives its
// positions that set none of their own.
var policyKeys = []string{"replace", "moved", "cabling"}

// applyDefaults applies a plan file's `defaults:` mapping (replace, moved,
// cabling) to the positions ps read from it that leave them empty. A bad
// value is reported at the defaults' line and applied to none.
func applyDefaults(file string, n *yaml.Node, ps []*Position) Errors {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil
	}
	m, err := stringMap(n)
	if err != nil {
		return Errors{&Error{File: file, Line: n.Line, Field: "defaults", Err: err}}
	}
	var errs Errors
	for k := range m {
		known := false
		for _, pk := range policyKeys {
			known = known || k == pk
		}
		if !known {
			errs = append(errs, &Error{File: file, Line: n.Line, Field: "defaults." + visible(k),
				Err: fmt.Errorf("unknown default: defaults hold replace, moved and cabling")})
		}
	}
	probe := &Position{Replace: m["replace"], Moved: m["moved"], Cabling: m["cabling"]}
	probe.checkPolicies(func(field string, err error) {
		errs = append(errs, &Error{File: file, Line: n.Line, Field: "defaults." + field, Err: err})
	})
	if len(errs) > 0 {
		return errs
	}
	for _, p := range ps {
		if p.Replace == "" {
			p.Replace = m["replace"]
		}
		if p.Moved == "" {
			p.Moved = m["moved"]
		}
		if p.Cabling == "" {
			p.Cabling = m["cabling"]
		}
	}
	return nil
}

// neighborList reads a position's `neighbors:`, a list of mappings with
// port, remote_system and remote_port.
func neighborList(n *yaml.Node) ([]Neighbor, error) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("want a list of {port, remote_system, remote_port}, got %s", describe(n))
	}
	if len(n.Content) > MaxNeighbors {
		return nil, fmt.Errorf("%d neighbours: at most %d", len(n.Content), MaxNeighbors)
	}
	out := make([]Neighbor, 0, len(n.Content))
	for _, item := range n.Content {
		item = resolve(item)
		m, err := stringMap(item)
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", item.Line, err)
		}
		var nb Neighbor
		for k, v := range m {
			switch k {
			case "port":
				nb.Port = v
			case "remote_system":
				nb.RemoteSystem = v
			case "remote_port":
				nb.RemotePort = v
			default:
				return nil, fmt.Errorf("line %d: unknown key %q: a neighbour has port, remote_system and remote_port", item.Line, visible(k))
			}
		}
		out = append(out, nb)
	}
	return out, nil
}
