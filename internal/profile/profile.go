// Package profile loads operator-written YAML profiles, matches devices to
// them and renders what a matched device gets: hostname, management address,
// SONiC image, config_db content, extra ztp.json sections, the cluster to join
// and, for VMs, cloud-init data.
//
// A file holds one or more profiles (YAML documents separated by "---"); a
// directory contributes its *.yaml and *.yml files in name order. Unknown
// fields are errors, every template is parsed, checked (each function and
// each field of Data it names) and trial-rendered at load, so a typo fails
// `ztpd serve` and `ztpd profile check` instead of failing a switch at
// 3 a.m. Loading reports every problem of every file in one pass, in order,
// each as file:line:column: profile "name": field: problem, the field named
// as written in YAML (mgmt.prefix), with "did you mean" for a misspelt field,
// template field or function.
//
// Precedence, stated once: profiles are tried in order of
//
//  1. priority, higher first (default 0);
//  2. specificity, more match fields set first (serial, mac, product,
//     platform, kind, subnet, circuit_id, remote_id each count one);
//  3. name, alphabetically.
//
// The first profile whose every given match field matches wins. Within a field
// a list matches when any of its values does. serial, product, platform,
// circuit_id and remote_id values are shell globs (path.Match), the last
// two over the relay agent information (option 82) of the device's lease
// as device records show it; mac values are globs over the
// lower-case colon form, kind is one of sonic, onie, vm, unknown, and subnet
// is a CIDR containing the device address or the name of its DHCP subnet. A
// profile without match fields matches every device (a catch-all).
package profile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
	yaml4 "go.yaml.in/yaml/v4"

	"github.com/ztpd/ztpd/internal/configfiles"
)

// Profile is one loaded, validated profile.
type Profile struct {
	spec
	File string // file it came from
	Line int    // line of its first key

	specificity int
	subnets     []netip.Prefix
	subnetNames []string
	macs        []string

	hostname   *tmpl
	hwsku      *tmpl
	mgmtIP     *tmpl
	mgmtPrefix *tmpl
	mgmtGW     *tmpl
	configDB   *tmpl
	userData   *tmpl
	sections   []compiledSection

	sectionsUseMgmt bool // a section template refers to .Mgmt

	at fieldPos // where each field's value stands in File
}

// spec is the YAML form of a profile.
type spec struct {
	Name     string `yaml:"name"`
	Priority int    `yaml:"priority"`
	Match    Match  `yaml:"match"`

	Hostname Template `yaml:"hostname"`
	HWSKU    Template `yaml:"hwsku"`
	Mgmt     *struct {
		Interface string   `yaml:"interface"`
		IP        Template `yaml:"ip"`
		Prefix    Template `yaml:"prefix"`
		Gateway   Template `yaml:"gateway"`
	} `yaml:"mgmt"`
	SONiC *struct {
		Version    string `yaml:"version"`
		Image      string `yaml:"image"`
		SetDefault *bool  `yaml:"set_default"`
		SkipReboot bool   `yaml:"skip_reboot"`
	} `yaml:"sonic"`
	ConfigDB *struct {
		File   string `yaml:"file"`
		Inline string `yaml:"inline"`
		Mode   string `yaml:"mode"` // merge | replace | none
	} `yaml:"config_db"`
	Cluster    string            `yaml:"cluster"`
	Role       string            `yaml:"role"`
	Sections   []sectionSpec     `yaml:"sections"`
	ZTPOptions map[string]bool   `yaml:"ztp_options"`
	Labels     map[string]string `yaml:"labels"`
	Desired    *desiredSpec      `yaml:"desired"`
	VM         *struct {
		UserData struct {
			File   string `yaml:"file"`
			Inline string `yaml:"inline"`
		} `yaml:"user_data"`
		PublicKeys       []string `yaml:"public_keys"`
		AvailabilityZone string   `yaml:"availability_zone"`
		ServiceOffering  string   `yaml:"service_offering"`
	} `yaml:"vm"`
}

// Match selects devices; see the package documentation for the rules.
type Match struct {
	Serial   StrList `yaml:"serial"`
	MAC      StrList `yaml:"mac"`
	Product  StrList `yaml:"product"`
	Platform StrList `yaml:"platform"`
	Kind     StrList `yaml:"kind"`
	Subnet   StrList `yaml:"subnet"`
	// CircuitID and RemoteID are globs over the relay agent information
	// (option 82) the device's lease came with, in its stored form.
	CircuitID StrList `yaml:"circuit_id"`
	RemoteID  StrList `yaml:"remote_id"`
}

type sectionSpec struct {
	Name string    `yaml:"name"`
	Data yaml.Node `yaml:"data"`
}

// StrList is a YAML scalar or a list of scalars.
type StrList []string

// UnmarshalYAML accepts "x" as well as [x, y].
func (l *StrList) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*l = StrList{n.Value}
		return nil
	case yaml.SequenceNode:
		out := make(StrList, 0, len(n.Content))
		for _, c := range n.Content {
			if c.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: list items must be plain values", c.Line)
			}
			out = append(out, c.Value)
		}
		*l = out
		return nil
	}
	return fmt.Errorf("line %d: want a value or a list of values", n.Line)
}

// Template is a template string together with where it stands in its
// file.
type Template struct {
	Src    string
	Line   int
	Column int
	style  yaml.Style
	indent int // a block scalar's content indentation
}

// UnmarshalYAML takes any scalar (so `prefix: 24` works) and keeps its place.
func (t *Template) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a text value", n.Line)
	}
	*t = Template{Src: n.Value, Line: n.Line, Column: n.Column, style: n.Style}
	return nil
}

// posIn maps a line and column of the template's text (1-based; column 0
// unknown) to the profile file. Lines of a literal block scalar (|) map
// exactly; a quoted or plain value's first line too (escapes in "..."
// aside); the other lines of a folded or multi-line value map to the line
// only, approximately.
func (t Template) posIn(tl, tc int) pos {
	if t.Line == 0 {
		return pos{}
	}
	if tl < 1 {
		tl = 1
	}
	switch {
	case t.style&yaml.LiteralStyle != 0:
		if tc == 0 {
			return pos{t.Line + tl, 0}
		}
		return pos{t.Line + tl, t.indent + tc}
	case t.style&yaml.FoldedStyle != 0:
		return pos{t.Line + tl, 0}
	case tl == 1:
		if tc == 0 {
			return pos{t.Line, t.Column}
		}
		c := t.Column + tc - 1
		if t.style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle) != 0 {
			c++ // the opening quote
		}
		return pos{t.Line, c}
	}
	return pos{t.Line + tl - 1, 0}
}

// Set is the loaded profiles in precedence order.
type Set struct {
	list   []*Profile
	byName map[string]*Profile
}

// Profiles returns the profiles in precedence order.
func (s *Set) Profiles() []*Profile {
	if s == nil {
		return nil
	}
	return s.list
}

// Get returns the profile called name, or nil.
func (s *Set) Get(name string) *Profile {
	if s == nil {
		return nil
	}
	return s.byName[name]
}

// Match returns the first profile in precedence order that matches f, or nil.
func (s *Set) Match(f *Facts) *Profile {
	if s == nil {
		return nil
	}
	for _, p := range s.list {
		if p.Matches(f) {
			return p
		}
	}
	return nil
}

// Errors lists every problem found while loading, so an operator fixes them
// in one pass.
type Errors []error

func (es Errors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return "invalid profiles:\n  " + strings.Join(parts, "\n  ")
}

// FieldError is a problem in one field of one profile: where it is (file,
// line and, when known, column), the profile's name, the field's path as
// written in YAML (mgmt.prefix, sections[0].data) and what is wrong.
type FieldError struct {
	File    string
	Line    int
	Column  int
	Profile string
	Field   string
	Err     error
}

func (e *FieldError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, ":%d", e.Column)
		}
	}
	b.WriteString(": ")
	if e.Profile != "" {
		fmt.Fprintf(&b, "profile %q: ", e.Profile)
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *FieldError) Unwrap() error { return e.Err }

// sortErrors orders errors by file, line and column; errors without a
// place (a directory that cannot be read) come first.
func sortErrors(errs Errors) {
	sort.SliceStable(errs, func(i, j int) bool {
		a, aok := errs[i].(*FieldError)
		b, bok := errs[j].(*FieldError)
		switch {
		case !aok || !bok:
			return !aok && bok
		case a.File != b.File:
			return a.File < b.File
		case a.Line != b.Line:
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
}

// Load reads profiles from files and directories. An empty list gives an
// empty set.
func Load(paths []string) (*Set, error) {
	files, listErrs := configfiles.List(paths, "profiles", ".yaml", ".yml")
	errs := Errors(listErrs)
	var valid, all []*Profile
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, fmt.Errorf("profiles: %w", err))
			continue
		}
		ok, docs, perrs := parseDocs(f, raw)
		valid, all = append(valid, ok...), append(all, docs...)
		errs = append(errs, perrs...)
	}
	// Names must be unique across files, invalid profiles included: a
	// duplicate is reported together with everything else.
	errs = append(errs, duplicateNames(all)...)
	set, _ := NewSet(valid) // its only errors are duplicates, reported above
	if len(errs) > 0 {
		sortErrors(errs)
		return nil, errs
	}
	return set, nil
}

// NewSet orders profiles by precedence and checks that names are unique.
func NewSet(ps []*Profile) (*Set, Errors) {
	errs := duplicateNames(ps)
	s := &Set{byName: map[string]*Profile{}}
	for _, p := range ps {
		if _, dup := s.byName[p.Name]; dup {
			continue
		}
		s.byName[p.Name] = p
		s.list = append(s.list, p)
	}
	sort.SliceStable(s.list, func(i, j int) bool {
		a, b := s.list[i], s.list[j]
		if a.Priority != b.Priority {
			return a.Priority > b.Priority
		}
		if a.specificity != b.specificity {
			return a.specificity > b.specificity
		}
		return a.Name < b.Name
	})
	return s, errs
}

// duplicateNames reports every profile whose name an earlier one has.
func duplicateNames(ps []*Profile) Errors {
	var errs Errors
	first := map[string]*Profile{}
	for _, p := range ps {
		if p.Name == "" {
			continue
		}
		o, dup := first[p.Name]
		if !dup {
			first[p.Name] = p
			continue
		}
		at, oat := p.at.of("name"), o.at.of("name")
		if at.line == 0 {
			at = pos{p.Line, 0}
		}
		if oat.line == 0 {
			oat = pos{o.Line, 0}
		}
		errs = append(errs, &FieldError{File: p.File, Line: at.line, Column: at.col, Profile: p.Name, Field: "name",
			Err: fmt.Errorf("also defined at %s:%d", o.File, oat.line)})
	}
	return errs
}

// Parse decodes every profile document in raw; file names the source in
// errors and anchors relative template file paths. It reports every
// problem of every document, in order of position; only a YAML syntax
// error ends the file early (the documents before it are still checked).
// Profiles with problems are left out.
func Parse(file string, raw []byte) ([]*Profile, Errors) {
	ps, _, errs := parseDocs(file, raw)
	return ps, errs
}

// parseDocs is Parse that also returns every document's profile, valid or not.
func parseDocs(file string, raw []byte) (valid, all []*Profile, errs Errors) {
	docs := yaml.NewDecoder(bytes.NewReader(raw))
	var lines []string // of raw, split once a document needs them
	for {
		var doc yaml.Node
		err := docs.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			errs = append(errs, syntaxError(file, raw, err))
			break
		}
		if len(doc.Content) == 0 || isNull(doc.Content[0]) {
			continue
		}
		root := doc.Content[0]
		p := &Profile{File: file, Line: root.Line}
		if lines == nil {
			lines = strings.Split(string(raw), "\n")
		}
		d := newDecoder(lines)
		d.decode(root, reflect.ValueOf(&p.spec).Elem(), "")
		p.at = d.at
		all = append(all, p)
		perrs := p.compile(filepath.Dir(file), d)
		if len(perrs) > 0 {
			errs = append(errs, perrs...)
			continue
		}
		valid = append(valid, p)
	}
	sortErrors(errs)
	return valid, all, errs
}

var yamlLineRE = regexp.MustCompile(`^(?:yaml: )?line (\d+): `)

// syntaxError places a YAML syntax error. yaml.v3 reports the line of the
// enclosing construct, 0-based, for many parser errors (line 1 for a
// bracket left open on line 3), so the place comes from yaml.v4's parser,
// which reports the line and column of the offending token.
func syntaxError(file string, raw []byte, err error) error {
	fe := &FieldError{File: file, Err: fmt.Errorf("YAML syntax: %s", strings.TrimPrefix(err.Error(), "yaml: "))}
	docs := yaml4.NewDecoder(bytes.NewReader(raw))
	for {
		var n yaml4.Node
		err4 := docs.Decode(&n)
		if err4 == nil {
			continue
		}
		var le *yaml4.LoadError
		switch {
		case errors.As(err4, &le) && le.Mark.Line > 0:
			fe.Line, fe.Column = le.Mark.Line, le.Mark.Column
			msg := "YAML syntax: " + le.Message
			if le.ContextMsg != "" && le.ContextMark.Line > 0 && le.ContextMark != le.Mark {
				msg += fmt.Sprintf(" (%s that starts at line %d column %d)", le.ContextMsg, le.ContextMark.Line, le.ContextMark.Column)
			}
			fe.Err = errors.New(msg)
		case !utf8.Valid(raw):
			off := 0
			for off < len(raw) {
				r, n := utf8.DecodeRune(raw[off:])
				if r == utf8.RuneError && n <= 1 {
					break
				}
				off += n
			}
			fe.Line, fe.Column = lineColOf(string(raw), off)
			fe.Err = errors.New("not UTF-8 text: YAML files must be UTF-8")
		default:
			// yaml.v4 reads what yaml.v3 refuses: yaml.v3's own line,
			// approximate, is better than none (it leaves out line 1).
			fe.Line = 1
			if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
				fe.Line, _ = strconv.Atoi(m[1])
				fe.Line = max(fe.Line, 1)
				fe.Err = fmt.Errorf("YAML syntax: %s", strings.TrimPrefix(err.Error(), m[0]))
			}
		}
		return fe
	}
}

var (
	nameRE    = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	sectionRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
	ifaceRE   = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9._-]{0,14}$`)
	builtins  = map[string]bool{"configdb-json": true, "firmware": true, "snmp": true,
		"connectivity-check": true, "graphservice": true, "download": true}
	// reserved section names are generated by ztpd itself.
	reserved   = map[string]bool{"configdb-json": true, "firmware": true, "join": true}
	ztpOptions = map[string]bool{"restart-ztp-on-failure": true, "restart-ztp-no-config": true,
		"config-fallback": true, "ignore-result": true, "reboot-on-success": true,
		"reboot-on-failure": true, "halt-on-failure": true}
)

// compile validates the spec and parses and checks every template. It
// reports every problem it finds; fields whose values did not decode (d.bad)
// are not reported again.
func (p *Profile) compile(dir string, d *decoder) Errors {
	c := &compiler{p: p, d: d}
	for _, pr := range d.problems {
		c.addIn(pr.file, pr.field, pr.at, pr.err)
	}
	if p.Name == "" {
		if _, given := p.at["name"]; !given && !d.bad["name"] {
			c.addAt("name", pos{p.Line, 0}, "required: every profile has a name")
		} else {
			c.add("name", "empty: use 1-63 lower-case letters, digits and . _ - starting with a letter or digit")
		}
	} else if !nameRE.MatchString(p.Name) {
		c.add("name", "%q: use 1-63 lower-case letters, digits and . _ - starting with a letter or digit", p.Name)
	}
	m := &p.Match
	for _, f := range []struct {
		name string
		vals StrList
	}{{"serial", m.Serial}, {"product", m.Product}, {"platform", m.Platform}, {"circuit_id", m.CircuitID}, {"remote_id", m.RemoteID}} {
		for i, v := range f.vals {
			if _, err := path.Match(v, ""); err != nil || v == "" {
				c.addItem("match."+f.name, i, "%q is not a valid glob pattern", v)
			}
		}
	}
	for i, v := range m.MAC {
		lv := strings.ToLower(strings.TrimSpace(v))
		if _, err := path.Match(lv, ""); err != nil || lv == "" {
			c.addItem("match.mac", i, "%q is not a MAC address or glob", v)
		}
		p.macs = append(p.macs, lv)
	}
	for i, v := range m.Kind {
		switch v {
		case "sonic", "onie", "vm", "unknown":
		default:
			c.addItem("match.kind", i, "%q is not one of sonic, onie, vm, unknown%s", v,
				didYouMean(v, []string{"sonic", "onie", "vm", "unknown"}, strconv.Quote))
		}
	}
	for i, v := range m.Subnet {
		if strings.Contains(v, "/") {
			pfx, err := netip.ParsePrefix(v)
			if err != nil {
				c.addItem("match.subnet", i, "%q is not a CIDR", v)
				continue
			}
			p.subnets = append(p.subnets, pfx.Masked())
		} else if v == "" {
			c.addItem("match.subnet", i, "empty subnet name")
		} else {
			p.subnetNames = append(p.subnetNames, v)
		}
	}
	for _, n := range []int{len(m.Serial), len(m.MAC), len(m.Product), len(m.Platform), len(m.Kind), len(m.Subnet), len(m.CircuitID), len(m.RemoteID)} {
		if n > 0 {
			p.specificity++
		}
	}

	p.hostname = c.inline("hostname", p.Hostname, defaultHostname)
	if h := p.Hostname.Src; h != "" && !strings.Contains(h, "{{") {
		if err := checkHostname(h); err != nil {
			c.add("hostname", "%v", err)
		}
	}
	p.hwsku = c.inline("hwsku", p.HWSKU, "")
	if mg := p.spec.Mgmt; mg != nil {
		if mg.Interface == "" {
			mg.Interface = "eth0"
		}
		if !ifaceRE.MatchString(mg.Interface) {
			c.add("mgmt.interface", "%q is not an interface name", mg.Interface)
		}
		if mg.Prefix.Src == "" {
			c.add("mgmt.prefix", "required when mgmt is set (e.g. 24)")
		} else if !strings.Contains(mg.Prefix.Src, "{{") {
			if n, err := strconv.Atoi(mg.Prefix.Src); err != nil || n < 1 || n > 32 {
				c.add("mgmt.prefix", "%q is not a prefix length 1..32", mg.Prefix.Src)
			}
		}
		for _, t := range []struct {
			field string
			t     Template
		}{{"mgmt.ip", mg.IP}, {"mgmt.gateway", mg.Gateway}} {
			if t.t.Src != "" && !strings.Contains(t.t.Src, "{{") {
				if a, err := netip.ParseAddr(t.t.Src); err != nil || !a.Is4() {
					c.add(t.field, "%q is not an IPv4 address", t.t.Src)
				}
			}
		}
		p.mgmtIP = c.inline("mgmt.ip", mg.IP, "{{ .IP }}")
		p.mgmtPrefix = c.inline("mgmt.prefix", mg.Prefix, "")
		p.mgmtGW = c.inline("mgmt.gateway", mg.Gateway, "")
	}
	if sc := p.spec.SONiC; sc != nil {
		if sc.Version == "" {
			c.add("sonic.version", "required: the SONiC build version the switch must run, e.g. 202405.1")
		} else if !versionRE.MatchString(BuildVersion(sc.Version)) {
			c.add("sonic.version", "%q is not a SONiC version", sc.Version)
		}
		if sc.Image != "" && !imageNameRE.MatchString(sc.Image) {
			c.add("sonic.image", "%q is not an image name", sc.Image)
		}
	}
	if cd := p.spec.ConfigDB; cd != nil {
		switch cd.Mode {
		case "":
			cd.Mode = ModeMerge
		case ModeMerge, ModeReplace, ModeNone:
		default:
			c.add("config_db.mode", "%q is not one of merge, replace, none%s", cd.Mode,
				didYouMean(cd.Mode, []string{ModeMerge, ModeReplace, ModeNone}, strconv.Quote))
		}
		p.configDB = c.source(dir, "config_db", cd.File, cd.Inline, docJSON)
	}
	if vm := p.spec.VM; vm != nil {
		p.userData = c.source(dir, "vm.user_data", vm.UserData.File, vm.UserData.Inline, docYAML)
		for i, k := range vm.PublicKeys {
			if strings.ContainsAny(k, "\r\n") || len(strings.Fields(k)) < 2 {
				c.add(fmt.Sprintf("vm.public_keys[%d]", i), "not a one-line SSH public key")
			}
		}
	}
	if p.Cluster != "" && !nameRE.MatchString(strings.ToLower(p.Cluster)) {
		c.add("cluster", "%q is not a cluster name", p.Cluster)
	}
	switch p.Role {
	case "", "control-plane", "worker", "sonic", "etcd": // etcd: a cluster's etcd node (external etcd)
	default:
		c.add("role", "%q is not one of control-plane, worker, sonic, etcd%s", p.Role,
			didYouMean(p.Role, []string{"control-plane", "worker", "sonic", "etcd"}, strconv.Quote))
	}
	if p.Role != "" && p.Cluster == "" {
		c.add("role", "role without a cluster")
	}
	c.checkDesired()
	opts := make([]string, 0, len(ztpOptions))
	for k := range ztpOptions {
		opts = append(opts, k)
	}
	for k := range p.ZTPOptions {
		if !ztpOptions[k] {
			c.add("ztp_options."+k, "unknown ztp.json global option%s", didYouMean(k, opts, func(s string) string { return s }))
		}
	}
	seen := map[string]bool{}
	for i, s := range p.Sections {
		field := fmt.Sprintf("sections[%d]", i)
		switch {
		case s.Name == "":
			c.add(field+".name", "required: the section's name (a built-in plugin such as snmp, or a name with a plugin)")
			continue
		case !sectionRE.MatchString(s.Name):
			c.add(field+".name", "%q: use lower-case letters, digits and -, without a number prefix (ztpd numbers sections)", s.Name)
			continue
		case reserved[s.Name]:
			c.add(field+".name", "%q is generated by ztpd; set it through the profile's own fields", s.Name)
			continue
		}
		if seen[s.Name] {
			c.add(field+".name", "%q appears twice", s.Name)
		}
		seen[s.Name] = true
		if s.Data.Kind != yaml.MappingNode {
			if !c.suppressed(field + ".data") {
				c.add(field+".data", "must be a mapping of the section's keys")
			}
			continue
		}
		body, ok := c.tree(field+".data", &s.Data).(map[string]any)
		if !ok {
			continue
		}
		if !builtins[s.Name] {
			if _, ok := body["plugin"]; !ok {
				c.add(field+".name", "%q is not a built-in SONiC ZTP plugin (%s); give a plugin", s.Name, builtinList())
			}
		}
		p.sections = append(p.sections, compiledSection{name: s.Name, body: body})
		if mentions(&s.Data, "Mgmt") {
			p.sectionsUseMgmt = true
		}
	}
	c.trial() // the templates that compiled, whatever else is wrong

	return c.errs
}

// mentions reports whether any scalar under n contains word.
func mentions(n *yaml.Node, word string) bool {
	if n.Kind == yaml.ScalarNode && strings.Contains(n.Value, word) {
		return true
	}
	for _, c := range n.Content {
		if mentions(c, word) {
			return true
		}
	}
	return false
}

func builtinList() string {
	var l []string
	for k := range builtins {
		l = append(l, k)
	}
	sort.Strings(l)
	return strings.Join(l, ", ")
}

// loadSource reads and parses a document template given as a file
// (relative to the profile) or inline text, and makes it escape every
// value for its place in a document of kind k (see escape.go). User data
// escapes as YAML only when it is a cloud-config; a script or MIME user
// data is rendered as written.
func (c *compiler) source(dir, field, file, inline string, k docKind) *tmpl {
	switch {
	case file != "" && inline != "":
		c.add(field, "give file or inline, not both")
		return nil
	case file == "" && inline == "":
		if !c.suppressed(field+".file") && !c.suppressed(field+".inline") {
			c.add(field, "needs file or inline")
		}
		return nil
	}
	var t *tmpl
	if file != "" {
		fp := file
		if !filepath.IsAbs(fp) {
			fp = filepath.Join(dir, fp)
		}
		raw, err := os.ReadFile(fp)
		if err != nil {
			c.add(field+".file", "%v", err)
			return nil
		}
		t = c.template(field, fp, string(raw), func(tl, tc int) (string, pos) { return fp, pos{tl, tc} })
	} else {
		var where Template
		if tv, ok := c.d.text[field+".inline"]; ok {
			where = tv
		}
		t = c.template(field, field, inline, func(tl, tc int) (string, pos) { return "", where.posIn(tl, tc) })
	}
	if t == nil {
		return nil
	}
	if k == docYAML && !isCloudConfig(t.src) {
		return t
	}
	if err := escapeDoc(t.t, k); err != nil {
		var pe *tmplPosError
		if errors.As(err, &pe) {
			tl, tc := lineColOf(t.src, pe.off)
			file, at := t.loc(tl, tc)
			c.addIn(file, field, at, errors.New(pe.msg))
		} else {
			file, at := t.loc(1, 0)
			c.addIn(file, field, at, err)
		}
		return nil
	}
	t.doc = k
	return t
}

// isCloudConfig reports whether user data is a cloud-config document.
func isCloudConfig(src string) bool {
	return strings.HasPrefix(strings.TrimLeft(src, " \t\r\n"), "#cloud-config")
}

// Where is "file:line" of field's value in the profile (mgmt.prefix,
// cluster), or of the profile itself when the field is not written.
func (p *Profile) Where(field string) string {
	at := p.at.of(field)
	if at.line == 0 {
		at.line = p.Line
	}
	return fmt.Sprintf("%s:%d", p.File, at.line)
}

// Matches reports whether every given match field matches f.
func (p *Profile) Matches(f *Facts) bool { return p.match(f, nil) }

// WhyNot says, one line per match field, why p does not match f (nil when
// it does): what `ztpd profile check --device` shows for a device that
// gets no profile.
func (p *Profile) WhyNot(f *Facts) []string {
	var why []string
	p.match(f, &why)
	return why
}

// match checks every given match field against f. Without why it stops at
// the first mismatch (the serving path); with why it notes every one.
func (p *Profile) match(f *Facts, why *[]string) bool {
	m := &p.Match
	miss := func(field, v string, want []string) bool {
		if why == nil {
			return false
		}
		*why = append(*why, fmt.Sprintf("match.%s: the device's %q is not %s", field, v, oneOf(want)))
		return true
	}
	if len(m.Kind) > 0 && !anyEqual(m.Kind, f.Kind) && !miss("kind", f.Kind, m.Kind) {
		return false
	}
	if len(m.Serial) > 0 && !anyGlob(m.Serial, f.Serial) && !miss("serial", f.Serial, m.Serial) {
		return false
	}
	if len(p.macs) > 0 && !anyGlob(p.macs, f.MAC) && !miss("mac", f.MAC, p.macs) {
		return false
	}
	if len(m.Product) > 0 && !anyGlob(m.Product, f.Product) && !miss("product", f.Product, m.Product) {
		return false
	}
	if len(m.Platform) > 0 && !anyGlob(m.Platform, f.Platform) && !miss("platform", f.Platform, m.Platform) {
		return false
	}
	if len(m.CircuitID) > 0 && !anyGlob(m.CircuitID, f.CircuitID) && !miss("circuit_id", f.CircuitID, m.CircuitID) {
		return false
	}
	if len(m.RemoteID) > 0 && !anyGlob(m.RemoteID, f.RemoteID) && !miss("remote_id", f.RemoteID, m.RemoteID) {
		return false
	}
	if len(m.Subnet) > 0 {
		ok := anyEqual(p.subnetNames, f.Subnet)
		if !ok {
			if a, err := netip.ParseAddr(f.IP); err == nil {
				for _, s := range p.subnets {
					if s.Contains(a) {
						ok = true
						break
					}
				}
			}
		}
		where := f.IP
		if f.Subnet != "" {
			where += " in subnet " + f.Subnet
		}
		if !ok && !miss("subnet", where, m.Subnet) {
			return false
		}
	}
	return why == nil || len(*why) == 0
}

// oneOf renders the values a match field accepts.
func oneOf(vals []string) string {
	if len(vals) == 1 {
		return fmt.Sprintf("%q", vals[0])
	}
	q := make([]string, len(vals))
	for i, v := range vals {
		q[i] = fmt.Sprintf("%q", v)
	}
	return "one of " + strings.Join(q, ", ")
}

func anyEqual(vals []string, v string) bool {
	for _, x := range vals {
		if x == v {
			return true
		}
	}
	return false
}

// anyGlob matches v against glob patterns; an empty fact never matches.
func anyGlob(pats []string, v string) bool {
	if v == "" {
		return false
	}
	for _, p := range pats {
		if p == v {
			return true
		}
		if ok, _ := path.Match(p, v); ok {
			return true
		}
	}
	return false
}
