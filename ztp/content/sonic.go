package content

// SONiC: ztp.json and the per-device config_db.json.

import (
	"context"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/profile"
	"github.com/ztpd/ztpd/ztp/endpoints"
)

// ZTPJSON renders the ztp.json for the switch behind c.
func (s *Service) ZTPJSON(ctx context.Context, c *Client) (*Served, error) {
	// The joiner's links are in the family the device asked over, over
	// HTTP or TFTP alike.
	ctx = endpoints.WithLocal(ctx, c.Local)
	dev, _, p, err := s.resolve(c)
	if err != nil {
		s.refused(c, dev, "ztp.json", err)
		return nil, err
	}
	f := s.facts(&dev)
	env := s.env(c)
	base := env.BaseURL
	r, err := p.Render(f, env, profile.RenderSections)
	if err != nil {
		return nil, err
	}
	in := ZTPInput{DeviceID: dev.ID, BaseURL: base, ReportedVersion: dev.SONiCVer}
	if c.SONiCVersion != "" { // "N.A" says unknown now, whatever was stored
		in.ReportedVersion = c.SONiCVersion
	}
	if NeedsFirmware(r, in.ReportedVersion) {
		im, err := s.sonicImage(r, f)
		if err != nil {
			s.waited(c, dev, "ztp.json", err)
			return nil, err
		}
		in.FirmwareURL = base + endpoints.ImagesPath + im.SHA256
	}
	if r.Cluster != "" && s.opt.Join != nil {
		// The join section carries an enrollment secret; identify has
		// established that c holds the device's address, which the
		// secret is bound to.
		holder := dev
		if c.Addr.IsValid() {
			holder.IP = c.Addr.Unmap().String()
		}
		if in.Join, err = s.opt.Join.ZTPSection(ctx, holder, *r); err != nil {
			if s.waited(c, dev, "ztp.json", err) {
				return nil, err
			}
			return nil, unavailable("join section for cluster %q: %v", r.Cluster, err)
		}
	}
	body, err := BuildZTPJSON(r, in)
	if err != nil {
		return nil, err
	}
	s.progress(c, dev, p.Name, core.StateZTPServed, "ztp.json.served", nil)
	return &Served{Body: body, Device: dev, Profile: p.Name}, nil
}

// sonicImage finds the stored SONiC installer a profile asks for: by name,
// else the newest sonic-installer (or onie-installer) of that version for the
// device's platform or for no platform.
func (s *Service) sonicImage(r *profile.Result, f *profile.Facts) (core.Image, error) {
	if s.opt.Images == nil {
		return core.Image{}, unavailable("no image store")
	}
	return sonicImage(s.opt.Images, func(ref string) (core.Image, error) { return s.imgs.resolve(s.opt.Images, ref) }, r, f)
}

// sonicImage is Service.sonicImage over any image store; resolve finds an
// image by name or sha256 (through the service's cache when serving).
func sonicImage(images Images, resolve func(ref string) (core.Image, error), r *profile.Result, f *profile.Facts) (core.Image, error) {
	if r.SONiC.Image != "" {
		im, err := resolve(r.SONiC.Image)
		if err != nil {
			return im, waitFor("profile %q wants SONiC image %q, which is not in the image store (ztpd image add)", r.Profile, r.SONiC.Image)
		}
		return im, nil
	}
	im, err := pickInstaller(images, []string{f.Platform}, func(im core.Image) bool {
		return profile.BuildVersion(im.Version) == r.SONiC.Version
	})
	if err != nil {
		return im, waitFor("profile %q wants SONiC %s, but no sonic-installer image with --version %s for platform %q is stored",
			r.Profile, r.SONiC.Version, r.SONiC.Version, f.Platform)
	}
	return im, nil
}

// ConfigDB renders config_db.json of device id for the requester c, which
// must be that device.
func (s *Service) ConfigDB(ctx context.Context, c *Client, id string) (*Served, error) {
	ctx = endpoints.WithLocal(ctx, c.Local)
	nid, err := core.NormalizeMAC(id)
	if err != nil {
		return nil, notFound("no device %q", id)
	}
	var target core.Device
	err = s.opt.Store.View(func(tx core.Tx) error {
		var err error
		target, _, err = s.identify(tx, c)
		return err
	})
	if err != nil {
		s.refused(c, target, "config_db.json", err)
		return nil, err
	}
	if target.ID != nid {
		err := forbidden("config of device %s is served only to that device, not to device %s at %s", nid, target.ID, addrString(c.Addr))
		s.refused(c, target, "config_db.json", err)
		return nil, err
	}
	learn(&target, c)
	f := s.facts(&target)
	p, err := s.pick(f)
	if err != nil {
		return nil, err
	}
	r, err := p.Render(f, s.env(c), profile.RenderConfigDB)
	if err != nil {
		return nil, err
	}
	var km *KubeMaster
	if r.Cluster != "" && s.opt.Join != nil {
		if km, err = s.opt.Join.KubernetesMaster(ctx, target, *r); err != nil {
			if s.waited(c, target, "config_db.json", err) {
				return nil, err
			}
			return nil, unavailable("kubernetes master for cluster %q: %v", r.Cluster, err)
		}
	}
	body, err := BuildConfigDB(r, f, km)
	if err != nil {
		return nil, err
	}
	s.progress(c, target, p.Name, core.StateConfigServed, "ztp.config.served", nil)
	return &Served{Body: body, Device: target, Profile: p.Name}, nil
}
