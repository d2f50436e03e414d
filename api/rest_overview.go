package api

import (
	"github.com/ztpd/ztpd/internal/core"
)

// deviceCounts is the device summary of the overview (openapi.json
// DeviceCounts), also sent with every console stream update.
type deviceCounts struct {
	Total     int            `json:"total"`
	ByState   map[string]int `json:"by_state"`
	ByKind    map[string]int `json:"by_kind"`
	Unmatched int            `json:"unmatched"`
}

// deviceCounts counts the devices by state and kind; own, when not nil,
// keeps only the devices of those clusters (a user key's view, see
// ownClusters). Unmatched are the devices whose last ZTP request got no
// content, whatever their state (listDevices' state=unmatched).
func (s *Server) deviceCounts(own map[string]bool) (deviceCounts, error) {
	n := deviceCounts{ByState: map[string]int{}, ByKind: map[string]int{}}
	err := s.st.View(func(tx core.Tx) error {
		return tx.Devices().List("", func(d core.Device) (bool, error) {
			if own != nil && !own[d.Cluster] {
				return true, nil
			}
			n.Total++
			n.ByState[string(d.State)]++
			n.ByKind[string(d.Kind)]++
			if d.Refusal.Refused() {
				n.Unmatched++
			}
			return true, nil
		})
	})
	return n, err
}
