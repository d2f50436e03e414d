package api

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/httpserve"
)

func restSerialConflictOf(c *core.SerialConflict) *client.SerialConflict {
	if c == nil {
		return nil
	}
	return &client.SerialConflict{Serial: c.Serial, With: c.With}
}

func restDeviceOf(d core.Device) client.Device {
	return client.Device{SerialConflict: restSerialConflictOf(d.SerialConflict), ID: d.ID, Kind: d.Kind, MAC: d.MAC, Serial: d.Serial, Product: d.Product, Platform: d.Platform,
		Hostname: d.Hostname, ClientID: d.ClientID, VendorClass: d.VendorClass, SONiCVer: d.SONiCVer, IP: d.IP,
		Subnet: d.Subnet, RelayAddr: d.RelayAddr, CircuitID: d.CircuitID, RemoteID: d.RemoteID, BaseMAC: d.BaseMAC,
		FixedIP: d.FixedIP, State: d.State, Approved: d.Approved, Cluster: d.Cluster, Role: d.Role, Profile: d.Profile,
		Labels: d.Labels, Refusal: client.Refusal(d.Refusal), FirstSeen: d.FirstSeen, LastSeen: d.LastSeen, UpdatedAt: d.UpdatedAt}
}

func restLeaseOf(l core.Lease) client.Lease {
	return client.Lease{IP: l.IP, MAC: l.MAC, ClientID: l.ClientID, Hostname: l.Hostname, Subnet: l.Subnet, State: l.State,
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
	own, ok := s.ownClusters(c)
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
	if state != "" || unmatched || kind != "" || cluster != "" || subnet != "" || approved != "" || own != nil || search != "" {
		keep = func(d core.Device) bool {
			return (own == nil || own[d.Cluster]) && (state == "" || string(d.State) == state) && (!unmatched || d.Refusal.Refused()) &&
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
		err := s.st.View(func(tx core.Tx) error {
			list := tx.Devices().List
			if state != "" {
				list = func(after string, fn core.Visit[core.Device]) error {
					return tx.Devices().ListState(core.DeviceState(state), after, fn)
				}
			}
			var err error
			buf, err = appendPage(buf, list, after, limit, devicePos, keep, appendDeviceView)
			return err
		})
		return buf, err
	}
	if own != nil { // depends on the caller's clusters too: never kept
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
	d, err := s.lookupDevice(ref)
	if err != nil && !errors.Is(err, core.ErrNotFound) {
		s.restFail(c, err)
		return
	}
	own, ok := s.ownClusters(c)
	if !ok {
		return
	}
	if err != nil || (own != nil && !own[d.Cluster]) {
		restRefuse(c, core.KindNotFound, "device "+ref+" not found")
		return
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, restDeviceOf(d))
}

// ownClusters is nil for admin keys, else the IDs of the clusters of the
// key's account: a user key sees only their devices, leases and events.
// ok is false when the answer was already written.
func (s *Server) ownClusters(c *gin.Context) (map[string]bool, bool) {
	if credOf(c).IsAdmin() {
		return nil, true
	}
	own, err := s.clusters.AccountClusters(c.Request.Context(), callerOf(c))
	if err != nil {
		s.restFail(c, err)
		return nil, false
	}
	return own, true
}

// ownMACs is nil for admin keys, else the MAC addresses of the devices in
// the key's account's clusters.
func (s *Server) ownMACs(c *gin.Context) (map[string]bool, bool) {
	own, ok := s.ownClusters(c)
	if own == nil || !ok {
		return nil, ok
	}
	macs := map[string]bool{}
	err := s.st.View(func(tx core.Tx) error {
		return tx.Devices().List("", func(d core.Device) (bool, error) {
			if own[d.Cluster] {
				macs[d.MAC] = true
			}
			return true, nil
		})
	})
	if err != nil {
		s.restFail(c, err)
		return nil, false
	}
	return macs, true
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
	macs, ok := s.ownMACs(c)
	if !ok {
		return
	}
	var keep func(core.Lease) bool
	if state != "" || subnet != "" || mac != "" || macs != nil {
		keep = func(l core.Lease) bool {
			return (macs == nil || macs[l.MAC]) && (state == "" || string(l.State) == state) && (subnet == "" || l.Subnet == subnet) && (mac == "" || l.MAC == mac)
		}
	}
	fill := func(buf []byte) ([]byte, error) {
		err := s.st.View(func(tx core.Tx) error {
			var err error
			buf, err = appendPage(buf, tx.Leases().List, after, limit, leasePos, keep, appendLeaseView)
			return err
		})
		return buf, err
	}
	if macs != nil {
		s.writeAppended(c, fill)
		return
	}
	s.writeAppended(c, fill, core.AggLeases)
}
