// Package api holds the API's wire types: every request body and answer of the HTTP API, with the values
// and bounds the format names (scopes, states, query parameter limits). It imports nothing of ours, so the
// CLI's client commands and httpapi's route table speak the API without the domain (package appliance),
// much as River's rivertype does for its jobs.
//
// A file here is named after the API area (and the appliance/<area>.go that serves it). The struct tags
// make both the JSON and /v1/openapi.json: `json` the member names, `api:"required"` a required request
// member, `api:"nullable"` an answer's pointer that may be null, `doc`, `enum` and `schema` the
// document's descriptions, closed sets and JSON Schema keywords (see httpapi/openapi.go).
package api
