// Package packaging builds ztpd's Debian package: the binary, a hardened
// systemd unit (ztpd.service), the default configuration (ztpd.yaml, a
// conffile), man pages and shell completions generated from the command tree
// (ztpd gendocs), example profiles, and maintainer scripts that create the
// ztpd system user. "make package" runs it through ./internal/packaging/mkdeb.
package packaging

import (
	"compress/gzip"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"
)

// Where the package puts things.
const (
	UnitPath        = "/lib/systemd/system/ztpd.service"
	ConfigPath      = "/etc/ztpd/ztpd.yaml"
	ProfilesDir     = "/etc/ztpd/profiles"
	BinaryPath      = "/usr/bin/ztpd"
	ManDir          = "/usr/share/man/man1"
	BashCompletion  = "/usr/share/bash-completion/completions/ztpd"
	ZshCompletion   = "/usr/share/zsh/vendor-completions/_ztpd"
	FishCompletion  = "/usr/share/fish/vendor_completions.d/ztpd.fish"
	ExamplesDir     = "/usr/share/doc/ztpd/examples/profiles"
	StateDir        = "/var/lib/ztpd"
	AdminKeyFile    = "/var/lib/ztpd/admin-api-key.yaml"
	PackageName     = "ztpd"
	ServiceUserName = "ztpd"
)

//go:embed ztpd.service ztpd.yaml scripts/postinst scripts/prerm scripts/postrm
var shipped embed.FS

// Unit returns the systemd unit the package installs.
func Unit() []byte { return mustRead("ztpd.service") }

// DefaultConfig returns /etc/ztpd/ztpd.yaml as the package installs it.
func DefaultConfig() []byte { return mustRead("ztpd.yaml") }

func mustRead(name string) []byte {
	b, err := shipped.ReadFile(name)
	if err != nil {
		panic(err) // embedded at build time: cannot happen
	}
	return b
}

// Options say what goes into the package.
type Options struct {
	Version        string // Debian version, e.g. 1.2.0 or 0.0.0~git20261203.7145c11
	Arch           string // Go architecture (amd64, arm64, ...); nfpm maps it to Debian's
	Binary         string // the ztpd binary built for Arch
	ManDir         string // ztpd gendocs --man output: *.1
	CompletionsDir string // ztpd gendocs --completions output: ztpd.bash, _ztpd, ztpd.fish
	ExamplesDir    string // optional: example profiles (examples/profiles)
	OutDir         string // where the .deb is written
}

// debVersion is Debian's version syntax (deb-version(7)) without an epoch.
var debVersion = regexp.MustCompile(`^[0-9][A-Za-z0-9.+~]*(-[A-Za-z0-9.+~]+)?$`)

// BuildDeb writes the package into o.OutDir and returns its path.
func BuildDeb(o Options) (string, error) {
	if !debVersion.MatchString(o.Version) {
		return "", fmt.Errorf("version %q is not a Debian version (starts with a digit; letters, digits and . + ~ only)", o.Version)
	}
	if o.Arch == "" {
		return "", errors.New("no architecture given")
	}
	for what, p := range map[string]string{"binary": o.Binary, "man page directory": o.ManDir, "completions directory": o.CompletionsDir} {
		if p == "" {
			return "", fmt.Errorf("no %s given", what)
		}
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s: %w", what, err)
		}
	}
	stage, err := os.MkdirTemp("", "ztpd-deb-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(stage)

	var contents files.Contents
	add := func(src, dst, typ string, mode fs.FileMode) {
		contents = append(contents, &files.Content{Source: src, Destination: dst, Type: typ,
			FileInfo: &files.ContentFileInfo{Owner: "root", Group: "root", Mode: mode}})
	}
	add(o.Binary, BinaryPath, files.TypeFile, 0o755)
	for name, dst := range map[string]string{"ztpd.service": UnitPath, "ztpd.yaml": ConfigPath} {
		src := filepath.Join(stage, name)
		if err := os.WriteFile(src, mustRead(name), 0o644); err != nil {
			return "", err
		}
		typ := files.TypeFile
		if dst == ConfigPath {
			typ = files.TypeConfig // a conffile: dpkg keeps the operator's edits
		}
		add(src, dst, typ, 0o644)
	}
	contents = append(contents, &files.Content{Destination: ProfilesDir, Type: files.TypeDir,
		FileInfo: &files.ContentFileInfo{Owner: "root", Group: "root", Mode: 0o755}})

	pages, err := filepath.Glob(filepath.Join(o.ManDir, "*.1"))
	if err != nil {
		return "", err
	}
	if len(pages) == 0 {
		return "", fmt.Errorf("no man pages (*.1) in %s: run ztpd gendocs --man %s", o.ManDir, o.ManDir)
	}
	sort.Strings(pages)
	if err := os.Mkdir(filepath.Join(stage, "man"), 0o755); err != nil {
		return "", err
	}
	for _, p := range pages {
		gz := filepath.Join(stage, "man", filepath.Base(p)+".gz")
		if err := gzipFile(p, gz); err != nil {
			return "", err
		}
		add(gz, ManDir+"/"+filepath.Base(gz), files.TypeFile, 0o644)
	}
	for name, dst := range map[string]string{"ztpd.bash": BashCompletion, "_ztpd": ZshCompletion, "ztpd.fish": FishCompletion} {
		src := filepath.Join(o.CompletionsDir, name)
		if _, err := os.Stat(src); err != nil {
			return "", fmt.Errorf("completion: %w (run ztpd gendocs --completions %s)", err, o.CompletionsDir)
		}
		add(src, dst, files.TypeFile, 0o644)
	}
	if o.ExamplesDir != "" {
		ents, err := os.ReadDir(o.ExamplesDir)
		if err != nil {
			return "", fmt.Errorf("examples: %w", err)
		}
		for _, e := range ents {
			if e.Type().IsRegular() {
				add(filepath.Join(o.ExamplesDir, e.Name()), ExamplesDir+"/"+e.Name(), files.TypeFile, 0o644)
			}
		}
	}

	scripts := map[string]string{}
	for _, s := range []string{"postinst", "prerm", "postrm"} {
		scripts[s] = filepath.Join(stage, s)
		if err := os.WriteFile(scripts[s], mustRead("scripts/"+s), 0o755); err != nil {
			return "", err
		}
	}

	info := &nfpm.Info{
		Name:          PackageName,
		Arch:          o.Arch,
		Platform:      "linux",
		Version:       o.Version,
		VersionSchema: "none", // o.Version is already a Debian version
		Section:       "net",
		Priority:      "optional",
		Maintainer:    "ztpd developers <ztpd@localhost>",
		Description: "zero-touch provisioning appliance for SONiC switches and CloudStack VMs\n" +
			"ztpd answers DHCP for SONiC, ONIE and CloudStack VMs, serves per-device ZTP\n" +
			"content over HTTP and TFTP, builds Kubernetes binaries ISOs, issues join\n" +
			"credentials and exposes a CloudStack-compatible API. The package runs it as\n" +
			"the hardened systemd service ztpd.service under its own user.",
		Overridables: nfpm.Overridables{
			// adduser makes the system user; useradd (passwd) is the fallback.
			Depends: []string{"adduser | passwd"},
			// The completion script uses bash-completion's helpers (and only
			// bash-completion reads its directory).
			Recommends: []string{"bash-completion"},
			Contents:   contents,
			Scripts:    nfpm.Scripts{PostInstall: scripts["postinst"], PreRemove: scripts["prerm"], PostRemove: scripts["postrm"]},
		},
	}
	info = nfpm.WithDefaults(info)
	if err := nfpm.PrepareForPackager(info, "deb"); err != nil {
		return "", fmt.Errorf("package contents: %w", err)
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(o.OutDir, deb.Default.ConventionalFileName(info))
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return "", err
	}
	err = deb.Default.Package(info, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("deb: %w", err)
	}
	return out, os.Rename(tmp, out)
}

// gzipFile compresses src to dst as gzip -9n does: no name, no time stamp,
// so the package's man pages do not change between builds of the same tree.
func gzipFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	zw, err := gzip.NewWriterLevel(out, gzip.BestCompression)
	if err != nil {
		out.Close()
		return err
	}
	_, err = io.Copy(zw, in)
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("man page %s: %w", src, err)
	}
	return nil
}

// DebianArch is the Debian architecture nfpm writes for a Go one.
func DebianArch(goarch string) string {
	if a, ok := map[string]string{"386": "i386", "arm": "armhf", "arm64": "arm64", "amd64": "amd64",
		"ppc64le": "ppc64el", "s390x": "s390x", "riscv64": "riscv64", "mips64le": "mips64el"}[goarch]; ok {
		return a
	}
	return strings.ToLower(goarch)
}
