package httpapi

import (
	"testing"

	"github.com/theappliance/appliance/appliance/appliancetest"
)

const (
	scopeBegin = "<!-- scope-table:begin (generated from the route table: UPDATE_DOCS=1 go test ./httpapi -run TestScopeTableDoc) -->\n"
	scopeEnd   = "<!-- scope-table:end -->"
)

// TestScopeTableDoc keeps the scope table of docs/api-decisions.md identical to the route table.
// Run with UPDATE_DOCS=1 to rewrite it.
func TestScopeTableDoc(t *testing.T) {
	t.Parallel()
	b := setup(t)
	appliancetest.DocSection(t, "../docs/api-decisions.md", scopeBegin, scopeEnd, ScopeTable(b.api.Routes()),
		"UPDATE_DOCS=1 go test ./httpapi -run TestScopeTableDoc")
}
