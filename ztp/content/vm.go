package content

import (
	"context"
	"crypto/sha1"
	"fmt"
	"strings"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/profile"
	"github.com/ztpd/ztpd/ztp/endpoints"
)

// MetadataKeys are the CloudStack metadata entries, in the order the virtual
// router lists them at /latest/meta-data/. cloud-init's CloudStack datasource
// crawls this index (ec2 style); entries are leaves, "public-keys" included.
var MetadataKeys = []string{
	"service-offering", "availability-zone", "local-ipv4", "local-hostname",
	"public-ipv4", "public-hostname", "instance-id", "vm-id", "public-keys", "cloud-identifier",
}

// VM is the cloud-init view of the VM behind a client address.
type VM struct {
	Device core.Device
	Result *profile.Result
}

// VM identifies a CloudStack VM by the lease of its source address and
// renders its profile. userData asks for the user-data template too.
func (s *Service) VM(ctx context.Context, c *Client, userData bool) (*VM, error) {
	var dev core.Device
	// A VM is known by its address alone: what its request may say about
	// itself is neither checked nor learnt.
	byAddr := &Client{Addr: c.Addr}
	err := s.opt.Store.View(func(tx core.Tx) error {
		var err error
		dev, _, err = s.identify(tx, byAddr)
		return err
	})
	if err != nil {
		s.refused(c, dev, "meta-data", err)
		return nil, err
	}
	learn(&dev, byAddr)
	f := Facts(&dev)
	s.nodeShape(f, &dev)
	p, err := s.pick(f)
	if err != nil {
		s.refused(c, dev, "meta-data", err)
		return nil, err
	}
	parts := profile.Parts(0)
	if userData {
		parts = profile.RenderUserData
	}
	r, err := p.Render(f, s.env(c), parts)
	if err != nil {
		return nil, err
	}
	return &VM{Device: dev, Result: r}, nil
}

// Metadata answers /latest/meta-data/<key>.
func (s *Service) Metadata(ctx context.Context, c *Client, key string) (string, error) {
	vm, err := s.VM(ctx, c, false)
	if err != nil {
		return "", err
	}
	d, r := &vm.Device, vm.Result
	if c.Addr.IsValid() {
		d.IP = c.Addr.Unmap().String() // identify proved it holds this address
	}
	v, ok := MetadataValue(key, d, r)
	if !ok {
		return "", notFound("no meta-data %q", key)
	}
	s.progress(c, vm.Device, r.Profile, core.StateConfigServed, "metadata.served", map[string]string{"key": key})
	return v, nil
}

// UserData answers /latest/user-data: the joiner's cloud-config when the
// profile names a cluster, else the profile's own user-data, else a minimal
// cloud-config that sets the host name.
func (s *Service) UserData(ctx context.Context, c *Client) ([]byte, error) {
	// The joiner writes URLs in the family the VM asked over.
	ctx = endpoints.WithLocal(ctx, c.Local)
	vm, err := s.VM(ctx, c, true)
	if err != nil {
		return nil, err
	}
	r := vm.Result
	var body []byte
	switch {
	case r.Cluster != "" && s.opt.Join != nil:
		if body, err = s.opt.Join.UserData(ctx, vm.Device, *r); err != nil {
			if s.waited(c, vm.Device, "user-data", err) {
				return nil, err
			}
			return nil, unavailable("user-data for cluster %q: %v", r.Cluster, err)
		}
	case r.UserData != nil:
		body = r.UserData
	default:
		body = DefaultUserData(r.Hostname)
	}
	s.progress(c, vm.Device, r.Profile, core.StateZTPServed, "userdata.served", nil)
	return body, nil
}

// JoinData answers /latest/join-data: the join data of the VM behind c
// (the holder of its address, as for user-data), over the device HTTPS
// listener only. On plain HTTP it is refused before anything is looked
// up, naming where to ask.
func (s *Service) JoinData(ctx context.Context, c *Client) ([]byte, error) {
	if !c.Secure {
		if u := s.opt.Endpoints.JoinData(c.Local); u != "" {
			return nil, forbidden("join data is served over HTTPS only: ask %s, pinned to the key the user-data names", u)
		}
		return nil, notFound("no join data: the device HTTPS listener is off (http.tls), so a VM's user-data carries its join")
	}
	ctx = endpoints.WithLocal(ctx, c.Local)
	vm, err := s.VM(ctx, c, false)
	if err != nil {
		return nil, err
	}
	r := vm.Result
	if r.Cluster == "" || s.opt.Join == nil {
		return nil, notFound("no join data: profile %q names no cluster", r.Profile)
	}
	body, err := s.opt.Join.JoinData(ctx, vm.Device, *r, c.EtcdCSRs)
	if err != nil {
		switch {
		case s.waited(c, vm.Device, "join-data", err):
			return nil, err
		case core.KindOf(err) == core.KindState:
			// Handed out for good: the waiter stops on it, and its
			// message names the reset that allows a new one.
			return nil, &Error{Status: 409, Reason: err.Error()}
		}
		return nil, unavailable("join data for cluster %q: %v", r.Cluster, err)
	}
	s.progress(c, vm.Device, r.Profile, core.StateZTPServed, "joindata.served", nil)
	return body, nil
}

// DefaultUserData is the user-data of a VM whose profile gives none and
// names no cluster: a cloud-config that sets the host name.
func DefaultUserData(hostname string) []byte {
	return []byte(fmt.Sprintf("#cloud-config\nhostname: %s\npreserve_hostname: false\n", hostname))
}

// InstanceID is the stable cloud-init instance id of a VM: its
// "instance-id" label, else a name-based UUID (version 5) of its MAC.
func InstanceID(d *core.Device) string {
	if v := d.Labels["instance-id"]; v != "" {
		return v
	}
	h := sha1.Sum([]byte("ztpd-instance:" + d.ID))
	h[6] = h[6]&0x0f | 0x50
	h[8] = h[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// MetadataValue is the meta-data entry key of VM d rendered as r, as the
// server answers it and `ztpd profile check` shows it; ok is false for a
// key that is not a meta-data entry.
func MetadataValue(key string, d *core.Device, r *profile.Result) (v string, ok bool) {
	switch key {
	case "instance-id":
		v = InstanceID(d)
	case "vm-id":
		v = d.Labels["vm-id"]
		if v == "" {
			v = InstanceID(d)
		}
	case "local-hostname", "public-hostname":
		v = r.Hostname
	case "local-ipv4", "public-ipv4":
		v = d.IP
	case "availability-zone":
		v = firstNonEmpty([]string{r.AvailabilityZone, d.Subnet, "ztpd"})
	case "service-offering":
		v = firstNonEmpty([]string{r.ServiceOffering, d.Labels["service-offering"], "ztpd"})
	case "public-keys":
		v = strings.Join(r.PublicKeys, "\n")
	case "cloud-identifier":
		v = "CloudStack-{ztpd}"
	default:
		return "", false
	}
	return v, true
}
