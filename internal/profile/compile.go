package profile

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// compiler collects the problems of one profile while compile checks it.
type compiler struct {
	p      *Profile
	d      *decoder
	errs   Errors
	budget int // section nodes left to expand (aliases)
}

// suppressed reports whether field or a field enclosing it already failed
// to decode: what follows from a value that is not there is not news.
func (c *compiler) suppressed(field string) bool {
	for field != "" {
		if c.d.bad[field] {
			return true
		}
		i := strings.LastIndexAny(field, ".[")
		if i < 0 {
			return false
		}
		field = field[:i]
	}
	return false
}

// addIn records err in field at position at of file ("" = the profile's).
func (c *compiler) addIn(file, field string, at pos, err error) {
	if file == "" {
		file = c.p.File
		if at.line == 0 {
			at = pos{c.p.Line, 0}
		}
	}
	c.errs = append(c.errs, &FieldError{File: file, Line: at.line, Column: at.col, Profile: c.p.Name, Field: field, Err: err})
}

func (c *compiler) addAt(field string, at pos, format string, args ...any) {
	if c.suppressed(field) {
		return
	}
	c.addIn("", field, at, fmt.Errorf(format, args...))
}

// add records a problem with field, at the field's value (or the closest
// enclosing field that is written).
func (c *compiler) add(field string, format string, args ...any) {
	c.addAt(field, c.p.at.of(field), format, args...)
}

// addItem records a problem with item i of a list field, at that item.
func (c *compiler) addItem(field string, i int, format string, args ...any) {
	at, ok := c.p.at[fmt.Sprintf("%s[%d]", field, i)]
	if !ok {
		at = c.p.at.of(field)
	}
	c.addAt(field, at, format, args...)
}

// inline checks and parses a template written in the profile, or def when
// it is not given.
func (c *compiler) inline(field string, t Template, def string) *tmpl {
	if c.suppressed(field) {
		return nil
	}
	src := t.Src
	if src == "" {
		if def == "" {
			return nil
		}
		src = def
	}
	tp := c.template(field, field, src, func(tl, tc int) (string, pos) { return "", t.posIn(tl, tc) })
	if tp != nil {
		tp.line = t.Line
	}
	return tp
}

// template checks src (every function and field it names) and parses it.
// loc maps positions in src to its file. Every problem is recorded; nil
// when there is one.
func (c *compiler) template(field, name, src string, loc func(tl, tc int) (string, pos)) *tmpl {
	probs := checkTemplate(name, src)
	for _, pr := range probs {
		tl, tc := pr.line, 0
		if pr.off >= 0 {
			tl, tc = lineColOf(src, pr.off)
		}
		file, at := loc(tl, tc)
		c.addIn(file, field, at, errors.New(pr.msg))
	}
	if len(probs) > 0 {
		return nil
	}
	t, err := newTmpl(name, src)
	if err != nil { // checkTemplate parses as text/template does; kept for safety
		file, at := loc(1, 0)
		c.addIn(file, field, at, err)
		return nil
	}
	t.src, t.loc = src, loc
	return t
}

// lineColOf is the 1-based line and column of byte offset off in s.
func lineColOf(s string, off int) (int, int) {
	if off > len(s) {
		off = len(s)
	}
	line := 1 + strings.Count(s[:off], "\n")
	return line, off - strings.LastIndex(s[:off], "\n")
}

// tree compiles a section's data: maps, lists and scalars whose strings
// may be templates. It returns nil when a problem was recorded.
func (c *compiler) tree(field string, n *yaml.Node) any {
	if c.budget == 0 {
		c.budget = maxNodes
	}
	ok := true
	v := c.treeNode(field, n, &ok)
	if !ok {
		return nil
	}
	return v
}

func (c *compiler) treeNode(field string, n *yaml.Node, ok *bool) any {
	if c.budget--; c.budget < 0 {
		if c.budget == -1 {
			c.addAt(field, pos{n.Line, n.Column}, "the data expands to more than %d values through aliases", maxNodes)
		}
		*ok = false
		return nil
	}
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for _, kv := range c.d.pairs(n, field) {
			k := kv[0]
			if k.Kind != yaml.ScalarNode {
				c.addAt(field, pos{k.Line, k.Column}, "keys must be plain text, got %s", describe(k))
				*ok = false
				continue
			}
			f := join(field, k.Value)
			if _, dup := m[k.Value]; dup {
				c.addAt(f, pos{k.Line, k.Column}, "key %q appears twice", k.Value)
				*ok = false
				continue
			}
			m[k.Value] = c.treeNode(f, kv[1], ok)
		}
		return m
	case yaml.SequenceNode:
		l := make([]any, 0, len(n.Content))
		for i, e := range n.Content {
			l = append(l, c.treeNode(fmt.Sprintf("%s[%d]", field, i), e, ok))
		}
		return l
	case yaml.AliasNode:
		if n.Alias == nil {
			*ok = false
			return nil
		}
		return c.treeNode(field, n.Alias, ok)
	case yaml.ScalarNode:
		if n.Tag == "!!str" || n.Tag == "" {
			if strings.Contains(n.Value, "{{") {
				where := c.d.textAt(n)
				t := c.template(field, field, n.Value, func(tl, tc int) (string, pos) { return "", where.posIn(tl, tc) })
				if t == nil {
					*ok = false
					return nil
				}
				t.line = n.Line
				return t
			}
			return n.Value
		}
		var v any
		if err := n.Decode(&v); err != nil {
			c.addAt(field, pos{n.Line, n.Column}, "%v", cleanYAML(err))
			*ok = false
			return nil
		}
		return v
	}
	c.addAt(field, pos{n.Line, n.Column}, "unsupported YAML node")
	*ok = false
	return nil
}

func cleanYAML(err error) error {
	return errors.New(strings.TrimPrefix(err.Error(), "yaml: "))
}

// trial executes every template for the sample device (SampleFacts), so
// what only shows when a template runs (a label the device may lack, a
// function given the wrong value, config_db text that is not JSON) fails
// at load. Unlike Render it goes on after a failure, to report them all.
func (c *compiler) trial() {
	p := c.p
	f := SampleFacts()
	d := &Data{ID: f.ID, MAC: f.MAC, Serial: f.Serial, Product: f.Product, Platform: f.Platform,
		Kind: f.Kind, IP: f.IP, Subnet: f.Subnet, SONiCVersion: f.SONiCVersion,
		VendorClass: f.VendorClass, DHCPHostname: f.DHCPHostname, Labels: mergeLabels(f.Labels, p.spec.Labels),
		Profile: p.Name, Cluster: p.Cluster, Role: p.Role, BaseURL: "http://192.0.2.1:8080",
		SecureBaseURL: "https://192.0.2.1", TLSPin: "sha256//47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=",
		CircuitID: "Ethernet12", RemoteID: "mgmt-7",
		Position: Position{Name: "leaf-07a", CircuitID: "Ethernet12", RemoteID: "mgmt-7", Rack: "7", Port: "Ethernet12",
			Address: "192.0.2.10", Fields: map[string]string{}}}
	run := func(field string, t *tmpl) ([]byte, bool) {
		if t == nil {
			return nil, true
		}
		out, err := t.execBytes(d)
		if err != nil {
			c.execError(field, t, err)
			return nil, false
		}
		return out, true
	}
	h, _ := run("hostname", p.hostname)
	d.Hostname = strings.TrimSpace(string(h))
	sku, _ := run("hwsku", p.hwsku)
	d.HWSKU = strings.TrimSpace(string(sku))
	if mg := p.spec.Mgmt; mg != nil {
		run("mgmt.ip", p.mgmtIP)
		run("mgmt.prefix", p.mgmtPrefix)
		run("mgmt.gateway", p.mgmtGW)
		d.Mgmt = Mgmt{Interface: mg.Interface, IP: "192.0.2.10", Prefix: 24}
	}
	if out, ok := run("config_db", p.configDB); ok && p.configDB != nil {
		if _, err := parseConfigDB(out); err != nil {
			file, at := p.configDB.loc(1, 0)
			c.addIn(file, "config_db", at, fmt.Errorf("rendered for the sample device: %w", err))
		}
	}
	if out, ok := run("vm.user_data", p.userData); ok && p.userData != nil && p.userData.doc == docYAML {
		if err := checkCloudConfig(out); err != nil {
			file, at := p.userData.loc(1, 0)
			c.addIn(file, "vm.user_data", at, err)
		}
	}
	for i, s := range p.sections {
		c.trialTree(fmt.Sprintf("sections[%d].data", i), s.body, d)
	}
}

func (c *compiler) trialTree(field string, v any, d *Data) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			c.trialTree(join(field, k), e, d)
		}
	case []any:
		for i, e := range x {
			c.trialTree(fmt.Sprintf("%s[%d]", field, i), e, d)
		}
	case *tmpl:
		if _, err := x.exec(d); err != nil {
			c.execError(field, x, err)
		}
	}
}

// execErrRE takes apart text/template's execution error:
// template: NAME:LINE:COL: executing "NAME" at <NODE>: MESSAGE.
var execErrRE = regexp.MustCompile(`^template: (?s:.*?):(\d+):(\d+): executing ".*?" at (<.*?>): `)

// execError records a template's execution error at its place.
func (c *compiler) execError(field string, t *tmpl, err error) {
	tl, tc := 1, 0
	if m := execErrRE.FindStringSubmatch(err.Error()); m != nil {
		fmt.Sscan(m[1], &tl)
		fmt.Sscan(m[2], &tc) // 0-based
		// From the action text's start (the error is placed at a chain's
		// last element).
		off := len(t.src)
		if lines := strings.SplitAfterN(t.src, "\n", tl+1); tl >= 1 && tl <= len(lines) {
			off = len(strings.Join(lines[:tl-1], "")) + tc
		}
		off = startOf(t.src, off, strings.TrimSuffix(strings.TrimPrefix(m[3], "<"), ">"))
		tl, tc = lineColOf(t.src, off)
	}
	file, at := t.loc(tl, tc)
	c.addIn(file, field, at, cleanExecErr(err))
}

var escaperCallRE = regexp.MustCompile(`error calling _ztpd_[a-z_]+: `)

// cleanExecErr turns text/template's execution error into what went wrong
// at which action, without the Go-side framing; a missing label gets the
// way to give it a default.
func cleanExecErr(err error) error {
	msg := err.Error()
	m := execErrRE.FindStringSubmatch(msg)
	if m == nil {
		return err
	}
	rest := escaperCallRE.ReplaceAllString(msg[len(m[0]):], "")
	out := "at " + m[3] + ": " + rest
	if strings.HasPrefix(rest, "map has no entry for key ") && strings.HasPrefix(m[3], "<.Labels.") {
		key := strings.TrimSuffix(strings.TrimPrefix(m[3], "<.Labels."), ">")
		out += fmt.Sprintf(` (the sample device has no label %q; write {{ index .Labels %q | default "..." }} when a device may lack it)`, key, key)
	}
	return errors.New(out)
}
