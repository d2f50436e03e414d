package core

import "strings"

// Events come in two streams with one sequence: the audit trail (what
// operators and API keys did, which credentials were issued, who was
// approved, reset or joined) and device events (DHCP, ZTP fetches,
// refusals). They are kept apart so that device noise, however loud, never
// pushes the audit trail out: each has its own retention.
var auditPrefixes = []string{"apikey.", "cluster.", "version.", "token.", "kubeconfig.", "join.", "api.",
	"device.approved", "device.reset", "device.declared", "desired.", "rollout."}

// IsAudit reports whether events of type typ belong to the audit trail.
func IsAudit(typ string) bool {
	for _, p := range auditPrefixes {
		if strings.HasPrefix(typ, p) {
			return true
		}
	}
	return false
}
