// Package bom loads the per-version bills of materials that say what goes on a
// CloudStack Kubernetes binaries ISO: for every artifact its destination path on
// the ISO, where it comes from (URL template, inline content, or a container
// image archive exported by the operator), its mode and its pinned sha256.
//
// One YAML file per Kubernetes version lives next to this file and is embedded,
// so `ztpd iso build --kubernetes-version X` works without network or files.
package bom

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/ztpd/ztpd/internal/semver"
)

//go:embed kubernetes-*.yaml
var builtin embed.FS

// MaxSize bounds a BOM file; real ones are a few KiB.
const MaxSize = 1 << 20

// Arches a BOM may name. CloudStack builds x86_64 and aarch64 ISOs.
var knownArches = map[string]bool{"amd64": true, "arm64": true}

// BOM is one Kubernetes version's bill of materials as written in YAML.
type BOM struct {
	KubernetesVersion string     `yaml:"kubernetesVersion"`
	Arches            []string   `yaml:"arches"`
	Artifacts         []Artifact `yaml:"artifacts"`
}

// Artifact is one file on the ISO. Exactly one of URL, Content or Image may be
// set; with none of them the file must be supplied with --from-dir.
type Artifact struct {
	Name string `yaml:"name"`
	// Path is the destination on the ISO (template), e.g. cni/cni-plugins-{{.Arch}}.tgz.
	Path string `yaml:"path"`
	// Version fills {{.Version}}; default "v" + the Kubernetes version.
	Version string `yaml:"version"`
	// URL is the upstream download (template).
	URL string `yaml:"url"`
	// SHA256URL is the upstream-published checksum file (template), used to
	// verify downloads of artifacts that are not pinned here.
	SHA256URL string `yaml:"sha256URL"`
	// Content is the file itself, for small text files such as systemd units.
	Content *string `yaml:"content"`
	// Origin documents where inline content was taken from.
	Origin string `yaml:"origin"`
	// Image is a container image reference; its archive docker/<last path
	// component>.tar (or Path) is exported by the operator, never downloaded.
	Image string `yaml:"image"`
	// Mode is the octal file mode on the ISO: "0755" for binaries, default "0644".
	Mode string `yaml:"mode"`
	// SHA256 pins the file's content on the ISO, per arch or for all arches.
	SHA256 Digests `yaml:"sha256"`
	// Arches limits the artifact to some arches (default: all of the BOM's).
	Arches []string `yaml:"arches"`
	// Optional artifacts are left out when no source has them.
	Optional bool `yaml:"optional"`
}

// Digests maps an arch to a sha256 (lowercase hex). A plain string in YAML
// pins the same content for every arch (key "*").
type Digests map[string]string

// UnmarshalYAML accepts either a scalar (all arches) or an arch mapping.
func (d *Digests) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag == "!!null" || n.Value == "" {
			*d = nil
			return nil
		}
		*d = Digests{"*": n.Value}
		return nil
	case yaml.MappingNode:
		m := map[string]string{}
		if err := n.Decode(&m); err != nil {
			return err
		}
		*d = m
		return nil
	}
	return fmt.Errorf("line %d: sha256 must be a hex string or a map of arch to hex string", n.Line)
}

// Kind says where an artifact's bytes come from.
type Kind string

const (
	KindURL     Kind = "url"     // downloadable upstream file
	KindContent Kind = "content" // inline in the BOM
	KindImage   Kind = "image"   // container image archive exported by the operator
	KindLocal   Kind = "local"   // only from --from-dir
)

// Item is an artifact resolved for one arch: templates expanded, mode parsed.
type Item struct {
	Name      string
	Kind      Kind
	Path      string // destination on the ISO, slash-separated, relative
	URL       string
	SHA256URL string
	Content   []byte
	Image     string
	Mode      fs.FileMode
	SHA256    string // pinned content hash, "" when not pinned
	Optional  bool
}

// Pinned reports whether the BOM fixes the item's content hash.
func (it Item) Pinned() bool { return it.SHA256 != "" }

var (
	hexRe     = regexp.MustCompile(`^[0-9a-f]{64}$`)
	nameRe    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	versionRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$`)
	imageRe   = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*(:[0-9]{1,5})?(/[a-z0-9][a-z0-9._-]*)*(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?(@sha256:[0-9a-f]{64})?$`)
)

// Parse decodes and validates a BOM. Unknown fields are errors, so a typo in a
// field name cannot silently drop a checksum.
func Parse(data []byte) (*BOM, error) {
	if len(data) > MaxSize {
		return nil, fmt.Errorf("bom: %d bytes, more than the %d byte limit", len(data), MaxSize)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var b BOM
	if err := dec.Decode(&b); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("bom: empty document")
		}
		return nil, fmt.Errorf("bom: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("bom: more than one YAML document")
	}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	return &b, nil
}

// Load reads and parses a BOM file.
func Load(file string) (*BOM, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("bom: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("bom %s: %w", file, err)
	}
	b, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return b, nil
}

// Builtin returns the embedded BOM of a Kubernetes version ("1.31.4").
func Builtin(version string) (*BOM, error) {
	if _, ok := parseVersion(version); !ok {
		return nil, fmt.Errorf("kubernetes version %q: want MAJOR.MINOR.PATCH, e.g. 1.31.4", version)
	}
	data, err := builtin.ReadFile("kubernetes-" + version + ".yaml")
	if err != nil {
		return nil, fmt.Errorf("no built-in bill of materials for Kubernetes %s (have %s); pass --bom FILE",
			version, strings.Join(BuiltinVersions(), ", "))
	}
	b, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("built-in kubernetes-%s.yaml: %w", version, err)
	}
	return b, nil
}

// BuiltinVersions lists the embedded BOMs' Kubernetes versions, oldest first.
func BuiltinVersions() []string {
	ents, _ := builtin.ReadDir(".")
	type named struct {
		v    semver.Version
		name string
	}
	var vs []named
	for _, e := range ents {
		name := strings.TrimSuffix(strings.TrimPrefix(e.Name(), "kubernetes-"), ".yaml")
		if v, ok := parseVersion(name); ok {
			vs = append(vs, named{v, name})
		}
	}
	slices.SortFunc(vs, func(a, b named) int { return a.v.Compare(b.v) })
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.name
	}
	return out
}

// parseVersion parses a BOM's Kubernetes version: semver.Parse in its one
// canonical spelling (no leading zeros, at most four digits a part). The
// version names the embedded file (kubernetes-<v>.yaml) and is expanded
// into URLs and ISO paths, so a release must have exactly one spelling;
// CloudStack's API also takes "1.31.04", which is why semver.Parse does
// not check this.
func parseVersion(s string) (semver.Version, bool) {
	v, err := semver.Parse(s)
	return v, err == nil && v.String() == s && max(v.Major, v.Minor, v.Patch) <= 9999
}

// Validate checks the whole BOM, including every template for every arch, so
// that Resolve cannot fail on a BOM that validated.
func (b *BOM) Validate() error {
	if _, ok := parseVersion(b.KubernetesVersion); !ok {
		return fmt.Errorf("bom: kubernetesVersion %q: want MAJOR.MINOR.PATCH, e.g. 1.31.4", b.KubernetesVersion)
	}
	if len(b.Arches) == 0 {
		return errors.New("bom: arches: list at least one of amd64, arm64")
	}
	seenArch := map[string]bool{}
	for _, a := range b.Arches {
		if !knownArches[a] {
			return fmt.Errorf("bom: arches: unknown arch %q (use amd64 or arm64)", a)
		}
		if seenArch[a] {
			return fmt.Errorf("bom: arches: %s listed twice", a)
		}
		seenArch[a] = true
	}
	if len(b.Artifacts) == 0 {
		return errors.New("bom: artifacts: empty")
	}
	names := map[string]bool{}
	for i := range b.Artifacts {
		a := &b.Artifacts[i]
		where := fmt.Sprintf("bom: artifacts[%d]", i)
		if a.Name != "" {
			where += " (" + a.Name + ")"
		}
		if err := a.validate(b, seenArch); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if names[a.Name] {
			return fmt.Errorf("%s: name: duplicate", where)
		}
		names[a.Name] = true
	}
	// Resolving every arch catches path collisions and template errors now.
	for _, arch := range b.Arches {
		if _, err := b.Resolve(arch); err != nil {
			return err
		}
	}
	return nil
}

func (a *Artifact) validate(b *BOM, arches map[string]bool) error {
	if !nameRe.MatchString(a.Name) {
		return fmt.Errorf("name %q: want 1-64 of A-Z a-z 0-9 . _ - (starting with a letter or digit)", a.Name)
	}
	if a.Version != "" && !versionRe.MatchString(a.Version) {
		return fmt.Errorf("version %q: want 1-64 of A-Z a-z 0-9 . _ + -", a.Version)
	}
	sources := 0
	for _, set := range []bool{a.URL != "", a.Content != nil, a.Image != ""} {
		if set {
			sources++
		}
	}
	if sources > 1 {
		return errors.New("set at most one of url, content and image")
	}
	if a.Path == "" && a.Image == "" {
		return errors.New("path: required (only image artifacts have a default path)")
	}
	if a.SHA256URL != "" && a.URL == "" {
		return errors.New("sha256URL: only meaningful with url")
	}
	if a.Content != nil && len(a.SHA256) > 0 {
		return errors.New("sha256: inline content is hashed as written; do not pin it")
	}
	if a.Origin != "" && a.Content == nil {
		return errors.New("origin: only meaningful with content")
	}
	if _, err := parseMode(a.Mode); err != nil {
		return err
	}
	for _, arch := range a.Arches {
		if !arches[arch] {
			return fmt.Errorf("arches: %q is not one of the BOM's arches", arch)
		}
	}
	for k, v := range a.SHA256 {
		if k != "*" && !arches[k] {
			return fmt.Errorf("sha256: key %q is not one of the BOM's arches", k)
		}
		if !hexRe.MatchString(v) {
			return fmt.Errorf("sha256[%s]: %q is not 64 lowercase hex digits", k, v)
		}
	}
	if _, ok := a.SHA256["*"]; ok && len(a.SHA256) > 1 {
		return errors.New("sha256: give one hash for all arches or one per arch, not both")
	}
	return nil
}

func parseMode(s string) (fs.FileMode, error) {
	if s == "" {
		return 0o644, nil
	}
	if len(s) > 4 || len(s) < 3 {
		return 0, fmt.Errorf("mode %q: want octal like 0755 or 0644", s)
	}
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o777 {
		return 0, fmt.Errorf("mode %q: want octal permission bits like 0755 or 0644", s)
	}
	if m&0o444 == 0 {
		return 0, fmt.Errorf("mode %q: the file would not be readable on the node", s)
	}
	return fs.FileMode(m), nil
}

// templateData is what URL and path templates see.
type templateData struct {
	Arch              string // amd64 | arm64
	Version           string // the artifact's version, default "v" + KubernetesVersion
	KubernetesVersion string // e.g. 1.31.4
}

// expand fills the only three placeholders a BOM may use. It is deliberately
// not text/template: a BOM must not be able to loop or call functions.
func expand(field, tmpl string, d templateData) (string, error) {
	if len(tmpl) > 2048 {
		return "", fmt.Errorf("%s: longer than 2048 bytes", field)
	}
	var out strings.Builder
	rest := tmpl
	for {
		i := strings.Index(rest, "{{")
		if i < 0 {
			if strings.Contains(rest, "}}") {
				return "", fmt.Errorf("%s: stray }} in %q", field, tmpl)
			}
			out.WriteString(rest)
			return out.String(), nil
		}
		out.WriteString(rest[:i])
		rest = rest[i+2:]
		j := strings.Index(rest, "}}")
		if j < 0 {
			return "", fmt.Errorf("%s: unclosed {{ in %q", field, tmpl)
		}
		switch key := strings.TrimSpace(rest[:j]); key {
		case ".Arch":
			out.WriteString(d.Arch)
		case ".Version":
			out.WriteString(d.Version)
		case ".KubernetesVersion":
			out.WriteString(d.KubernetesVersion)
		default:
			return "", fmt.Errorf("%s: unknown placeholder {{%s}}; use {{.Arch}}, {{.Version}} or {{.KubernetesVersion}}", field, key)
		}
		rest = rest[j+2:]
	}
}

// Resolve expands the BOM for one arch into the items that go on its ISO,
// sorted by destination path.
func (b *BOM) Resolve(arch string) ([]Item, error) {
	if !knownArches[arch] {
		return nil, fmt.Errorf("arch %q: use amd64 or arm64", arch)
	}
	ok := false
	for _, a := range b.Arches {
		ok = ok || a == arch
	}
	if !ok {
		return nil, fmt.Errorf("the bill of materials for Kubernetes %s has no %s build (arches: %s)",
			b.KubernetesVersion, arch, strings.Join(b.Arches, ", "))
	}
	var items []Item
	byPath := map[string]string{}
	for i := range b.Artifacts {
		a := &b.Artifacts[i]
		if len(a.Arches) > 0 && !contains(a.Arches, arch) {
			continue
		}
		it, err := a.resolve(b.KubernetesVersion, arch)
		if err != nil {
			return nil, fmt.Errorf("bom: artifact %s (%s): %w", a.Name, arch, err)
		}
		if other, dup := byPath[it.Path]; dup {
			return nil, fmt.Errorf("bom: artifacts %s and %s both write %s", other, a.Name, it.Path)
		}
		byPath[it.Path] = a.Name
		items = append(items, it)
	}
	// A file may not sit where another needs a directory (k8s and k8s/kubeadm).
	for p, n := range byPath {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if other, clash := byPath[d]; clash {
				return nil, fmt.Errorf("bom: artifact %s writes file %s, which artifact %s needs as a directory", other, d, n)
			}
		}
	}
	sort.Slice(items, func(i, j int) bool { return items[i].Path < items[j].Path })
	return items, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (a *Artifact) resolve(k8sVersion, arch string) (Item, error) {
	d := templateData{Arch: arch, Version: a.Version, KubernetesVersion: k8sVersion}
	if d.Version == "" {
		d.Version = "v" + k8sVersion
	}
	it := Item{Name: a.Name, Optional: a.Optional}
	var err error
	switch {
	case a.URL != "":
		it.Kind = KindURL
	case a.Content != nil:
		it.Kind = KindContent
		it.Content = []byte(*a.Content)
		sum := sha256.Sum256(it.Content)
		it.SHA256 = hex.EncodeToString(sum[:])
	case a.Image != "":
		it.Kind = KindImage
	default:
		it.Kind = KindLocal
	}
	if it.Mode, err = parseMode(a.Mode); err != nil {
		return it, err
	}
	if a.Image != "" {
		if it.Image, err = expand("image", a.Image, d); err != nil {
			return it, err
		}
		if !imageRe.MatchString(it.Image) || len(it.Image) > 255 {
			return it, fmt.Errorf("image %q: not an image reference like registry.k8s.io/pause:3.10", it.Image)
		}
	}
	p := a.Path
	if p == "" {
		p = "docker/" + ImageArchiveName(it.Image)
	}
	if it.Path, err = expand("path", p, d); err != nil {
		return it, err
	}
	if err := CheckPath(it.Path); err != nil {
		return it, err
	}
	if a.URL != "" {
		if it.URL, err = expand("url", a.URL, d); err != nil {
			return it, err
		}
		if err := checkURL(it.URL); err != nil {
			return it, fmt.Errorf("url: %w", err)
		}
	}
	if a.SHA256URL != "" {
		if it.SHA256URL, err = expand("sha256URL", a.SHA256URL, d); err != nil {
			return it, err
		}
		if err := checkURL(it.SHA256URL); err != nil {
			return it, fmt.Errorf("sha256URL: %w", err)
		}
	}
	if h, ok := a.SHA256[arch]; ok {
		it.SHA256 = h
	} else if h, ok := a.SHA256["*"]; ok {
		it.SHA256 = h
	}
	return it, nil
}

// ImageArchiveName is the file name CloudStack's ISO script gives an image
// archive: the last path component of the reference plus ".tar", so
// registry.k8s.io/coredns/coredns:v1.11.3 becomes coredns:v1.11.3.tar.
func ImageArchiveName(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")
	if i := strings.LastIndex(ref, "/"); i >= 0 {
		ref = ref[i+1:]
	}
	return ref + ".tar"
}

func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return fmt.Errorf("%q: want an http or https URL", s)
	}
	if u.Host == "" {
		return fmt.Errorf("%q: no host", s)
	}
	return nil
}

// MaxDepth is the deepest directory nesting allowed on the ISO; deeper trees
// would need Rock Ridge directory relocation, which CloudStack layouts never need.
const MaxDepth = 7

// CheckPath validates a destination path on the ISO: relative, clean, no "."
// or ".." parts, no NUL, parts of at most 255 bytes, at most MaxDepth
// directories deep.
func CheckPath(p string) error {
	switch {
	case p == "":
		return errors.New("path: empty")
	case len(p) > 1024:
		return fmt.Errorf("path %.40q...: longer than 1024 bytes", p)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("path %q: must be relative to the ISO root", p)
	case strings.ContainsRune(p, 0):
		return fmt.Errorf("path %q: contains NUL", p)
	case strings.Contains(p, "\\"):
		return fmt.Errorf("path %q: use / as separator", p)
	}
	parts := strings.Split(p, "/")
	for _, part := range parts {
		switch {
		case part == "" || part == "." || part == "..":
			return fmt.Errorf("path %q: empty, . or .. component", p)
		case len(part) > 255:
			return fmt.Errorf("path %q: component longer than 255 bytes", p)
		}
	}
	if len(parts)-1 > MaxDepth {
		return fmt.Errorf("path %q: deeper than %d directories", p, MaxDepth)
	}
	return nil
}
