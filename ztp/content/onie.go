package content

// ONIE: installer selection by profile, platform and ONIE's waterfall names.

import (
	"context"
	"errors"
	"sort"
	"strings"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/profile"
)

// pickInstaller chooses among sonic-installer and onie-installer images: an
// exact platform match (candidates in order, onie-installer before
// sonic-installer) beats an image without a platform; newest wins a tie.
func (s *Service) pickInstaller(platforms []string, ok func(core.Image) bool) (core.Image, error) {
	return pickInstaller(s.opt.Images, platforms, ok)
}

// pickInstaller is Service.pickInstaller over any image store (the preview
// of `ztpd profile check` chooses as serving does).
func pickInstaller(images Images, platforms []string, ok func(core.Image) bool) (core.Image, error) {
	var all []core.Image
	for _, k := range []string{"onie-installer", "sonic-installer"} {
		l, err := images.List(k)
		if err != nil {
			return core.Image{}, err
		}
		all = append(all, l...)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].Created.After(all[j].Created) })
	for _, plat := range platforms {
		if plat == "" {
			continue
		}
		for _, k := range []string{"onie-installer", "sonic-installer"} {
			for _, im := range all {
				if im.Kind == k && platformIs(im.Platform, plat) && ok(im) {
					return im, nil
				}
			}
		}
	}
	for _, k := range []string{"onie-installer", "sonic-installer"} {
		for _, im := range all {
			if im.Kind == k && im.Platform == "" && ok(im) {
				return im, nil
			}
		}
	}
	return core.Image{}, core.ErrNotFound
}

// ONIEInstallerName reports whether name is one of the file names ONIE's
// discovery waterfall asks for when DHCP gave it no option 114
// (onie-installer-<arch>-<vendor>_<machine>[-r<rev>], onie-installer-<vendor>_<machine>,
// onie-installer-<arch>, onie-installer, each optionally with .bin), and
// returns the platform part as a hint for ONIEInstaller.
func ONIEInstallerName(name string) (hint string, ok bool) {
	rest, ok := strings.CutPrefix(strings.TrimSuffix(name, ".bin"), "onie-installer")
	if !ok || (rest != "" && rest[0] != '-') {
		return "", false
	}
	return strings.TrimPrefix(rest, "-"), true
}

// ONIEInstaller picks the installer for the ONIE switch behind c. hint is a
// platform named by the request itself (a TFTP onie-installer-<platform>
// file name). A profile that pins a SONiC image or version wins; otherwise
// the platform from the ONIE headers, the hint, or the DHCP vendor class
// selects it.
func (s *Service) ONIEInstaller(ctx context.Context, c *Client, hint string) (core.Image, core.Device, error) {
	// Installers are public images: a switch nobody holds an address for
	// (or without a matching profile) still gets one by platform, it is
	// just not recorded. A link-local neighbour holds none either, but the
	// network names its MAC, so it is recorded as an ONIE DHCP client is.
	c.neighborHolds = true
	dev, _, p, err := s.resolve(c)
	var idErr *Error
	if err != nil && !(errors.As(err, &idErr) && (idErr.Status == 404 || idErr.Kind == RefusedNoHolder)) {
		s.refused(c, dev, "onie-installer", err)
		return core.Image{}, dev, err
	}
	f := s.facts(&dev)
	if p != nil && dev.ID != "" {
		if sc := p.SONiC(); sc != nil {
			im, ierr := s.sonicImage(&profile.Result{Profile: p.Name, SONiC: sc}, f)
			if ierr != nil {
				return im, dev, ierr
			}
			s.progress(c, dev, p.Name, core.StateImageServed, "onie.installer.served", map[string]string{"image": im.Name})
			return im, dev, nil
		}
	}
	plats := oniePlatforms(c.ONIE, hint, f.Platform)
	im, err := s.pickInstaller(plats, func(core.Image) bool { return true })
	if err != nil {
		return im, dev, noInstaller(plats)
	}
	if dev.ID != "" {
		name := ""
		if p != nil {
			name = p.Name
		}
		s.progress(c, dev, name, core.StateImageServed, "onie.installer.served", map[string]string{"image": im.Name})
	}
	return im, dev, nil
}

// oniePlatforms are the platforms an ONIE request names, in the order an
// installer is chosen by: its headers' platform, that without the machine
// revision, the platform its file name asks for (hint), the device's.
func oniePlatforms(o *ONIE, hint, devicePlatform string) []string {
	var plats []string
	if o != nil {
		plats = append(plats, o.Platform())
		if o.MachineRev != "" {
			plats = append(plats, (&ONIE{Arch: o.Arch, Machine: o.Machine}).Platform())
		}
	}
	return append(plats, hint, devicePlatform)
}

func noInstaller(plats []string) error {
	return notFound("no ONIE installer stored for platform %q (ztpd image add FILE --kind onie-installer --platform P)", firstNonEmpty(plats))
}

// platformIs matches a stored platform against a requested one; a request
// without the machine revision ("x86_64-accton_as7712_32x", as in ONIE's
// fallback file names) matches every revision.
func platformIs(stored, want string) bool {
	if stored == want {
		return true
	}
	rest, ok := strings.CutPrefix(stored, want+"-r")
	return ok && rest != "" && strings.Trim(rest, "0123456789") == ""
}

func firstNonEmpty(l []string) string {
	for _, s := range l {
		if s != "" {
			return s
		}
	}
	return ""
}
