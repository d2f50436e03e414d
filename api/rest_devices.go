package api

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/internal/httpserve"
)

// restDevice is a device as the REST API shows it (openapi.json Device).
type restDevice struct {
	ID          string            `json:"id"`
	Kind        core.DeviceKind   `json:"kind"`
	MAC         string            `json:"mac"`
	Serial      string            `json:"serial,omitempty"`
	Product     string            `json:"product,omitempty"`
	Platform    string            `json:"platform,omitempty"`
	Hostname    string            `json:"hostname,omitempty"`
	ClientID    string            `json:"client_id,omitempty"`
	VendorClass string            `json:"vendor_class,omitempty"`
	SONiCVer    string            `json:"sonic_version,omitempty"`
	IP          string            `json:"ip,omitempty"`
	Subnet      string            `json:"subnet,omitempty"`
	RelayAddr   string            `json:"relay_addr,omitempty"`
	CircuitID   string            `json:"circuit_id,omitempty"`
	RemoteID    string            `json:"remote_id,omitempty"`
	BaseMAC     string            `json:"base_mac,omitempty"`
	FixedIP     string            `json:"fixed_ip,omitempty"`
	State       core.DeviceState  `json:"state"`
	Approved    bool              `json:"approved,omitempty"`
	Cluster     string            `json:"cluster,omitempty"`
	Role        string            `json:"role,omitempty"`
	Profile     string            `json:"profile,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Refusal     restRefusal       `json:"refusal,omitzero"`
	// SerialConflict: other devices stated this device's serial (or it
	// stated theirs); the serial resolves to no device until resolved.
	SerialConflict *restSerialConflict `json:"serial_conflict,omitempty"`
	FirstSeen      time.Time           `json:"first_seen"`
	LastSeen       time.Time           `json:"last_seen"`
	UpdatedAt      time.Time           `json:"updated_at"`
}

// restRefusal is why a device's last ZTP request got no content
// (openapi.json DeviceRefusal).
type restRefusal struct {
	What   string    `json:"what"`
	Kind   string    `json:"kind"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// restSerialConflict is a serial several devices stated (openapi.json
// SerialConflict).
type restSerialConflict struct {
	Serial string   `json:"serial"`
	With   []string `json:"with"`
}

func restSerialConflictOf(c *core.SerialConflict) *restSerialConflict {
	if c == nil {
		return nil
	}
	return &restSerialConflict{Serial: c.Serial, With: c.With}
}

func restDeviceOf(d core.Device) restDevice {
	return restDevice{SerialConflict: restSerialConflictOf(d.SerialConflict), ID: d.ID, Kind: d.Kind, MAC: d.MAC, Serial: d.Serial, Product: d.Product, Platform: d.Platform,
		Hostname: d.Hostname, ClientID: d.ClientID, VendorClass: d.VendorClass, SONiCVer: d.SONiCVer, IP: d.IP,
		Subnet: d.Subnet, RelayAddr: d.RelayAddr, CircuitID: d.CircuitID, RemoteID: d.RemoteID, BaseMAC: d.BaseMAC,
		FixedIP: d.FixedIP, State: d.State, Approved: d.Approved, Cluster: d.Cluster, Role: d.Role, Profile: d.Profile,
		Labels: d.Labels, Refusal: restRefusal(d.Refusal), FirstSeen: d.FirstSeen, LastSeen: d.LastSeen, UpdatedAt: d.UpdatedAt}
}

// restLease is a lease as the REST API shows it (openapi.json Lease).
type restLease struct {
	IP        string          `json:"ip"`
	MAC       string          `json:"mac"`
	ClientID  string          `json:"client_id,omitempty"`
	Hostname  string          `json:"hostname,omitempty"`
	Subnet    string          `json:"subnet"`
	State     core.LeaseState `json:"state"`
	Start     time.Time       `json:"start"`
	Expiry    time.Time       `json:"expiry"`
	Reserved  bool            `json:"reserved,omitempty"`
	UpdatedAt time.Time       `json:"updated_at"`
}

func restLeaseOf(l core.Lease) restLease {
	return restLease{IP: l.IP, MAC: l.MAC, ClientID: l.ClientID, Hostname: l.Hostname, Subnet: l.Subnet, State: l.State,
		Start: l.Start, Expiry: l.Expiry, Reserved: l.Reserved, UpdatedAt: l.UpdatedAt}
}

func devicePos(d core.Device) string { return d.ID }
func leasePos(l core.Lease) string   { return l.IP }

func (s *Server) listDevices(c *gin.Context) {
	limit, after, ok := listParams(c)
	if !ok {
		return
	}
	state, kind, cluster, subnet, approved := c.Query("state"), c.Query("kind"), c.Query("cluster"), c.Query("subnet"), c.Query("approved")
	search := strings.ToLower(c.Query("q"))
	if approved != "" && approved != "true" && approved != "false" {
		restRefuse(c, core.KindInvalid, "approved must be true or false")
		return
	}
	sc, ok := s.scopeOf(c)
	if !ok {
		return
	}
	var keep func(core.Device) bool
	// state=unmatched: the devices whose last ZTP request got no content
	// (no profile matches them, or a refused request), whatever their state.
	unmatched := state == "unmatched"
	if unmatched {
		state = ""
	}
	if state != "" || unmatched || kind != "" || cluster != "" || subnet != "" || approved != "" || search != "" {
		keep = func(d core.Device) bool {
			return (state == "" || string(d.State) == state) && (!unmatched || d.Refusal.Refused()) &&
				(kind == "" || string(d.Kind) == kind) &&
				(cluster == "" || d.Cluster == cluster) && (subnet == "" || d.Subnet == subnet) &&
				(approved == "" || strconv.FormatBool(d.Approved) == approved) && (search == "" || deviceMatches(d, search))
		}
	}
	// Query plan: with state=, the devices-by-state index from the cursor
	// (core.Devices.ListState: a page reads its own devices plus those the
	// other filters skip); without it, the devices in ID order from the
	// cursor. Either way the walk stops at limit+1 kept devices, and the
	// page is then kept in the response cache until a device changes.
	fill := func(buf []byte) ([]byte, error) {
		err := s.queries.ReadScoped(sc, func(r devices.Reader) error {
			list := func(after string, fn core.Visit[core.Device]) error {
				return r.Devices(core.DeviceState(state), after, fn)
			}
			var err error
			buf, err = appendPage(buf, list, after, limit, devicePos, keep, appendDeviceView)
			return err
		})
		return buf, err
	}
	if !sc.All() { // depends on the caller's clusters too: never kept
		s.writeAppended(c, fill)
		return
	}
	s.writeAppended(c, fill, core.AggDevices)
}

// deviceMatches reports whether any of what an operator searches a device
// by (serial, MAC, IP, hostname, product, profile, ID) contains lower, a
// lowercase text.
func deviceMatches(d core.Device, lower string) bool {
	for _, f := range [...]string{d.Serial, d.MAC, d.IP, d.Hostname, d.Product, d.Profile, d.ID} {
		if strings.Contains(strings.ToLower(f), lower) {
			return true
		}
	}
	return false
}

func (s *Server) getDevice(c *gin.Context) {
	ref := c.Param("id")
	d, err := s.lookupDevice(callerOf(c), ref)
	if errors.Is(err, core.ErrNotFound) {
		restRefuse(c, core.KindNotFound, "device "+ref+" not found")
		return
	}
	if err != nil {
		s.restFail(c, err)
		return
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, restDeviceOf(d))
}

// scopeOf is what the caller sees (devices.Queries decides it): the fleet
// for admin keys, else the key's account's clusters and their devices,
// leases and events. ok is false when the answer was already written.
func (s *Server) scopeOf(c *gin.Context) (devices.Scope, bool) {
	sc, err := s.queries.ScopeOf(callerOf(c))
	if err != nil {
		s.restFail(c, err)
		return sc, false
	}
	return sc, true
}

func (s *Server) approveDevice(c *gin.Context) {
	var req struct {
		Cluster string `json:"cluster"`
	}
	if !bindBody(c, &req) {
		return
	}
	d, err := s.clusters.ApproveDevice(c.Request.Context(), callerOf(c), c.Param("id"), req.Cluster)
	if err != nil {
		s.restFail(c, err)
		return
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, restDeviceOf(d))
}

func (s *Server) resetDevice(c *gin.Context) {
	d, err := s.clusters.ResetDevice(c.Request.Context(), callerOf(c), c.Param("id"))
	if err != nil {
		s.restFail(c, err)
		return
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, restDeviceOf(d))
}

func (s *Server) listLeases(c *gin.Context) {
	limit, after, ok := listParams(c)
	if !ok {
		return
	}
	state, subnet, mac := c.Query("state"), c.Query("subnet"), strings.ToLower(c.Query("mac"))
	sc, ok := s.scopeOf(c)
	if !ok {
		return
	}
	var keep func(core.Lease) bool
	if state != "" || subnet != "" || mac != "" {
		keep = func(l core.Lease) bool {
			return (state == "" || string(l.State) == state) && (subnet == "" || l.Subnet == subnet) && (mac == "" || l.MAC == mac)
		}
	}
	fill := func(buf []byte) ([]byte, error) {
		err := s.queries.ReadScoped(sc, func(r devices.Reader) error {
			var err error
			buf, err = appendPage(buf, r.Leases, after, limit, leasePos, keep, appendLeaseView)
			return err
		})
		return buf, err
	}
	if !sc.All() {
		s.writeAppended(c, fill)
		return
	}
	s.writeAppended(c, fill, core.AggLeases)
}
