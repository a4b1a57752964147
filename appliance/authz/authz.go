// Package authz is the authenticated caller (Principal) and the rules of what it may reach: its scopes,
// its organization and project binding, the organization roles. httpapi makes a Principal per request;
// every area of the domain (the root package `appliance` and the area packages beside it) checks it with
// these methods; `appliance` re-exports the names.
package authz

import (
	"slices"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
)

// organizationScopes act on the organization as a whole and are refused on project-scoped keys.
var organizationScopes = []api.Scope{api.ScopeOrganizationsRead, api.ScopeOrganizationsWrite, api.ScopeAPIKeysRead, api.ScopeAPIKeysWrite}

// IsOrganizationScope reports whether s manages the organization as a whole.
func IsOrganizationScope(s api.Scope) bool { return slices.Contains(organizationScopes, s) }

// Organization roles of the built-in identity provider.
const (
	RoleOwner  = api.RoleOwner
	RoleAdmin  = api.RoleAdmin
	RoleMember = api.RoleMember
)

// RoleScopes are the scopes a session carries for each role.
func RoleScopes(role string) []api.Scope {
	if isAdminRole(role) {
		return api.AllScopes
	}
	return []api.Scope{api.ScopeProjectsRead, api.ScopeProjectsWrite, api.ScopeCredentialsRead, api.ScopeBackupsRead,
		api.ScopeBackupsWrite, api.ScopeJobsRead, api.ScopeOrganizationsRead, api.ScopeAPIKeysRead}
}

// Authentication sources.
const (
	SourceAPIKey  = "api_key"
	SourceSession = "session"
)

// Actor kinds recorded on audit events.
const (
	ActorAPIKey    = api.ActorAPIKey
	ActorUser      = api.ActorUser
	ActorSystem    = api.ActorSystem
	ActorAnonymous = api.ActorAnonymous
	// ActorBillingProvider acts for a billing provider's verified webhook events (BillingProvider).
	ActorBillingProvider = api.ActorBillingProvider
	// ActorServiceToken acts for a service token (ServiceToken).
	ActorServiceToken = api.ActorServiceToken
)

// Principal is the authenticated caller.
type Principal struct {
	AuthSource          string   `json:"auth_source"`
	IDPOrganizationID   string   `json:"idp_organization_id"`
	IDPOrganizationRole string   `json:"idp_organization_role"`
	IDPOrganizationSlug string   `json:"idp_organization_slug"`
	OrganizationID      string   `json:"organization_id"`
	UserID              string   `json:"user_id"`
	IsAdmin             bool     `json:"is_admin"`
	Scopes              []string `json:"scopes"`
	ProjectID           string   `json:"project_id"` // set for project-scoped keys
	APIKeyID            string   `json:"api_key_id"` // set when authenticated by API key

	sessionID    string
	provider     string // the billing provider's name (BillingProvider)
	serviceToken string // the service token's id (ServiceToken)
}

// BillingProvider is the caller of a billing provider's verified webhook event, named by the provider
// ("stripe") on the audit events it causes.
func BillingProvider(name string) *Principal {
	return &Principal{AuthSource: ActorBillingProvider, provider: name, Scopes: []string{}}
}

// NewSession is the caller of an identity-provider session, with no scopes yet (its organization's role
// gives them).
func NewSession(userID, sessionID string, isAdmin bool) *Principal {
	return &Principal{AuthSource: SourceSession, UserID: userID, IsAdmin: isAdmin, sessionID: sessionID, Scopes: []string{}}
}

// SessionID is the session the caller came with ("" for an API key).
func (p *Principal) SessionID() string { return p.sessionID }

// Unaffiliated reports whether the principal is a session of a user who belonged to no organization when
// signing in (they came to answer an invitation): it may read /v1/me, answer its invitations and sign out,
// nothing else, until it accepts one.
func (p *Principal) Unaffiliated() bool {
	return p.IsSession() && !p.IsAdmin && p.OrganizationID == ""
}

// Has reports whether the principal carries scope s.
func (p *Principal) Has(s api.Scope) bool { return slices.Contains(p.Scopes, string(s)) }

// SameRights reports whether q, the same credential authenticated again, may still do exactly what p
// could: the same organization, project binding, role, admin flag and scopes. A long-lived request (an
// event or log stream) that opened as p ends when its credential no longer authenticates as p.
func (p *Principal) SameRights(q *Principal) bool {
	return p.AuthSource == q.AuthSource && p.UserID == q.UserID && p.APIKeyID == q.APIKeyID &&
		p.OrganizationID == q.OrganizationID && p.ProjectID == q.ProjectID && p.IsAdmin == q.IsAdmin &&
		p.IDPOrganizationRole == q.IDPOrganizationRole && slices.Equal(p.Scopes, q.Scopes)
}

// IsSession reports whether the caller is an identity-provider session.
func (p *Principal) IsSession() bool { return p.AuthSource == SourceSession }

// Actor returns the kind and id recorded on audit events.
func (p *Principal) Actor() (kind, id string) {
	if p == nil {
		return ActorAnonymous, ""
	}
	switch p.AuthSource {
	case SourceAPIKey:
		return ActorAPIKey, p.APIKeyID
	case ActorSystem:
		return ActorSystem, "appliance"
	case ActorBillingProvider:
		return ActorBillingProvider, p.provider
	case ActorServiceToken:
		return ActorServiceToken, p.serviceToken
	}
	return ActorUser, p.UserID
}

// RequireAdminRole refuses callers without the organization admin role (owner or admin) for the
// admin-only actions of the spec (§Authentication 6). A session carries its user's role; an API key
// carries its creator's current role (see the root's actAsCreator), so a key minted by a member is refused
// too.
func (p *Principal) RequireAdminRole(action string) error {
	if p.IsAdmin || p.AuthSource == ActorSystem || isAdminRole(p.IDPOrganizationRole) {
		return nil
	}
	return apperr.Forbidden("%s requires the organization admin role", action)
}

// RequireOwnerRole refuses callers without the organization owner role (platform operators and the system
// pass), for the owner-only actions: a session carries its user's role, an API key its creator's current
// role.
func (p *Principal) RequireOwnerRole(action string) error {
	if p.IsAdmin || p.AuthSource == ActorSystem || p.IDPOrganizationRole == RoleOwner {
		return nil
	}
	return apperr.Forbidden("%s requires the organization owner role", action)
}

func isAdminRole(role string) bool { return role == RoleOwner || role == RoleAdmin }

// RoleGrants reports whether the organization role grants scope s.
func RoleGrants(role string, s api.Scope) bool { return slices.Contains(RoleScopes(role), s) }

// CheckOrganization refuses access to an organization the caller does not belong to. Platform admins may
// act on any organization. The error is a 404 so other organizations' IDs are not revealed.
func (p *Principal) CheckOrganization(orgID string) error {
	if p.IsAdmin || p.OrganizationID == orgID {
		return nil
	}
	return apperr.NotFound("organization %s not found", orgID)
}

// CheckProject refuses a project outside the caller's reach: another organization's (404) or, for a
// project-scoped key, any project but its own (403).
func (p *Principal) CheckProject(projectID, projectOrgID string) error {
	if err := p.CheckOrganization(projectOrgID); err != nil {
		return apperr.NotFound("project %s not found", projectID)
	}
	if p.ProjectID != "" && p.ProjectID != projectID {
		return apperr.Forbidden("this API key is restricted to project %s", p.ProjectID)
	}
	return nil
}

// OrganizationFilter resolves the organization a listing is for: organization principals always get their
// own (a different filter is refused); platform admins must name one.
func (p *Principal) OrganizationFilter(requested string) (string, error) {
	if p.IsAdmin {
		if requested == "" {
			return "", apperr.Invalid("organization_id is required for platform administrators, who have no implicit organization")
		}
		return requested, nil
	}
	if requested != "" && requested != p.OrganizationID {
		return "", apperr.NotFound("organization %s not found", requested)
	}
	return p.OrganizationID, nil
}

// RequireOperator refuses every caller but a platform operator's session or key (is_admin), and a service
// token whatever it carries: what names the action in the 403 ("managing organizations is for platform
// operators").
func (p *Principal) RequireOperator(what string) error {
	if p == nil || !p.IsAdmin || p.IsServiceToken() {
		return apperr.Forbidden("%s is for platform operators", what)
	}
	return nil
}

// ServiceToken is the caller of a narrow service token (appliance/programapps): no organization, no user,
// and exactly the one scope program_applications:create. The router admits it on the routes that take a
// service token and refuses it everywhere else.
func ServiceToken(id string) *Principal {
	return &Principal{AuthSource: ActorServiceToken, serviceToken: id, Scopes: []string{string(api.ScopeProgramApplicationsCreate)}}
}

// IsServiceToken reports whether the caller is a service token.
func (p *Principal) IsServiceToken() bool { return p.AuthSource == ActorServiceToken }

// ServiceTokenID is the service token the caller came with ("" for any other caller).
func (p *Principal) ServiceTokenID() string { return p.serviceToken }
