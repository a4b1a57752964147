package httpapi

import (
	"net/http"
	"testing"
)

// checkAgainstOpenAPI validates a response against the served OpenAPI document.
// TODO(openapi helper): implement with kin-openapi.
func checkAgainstOpenAPI(t testing.TB, b *bundle, req *http.Request, resp *response) {}
