package profile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"text/template"
)

// config_db modes: how the switch applies the rendered config_db.json.
const (
	ModeMerge   = "merge"   // `config load` over the factory config, then `config save`
	ModeReplace = "replace" // `config reload` with the file (a full configuration)
	ModeNone    = "none"    // no configdb-json section at all
)

// Facts are what ztpd knows about a device; templates see them as fields of
// Data (e.g. {{ .Serial }}).
type Facts struct {
	ID           string            `json:"id"` // device id (MAC)
	MAC          string            `json:"mac"`
	Serial       string            `json:"serial,omitempty"`
	Product      string            `json:"product,omitempty"`
	Platform     string            `json:"platform,omitempty"`
	Kind         string            `json:"kind"`
	IP           string            `json:"ip,omitempty"`
	Subnet       string            `json:"subnet,omitempty"`        // DHCP subnet name
	SONiCVersion string            `json:"sonic_version,omitempty"` // as reported, e.g. SONiC.202405.1
	VendorClass  string            `json:"vendor_class,omitempty"`
	DHCPHostname string            `json:"dhcp_hostname,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	CircuitID    string            `json:"circuit_id,omitempty"` // option 82, as device records show it
	RemoteID     string            `json:"remote_id,omitempty"`
	// Position is the cabling plan's slot the device is plugged into; nil
	// when none proved one.
	Position *Position `json:"position,omitempty"`
	// ClusterProfile and ClusterOffering are what the cluster the device
	// is a member of gives its role (CloudStack's nodetemplates and
	// nodeofferings): the profile it gets and its service offering's
	// name; "" when the cluster names none.
	ClusterProfile  string `json:"cluster_profile,omitempty"`
	ClusterOffering string `json:"cluster_offering,omitempty"`
}

// Position is a planned slot as templates see it (.Position.Name,
// .Position.Rack, index .Position.Fields "loopback"), and what the plan
// says its device is: its name is the device's host name, and its role,
// cluster and labels replace the profile's where given.
type Position struct {
	Name      string            `json:"name"`
	CircuitID string            `json:"circuit_id,omitempty"`
	RemoteID  string            `json:"remote_id,omitempty"`
	Rack      string            `json:"rack,omitempty"`
	Port      string            `json:"port,omitempty"`
	Address   string            `json:"address,omitempty"` // reserved for the slot
	Fields    map[string]string `json:"fields,omitempty"`
	Role      string            `json:"role,omitempty"`
	Cluster   string            `json:"cluster,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	Profile   string            `json:"profile,omitempty"` // the profile the plan gives the slot; "" = matched as usual
}

// SampleFacts is the device used to trial-render templates at load and by
// `ztpd profile check` when no flag overrides a fact.
func SampleFacts() *Facts {
	return &Facts{ID: "52:54:00:12:34:56", MAC: "52:54:00:12:34:56", Serial: "SAMPLE0001",
		Product: "Accton-AS7712-32X", Platform: "x86_64-accton_as7712_32x-r0", Kind: "sonic",
		IP: "192.0.2.10", Subnet: "sample", SONiCVersion: "SONiC.202311.1",
		VendorClass: "onie_vendor:x86_64-accton_as7712_32x-r0", DHCPHostname: "sonic",
		Labels: map[string]string{}}
}

// Data is what templates are executed on.
type Data struct {
	ID, MAC, Serial, Product, Platform, Kind, IP, Subnet string
	SONiCVersion, VendorClass, DHCPHostname              string
	Labels                                               map[string]string
	CircuitID, RemoteID                                  string
	Position                                             Position // zero without one

	Profile  string
	Hostname string // the rendered hostname (empty while rendering it)
	HWSKU    string
	Cluster  string
	Role     string
	Mgmt     Mgmt
	BaseURL  string // http://<advertise>:<port>, for URLs in sections
	// SecureBaseURL is the device HTTPS listener's https://<advertise>[:port]
	// and TLSPin the pins of its certificate as curl --pinnedpubkey takes
	// them ("sha256//A;sha256//B" during a rotation); both empty without
	// the listener. Secrets are fetched from SecureBaseURL with TLSPin.
	SecureBaseURL string
	TLSPin        string
}

// Env carries what rendering needs from the serving side.
type Env struct {
	BaseURL       string
	SecureBaseURL string // "" without the device HTTPS listener
	TLSPin        string
}

// Parts selects what Render produces beyond the cheap fields.
type Parts uint8

const (
	RenderConfigDB Parts = 1 << iota // parse and render the config_db template
	RenderUserData                   // render the VM user-data template
	RenderSections                   // render extra ztp.json sections
	RenderAll      = RenderConfigDB | RenderUserData | RenderSections
)

// Result is a profile rendered for one device.
type Result struct {
	Profile    string
	Hostname   string
	HWSKU      string
	Mgmt       *Mgmt
	SONiC      *SONiC
	ConfigMode string         // merge | replace | none
	ConfigDB   map[string]any // rendered template; nil without one
	Cluster    string
	Role       string
	Sections   []Section
	ZTPOptions map[string]bool
	Labels     map[string]string
	// VM (cloud-init) data.
	UserData         []byte
	PublicKeys       []string
	AvailabilityZone string
	ServiceOffering  string
}

// Mgmt is the switch's management interface address.
type Mgmt struct {
	Interface string
	IP        string
	Prefix    int
	Gateway   string
}

// CIDR is "ip/prefix", or "" when no address is set.
func (m Mgmt) CIDR() string {
	if m.IP == "" {
		return ""
	}
	return m.IP + "/" + strconv.Itoa(m.Prefix)
}

// SONiC is the image a switch must run.
type SONiC struct {
	Version    string // build version, e.g. 202405.1
	Image      string // image store name, "" = pick by version and platform
	SetDefault bool
	SkipReboot bool
}

// InstallerVersion is the version string `sonic-installer binary-version`
// prints for the image, which the firmware plugin compares against.
func (s SONiC) InstallerVersion() string { return "SONiC-OS-" + s.Version }

// Section is an extra ztp.json section, named without its number prefix.
type Section struct {
	Name string
	Data map[string]any
}

var (
	versionRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,99}$`)
	imageNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:+-]{0,199}$`)
)

// defaultHostname names a switch by its serial number, or by its MAC.
const defaultHostname = `{{ if .Serial }}sonic-{{ .Serial | lower | replace "_" "-" }}{{ else }}host-{{ .MAC | macHex }}{{ end }}`

// BuildVersion normalises the spellings of a SONiC version ("SONiC.202405.1"
// from the SONiC-VERSION header, "SONiC-OS-202405.1" from sonic-installer,
// "202405.1" from a profile) to the build version. "N.A" and "" give "".
func BuildVersion(v string) string {
	v = strings.TrimSpace(v)
	switch {
	case strings.EqualFold(v, "N.A"), strings.EqualFold(v, "N/A"):
		return ""
	case strings.HasPrefix(v, "SONiC-OS-"):
		return v[len("SONiC-OS-"):]
	case strings.HasPrefix(v, "SONiC."):
		return v[len("SONiC."):]
	}
	return v
}

// SONiC returns the image the profile pins, or nil; it needs no device
// facts (ONIE installs use it before the switch has a serial or name).
func (p *Profile) SONiC() *SONiC {
	sc := p.spec.SONiC
	if sc == nil {
		return nil
	}
	return &SONiC{Version: BuildVersion(sc.Version), Image: sc.Image, SetDefault: sc.SetDefault == nil || *sc.SetDefault,
		SkipReboot: sc.SkipReboot}
}

// Render produces what the profile gives the device with facts f. Output is
// built in memory; an error leaves nothing half-rendered.
func (p *Profile) Render(f *Facts, env Env, parts Parts) (*Result, error) {
	return p.render(f, env, parts, true)
}

// render with checkValues false only executes the templates: load-time trial
// renders use a sample device whose facts need not fit the profile's
// addresses or naming, so only template errors count there.
func (p *Profile) render(f *Facts, env Env, parts Parts, checkValues bool) (*Result, error) {
	d := &Data{ID: f.ID, MAC: f.MAC, Serial: f.Serial, Product: f.Product, Platform: f.Platform,
		Kind: f.Kind, IP: f.IP, Subnet: f.Subnet, SONiCVersion: f.SONiCVersion,
		VendorClass: f.VendorClass, DHCPHostname: f.DHCPHostname, Labels: mergeLabels(f.Labels, p.spec.Labels),
		Profile: p.Name, Cluster: p.Cluster, Role: p.Role, BaseURL: env.BaseURL, SecureBaseURL: env.SecureBaseURL, TLSPin: env.TLSPin,
		CircuitID: f.CircuitID, RemoteID: f.RemoteID}
	if pos := f.Position; pos != nil {
		d.Position = *pos
		if pos.Cluster != "" {
			// The profile's role was meant for its own cluster.
			d.Cluster, d.Role = pos.Cluster, pos.Role
		}
		if pos.Role != "" {
			d.Role = pos.Role
		}
		// Labels: the profile's, then the plan's, then the device's own.
		d.Labels = mergeLabels(f.Labels, mergeLabels(pos.Labels, p.spec.Labels))
	}
	r := &Result{Profile: p.Name, Cluster: d.Cluster, Role: d.Role, ZTPOptions: p.ZTPOptions, Labels: d.Labels,
		ConfigMode: ModeMerge}
	fail := func(field string, line int, err error) (*Result, error) {
		if line == 0 {
			line = p.Line
		}
		return nil, &FieldError{File: p.File, Line: line, Profile: p.Name, Field: field, Err: cleanExecErr(err)}
	}
	var err error
	if d.Position.Name != "" {
		d.Hostname = d.Position.Name // the plan names the device at its position
	} else if d.Hostname, err = p.hostname.exec(d); err != nil {
		return fail("hostname", p.hostname.line, err)
	}
	d.Hostname = strings.TrimSpace(d.Hostname)
	if err := checkHostname(d.Hostname); err != nil && checkValues {
		return fail("hostname", p.hostname.line, err)
	}
	r.Hostname = d.Hostname
	if p.hwsku != nil {
		if d.HWSKU, err = p.hwsku.exec(d); err != nil {
			return fail("hwsku", p.hwsku.line, err)
		}
		r.HWSKU = strings.TrimSpace(d.HWSKU)
	}
	// The management address goes into config_db; ztp.json needs it only
	// when a section template mentions it.
	if mg := p.spec.Mgmt; mg != nil && (parts&(RenderConfigDB|RenderUserData) != 0 || !checkValues || p.sectionsUseMgmt) {
		m, field, line, err := p.renderMgmt(d, checkValues)
		if err != nil {
			return fail(field, line, err)
		}
		m.Interface = mg.Interface
		d.Mgmt, r.Mgmt = m, &m
	}
	r.SONiC = p.SONiC()
	if cd := p.spec.ConfigDB; cd != nil {
		r.ConfigMode = cd.Mode
		if parts&RenderConfigDB != 0 && p.configDB != nil {
			out, err := p.configDB.execBytes(d)
			if err != nil {
				return fail("config_db", 0, err)
			}
			if r.ConfigDB, err = parseConfigDB(out); err != nil {
				return fail("config_db", 0, fmt.Errorf("rendered %s: %w", p.configDB.name, err))
			}
		}
	}
	if vm := p.spec.VM; vm != nil {
		r.PublicKeys, r.AvailabilityZone, r.ServiceOffering = vm.PublicKeys, vm.AvailabilityZone, vm.ServiceOffering
		if parts&RenderUserData != 0 && p.userData != nil {
			if r.UserData, err = p.userData.execBytes(d); err != nil {
				return fail("vm.user_data", 0, err)
			}
			if p.userData.doc == docYAML {
				if err := checkCloudConfig(r.UserData); err != nil {
					return fail("vm.user_data", 0, err)
				}
			}
		}
	}
	if f.ClusterOffering != "" {
		// The cluster's offering for the device's role is what its node
		// was planned as; a profile's offering is everyone's default.
		r.ServiceOffering = f.ClusterOffering
	}
	if parts&RenderSections != 0 {
		for i, s := range p.sections {
			v, err := renderTree(s.body, d)
			if err != nil {
				return fail(fmt.Sprintf("sections[%d] (%s)", i, s.name), 0, err)
			}
			r.Sections = append(r.Sections, Section{Name: s.name, Data: v.(map[string]any)})
		}
	}
	return r, nil
}

func (p *Profile) renderMgmt(d *Data, checkValues bool) (Mgmt, string, int, error) {
	var m Mgmt
	ipS, err := p.mgmtIP.exec(d)
	if err != nil {
		return m, "mgmt.ip", p.mgmtIP.line, err
	}
	if !checkValues {
		for _, t := range []*tmpl{p.mgmtPrefix, p.mgmtGW} {
			if _, err := t.exec(d); err != nil {
				return m, t.name, t.line, err
			}
		}
		m.IP, m.Prefix = "192.0.2.10", 24
		return m, "", 0, nil
	}
	ip, err := netip.ParseAddr(strings.TrimSpace(ipS))
	if err != nil || !ip.Is4() {
		return m, "mgmt.ip", p.mgmtIP.line, fmt.Errorf("rendered %q, not an IPv4 address", ipS)
	}
	pS, err := p.mgmtPrefix.exec(d)
	if err != nil {
		return m, "mgmt.prefix", p.mgmtPrefix.line, err
	}
	bits, err := strconv.Atoi(strings.TrimSpace(pS))
	if err != nil || bits < 1 || bits > 32 {
		return m, "mgmt.prefix", p.mgmtPrefix.line, fmt.Errorf("rendered %q, not a prefix length 1..32", pS)
	}
	m.IP, m.Prefix = ip.String(), bits
	if p.mgmtGW != nil {
		gS, err := p.mgmtGW.exec(d)
		if err != nil {
			return m, "mgmt.gateway", p.mgmtGW.line, err
		}
		if gS = strings.TrimSpace(gS); gS != "" {
			gw, err := netip.ParseAddr(gS)
			if err != nil || !gw.Is4() {
				return m, "mgmt.gateway", p.mgmtGW.line, fmt.Errorf("rendered %q, not an IPv4 address", gS)
			}
			if !netip.PrefixFrom(ip, bits).Masked().Contains(gw) {
				return m, "mgmt.gateway", p.mgmtGW.line, fmt.Errorf("%s is outside %s/%d", gw, ip, bits)
			}
			m.Gateway = gw.String()
		}
	}
	return m, "", 0, nil
}

func checkHostname(h string) error {
	if h == "" || len(h) > 253 {
		return fmt.Errorf("rendered %q, not a host name", h)
	}
	label := 0
	for i := 0; i <= len(h); i++ {
		if i == len(h) || h[i] == '.' {
			if label == 0 || label > 63 || h[i-1] == '-' || h[i-label] == '-' {
				return fmt.Errorf("rendered %q, not a host name (letters, digits and -, dot-separated labels up to 63)", h)
			}
			label = 0
			continue
		}
		c := h[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
			return fmt.Errorf("rendered %q, not a host name (letters, digits and -, dot-separated labels up to 63)", h)
		}
		label++
	}
	return nil
}

// parseConfigDB checks that out is a JSON object of tables (objects) and
// returns it. Errors name the line and column in the rendered text.
func parseConfigDB(out []byte) (map[string]any, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		if se, ok := err.(*json.SyntaxError); ok {
			line, col := lineCol(out, int(se.Offset))
			return nil, fmt.Errorf("not valid JSON at line %d column %d: %v", line, col, err)
		}
		return nil, fmt.Errorf("not valid JSON: %v", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("not valid JSON: text after the top-level object")
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("top level must be a JSON object of config_db tables")
	}
	for k, t := range obj {
		if _, ok := t.(map[string]any); !ok {
			return nil, fmt.Errorf("table %q must be a JSON object", k)
		}
	}
	return obj, nil
}

func lineCol(b []byte, off int) (int, int) {
	if off > len(b) {
		off = len(b)
	}
	line, col := 1, 1
	for _, c := range b[:off] {
		if c == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return line, col
}

func mergeLabels(a, b map[string]string) map[string]string {
	if len(b) == 0 {
		if a == nil {
			return map[string]string{}
		}
		return a
	}
	out := make(map[string]string, len(a)+len(b))
	for k, v := range b {
		out[k] = v
	}
	for k, v := range a { // device labels override profile defaults
		out[k] = v
	}
	return out
}

// tmpl is one parsed template.
type tmpl struct {
	name string
	line int
	t    *template.Template
	doc  docKind // the document kind its actions are escaped for, 0: none
	src  string
	// loc maps a line and column of src to its file ("" = the profile's)
	// and position there.
	loc func(tl, tc int) (string, pos)
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func newTmpl(name, src string) (*tmpl, error) {
	t, err := template.New(name).Option("missingkey=error").Funcs(funcs).Parse(src)
	if err != nil {
		return nil, err
	}
	return &tmpl{name: name, t: t}, nil
}

func (t *tmpl) exec(d any) (string, error) {
	if t == nil {
		return "", nil
	}
	b := bufPool.Get().(*bytes.Buffer)
	b.Reset()
	defer bufPool.Put(b)
	if err := t.t.Execute(b, d); err != nil {
		return "", err
	}
	return b.String(), nil
}

func (t *tmpl) execBytes(d any) ([]byte, error) {
	var b bytes.Buffer
	if err := t.t.Execute(&b, d); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Template helpers: pipeline-friendly argument order (value last).
var funcs = template.FuncMap{
	"lower":      strings.ToLower,
	"upper":      strings.ToUpper,
	"trim":       strings.TrimSpace,
	"replace":    func(old, new, s string) string { return strings.ReplaceAll(s, old, new) },
	"trimPrefix": func(p, s string) string { return strings.TrimPrefix(s, p) },
	"trimSuffix": func(p, s string) string { return strings.TrimSuffix(s, p) },
	"hasPrefix":  func(p, s string) bool { return strings.HasPrefix(s, p) },
	"hasSuffix":  func(p, s string) bool { return strings.HasSuffix(s, p) },
	"contains":   func(sub, s string) bool { return strings.Contains(s, sub) },
	"split":      func(sep, s string) []string { return strings.Split(s, sep) },
	"join":       func(sep string, l []string) string { return strings.Join(l, sep) },
	"default": func(def string, v any) string {
		if s := fmt.Sprint(v); v != nil && s != "" {
			return s
		}
		return def
	},
	"macHex": func(s string) string {
		return strings.NewReplacer(":", "", "-", "", ".", "").Replace(strings.ToLower(s))
	},
	"json": func(v any) (jsonText, error) {
		b, err := json.Marshal(v)
		return jsonText(b), err
	},
}

func init() {
	for k, f := range escapers {
		funcs[k] = f
	}
}

// Section bodies are trees of maps, lists and scalars whose strings may be
// templates.
type compiledSection struct {
	name string
	body any
}

func renderTree(v any, d *Data) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			r, err := renderTree(e, d)
			if err != nil {
				return nil, err
			}
			m[k] = r
		}
		return m, nil
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			r, err := renderTree(e, d)
			if err != nil {
				return nil, err
			}
			l[i] = r
		}
		return l, nil
	case *tmpl:
		s, err := x.exec(d)
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", x.line, cleanExecErr(err))
		}
		return s, nil
	}
	return v, nil
}

// Labels are the profile's labels (a copy), for what ztpd derives from
// them outside rendering (the Node labels of its devices).
func (p *Profile) Labels() map[string]string { return maps.Clone(p.spec.Labels) }
