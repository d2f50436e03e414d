package api

// URL paths the API serves (on its own listener, or on the main one).
// Device-facing paths live in ztp/endpoints.
const (
	CloudStackPath = "/client/api"
	RESTPath       = "/api/v1/"
	OpenAPIPath    = RESTPath + "openapi.json"
)
