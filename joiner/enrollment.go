package joiner

import (
	"errors"
	"net/netip"
	"strconv"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// EnrollmentRefused is the audit event of an enrollment secret refused at
// /join: its Fields carry the reason (EnrollmentRefusal*), the address it
// came from and the enrollment's id.
const EnrollmentRefused = "enrollment.refused"

// Why an enrollment was refused, as EnrollmentRefused events name it.
const (
	RefusalWrongAddress = "wrong-address" // presented from an address other than the one its device held at issue
	RefusalReplayed     = "replayed"      // already redeemed
	RefusalExpired      = "expired"
	RefusalUnknown      = "unknown" // an issued enrollment's id with the wrong secret
	RefusalRevoked      = "revoked"
)

// enrollmentRefusal names err when it refuses the enrollment itself.
func enrollmentRefusal(err error) string {
	switch {
	case errors.Is(err, ErrEnrollmentAddress):
		return RefusalWrongAddress
	case errors.Is(err, ErrEnrollmentUsed):
		return RefusalReplayed
	case errors.Is(err, ErrEnrollmentExpired):
		return RefusalExpired
	case errors.Is(err, ErrEnrollmentInvalid):
		return RefusalUnknown
	case errors.Is(err, ErrRevoked):
		return RefusalRevoked
	}
	return ""
}

// enrollmentRefused records a refused enrollment: an audit event on the
// device the secret was issued to and an info line. A secret whose id was
// never issued names no device: it is logged and counted (the join
// refusal metric), never stored, so made-up secrets cannot fill the audit
// trail; a known one's events are rate-limited per enrollment, the
// suppressed ones counted in the next.
func (s *Service) enrollmentRefused(enr *core.Token, id string, req JoinRequest, now time.Time, err error) {
	why := enrollmentRefusal(err)
	if why == "" || enr == nil {
		return
	}
	device := enr.Device
	if device == "" {
		device = enr.BindMAC
	}
	s.log.Info("enrollment refused", "device", device, "enrollment", id, "reason", why, "remote", req.RemoteIP, "bound_to", enr.BindIP)
	ok, suppressed := s.enrollmentRefusals.Allow(id, now)
	if !ok {
		return
	}
	fields := map[string]string{"reason": why, "enrollment": id, "remote": req.RemoteIP}
	if enr.BindIP != "" {
		fields["bound_to"] = enr.BindIP
	}
	if suppressed > 0 {
		fields["suppressed"] = strconv.Itoa(suppressed)
	}
	werr := s.store.Batch(func(tx core.Tx) error {
		return s.event(tx, now, EnrollmentRefused, device, enr.Cluster, "enrollment refused: "+err.Error(), fields)
	})
	if werr != nil {
		s.log.Warn("enrollment refusal not recorded", "device", device, "err", werr)
	}
}

// unmapped is addr without an IPv4-mapped prefix, "" when it is no address.
func unmapped(addr string) string {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return ""
	}
	return a.Unmap().String()
}
