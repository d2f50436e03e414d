// Package profile loads operator-written YAML profiles, matches devices to
// them and renders what a matched device gets: hostname, management address,
// SONiC image, config_db content, extra ztp.json sections, the cluster to join
// and, for VMs, cloud-init data.
//
// A file holds one or more profiles (YAML documents separated by "---"); a
// directory contributes its *.yaml and *.yml files in name order. Unknown
// fields are errors, and every template is parsed and trial-rendered at load,
// so a typo fails `ztpd serve` and `ztpd profile check` with the file, line,
// profile and field instead of failing a switch at 3 a.m.
//
// Precedence, stated once: profiles are tried in order of
//
//  1. priority, higher first (default 0);
//  2. specificity, more match fields set first (serial, mac, product,
//     platform, kind, subnet each count one);
//  3. name, alphabetically.
//
// The first profile whose every given match field matches wins. Within a field
// a list matches when any of its values does. serial, product and platform
// values are shell globs (path.Match), mac values are globs over the
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
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
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

// Template is a template string together with the YAML line it came from.
type Template struct {
	Src  string
	Line int
}

// UnmarshalYAML takes any scalar (so `prefix: 24` works) and keeps its line.
func (t *Template) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a text value", n.Line)
	}
	t.Src, t.Line = n.Value, n.Line
	return nil
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

// FieldError is a problem in one field of one profile.
type FieldError struct {
	File    string
	Line    int
	Profile string
	Field   string
	Err     error
}

func (e *FieldError) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	if e.Profile == "" {
		return fmt.Sprintf("%s: %v", loc, e.Err)
	}
	return fmt.Sprintf("%s: profile %q: %s: %v", loc, e.Profile, e.Field, e.Err)
}

func (e *FieldError) Unwrap() error { return e.Err }

// Load reads profiles from files and directories. An empty list gives an
// empty set.
func Load(paths []string) (*Set, error) {
	var files []string
	var errs Errors
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("profiles: %w", err))
			continue
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		ents, err := os.ReadDir(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("profiles: %w", err))
			continue
		}
		for _, e := range ents {
			n := e.Name()
			if e.Type().IsRegular() && !strings.HasPrefix(n, ".") && (strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
				files = append(files, filepath.Join(p, n))
			}
		}
	}
	var all []*Profile
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, fmt.Errorf("profiles: %w", err))
			continue
		}
		ps, perrs := Parse(f, raw)
		all = append(all, ps...)
		errs = append(errs, perrs...)
	}
	set, serrs := NewSet(all)
	errs = append(errs, serrs...)
	if len(errs) > 0 {
		return nil, errs
	}
	return set, nil
}

// NewSet orders profiles by precedence and checks that names are unique.
func NewSet(ps []*Profile) (*Set, Errors) {
	var errs Errors
	s := &Set{byName: map[string]*Profile{}}
	for _, p := range ps {
		if o, dup := s.byName[p.Name]; dup {
			errs = append(errs, &FieldError{File: p.File, Line: p.Line, Profile: p.Name, Field: "name",
				Err: fmt.Errorf("also defined at %s:%d", o.File, o.Line)})
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

// Parse decodes every profile document in raw; file names the source in
// errors and anchors relative template file paths.
func Parse(file string, raw []byte) ([]*Profile, Errors) {
	var out []*Profile
	var errs Errors
	// Pass one finds where each document starts; pass two decodes strictly
	// (a yaml.Node's own Decode would not reject unknown fields).
	var lines []int
	var empty []bool
	nodes := yaml.NewDecoder(bytes.NewReader(raw))
	for {
		var node yaml.Node
		err := nodes.Decode(&node)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, Errors{&FieldError{File: file, Err: cleanYAMLErr(err)}}
		}
		line := node.Line
		if len(node.Content) > 0 {
			line = node.Content[0].Line
		}
		lines = append(lines, line)
		empty = append(empty, len(node.Content) == 0 ||
			(node.Content[0].Kind == yaml.ScalarNode && node.Content[0].Tag == "!!null"))
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	for i, line := range lines {
		p := &Profile{File: file, Line: line}
		err := dec.Decode(&p.spec)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			errs = append(errs, &FieldError{File: file, Line: line, Err: cleanYAMLErr(err)})
			continue
		}
		if empty[i] {
			continue
		}
		if perrs := p.compile(filepath.Dir(file)); len(perrs) > 0 {
			errs = append(errs, perrs...)
			continue
		}
		out = append(out, p)
	}
	return out, errs
}

func cleanYAMLErr(err error) error {
	return errors.New(strings.TrimPrefix(err.Error(), "yaml: "))
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

// compile validates the spec and parses every template.
func (p *Profile) compile(dir string) Errors {
	var errs Errors
	add := func(field string, line int, format string, args ...any) {
		if line == 0 {
			line = p.Line
		}
		errs = append(errs, &FieldError{File: p.File, Line: line, Profile: p.Name, Field: field, Err: fmt.Errorf(format, args...)})
	}
	if !nameRE.MatchString(p.Name) {
		add("name", 0, "%q: use 1-63 lower-case letters, digits and . _ - starting with a letter or digit", p.Name)
	}
	m := &p.Match
	for _, f := range []struct {
		name string
		vals StrList
	}{{"serial", m.Serial}, {"product", m.Product}, {"platform", m.Platform}} {
		for _, v := range f.vals {
			if _, err := path.Match(v, ""); err != nil || v == "" {
				add("match."+f.name, 0, "%q is not a valid glob pattern", v)
			}
		}
	}
	for _, v := range m.MAC {
		lv := strings.ToLower(strings.TrimSpace(v))
		if _, err := path.Match(lv, ""); err != nil || lv == "" {
			add("match.mac", 0, "%q is not a MAC address or glob", v)
		}
		p.macs = append(p.macs, lv)
	}
	for _, v := range m.Kind {
		switch v {
		case "sonic", "onie", "vm", "unknown":
		default:
			add("match.kind", 0, "%q is not one of sonic, onie, vm, unknown", v)
		}
	}
	for _, v := range m.Subnet {
		if strings.Contains(v, "/") {
			pfx, err := netip.ParsePrefix(v)
			if err != nil {
				add("match.subnet", 0, "%q is not a CIDR", v)
				continue
			}
			p.subnets = append(p.subnets, pfx.Masked())
		} else if v == "" {
			add("match.subnet", 0, "empty subnet name")
		} else {
			p.subnetNames = append(p.subnetNames, v)
		}
	}
	for _, n := range []int{len(m.Serial), len(m.MAC), len(m.Product), len(m.Platform), len(m.Kind), len(m.Subnet)} {
		if n > 0 {
			p.specificity++
		}
	}

	parse := func(field string, t Template, def string) *tmpl {
		src := t.Src
		if src == "" {
			if def == "" {
				return nil
			}
			src = def
		}
		tp, err := newTmpl(field, src)
		if err != nil {
			add(field, t.Line, "%v", err)
			return nil
		}
		tp.line = t.Line
		return tp
	}
	p.hostname = parse("hostname", p.Hostname, defaultHostname)
	if h := p.Hostname.Src; h != "" && !strings.Contains(h, "{{") {
		if err := checkHostname(h); err != nil {
			add("hostname", p.Hostname.Line, "%v", err)
		}
	}
	p.hwsku = parse("hwsku", p.HWSKU, "")
	if mg := p.spec.Mgmt; mg != nil {
		if mg.Interface == "" {
			mg.Interface = "eth0"
		}
		if !ifaceRE.MatchString(mg.Interface) {
			add("mgmt.interface", 0, "%q is not an interface name", mg.Interface)
		}
		if mg.Prefix.Src == "" {
			add("mgmt.prefix", 0, "required when mgmt is set (e.g. 24)")
		} else if !strings.Contains(mg.Prefix.Src, "{{") {
			if n, err := strconv.Atoi(mg.Prefix.Src); err != nil || n < 1 || n > 32 {
				add("mgmt.prefix", mg.Prefix.Line, "%q is not a prefix length 1..32", mg.Prefix.Src)
			}
		}
		for _, t := range []struct {
			field string
			t     Template
		}{{"mgmt.ip", mg.IP}, {"mgmt.gateway", mg.Gateway}} {
			if t.t.Src != "" && !strings.Contains(t.t.Src, "{{") {
				if a, err := netip.ParseAddr(t.t.Src); err != nil || !a.Is4() {
					add(t.field, t.t.Line, "%q is not an IPv4 address", t.t.Src)
				}
			}
		}
		p.mgmtIP = parse("mgmt.ip", mg.IP, "{{ .IP }}")
		p.mgmtPrefix = parse("mgmt.prefix", mg.Prefix, "")
		p.mgmtGW = parse("mgmt.gateway", mg.Gateway, "")
	}
	if sc := p.spec.SONiC; sc != nil {
		if sc.Version == "" {
			add("sonic.version", 0, "required: the SONiC build version the switch must run, e.g. 202405.1")
		} else if !versionRE.MatchString(BuildVersion(sc.Version)) {
			add("sonic.version", 0, "%q is not a SONiC version", sc.Version)
		}
		if sc.Image != "" && !imageNameRE.MatchString(sc.Image) {
			add("sonic.image", 0, "%q is not an image name", sc.Image)
		}
	}
	if cd := p.spec.ConfigDB; cd != nil {
		switch cd.Mode {
		case "":
			cd.Mode = ModeMerge
		case ModeMerge, ModeReplace, ModeNone:
		default:
			add("config_db.mode", 0, "%q is not one of merge, replace, none", cd.Mode)
		}
		p.configDB = p.loadSource(dir, "config_db", cd.File, cd.Inline, docJSON, add)
	}
	if vm := p.spec.VM; vm != nil {
		p.userData = p.loadSource(dir, "vm.user_data", vm.UserData.File, vm.UserData.Inline, docYAML, add)
		for i, k := range vm.PublicKeys {
			if strings.ContainsAny(k, "\r\n") || len(strings.Fields(k)) < 2 {
				add(fmt.Sprintf("vm.public_keys[%d]", i), 0, "not a one-line SSH public key")
			}
		}
	}
	if p.Cluster != "" && !nameRE.MatchString(strings.ToLower(p.Cluster)) {
		add("cluster", 0, "%q is not a cluster name", p.Cluster)
	}
	switch p.Role {
	case "", "control-plane", "worker", "sonic":
	default:
		add("role", 0, "%q is not one of control-plane, worker, sonic", p.Role)
	}
	if p.Role != "" && p.Cluster == "" {
		add("role", 0, "role without a cluster")
	}
	for k := range p.ZTPOptions {
		if !ztpOptions[k] {
			add("ztp_options."+k, 0, "unknown ztp.json global option")
		}
	}
	seen := map[string]bool{}
	for i, s := range p.Sections {
		field := fmt.Sprintf("sections[%d]", i)
		if !sectionRE.MatchString(s.Name) {
			add(field+".name", s.Data.Line, "%q: use lower-case letters, digits and -, without a number prefix (ztpd numbers sections)", s.Name)
			continue
		}
		if reserved[s.Name] {
			add(field+".name", s.Data.Line, "%q is generated by ztpd; set it through the profile's own fields", s.Name)
			continue
		}
		if seen[s.Name] {
			add(field+".name", s.Data.Line, "%q appears twice", s.Name)
		}
		seen[s.Name] = true
		if s.Data.Kind != yaml.MappingNode {
			add(field+".data", s.Data.Line, "must be a mapping of the section's keys")
			continue
		}
		body, err := compileTree(field+".data", &s.Data)
		if err != nil {
			add(field+".data", s.Data.Line, "%v", err)
			continue
		}
		bm := body.(map[string]any)
		if !builtins[s.Name] {
			if _, ok := bm["plugin"]; !ok {
				add(field, s.Data.Line, "%q is not a built-in SONiC ZTP plugin (%s); give a plugin", s.Name, builtinList())
			}
		}
		p.sections = append(p.sections, compiledSection{name: s.Name, body: body})
		if mentions(&s.Data, "Mgmt") {
			p.sectionsUseMgmt = true
		}
	}
	if len(errs) == 0 {
		if _, err := p.render(SampleFacts(), Env{BaseURL: "http://192.0.2.1:8080"}, RenderAll, false); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
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

// loadSource parses a template given as a file (relative to the profile) or
// inline text.
// loadSource reads and parses a document template, and makes it escape
// every value for its place in a document of kind k (see escape.go). User
// data escapes as YAML only when it is a cloud-config; a script or MIME
// user data is rendered as written.
func (p *Profile) loadSource(dir, field, file, inline string, k docKind, add func(string, int, string, ...any)) *tmpl {
	switch {
	case file != "" && inline != "":
		add(field, 0, "give file or inline, not both")
		return nil
	case file == "" && inline == "":
		add(field, 0, "needs file or inline")
		return nil
	}
	src, name := inline, field
	if file != "" {
		fp := file
		if !filepath.IsAbs(fp) {
			fp = filepath.Join(dir, fp)
		}
		raw, err := os.ReadFile(fp)
		if err != nil {
			add(field+".file", 0, "%v", err)
			return nil
		}
		src, name = string(raw), fp
	}
	t, err := newTmpl(name, src)
	if err != nil {
		add(field, 0, "%v", err)
		return nil
	}
	if k == docYAML && !isCloudConfig(src) {
		return t
	}
	if err := escapeDoc(t.t, k); err != nil {
		add(field, 0, "%v", err)
		return nil
	}
	t.doc = k
	return t
}

// isCloudConfig reports whether user data is a cloud-config document.
func isCloudConfig(src string) bool {
	return strings.HasPrefix(strings.TrimLeft(src, " \t\r\n"), "#cloud-config")
}

// Matches reports whether every given match field matches f.
func (p *Profile) Matches(f *Facts) bool {
	m := &p.Match
	if len(m.Kind) > 0 && !anyEqual(m.Kind, f.Kind) {
		return false
	}
	if len(m.Serial) > 0 && !anyGlob(m.Serial, f.Serial) {
		return false
	}
	if len(p.macs) > 0 && !anyGlob(p.macs, f.MAC) {
		return false
	}
	if len(m.Product) > 0 && !anyGlob(m.Product, f.Product) {
		return false
	}
	if len(m.Platform) > 0 && !anyGlob(m.Platform, f.Platform) {
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
		if !ok {
			return false
		}
	}
	return true
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
