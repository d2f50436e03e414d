package core

import "strings"

// Events come in two streams with one sequence: the audit trail (what
// operators and API keys did, which credentials were issued, who was
// approved, reset or joined) and device events (DHCP, ZTP fetches,
// refusals). They are kept apart so that device noise, however loud, never
// pushes the audit trail out: each has its own retention.
var auditPrefixes = []string{"apikey.", "cluster.", "version.", "token.", "kubeconfig.", "join.", "api.",
	"device.approved", "device.reset", "device.declared", "desired.", "rollout.", "enrollment."}

// deviceCaused are events under an audit prefix that a device causes
// unauthenticated or speaks for itself: waiting to join (every user-data or
// join request of an unapproved device) and a node's own join report.
// They are device events: an audit entry is what a key holder or the
// appliance decided, and a device must not be able to cycle the trail.
var deviceCaused = []string{"join.waiting", "join.joined", "join.failed"}

// IsAudit reports whether events of type typ belong to the audit trail.
func IsAudit(typ string) bool {
	for _, t := range deviceCaused {
		if typ == t {
			return false
		}
	}
	for _, p := range auditPrefixes {
		if strings.HasPrefix(typ, p) {
			return true
		}
	}
	return false
}
