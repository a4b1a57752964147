package httpapi

import (
	"fmt"
	"strings"

	"github.com/theappliance/appliance/api"
)

// ScopeTable renders the route table's authentication and scope of every endpoint as a Markdown table.
// docs/api-decisions.md embeds it; a test keeps the two identical.
func ScopeTable(routes []Route) string {
	var b strings.Builder
	b.WriteString("| Method | Path | Auth | Scope | Project-scoped keys |\n|---|---|---|---|---|\n")
	for _, rt := range routes {
		auth := map[Auth]string{Public: "none", Authenticated: "key or session", SessionOnly: "session only", ServiceToken: "service token only"}[rt.Auth]
		if rt.Operator {
			auth += " (platform operators)"
		}
		if rt.Bucket == BucketStrict {
			auth += " (strict rate bucket)"
		}
		scope := strings.Join(scopeStrings(rt.scopes()), " + ")
		if scope == "" {
			scope = "—"
		}
		proj := "—"
		switch {
		case rt.Auth == Public || rt.Auth == SessionOnly || rt.Auth == ServiceToken:
		case rt.OrgLevel:
			proj = "refused"
		case strings.Contains(rt.Path, "{projectID}") || strings.Contains(rt.Path, "{jobID}"):
			proj = "own project only"
		default:
			proj = "allowed"
		}
		fmt.Fprintf(&b, "| %s | `%s` | %s | %s | %s |\n", rt.Method, rt.Path, auth, scope, proj)
	}
	return b.String()
}

// scopeStrings are the scopes' names.
func scopeStrings(scopes []api.Scope) []string {
	out := make([]string, len(scopes))
	for i, sc := range scopes {
		out[i] = string(sc)
	}
	return out
}
