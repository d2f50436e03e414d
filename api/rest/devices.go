package rest

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/internal/httpserve"
)

func restSerialConflictOf(c *core.SerialConflict) *client.SerialConflict {
	if c == nil {
		return nil
	}
	return &client.SerialConflict{Serial: c.Serial, With: c.With}
}

func restCablingMismatchOf(c *core.CablingMismatch) *client.CablingMismatch {
	if c == nil {
		return nil
	}
	return &client.CablingMismatch{Position: c.Position, Mismatches: c.Mismatches, At: c.At}
}

func restDeviceOf(d core.Device) client.Device {
	return client.Device{SerialConflict: restSerialConflictOf(d.SerialConflict), CablingMismatch: restCablingMismatchOf(d.CablingMismatch), ID: d.ID, Kind: d.Kind, MAC: d.MAC, Serial: d.Serial, Product: d.Product, Platform: d.Platform,
		Hostname: d.Hostname, ClientID: d.ClientID, VendorClass: d.VendorClass, SONiCVer: d.SONiCVer, IP: d.IP,
		Subnet: d.Subnet, RelayAddr: d.RelayAddr, CircuitID: d.CircuitID, RemoteID: d.RemoteID, Position: d.Position, BaseMAC: d.BaseMAC,
		FixedIP: d.FixedIP, State: d.State, Approved: d.Approved, Cluster: d.Cluster, Role: d.Role, Profile: d.Profile,
		Labels: d.Labels, Refusal: client.Refusal(d.Refusal), FirstSeen: d.FirstSeen, LastSeen: d.LastSeen, UpdatedAt: d.UpdatedAt}
}

func restLeaseOf(l core.Lease) client.Lease {
	return client.Lease{IP: l.IP, MAC: l.MAC, ClientID: l.ClientID, Hostname: l.Hostname, Subnet: l.Subnet, State: l.State,
		Start: l.Start, Expiry: l.Expiry, Reserved: l.Reserved, UpdatedAt: l.UpdatedAt}
}

func devicePos(d core.Device) string { return d.ID }
func leasePos(l core.Lease) string   { return l.IP }

func (s *Door) listDevices(c *gin.Context) {
	limit, after, ok := listParams(c)
	if !ok {
		return
	}
	state, kind, cluster, subnet, approved := c.Query("state"), c.Query("kind"), c.Query("cluster"), c.Query("subnet"), c.Query("approved")
	search := strings.ToLower(c.Query("q"))
	if approved != "" && approved != "true" && approved != "false" {
		Refuse(c, core.KindInvalid, "approved must be true or false")
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
	// Query plan: a user key walks its clusters' ranges of the
	// devices-by-cluster index, an admin the whole fleet; with state=,
	// the devices-by-state index from the cursor (a page reads its own
	// devices plus those the other filters skip); without it, the devices
	// in ID order from the cursor. Either way the walk stops at limit+1
	// kept devices, and the page is then kept in the response cache until
	// a device changes.
	fill := func(buf []byte) ([]byte, error) {
		err := s.queries.ReadScoped(sc, func(r devices.Reader) error {
			list := func(after string, fn core.Visit[core.Device]) error {
				return r.Devices(core.DeviceState(state), after, fn)
			}
			var err error
			buf, err = appendPage(buf, list, after, limit, devicePos, keep, AppendDeviceView)
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

func (s *Door) getDevice(c *gin.Context) {
	ref := c.Param("id")
	d, err := s.lookupDevice(callerOf(c), ref)
	if errors.Is(err, core.ErrNotFound) {
		Refuse(c, core.KindNotFound, "device "+ref+" not found")
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
func (s *Door) scopeOf(c *gin.Context) (devices.Scope, bool) {
	sc, err := s.queries.ScopeOf(callerOf(c))
	if err != nil {
		s.restFail(c, err)
		return sc, false
	}
	return sc, true
}

func (s *Door) approveDevice(c *gin.Context) {
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

func (s *Door) resetDevice(c *gin.Context) {
	d, err := s.clusters.ResetDevice(c.Request.Context(), callerOf(c), c.Param("id"))
	if err != nil {
		s.restFail(c, err)
		return
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, restDeviceOf(d))
}

func (s *Door) listLeases(c *gin.Context) {
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
