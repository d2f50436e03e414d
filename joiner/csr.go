package joiner

import (
	"errors"
	"fmt"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/joiner/pki"
)

// A switch's key is made on the switch: its join carries a certificate
// signing request, checked by pki (ParseCSR before the admission
// transaction, the subject inside it, once the node name is decided) and
// signed at render. ztpd makes no device key.

var (
	// ErrCSRRefused: the request asks for a key or a certificate ztpd
	// does not issue, or its signature does not verify.
	ErrCSRRefused = joinError(core.KindInvalid, "certificate signing request refused")
	// ErrCSRMissing: a join that issues a client certificate came without
	// a request, from a join plugin older than ztpd (both are served by
	// ztpd, so they move together).
	ErrCSRMissing = joinError(core.KindInvalid, "this join plugin is too old")
)

// csrCheck is the device's certificate signing request as ParseCSR found
// it: the request, or why it is refused.
type csrCheck struct {
	csr *pki.CSR
	err error
}

// checkSwitchCSR refuses a switch's join whose request is missing, failed
// ParseCSR, or names a subject other than the certificate of node name
// nodeName (bundle.SonicCertRequest).
func checkSwitchCSR(raw string, c csrCheck, nodeName string) error {
	switch {
	case raw == "":
		return fmt.Errorf("%w: it sent no certificate signing request, and ztpd signs only a key the switch made itself; "+
			"run the plugin ztpd serves at %s", ErrCSRMissing, PluginPath)
	case c.err != nil:
		return fmt.Errorf("%w: %s", ErrCSRRefused, csrReason(c.err))
	}
	if err := c.csr.CheckSubject(bundle.SonicCertRequest(nodeName, 0)); err != nil {
		return fmt.Errorf("%w: %s", ErrCSRRefused, csrReason(err))
	}
	return nil
}

func csrReason(err error) string {
	var ce *pki.CSRError
	if errors.As(err, &ce) {
		return ce.Reason
	}
	return err.Error()
}

// csrRefused records a refused request: a warning and an audit event on
// the device that made it (it proved who it is: its enrollment secret and
// its address held), a few per device every refusalLogEvery. Nothing was
// issued and the secret is not used up.
func (s *Service) csrRefused(device, cluster string, req JoinRequest, reason error, now time.Time) {
	if ok, _ := s.csrLog.Allow(device, now); !ok || device == "" {
		return
	}
	s.log.Warn("join refused", "device", device, "mac", req.MAC, "serial", req.Serial, "remote", req.RemoteIP, "reason", reason.Error())
	err := s.store.Batch(func(tx core.Tx) error {
		return s.event(tx, now, "join.refused", device, cluster, reason.Error(), map[string]string{"reason": refusalReason(reason)})
	})
	if err != nil {
		s.log.Warn("record a refused join", "device", device, "err", err)
	}
}
