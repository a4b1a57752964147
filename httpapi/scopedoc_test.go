package httpapi

import (
	"os"
	"strings"
	"testing"
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
	path := "../docs/api-decisions.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok := strings.Cut(string(doc), scopeBegin)
	_, after, ok2 := strings.Cut(rest, scopeEnd)
	if !ok || !ok2 {
		t.Fatalf("%s lacks the scope-table markers", path)
	}
	want := before + scopeBegin + ScopeTable(b.api.Routes()) + scopeEnd + after
	if want == string(doc) {
		return
	}
	if os.Getenv("UPDATE_DOCS") != "" {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("the scope table in %s is out of date: run UPDATE_DOCS=1 go test ./httpapi -run TestScopeTableDoc", path)
}
