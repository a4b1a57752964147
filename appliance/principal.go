package appliance

import "github.com/theappliance/appliance/appliance/authz"

// The caller and its checks live in appliance/authz, where the area packages reach them without this
// package; these names keep the root's and httpapi's spelling.

// Principal is the authenticated caller.
type Principal = authz.Principal

// IsOrganizationScope reports whether s manages the organization as a whole.
func IsOrganizationScope(s Scope) bool { return authz.IsOrganizationScope(s) }

// RoleGrants reports whether the organization role grants scope s.
func RoleGrants(role string, s Scope) bool { return authz.RoleGrants(role, s) }

// Organization roles of the built-in identity provider.
const (
	RoleOwner  = authz.RoleOwner
	RoleAdmin  = authz.RoleAdmin
	RoleMember = authz.RoleMember
)

// Authentication sources.
const (
	SourceAPIKey  = authz.SourceAPIKey
	SourceSession = authz.SourceSession
)

// Actor kinds recorded on audit events.
const (
	ActorAPIKey    = authz.ActorAPIKey
	ActorUser      = authz.ActorUser
	ActorSystem    = authz.ActorSystem
	ActorAnonymous = authz.ActorAnonymous
)
