package content

// Preview: what a device would be served, computed without a store, by the
// same selection and rendering code as serving (`ztpd profile check`).

import (
	"fmt"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/profile"
	"github.com/ztpd/ztpd/ztp/endpoints"
)

// MetadataPreviewKeys are the meta-data entries a preview shows.
var MetadataPreviewKeys = []string{"local-hostname", "local-ipv4", "availability-zone", "service-offering", "public-keys"}

// Preview is what device d would be served under set.
type Preview struct {
	Profile   string // "" when none matches (the device would get a 404)
	ByDefault bool   // chosen as ztp.default_profile
	Result    *profile.Result
	// SONiC and ONIE devices: ztp.json and config_db.json.
	ZTPJSON, ConfigDB []byte
	// VMs: meta-data entries and user-data.
	Metadata map[string]string
	UserData []byte
	// Notes say what serving adds that a preview cannot know (join
	// sections, the image store's choice).
	Notes []string
}

// PreviewDevice renders what d would be served: by profile name when
// profileName is set, else the profile Pick chooses. base is the URL prefix
// handed out (Endpoints.Base).
func PreviewDevice(set *profile.Set, defaultProfile, profileName string, d *core.Device, base string) (*Preview, error) {
	f := Facts(d)
	pv := &Preview{}
	var p *profile.Profile
	if profileName != "" {
		if p = set.Get(profileName); p == nil {
			return nil, fmt.Errorf("no profile named %q", profileName)
		}
	} else {
		var err error
		p, pv.ByDefault, err = Pick(set, defaultProfile, f)
		if err != nil {
			if defaultProfile != "" && set.Get(defaultProfile) == nil {
				return nil, fmt.Errorf("ztp.default_profile: no profile named %q", defaultProfile)
			}
			pv.Notes = append(pv.Notes, "no profile matches this device and no default profile is configured: it would get a 404")
			return pv, nil
		}
	}
	pv.Profile = p.Name
	r, err := p.Render(f, profile.Env{BaseURL: base}, profile.RenderAll)
	if err != nil {
		return nil, err
	}
	pv.Result = r
	if d.Kind == core.KindVM {
		pv.UserData = r.UserData
		if r.Cluster != "" {
			pv.Notes = append(pv.Notes, fmt.Sprintf("cluster %q: at serve time the joiner's cloud-config replaces this user-data", r.Cluster))
		}
		pv.Metadata = map[string]string{}
		for _, k := range MetadataPreviewKeys {
			pv.Metadata[k], _ = MetadataValue(k, d, r)
		}
		return pv, nil
	}
	in := ZTPInput{DeviceID: d.ID, BaseURL: base, ReportedVersion: d.SONiCVer}
	if NeedsFirmware(r, d.SONiCVer) {
		ref := r.SONiC.Image
		if ref == "" {
			ref = "<sonic-installer " + r.SONiC.Version + ">"
			pv.Notes = append(pv.Notes, "firmware: at serve time the newest stored sonic-installer of version "+r.SONiC.Version+" for the platform is used")
		}
		in.FirmwareURL = base + endpoints.ImagesPath + ref
	}
	if r.Cluster != "" {
		pv.Notes = append(pv.Notes, fmt.Sprintf("cluster %q (role %s): at serve time the joiner adds its join section and KUBERNETES_MASTER", r.Cluster, r.Role))
	}
	if pv.ZTPJSON, err = BuildZTPJSON(r, in); err != nil {
		return nil, err
	}
	if pv.ConfigDB, err = BuildConfigDB(r, f, nil); err != nil {
		return nil, err
	}
	return pv, nil
}
