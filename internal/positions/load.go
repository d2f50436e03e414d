package positions

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sort"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/ztpd/ztpd/internal/configfiles"
)

// Error is one problem of one position, at its place.
type Error struct {
	File     string
	Line     int
	Position string
	Field    string
	Err      error
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	}
	if e.Position != "" {
		fmt.Fprintf(&b, "position %q: ", visible(e.Position))
		if e.File == "" {
			b.Reset()
			fmt.Fprintf(&b, "position %q (through the API): ", visible(e.Position))
		}
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Errors lists every problem found in a plan, so an operator fixes them in
// one pass.
type Errors []error

func (es Errors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return "invalid cabling plan:\n  " + strings.Join(parts, "\n  ")
}

func sortErrors(errs Errors) {
	sort.SliceStable(errs, func(i, j int) bool {
		a, aok := errs[i].(*Error)
		b, bok := errs[j].(*Error)
		switch {
		case !aok || !bok:
			return !aok && bok
		case a.File != b.File:
			return a.File < b.File
		}
		return a.Line < b.Line
	})
}

// Files lists the plan files under paths: a file as given, a directory's
// *.yaml, *.yml and *.csv files in name order.
func Files(paths []string) ([]string, Errors) {
	return configfiles.List(paths, "positions", ".yaml", ".yml", ".csv")
}

// Load reads the plan files under paths and adds extra (the positions
// stored through the API), then builds the plan; on any problem it
// returns every one and no plan.
func Load(paths []string, extra []*Position) (*Plan, error) {
	files, errs := Files(paths)
	var all []*Position
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, fmt.Errorf("positions: %w", err))
			continue
		}
		ps, perrs := Parse(f, raw)
		all = append(all, ps...)
		errs = append(errs, perrs...)
	}
	all = append(all, extra...)
	pl, berrs := Build(all)
	errs = append(errs, berrs...)
	if len(errs) > 0 {
		sortErrors(errs)
		return nil, errs
	}
	return pl, nil
}

// Parse decodes the positions of one file, CSV when its name ends in
// .csv, else YAML. Positions that did not decode are left out and their
// problems returned; the positions returned are not checked yet (Build
// checks them).
func Parse(file string, raw []byte) ([]*Position, Errors) {
	if !utf8.Valid(raw) {
		line := 1 + bytes.Count(raw[:invalidAt(raw)], []byte("\n"))
		return nil, Errors{&Error{File: file, Line: line, Err: errors.New("not UTF-8 text: plan files must be UTF-8")}}
	}
	if strings.HasSuffix(file, ".csv") {
		return parseCSV(file, raw)
	}
	return parseYAML(file, raw)
}

func invalidAt(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// columns are the fields a position has, as YAML keys and CSV headers.
var columns = []string{"name", "relay", "circuit_id", "remote_id", "interface_id", "role", "cluster",
	"profile", "address", "serial", "rack", "port", "labels", "fields", "replace", "moved", "cabling", "neighbors"}

// set assigns one scalar field of p; it reports a value that cannot be
// decoded (an address that is not one).
func set(p *Position, field, v string) error {
	switch field {
	case "name":
		p.Name = v
	case "relay":
		a, err := netip.ParseAddr(v)
		if err != nil {
			return fmt.Errorf("%q is not an IP address", visible(v))
		}
		p.Relay = a
	case "circuit_id":
		p.CircuitID = v
	case "remote_id":
		p.RemoteID = v
	case "interface_id":
		p.InterfaceID = v
	case "role":
		p.Role = v
	case "cluster":
		p.Cluster = v
	case "profile":
		p.Profile = v
	case "address":
		if v == "" {
			return nil
		}
		a, err := netip.ParseAddr(v)
		if err != nil {
			return fmt.Errorf("%q is not an IP address", visible(v))
		}
		p.Address = a
	case "serial":
		p.Serial = v
	case "rack":
		p.Rack = v
	case "port":
		p.Port = v
	case "replace":
		p.Replace = v
	case "moved":
		p.Moved = v
	case "cabling":
		p.Cabling = v
	case "neighbors":
		ns, err := ParseNeighborList(v)
		if err != nil {
			return err
		}
		p.Neighbors = ns
	default:
		return fmt.Errorf("unknown field%s", didYouMean(field))
	}
	return nil
}

func didYouMean(field string) string {
	best, bestD := "", 3
	for _, c := range columns {
		if d := distance(field, c); d < bestD {
			best, bestD = c, d
		}
	}
	if best == "" {
		return " (fields: " + strings.Join(columns, ", ") + ")"
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

// distance is the Levenshtein distance of a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// maxNodes bounds what one YAML file may expand to through aliases.
const maxNodes = 1 << 20

// parseYAML reads a file whose top level is `positions:` with a list of
// positions (mappings), or that is the list itself.
func parseYAML(file string, raw []byte) ([]*Position, Errors) {
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, Errors{&Error{File: file, Line: yamlLine(err), Err: fmt.Errorf("YAML syntax: %s", strings.TrimPrefix(err.Error(), "yaml: "))}}
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	root := doc.Content[0]
	var errs Errors
	fail := func(n *yaml.Node, name, field, format string, args ...any) {
		errs = append(errs, &Error{File: file, Line: n.Line, Position: name, Field: field, Err: fmt.Errorf(format, args...)})
	}
	list := root
	var defaults *yaml.Node
	if root.Kind == yaml.MappingNode {
		list = nil
		for i := 0; i+1 < len(root.Content); i += 2 {
			if k := root.Content[i]; k.Value == "positions" {
				list = root.Content[i+1]
			} else if k.Value == "defaults" {
				defaults = root.Content[i+1]
			} else {
				fail(k, "", k.Value, "unknown top-level key: a plan file holds `positions:` and its list, and `defaults:`")
			}
		}
		if list == nil {
			return nil, errs
		}
	}
	if list.Kind != yaml.SequenceNode {
		if list.ShortTag() != "!!null" {
			fail(list, "", "positions", "want a list of positions")
		}
		return nil, errs
	}
	budget := maxNodes
	var out []*Position
	for _, item := range list.Content {
		item = resolve(item)
		if item.Kind != yaml.MappingNode {
			fail(item, "", "", "a position is a mapping of its fields (name, relay, circuit_id, ...)")
			continue
		}
		p := &Position{File: file, Line: item.Line}
		for i := 0; i+1 < len(item.Content); i += 2 {
			if k := item.Content[i]; k.Value == "name" {
				p.Name = resolve(item.Content[i+1]).Value
			}
		}
		ok := true
		for i := 0; i+1 < len(item.Content); i += 2 {
			k, v := item.Content[i], resolve(item.Content[i+1])
			if budget -= len(v.Content) + 1; budget < 0 {
				fail(k, p.Name, k.Value, "the file expands to more than %d values through aliases", maxNodes)
				return out, errs
			}
			switch k.Value {
			case "neighbors":
				ns, err := neighborList(v)
				if err != nil {
					fail(v, p.Name, k.Value, "%v", err)
					ok = false
				}
				p.Neighbors = ns
				continue
			case "labels", "fields":
				m, err := stringMap(v)
				if err != nil {
					fail(v, p.Name, k.Value, "%v", err)
					ok = false
					continue
				}
				if k.Value == "labels" {
					p.Labels = m
				} else {
					p.Fields = m
				}
				continue
			}
			if v.Kind != yaml.ScalarNode {
				fail(v, p.Name, k.Value, "want a value, got %s", describe(v))
				ok = false
				continue
			}
			val := v.Value
			if v.ShortTag() == "!!null" {
				val = ""
			}
			if err := set(p, k.Value, val); err != nil {
				fail(k, p.Name, k.Value, "%v", err)
				ok = false
			}
		}
		if ok {
			out = append(out, p)
		}
	}
	if defaults != nil {
		errs = append(errs, applyDefaults(file, resolve(defaults), out)...)
	}
	return out, errs
}

func resolve(n *yaml.Node) *yaml.Node {
	for depth := 0; n.Kind == yaml.AliasNode && n.Alias != nil && depth < 100; depth++ {
		n = n.Alias
	}
	return n
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return "nothing"
}

func stringMap(n *yaml.Node) (map[string]string, error) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("want a mapping of names to values, got %s", describe(n))
	}
	m := make(map[string]string, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		if k.Kind != yaml.ScalarNode || v.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("line %d: names and values must be plain values", k.Line)
		}
		if _, dup := m[k.Value]; dup {
			return nil, fmt.Errorf("line %d: %q given twice", k.Line, visible(k.Value))
		}
		m[k.Value] = v.Value
	}
	return m, nil
}

// yamlLine is the line a yaml.v3 error names, else 1.
func yamlLine(err error) int {
	var n int
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if _, e := fmt.Sscanf(msg, "line %d:", &n); e == nil && n > 0 {
		return n
	}
	return 1
}

// parseCSV reads a CSV file whose first row names its columns: the
// fields a position has (columns), "labels" as name=value pairs separated
// by ";", and any other column a plan field templates see under
// .Position.Fields. Lines starting with # are comments.
func parseCSV(file string, raw []byte) ([]*Position, Errors) {
	r := csv.NewReader(bytes.NewReader(raw))
	r.Comment = '#'
	r.FieldsPerRecord = -1
	r.TrimLeadingSpace = true
	var errs Errors
	header, err := r.Read()
	if errors.Is(err, io.EOF) {
		return nil, nil
	}
	if err != nil {
		return nil, Errors{csvError(file, err)}
	}
	hl, _ := r.FieldPos(0)
	known := map[string]bool{}
	for _, c := range columns {
		known[c] = true
	}
	seen := map[string]bool{}
	for i, h := range header {
		h = strings.TrimSpace(h)
		header[i] = h
		switch {
		case h == "":
			errs = append(errs, &Error{File: file, Line: hl, Field: fmt.Sprintf("column %d", i+1), Err: errors.New("header without a name")})
		case seen[h]:
			errs = append(errs, &Error{File: file, Line: hl, Field: h, Err: errors.New("column given twice")})
		case h == "fields":
			errs = append(errs, &Error{File: file, Line: hl, Field: h, Err: errors.New("plan fields are columns of their own in CSV")})
		case !known[h] && !fieldRE.MatchString(h):
			errs = append(errs, &Error{File: file, Line: hl, Field: h, Err: errors.New("not a column name: lower-case letters, digits and _, starting with a letter")})
		}
		seen[h] = true
	}
	if len(errs) > 0 {
		return nil, errs
	}
	var out []*Position
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			errs = append(errs, csvError(file, err))
			break
		}
		line, _ := r.FieldPos(0)
		p := &Position{File: file, Line: line}
		if len(rec) != len(header) {
			errs = append(errs, &Error{File: file, Line: line, Err: fmt.Errorf("%d values for %d columns", len(rec), len(header))})
			continue
		}
		for i, h := range header {
			if h == "name" {
				p.Name = strings.TrimSpace(rec[i])
			}
		}
		ok := true
		for i, h := range header {
			v := strings.TrimSpace(rec[i])
			switch {
			case h == "labels":
				m, err := pairs(v)
				if err != nil {
					errs = append(errs, &Error{File: file, Line: line, Position: p.Name, Field: h, Err: err})
					ok = false
				}
				p.Labels = m
			case known[h]:
				if err := set(p, h, v); err != nil {
					errs = append(errs, &Error{File: file, Line: line, Position: p.Name, Field: h, Err: err})
					ok = false
				}
			case v != "":
				if p.Fields == nil {
					p.Fields = map[string]string{}
				}
				p.Fields[h] = v
			}
		}
		if ok {
			out = append(out, p)
		}
	}
	return out, errs
}

func csvError(file string, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &Error{File: file, Line: pe.Line, Err: fmt.Errorf("CSV: %v", pe.Err)}
	}
	return &Error{File: file, Err: fmt.Errorf("CSV: %v", err)}
}

// pairs parses "a=1;b=2".
func pairs(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	m := map[string]string{}
	for _, kv := range strings.Split(s, ";") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not name=value", visible(kv))
		}
		k = strings.TrimSpace(k)
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("%q given twice", visible(k))
		}
		m[k] = strings.TrimSpace(v)
	}
	return m, nil
}
