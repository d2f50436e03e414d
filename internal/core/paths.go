package core

// URL paths that one transport hands out and another serves. They live here so
// DHCP can point at HTTP without importing it.
const (
	PathZTPJSON        = "/ztp/ztp.json"   // SONiC option 67
	PathZTPConfig      = "/ztp/config/"    // + <device-id>/config_db.json
	PathONIEInstaller  = "/onie/installer" // ONIE option 114
	PathMetadata       = "/latest/meta-data/"
	PathUserData       = "/latest/user-data"
	PathImages         = "/images/" // + <sha256|name>
	PathISOs           = "/isos/"   // + <name>.iso
	PathJoin           = "/join/"
	PathAPI            = "/api/v1/"
	PathCloudStackAPI  = "/client/api"
	PathHealthz        = "/healthz"
	PathMetrics        = "/metrics"
	PathOpenAPI        = "/api/v1/openapi.json"
	PathProvisionShell = "/ztp/provision.sh" // SONiC option 239 fallback script
)
