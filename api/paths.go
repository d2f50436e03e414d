package api

// CloudStackPath is where the CloudStack door answers (on the API's own
// listener, or on the main one). The other doors' paths are theirs:
// rest.Path, agentdoor.Path, console.Paths; device-facing paths live in
// ztp/endpoints.
const CloudStackPath = "/client/api"
