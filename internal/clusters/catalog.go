package clusters

import (
	"crypto/sha1"
	"fmt"

	"github.com/ztpd/ztpd/internal/core"
)

// Zone is the one availability zone ztpd presents: CloudStack clients need a
// zoneid for createKubernetesCluster. Its ID is generated once per appliance.
type Zone struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// zoneSetting is the setting holding the zone's ID.
const zoneSetting = "cloudstack-zone-id"

func ensureZone(st core.Store) (Zone, error) {
	z := Zone{Name: "ztpd"}
	err := st.View(func(tx core.Tx) error {
		var err error
		z.ID, _, err = tx.Settings().Get(zoneSetting)
		return err
	})
	if err != nil || z.ID != "" {
		return z, err
	}
	err = st.Update(func(tx core.Tx) error {
		id, ok, err := tx.Settings().Get(zoneSetting)
		if err != nil || ok {
			z.ID = id
			return err
		}
		z.ID = newUUID()
		return tx.Settings().Put(zoneSetting, z.ID)
	})
	return z, err
}

// Domain is the one CloudStack domain ztpd presents ("ROOT"); responses
// carry its id next to the owning account, as CloudStack's do.
type Domain struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// Domain is the appliance's ROOT domain.
func (s *Service) Domain() Domain { return s.domain }

// rootDomain derives the ROOT domain's ID from the zone's.
func rootDomain(z Zone) Domain { return Domain{ID: nameUUID("domain/ROOT/" + z.ID), Name: "ROOT"} }

// Offering is a service offering: the node size a cluster is planned for.
// ztpd provisions existing devices rather than VMs, so offerings only size
// the cluster's advertised cpunumber and memory; their IDs are fixed so
// scripts can name them.
type Offering struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	DisplayText string `json:"displaytext"`
	CPU         int    `json:"cpunumber"`
	MemoryMB    int    `json:"memory"`
	CPUSpeedMHz int    `json:"cpuspeed"`
}

// Offerings are the built-in service offerings, smallest first.
var Offerings = []Offering{
	offering("ztpd-small", "2 vCPU, 2 GiB", 2, 2048),
	offering("ztpd-medium", "2 vCPU, 4 GiB", 2, 4096),
	offering("ztpd-large", "4 vCPU, 8 GiB", 4, 8192),
	offering("ztpd-xlarge", "8 vCPU, 16 GiB", 8, 16384),
}

func offering(name, text string, cpu, mem int) Offering {
	return Offering{ID: nameUUID("offering/" + name), Name: name, DisplayText: text, CPU: cpu, MemoryMB: mem, CPUSpeedMHz: 1000}
}

// OfferingByID finds a built-in offering by ID or name.
func OfferingByID(id string) (Offering, bool) {
	for _, o := range Offerings {
		if o.ID == id || o.Name == id {
			return o, true
		}
	}
	return Offering{}, false
}

// nameUUID derives a stable UUID (version 5 layout) from a name.
func nameUUID(name string) string {
	h := sha1.Sum([]byte("ztpd\x00" + name))
	h[6] = h[6]&0x0f | 0x50
	h[8] = h[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}
