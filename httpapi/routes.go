package httpapi

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/theappliance/appliance/api"
)

// limitParam is the shared "limit" query parameter of list endpoints.
func limitParam(def int64) Param {
	return Param{Name: "limit", Type: "integer", Min: 1, Max: 200, Default: def, Doc: "number of entries, newest first"}
}

// hoursParam is the trailing window of an observability read.
func hoursParam(max, def int64) Param {
	return Param{Name: "hours", Type: "integer", Min: 1, Max: max, Default: def, Doc: fmt.Sprintf("the trailing window in hours (1 to %d)", max)}
}

// logsParams are the logs' and the log tail's query parameters.
func logsParams(maxHours int64, hoursDoc string) []Param {
	return []Param{
		{Name: "hours", Type: "integer", Min: 1, Max: maxHours, Default: int64(api.LogsHoursDefault), Doc: "the trailing window in hours: " + hoursDoc},
		{Name: "cursor", Type: "string", Doc: "resume strictly after the entry with this cursor (tail mode; takes precedence over hours)"},
		{Name: "severity", Type: "string", Pattern: listPattern(api.LogSeverities), Doc: "comma-separated severities to keep (" + strings.Join(api.LogSeverities, ", ") + "); empty: all"},
		{Name: "limit", Type: "integer", Min: 1, Max: api.LogsLimitMax, Default: int64(api.LogsLimitDefault), Doc: "at most this many entries (without a cursor the newest are kept)"},
		{Name: "q", Type: "string", Doc: "keep entries whose message, detail, hint or statement contains this text (ignoring case; plain text, not a pattern; at most 200 characters)"},
		{Name: "user", Type: "string", Doc: "keep the entries of this role"},
		{Name: "database", Type: "string", Doc: "keep the entries of this database"},
		{Name: "sqlstate", Type: "string", Doc: "keep the entries with this SQLSTATE (5 characters, e.g. 42P01)"},
	}
}

// rowsSelection are the table editor's filters and sort (docs/api-decisions.md "Table editor").
var rowsSelection = []Param{
	{Name: "filter", Type: "string", Repeated: true, Max: api.MaxRowFilters, Doc: "column:op:value, repeatable (all must hold); op one of " + strings.Join(api.RowFilterOps, ", ") +
		" (is_null and not_null take no value, in takes values separated by commas, like and ilike match the column's text); the value is bound, never spliced"},
	{Name: "sort", Type: "string", Repeated: true, Max: api.MaxRowSorts, Doc: "column (ascending) or -column (descending), repeatable, in order of precedence"},
}

// dryRun is the schema changes' preview switch.
var dryRun = Param{Name: "dry_run", Type: "boolean", Default: false, Doc: "true: return the DDL without running it"}

// listPattern is the pattern of a comma-separated list of values.
func listPattern(values []string) string {
	alt := "(" + strings.Join(values, "|") + ")"
	return "^" + alt + "(," + alt + ")*$"
}

// lastEventID is the event streams' resume parameter: an event position.
var lastEventID = Param{Name: "last_event_id", Type: "string", Pattern: `^(0|[1-9][0-9]{0,19})$`, Doc: "resume after this event position, a 64-bit unsigned integer as a string (the Last-Event-ID header wins)"}

// logsRangeParams are the logs' and the download's time range: it replaces hours.
var logsRangeParams = []Param{
	{Name: "from", Type: "string", Doc: "RFC 3339: entries at or after this time (replaces hours; within the hours the logs keep: 168, or 720 with the archive); not with cursor"},
	{Name: "to", Type: "string", Doc: "RFC 3339: entries at or before this time (after from; default: now); not with cursor"},
}

// skipBacklog is the event streams' parameter for clients that just read the current state.
var skipBacklog = Param{Name: "skip_backlog", Type: "boolean", Default: false, Doc: "true (without a Last-Event-ID): start after the newest event, sending only what happens next"}

// targetMajor is the PostgreSQL major version a major upgrade evaluates or moves to.
var targetMajor = Param{Name: "target_major", Type: "integer", Required: true, Min: 10, Max: 99, Doc: "the PostgreSQL major version to upgrade to"}

// table is the route table: every endpoint, its auth, scope and shape. The scope matrix test and the
// OpenAPI document are generated from it.
func (s *Server) table() []Route {
	const (
		get, post, put, patch, del = http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete
		ok, created, accepted      = http.StatusOK, http.StatusCreated, http.StatusAccepted
	)
	return onNode(withErrors([]Route{
		// Health and metadata
		{Method: get, Path: "/healthz", Tag: "health", Auth: Public, Status: ok, Summary: "Liveness (503 when the metadata store does not answer or refuses writes)", Errors: []int{http.StatusServiceUnavailable}, Do: Without(s.healthz)},
		{Method: get, Path: "/status", Tag: "health", Auth: Public, Status: ok, Summary: "Component status", Do: Without(s.status)},
		{Method: get, Path: "/v1/openapi.json", Tag: "health", Auth: Public, Status: ok, Summary: "This API's OpenAPI 3.1 document", Do: Raw(s.openapiDoc)},
		{Method: get, Path: "/v1/ca.crt", Tag: "health", Auth: Public, Status: ok, ContentType: "application/x-pem-file", Summary: "The appliance's CA certificate (PEM), which database and API certificates chain to: clients verify connections with it", Do: Raw(s.caCert)},

		// Identity and CLI device login
		{Method: get, Path: "/v1/me", Tag: "identity", Unaffiliated: true, Status: ok, Summary: "The caller and its organization", Do: Call(s.svc.Identity().Me)},
		{Method: post, Path: "/v1/auth/sessions", Tag: "identity", Auth: Public, Bucket: BucketStrict, Status: created, Summary: "Sign in to the built-in identity provider (401 for a wrong email or password, 403 for a sign-in from another site or into an organization the user is not a member of)",
			Errors: []int{http.StatusUnauthorized, http.StatusForbidden}, Do: With(s.createSession)},
		{Method: post, Path: "/v1/cli/login/sessions", Tag: "identity", Auth: Public, Bucket: BucketStrict, Status: created, Summary: "Start a CLI device login", Do: With(s.startCLILogin)},
		{Method: get, Path: "/v1/cli/login/sessions/{sessionID}", Tag: "identity", Auth: Public, Bucket: BucketStrict, Status: ok, Summary: "Poll a CLI device login",
			Query: []Param{{Name: "poll_token", Type: "string", Required: true, Doc: "the poll_token returned by the start call"}}, Do: Without(s.pollCLILogin)},
		{Method: del, Path: "/v1/auth/sessions/current", Tag: "identity", Unaffiliated: true, Auth: SessionOnly, Status: ok, Summary: "Sign out: end the calling session (and clear the dashboard's cookie)", Do: Without(s.signOut)},
		{Method: post, Path: "/v1/auth/password", Tag: "identity", Auth: SessionOnly, Bucket: BucketStrict, Status: ok, Summary: "Change the signed-in user's password (signs out their other sessions)", Errors: []int{http.StatusConflict}, Do: CallB(s.svc.Identity().ChangePassword)},
		{Method: get, Path: "/v1/cli/login/sessions/{sessionID}/details", Tag: "identity", Auth: SessionOnly, Status: ok, Summary: "Show a CLI device login to the approving user", Do: CallP("sessionID", s.svc.Identity().CLILoginDetailsFor)},
		{Method: post, Path: "/v1/cli/login/sessions/{sessionID}/authorize", Tag: "identity", Auth: SessionOnly, Status: ok, Summary: "Authorize a CLI device login (mints its key)", Errors: []int{http.StatusConflict, http.StatusGone}, Do: CallP("sessionID", s.svc.Identity().AuthorizeCLILogin)},
		{Method: post, Path: "/v1/cli/login/sessions/{sessionID}/refuse", Tag: "identity", Auth: SessionOnly, Status: ok, Summary: "Refuse a CLI device login (it can no longer be authorized; the device's poll reads state refused)", Errors: []int{http.StatusConflict, http.StatusGone}, Do: CallP("sessionID", s.svc.Identity().RefuseCLILogin)},

		// Organizations
		{Method: get, Path: "/v1/organizations", Tag: "operators", Auth: SessionOnly, Operator: true, Status: ok, Summary: "List every organization with its counts of projects and members (platform operators)", Do: Call(s.svc.Tenancy().ListOrganizations)},
		{Method: post, Path: "/v1/organizations", Tag: "operators", Auth: SessionOnly, Operator: true, Status: created, Summary: "Create an organization, with its first owner when owner_email names one (platform operators; 409 when the slug is taken)", Errors: []int{http.StatusConflict}, Do: CallB(s.svc.Tenancy().CreateOrganization)},
		{Method: post, Path: "/v1/organizations/{orgID}/suspend", Tag: "operators", Auth: SessionOnly, Operator: true, Status: ok, Summary: "Suspend an organization with a reason: its keys and sessions are refused at once, a job per project stops its server (data kept) (platform operators; 409 when suspended already)", Errors: []int{http.StatusConflict}, Do: CallPB("orgID", s.svc.Tenancy().SuspendOrganization)},
		{Method: get, Path: "/v1/nodes", Tag: "operators", Auth: SessionOnly, Operator: true, Status: ok, Summary: "List the cluster's nodes, as appliance cluster nodes does: state (alive, joining, unavailable), etcd role and leader, capacity and what placement counts free of it, projects, lease and heartbeat age; read from the store and etcd, so any node answers the same; on a single node, that node alone with clustered false (platform operators; 503 when the cluster's store does not answer)", Errors: []int{http.StatusServiceUnavailable}, Do: Call(s.svc.ListNodes)},
		{Method: post, Path: "/v1/projects/{projectID}/restore-elsewhere", Tag: "operators", Auth: SessionOnly, Operator: true, Status: accepted, Summary: "Restore a project whose cluster node holds no lease on the node that answers, from the off-machine backup store (newest backup + the whole WAL archive), at once; the job's result says to which LSN/time it came back (platform operators; 409 on a single node, while its node is alive, or without a backup store: the answer says what is lost)", Errors: []int{http.StatusConflict}, Do: CallP("projectID", s.svc.RestoreElsewhere)},
		{Method: post, Path: "/v1/projects/{projectID}/move", Tag: "operators", Auth: SessionOnly, Operator: true, Status: accepted, Summary: "Move an active project to another node of the cluster ({node}): on its node writes pause (pooler stopped, server fenced), its last WAL is archived and its server stops; the target rebuilds it from the off-machine backup store (newest base backup + WAL archive) and opens it with its URLs naming the target's host; the source keeps its directory aside (instances/<id>.moved-<time>). A failure before the target opens it resumes the source. The job's result: from_node, to_node, write_pause_ms, lsn, warnings (platform operators; 400 for an unknown node; 409 on a single node, for the node it is on, a node without a lease, a project not active, a node with no free port pair, without a backup store or a base backup in it, or while a move runs)", Errors: []int{http.StatusBadRequest, http.StatusConflict}, Do: CallPB("projectID", s.svc.MoveProject)},
		{Method: post, Path: "/v1/organizations/{orgID}/resume", Tag: "operators", Auth: SessionOnly, Operator: true, Status: ok, Summary: "Resume a suspended organization: its keys and sessions work again, a job per project starts its server (platform operators; 409 when not suspended)", Errors: []int{http.StatusConflict}, Do: CallP("orgID", s.svc.Tenancy().ResumeOrganization)},
		{Method: del, Path: "/v1/organizations/{orgID}", Tag: "operators", Auth: SessionOnly, Operator: true, Status: ok, Summary: "Delete an organization with no project left: its keys are revoked, its memberships and invitations end (platform operators; 409 while it has projects)", Errors: []int{http.StatusConflict}, Do: CallP("orgID", s.svc.Tenancy().DeleteOrganization)},
		// Plans and quotas, the operators' configuration (docs/api-decisions.md "Plans and quotas as operator configuration").
		{Method: get, Path: "/v1/plans", Tag: "operators", Status: ok, Summary: "The plans in force, smallest first (any signed-in caller: a project's plan is chosen among them)", Do: Call(s.svc.Tenancy().ListPlans)},
		{Method: put, Path: "/v1/plans/{name}", Tag: "operators", Auth: SessionOnly, Operator: true, Status: ok, Summary: "Create or replace a plan; a changed plan is applied to every project on it (limits at once, a project.apply_plan job per active project for its server and key-value store) (platform operators)", Do: CallPB("name", s.svc.Tenancy().PutPlan)},
		{Method: del, Path: "/v1/plans/{name}", Tag: "operators", Auth: SessionOnly, Operator: true, Status: ok, Summary: "Delete a plan no project is on (platform operators; 409 naming a project on it, and for the free plan)", Errors: []int{http.StatusConflict}, Do: CallP("name", s.svc.Tenancy().DeletePlan)},
		{Method: get, Path: "/v1/organizations/{orgID}/quota", Tag: "operators", Auth: SessionOnly, Operator: true, Status: ok, Summary: "An organization's quota: its own, else the default (platform operators)", Do: CallP("orgID", s.svc.Tenancy().GetQuota)},
		{Method: patch, Path: "/v1/organizations/{orgID}/quota", Tag: "operators", Auth: SessionOnly, Operator: true, Status: ok, Summary: "Set an organization's own quota (the limits given), or drop it with default: true (platform operators)", Do: CallPB("orgID", s.svc.Tenancy().PatchQuota)},
		{Method: get, Path: "/v1/organizations/{orgID}", Tag: "organizations", Scope: api.ScopeOrganizationsRead, OrgLevel: true, Status: ok, Summary: "Get an organization", Do: CallP("orgID", s.svc.Identity().GetOrganization)},
		{Method: patch, Path: "/v1/organizations/{orgID}", Tag: "organizations", Scope: api.ScopeOrganizationsWrite, OrgLevel: true, Status: ok, Summary: "Update an organization's profile (409 when the slug is taken)", Errors: []int{http.StatusConflict}, Do: CallPB("orgID", s.svc.Identity().PatchOrganization)},
		{Method: get, Path: "/v1/organizations/{orgID}/usage", Tag: "organizations", Scope: api.ScopeOrganizationsRead, OrgLevel: true, Status: ok, Summary: "Organization usage", Do: CallP("orgID", s.svc.OrganizationUsage)},
		{Method: get, Path: "/v1/organizations/{orgID}/audit-events", Tag: "audit", Scope: api.ScopeOrganizationsRead, OrgLevel: true, Status: ok, Summary: "Organization audit events",
			Query: auditParams, Do: Without(s.orgAudit)},

		// Members (an addition to the spec: the built-in identity provider's people and their roles)
		{Method: get, Path: "/v1/organizations/{orgID}/members", Tag: "members", Scope: api.ScopeOrganizationsRead, OrgLevel: true, Status: ok, Summary: "List the organization's members and their roles", Do: CallP("orgID", s.svc.Identity().ListMembers)},
		{Method: post, Path: "/v1/organizations/{orgID}/members", Tag: "members", Scope: api.ScopeOrganizationsWrite, OrgLevel: true, Status: created, Summary: "Add a person with a role: a new email creates their user; an existing user is invited and joins by accepting (admin role; owners only for owner)", Errors: []int{http.StatusConflict}, Do: CallPB("orgID", s.svc.Identity().AddMember)},
		{Method: get, Path: "/v1/organizations/{orgID}/invitations", Tag: "members", Scope: api.ScopeOrganizationsRead, OrgLevel: true, Status: ok, Summary: "List the organization's pending invitations", Do: CallP("orgID", s.svc.Identity().ListInvitations)},
		{Method: del, Path: "/v1/organizations/{orgID}/invitations/{invitationID}", Tag: "members", Scope: api.ScopeOrganizationsWrite, OrgLevel: true, Status: ok, Summary: "Withdraw a pending invitation (admin role)", Do: CallPP("orgID", "invitationID", s.svc.Identity().RevokeInvitation)},
		{Method: get, Path: "/v1/me/invitations", Tag: "members", Unaffiliated: true, Auth: SessionOnly, Status: ok, Summary: "The signed-in user's pending invitations to organizations", Do: Call(s.svc.Identity().MyInvitations)},
		{Method: post, Path: "/v1/me/invitations/{invitationID}/accept", Tag: "members", Unaffiliated: true, Auth: SessionOnly, Status: ok, Summary: "Accept an invitation: the signed-in user joins the organization with the invited role", Errors: []int{http.StatusGone}, Do: CallP("invitationID", s.svc.Identity().AcceptInvitation)},
		{Method: post, Path: "/v1/me/invitations/{invitationID}/decline", Tag: "members", Unaffiliated: true, Auth: SessionOnly, Status: ok, Summary: "Decline an invitation (the organization is not told who declined)", Do: CallP("invitationID", s.svc.Identity().DeclineInvitation)},
		{Method: patch, Path: "/v1/organizations/{orgID}/members/{userID}", Tag: "members", Scope: api.ScopeOrganizationsWrite, OrgLevel: true, Status: ok, Summary: "Change a member's role (admin role; owners only to give or take owner; never the last owner)", Errors: []int{http.StatusConflict}, Do: CallPPB("orgID", "userID", s.svc.Identity().SetMemberRole)},
		{Method: del, Path: "/v1/organizations/{orgID}/members/{userID}", Tag: "members", Scope: api.ScopeOrganizationsWrite, OrgLevel: true, Status: ok, Summary: "Remove a member: their sessions end and the keys they created here are revoked", Errors: []int{http.StatusConflict}, Do: CallPP("orgID", "userID", s.svc.Identity().RemoveMember)},

		// API keys
		{Method: get, Path: "/v1/organizations/{orgID}/api-keys", Tag: "api-keys", Scope: api.ScopeAPIKeysRead, OrgLevel: true, Status: ok, Summary: "List API keys", Do: CallP("orgID", s.svc.Identity().ListAPIKeys)},
		{Method: post, Path: "/v1/organizations/{orgID}/api-keys", Tag: "api-keys", Scope: api.ScopeAPIKeysWrite, OrgLevel: true, Status: created, Summary: "Create an API key (plaintext returned once)", Do: CallPB("orgID", s.svc.Identity().CreateAPIKey)},
		{Method: del, Path: "/v1/organizations/{orgID}/api-keys/{keyID}", Tag: "api-keys", Scope: api.ScopeAPIKeysWrite, OrgLevel: true, Status: ok, Summary: "Revoke an API key", Do: CallPP("orgID", "keyID", s.svc.Identity().RevokeAPIKey)},

		// Outbound webhook endpoints (managing them needs the organization admin role: an endpoint receives every project's events)
		{Method: get, Path: "/v1/organizations/{orgID}/webhook-endpoints", Tag: "webhooks", Scope: api.ScopeOrganizationsRead, OrgLevel: true, Status: ok, Summary: "List webhook endpoints with their health", Do: CallP("orgID", s.svc.Webhooks().ListEndpoints)},
		{Method: post, Path: "/v1/organizations/{orgID}/webhook-endpoints", Tag: "webhooks", Scope: api.ScopeOrganizationsWrite, OrgLevel: true, Status: created, Summary: "Register a webhook endpoint (its signing secret is returned once; a destination the outbound policy refuses is a 400)", Do: CallPB("orgID", s.svc.Webhooks().CreateEndpoint)},
		{Method: patch, Path: "/v1/organizations/{orgID}/webhook-endpoints/{endpointID}", Tag: "webhooks", Scope: api.ScopeOrganizationsWrite, OrgLevel: true, Status: ok, Summary: "Change a webhook endpoint (url, description, event_types, is_active)", Do: CallPPB("orgID", "endpointID", s.svc.Webhooks().PatchEndpoint)},
		{Method: del, Path: "/v1/organizations/{orgID}/webhook-endpoints/{endpointID}", Tag: "webhooks", Scope: api.ScopeOrganizationsWrite, OrgLevel: true, Status: ok, Summary: "Delete a webhook endpoint and its deliveries", Do: CallPP("orgID", "endpointID", s.svc.Webhooks().DeleteEndpoint)},
		{Method: post, Path: "/v1/organizations/{orgID}/webhook-endpoints/{endpointID}/rotate-secret", Tag: "webhooks", Scope: api.ScopeOrganizationsWrite, OrgLevel: true, Status: ok, Summary: "Issue a new signing secret, returned once (the previous one also signs for 24 hours)", Do: CallPP("orgID", "endpointID", s.svc.Webhooks().RotateSecret)},
		{Method: get, Path: "/v1/organizations/{orgID}/webhook-endpoints/{endpointID}/deliveries", Tag: "webhooks", Scope: api.ScopeOrganizationsRead, OrgLevel: true, Status: ok, Summary: "An endpoint's deliveries with their attempts, newest first",
			Query: []Param{limitParam(50)}, Do: Without(s.listWebhookDeliveries)},
		{Method: post, Path: "/v1/organizations/{orgID}/webhook-endpoints/{endpointID}/deliveries/{deliveryID}/redeliver", Tag: "webhooks", Scope: api.ScopeOrganizationsWrite, OrgLevel: true, Status: ok, Summary: "Send a delivery again as a new attempt (the same webhook-id)", Errors: []int{http.StatusConflict}, Do: CallPPP("orgID", "endpointID", "deliveryID", s.svc.Webhooks().Redeliver)},
		{Method: post, Path: "/v1/organizations/{orgID}/webhook-endpoints/{endpointID}/test", Tag: "webhooks", Scope: api.ScopeOrganizationsWrite, OrgLevel: true, Status: ok, Summary: "Send a signed webhook.test event to the endpoint", Errors: []int{http.StatusConflict}, Do: CallPP("orgID", "endpointID", s.svc.Webhooks().TestEndpoint)},

		// Projects
		{Method: get, Path: "/v1/projects", Tag: "projects", Scope: api.ScopeProjectsRead, Status: ok, Summary: "List projects",
			Query: []Param{{Name: "organization_id", Type: "string", Doc: "the organization to list; required for platform administrators, optional (and must be their own) for others"}}, Do: Without(s.listProjects)},
		{Method: post, Path: "/v1/projects", Tag: "projects", Scope: api.ScopeProjectsWrite, Status: accepted, Summary: "Create a project (provisions a PostgreSQL instance)", Do: CallB(s.svc.CreateProject)},
		{Method: get, Path: "/v1/projects/{projectID}", Tag: "projects", Scope: api.ScopeProjectsRead, Status: ok, Summary: "Get a project", Do: CallP("projectID", s.svc.GetProject)},
		{Method: patch, Path: "/v1/projects/{projectID}", Tag: "projects", Scope: api.ScopeProjectsWrite, Status: ok, Summary: "Update a project (server changes run as project.apply_plan)", Do: CallPB("projectID", s.svc.PatchProject)},
		{Method: del, Path: "/v1/projects/{projectID}", Tag: "projects", Scope: api.ScopeProjectsWrite, Status: accepted, Summary: "Delete a project and its data (410 once it has been deleted)",
			Query:  []Param{{Name: "approval_token", Type: "string", Doc: "single-use approval token for project.delete; required when the environment is production"}},
			Errors: []int{http.StatusGone}, Do: Without(s.deleteProject)},
		{Method: get, Path: "/v1/projects/{projectID}/connections", Tag: "projects", Scope: api.ScopeCredentialsRead, Status: ok, Summary: "Connection URLs with the current credential", Do: CallP("projectID", s.svc.ProjectConnections)},
		{Method: post, Path: "/v1/projects/{projectID}/credentials/rotate", Tag: "projects", Scope: api.ScopeProjectsWrite, Status: accepted, Summary: "Rotate the database credential (the previous one works during the overlap)", Do: CallPB("projectID", s.svc.RotateCredentials)},
		{Method: get, Path: "/v1/projects/{projectID}/databases", Tag: "databases", Scope: api.ScopeProjectsRead, Status: ok, Summary: "The databases of the project's server (its own flagged reserved)", Errors: []int{http.StatusConflict}, Do: CallP("projectID", s.svc.Databases().List)},
		{Method: post, Path: "/v1/projects/{projectID}/databases", Tag: "databases", Scope: api.ScopeProjectsWrite, Status: created, Summary: "Create a database (reachable directly and through the pooler at once)", Errors: []int{http.StatusConflict}, Do: CallPB("projectID", s.svc.Databases().Create)},
		{Method: del, Path: "/v1/projects/{projectID}/databases/{databaseName}", Tag: "databases", Scope: api.ScopeProjectsWrite, Status: ok, Summary: "Drop a database created here, ending its sessions (admin role; the project's own and PostgreSQL's are refused)", Errors: []int{http.StatusConflict}, Do: CallPP("projectID", "databaseName", s.svc.Databases().Drop)},
		{Method: get, Path: "/v1/projects/{projectID}/roles", Tag: "databases", Scope: api.ScopeProjectsRead, Status: ok, Summary: "The project's role (reserved) and the login roles created here", Errors: []int{http.StatusConflict}, Do: CallP("projectID", s.svc.Databases().ListRoles)},
		{Method: post, Path: "/v1/projects/{projectID}/roles", Tag: "databases", Scope: api.ScopeProjectsWrite, Also: []api.Scope{api.ScopeCredentialsRead}, Status: created, Summary: "Create a login role (no superuser, replication, CREATEROLE or CREATEDB) with a generated password, returned once (needs credentials:read too)", Errors: []int{http.StatusConflict}, Do: CallPB("projectID", s.svc.Databases().CreateRole)},
		{Method: post, Path: "/v1/projects/{projectID}/roles/{roleName}/reset-password", Tag: "databases", Scope: api.ScopeProjectsWrite, Also: []api.Scope{api.ScopeCredentialsRead}, Status: ok, Summary: "Give a role created here a new generated password, returned once (needs credentials:read too); the old one stops logging in", Errors: []int{http.StatusConflict}, Do: CallPP("projectID", "roleName", s.svc.Databases().ResetRolePassword)},
		{Method: del, Path: "/v1/projects/{projectID}/roles/{roleName}", Tag: "databases", Scope: api.ScopeProjectsWrite, Status: ok, Summary: "Drop a role created here: what it owns passes to the project's role, its privileges and sessions end (the project's own and the appliance's roles are refused)", Errors: []int{http.StatusConflict}, Do: CallPP("projectID", "roleName", s.svc.Databases().DropRole)},
		{Method: get, Path: "/v1/projects/{projectID}/extensions", Tag: "extensions", Scope: api.ScopeProjectsRead, Status: ok, Summary: "Extensions the server offers, and which are enabled", Do: CallP("projectID", s.svc.Extensions().List)},
		{Method: post, Path: "/v1/projects/{projectID}/extensions", Tag: "extensions", Scope: api.ScopeProjectsWrite, Status: accepted, Summary: "Enable an extension (restarts when it needs preloading)", Do: CallPB("projectID", s.svc.Extensions().Enable)},
		{Method: del, Path: "/v1/projects/{projectID}/extensions/{extensionName}", Tag: "extensions", Scope: api.ScopeProjectsWrite, Status: accepted, Summary: "Disable an extension", Do: CallPP("projectID", "extensionName", s.svc.Extensions().Disable)},
		{Method: post, Path: "/v1/projects/{projectID}/extensions/{extensionName}/update", Tag: "extensions", Scope: api.ScopeProjectsWrite, Status: accepted, Summary: "Update an extension to the newest version", Do: CallPP("projectID", "extensionName", s.svc.Extensions().Update)},
		{Method: post, Path: "/v1/projects/{projectID}/restart", Tag: "projects", Scope: api.ScopeProjectsWrite, Status: accepted, Summary: "Restart the project's server and its pooler: the sessions open end (the admin role for sessions, an organization-wide key for API keys; 409 while another job holds the project)", Do: CallP("projectID", s.svc.Upgrades().Restart)},
		// Scale to zero (issue 33; docs/api-decisions.md "Scale to zero").
		{Method: post, Path: "/v1/projects/{projectID}/suspend", Tag: "projects", Scope: api.ScopeProjectsWrite, Status: ok, Summary: "Suspend the project now, idle or not: its server and pooler stop (the sessions open end; the admin role), runtime_status suspended, and the next connection to its ports wakes it (409 while a job holds the project or its organization is suspended)", Errors: []int{http.StatusConflict}, Do: CallP("projectID", s.svc.SuspendProject)},
		{Method: post, Path: "/v1/projects/{projectID}/resume", Tag: "projects", Scope: api.ScopeProjectsWrite, Status: ok, Summary: "Wake a suspended project now (a running one is left as it is): its server and pooler start, runtime_status active (409 when its organization is suspended)", Errors: []int{http.StatusConflict}, Do: CallP("projectID", s.svc.ResumeProject)},
		{Method: post, Path: "/v1/projects/{projectID}/upgrade/minor", Tag: "upgrades", Scope: api.ScopeProjectsWrite, Status: accepted, Summary: "Restart onto the installed minor release of the same major",
			Query: []Param{{Name: "force", Type: "boolean", Default: false, Doc: "restart even while client sessions are active (administrators only)"}}, Do: Without(s.upgradeMinor)},
		{Method: get, Path: "/v1/projects/{projectID}/upgrade/major", Tag: "upgrades", Scope: api.ScopeProjectsRead, Status: ok, Summary: "The project's major, an upgrade awaiting confirm or rollback, and the majors installed it can be upgraded to (an addition)",
			Do: CallP("projectID", s.svc.Upgrades().Majors)},
		{Method: post, Path: "/v1/projects/{projectID}/upgrade/major/preflight", Tag: "upgrades", Scope: api.ScopeProjectsWrite, Status: accepted, Summary: "Check a major upgrade (pg_upgrade --check)",
			Query: []Param{targetMajor}, Do: Without(s.upgradePreflight)},
		{Method: post, Path: "/v1/projects/{projectID}/upgrade/major", Tag: "upgrades", Scope: api.ScopeProjectsWrite, Status: accepted, Summary: "Upgrade to a new major version (the old data is kept until confirm)",
			Query: []Param{targetMajor}, Do: Without(s.upgradeMajor)},
		{Method: post, Path: "/v1/projects/{projectID}/upgrade/major/confirm", Tag: "upgrades", Scope: api.ScopeProjectsWrite, Status: accepted, Summary: "Confirm a major upgrade (drops the old data)", Do: CallP("projectID", s.svc.Upgrades().Confirm)},
		{Method: post, Path: "/v1/projects/{projectID}/upgrade/major/rollback", Tag: "upgrades", Scope: api.ScopeProjectsWrite, Status: accepted, Summary: "Roll a major upgrade back to the old data", Do: CallP("projectID", s.svc.Upgrades().Rollback)},
		{Method: post, Path: "/v1/projects/{projectID}/approvals", Tag: "projects", Scope: api.ScopeProjectsWrite, Status: created, Summary: "Mint a single-use approval token (410 for a deleted project)", Errors: []int{http.StatusGone}, Do: CallPB("projectID", s.svc.CreateApproval)},
		{Method: get, Path: "/v1/projects/{projectID}/audit-events", Tag: "audit", Scope: api.ScopeProjectsRead, Status: ok, Summary: "Project audit events",
			Query: auditParams, Do: Without(s.projectAudit)},

		// Backups and restores
		{Method: get, Path: "/v1/projects/{projectID}/backups", Tag: "backups", Scope: api.ScopeBackupsRead, Status: ok, Summary: "List base backups, newest first", Do: CallP("projectID", s.svc.Backups().List)},
		{Method: post, Path: "/v1/projects/{projectID}/backups", Tag: "backups", Scope: api.ScopeBackupsWrite, Status: accepted, Summary: "Take a base backup (pg_basebackup, then pg_verifybackup)", Do: CallPB("projectID", s.svc.Backups().Create)},
		{Method: get, Path: "/v1/projects/{projectID}/scheduled-backups", Tag: "backups", Scope: api.ScopeBackupsRead, Status: ok, Summary: "List the backup schedule (empty until one is set)", Do: CallP("projectID", s.svc.Backups().ListSchedules)},
		{Method: put, Path: "/v1/projects/{projectID}/scheduled-backups/default", Tag: "backups", Scope: api.ScopeBackupsWrite, Status: ok, Summary: "Set the daily backup schedule and retention (id default; the admin role)", Do: With(s.putScheduledBackup)},
		{Method: post, Path: "/v1/projects/{projectID}/restores", Tag: "backups", Scope: api.ScopeBackupsWrite, Status: accepted, Summary: "Restore to a backup, a time or a restore point (sessions need the admin role)", Do: CallPB("projectID", s.svc.Backups().Restore)},
		{Method: get, Path: "/v1/projects/{projectID}/restore-points", Tag: "backups", Scope: api.ScopeBackupsRead, Status: ok, Summary: "List restore points and the point-in-time window", Do: CallP("projectID", s.svc.Backups().ListRestorePoints)},
		{Method: post, Path: "/v1/projects/{projectID}/restore-points", Tag: "backups", Scope: api.ScopeBackupsWrite, Status: created, Summary: "Create a named restore point (pg_create_restore_point)", Do: CallPB("projectID", s.svc.Backups().CreateRestorePoint)},
		{Method: del, Path: "/v1/projects/{projectID}/restore-points/{restorePointID}", Tag: "backups", Scope: api.ScopeBackupsWrite, Status: ok, Summary: "Delete a restore point", Do: CallPP("projectID", "restorePointID", s.svc.Backups().DeleteRestorePoint)},

		// Exports
		{Method: get, Path: "/v1/projects/{projectID}/exports", Tag: "exports", Scope: api.ScopeBackupsRead, Status: ok, Summary: "List logical exports (pg_dump custom format), newest first", Do: CallP("projectID", s.svc.Exports().List)},
		{Method: post, Path: "/v1/projects/{projectID}/exports", Tag: "exports", Scope: api.ScopeBackupsWrite, Status: accepted, Summary: "Export the database (pg_dump -Fc; kept 7 days after completion)", Do: With(s.createExport)},
		{Method: get, Path: "/v1/projects/{projectID}/exports/{exportID}/download", Tag: "exports", Scope: api.ScopeBackupsRead, Status: ok, Summary: "A signed download URL for a completed export (valid 15 minutes)", Do: CallPP("projectID", "exportID", s.svc.Exports().Download)},
		{Method: get, Path: "/v1/downloads/exports/{exportID}", Tag: "exports", Auth: Public, Status: ok, Summary: "Download an export's dump through a signed URL (403 when tampered or expired)",
			Query:       []Param{{Name: "expires", Type: "integer", Required: true, Doc: "unix time the URL expires at"}, {Name: "sig", Type: "string", Required: true, Doc: "HMAC-SHA256 signature (hex)"}},
			ContentType: "application/octet-stream", Stream: true, Errors: []int{http.StatusForbidden, http.StatusServiceUnavailable}, Do: Raw(s.downloadExport)},

		// Imports
		{Method: post, Path: "/v1/projects/{projectID}/imports/uploads", Tag: "imports", Scope: api.ScopeProjectsWrite, Status: created, Summary: "A signed URL to PUT a dump to (pg_dump -Fc; valid 1 hour; sessions need the admin role)", Do: With(s.createImportUpload)},
		{Method: put, Path: "/v1/uploads/imports/{uploadID}", Tag: "imports", Auth: Public, Status: ok, Summary: "Upload a dump through a signed URL (raw body up to the storage limit; 403 when tampered or expired, 413 too large, 409 already uploaded)",
			Query:  []Param{{Name: "expires", Type: "integer", Required: true, Doc: "unix time the URL expires at"}, {Name: "sig", Type: "string", Required: true, Doc: "HMAC-SHA256 signature (hex)"}},
			Stream: true, RawBody: "*/*", Errors: []int{http.StatusForbidden, http.StatusConflict, http.StatusServiceUnavailable}, Do: Without(s.receiveImportUpload)},
		{Method: post, Path: "/v1/projects/{projectID}/imports", Tag: "imports", Scope: api.ScopeProjectsWrite, Status: accepted, Summary: "Restore an uploaded dump over the database (pg_restore --clean; needs confirm: true; sessions need the admin role)", Do: CallPB("projectID", s.svc.Migrate().CreateImport)},
		{Method: post, Path: "/v1/projects/{projectID}/imports/preflight", Tag: "imports", Scope: api.ScopeProjectsWrite, Status: ok, Summary: "Connect to a source database and report what an import would meet: version, size, extensions, schemas, provider, replication readiness (an unreachable source is ok: false with a failing connect check)", Do: CallPB("projectID", s.svc.Migrate().Preflight)},
		{Method: post, Path: "/v1/projects/{projectID}/imports/follow", Tag: "imports", Scope: api.ScopeProjectsWrite, Status: accepted, Summary: "Follow a source by logical replication: back up the project, copy the source's schema, subscribe (needs confirm: true; 409 naming every blocker when the source is not ready)", Do: CallPB("projectID", s.svc.Migrate().StartFollow)},
		{Method: post, Path: "/v1/projects/{projectID}/imports/follow/status", Tag: "imports", Scope: api.ScopeProjectsRead, Status: accepted, Summary: "A job whose result is the follow's state: tables and their sync state, lag in bytes", Do: CallP("projectID", s.svc.Migrate().FollowStatus)},
		{Method: post, Path: "/v1/projects/{projectID}/imports/follow/cutover", Tag: "imports", Scope: api.ScopeProjectsWrite, Status: accepted, Summary: "Wait for zero lag, copy sequence values, drop the subscription and publication (needs confirm: true; stop writes to the source first)", Do: CallPB("projectID", s.svc.Migrate().FollowCutover)},
		{Method: post, Path: "/v1/projects/{projectID}/imports/follow/abort", Tag: "imports", Scope: api.ScopeProjectsWrite, Status: accepted, Summary: "Stop following: drop the subscription and publication and restore the backup taken before follow started", Do: CallP("projectID", s.svc.Migrate().FollowAbort)},

		// Preview databases (an instance of their own, derived from a project)
		{Method: get, Path: "/v1/projects/{projectID}/preview-databases", Tag: "previews", Scope: api.ScopeProjectsRead, Status: ok, Summary: "List the project's preview databases", Do: CallP("projectID", s.svc.Previews().List)},
		{Method: post, Path: "/v1/projects/{projectID}/preview-databases", Tag: "previews", Scope: api.ScopeProjectsWrite, Status: accepted, Summary: "Create a preview database: clone (the project's data as of now) or empty, deleted after ttl_hours", Do: CallPB("projectID", s.svc.Previews().Create)},
		{Method: del, Path: "/v1/preview-databases/{previewID}", Tag: "previews", Scope: api.ScopeProjectsWrite, Status: accepted, Summary: "Delete a preview database and everything it had", Errors: []int{http.StatusConflict}, Do: CallP("previewID", s.svc.Previews().Delete)},
		{Method: post, Path: "/v1/preview-databases/{previewID}/reset", Tag: "previews", Scope: api.ScopeProjectsWrite, Status: accepted, Summary: "Make a preview again from its source (its writes are gone; host, ports and credential stay)", Errors: []int{http.StatusConflict}, Do: CallP("previewID", s.svc.Previews().Reset)},
		{Method: post, Path: "/v1/preview-databases/{previewID}/extend", Tag: "previews", Scope: api.ScopeProjectsWrite, Status: ok, Summary: "Move a preview's deletion to ttl_hours from now", Errors: []int{http.StatusConflict}, Do: CallPB("previewID", s.svc.Previews().Extend)},
		{Method: get, Path: "/v1/preview-databases/{previewID}/schema-diff", Tag: "previews", Scope: api.ScopeProjectsRead, Status: ok, Summary: "What a preview's schema adds, removes and changes against its project's (tables, columns, constraints, indexes, views, functions, extensions, types, sequences, triggers, policies, grants): shown before a cutover", Errors: []int{http.StatusConflict, http.StatusServiceUnavailable}, Do: CallP("previewID", s.svc.Previews().SchemaDiff)},
		{Method: get, Path: "/v1/preview-databases/{previewID}/connections", Tag: "previews", Scope: api.ScopeCredentialsRead, Status: ok, Summary: "A preview's connection URLs with its own credential", Errors: []int{http.StatusConflict}, Do: CallP("previewID", s.svc.Previews().Connections)},

		// Cutover requests (a preview's data made its project's: requested, approved by an admin, promoted)
		{Method: get, Path: "/v1/projects/{projectID}/cutover-requests", Tag: "previews", Scope: api.ScopeProjectsRead, Status: ok, Summary: "List the project's cutover requests, newest first", Do: CallP("projectID", s.svc.Migrate().ListCutoverRequests)},
		{Method: post, Path: "/v1/projects/{projectID}/cutover-requests", Tag: "previews", Scope: api.ScopeProjectsWrite, Status: created, Summary: "Ask for an active preview's data to become the project's (an organization admin approves it; one request per preview open or under way, one under way per project)",
			Errors: []int{http.StatusConflict}, Do: CallPB("projectID", s.svc.Migrate().RequestCutover)},
		{Method: get, Path: "/v1/projects/{projectID}/cutover-requests/{requestID}", Tag: "previews", Scope: api.ScopeProjectsRead, Status: ok, Summary: "A cutover request", Do: CallPP("projectID", "requestID", s.svc.Migrate().GetCutoverRequest)},
		{Method: post, Path: "/v1/projects/{projectID}/cutover-requests/{requestID}/approve", Tag: "previews", Scope: api.ScopeProjectsWrite, Status: accepted, Summary: "Approve an open cutover request (admin role): a backup of the project, then the promotion job that swaps the preview's data in behind the project's host, ports and credentials",
			Errors: []int{http.StatusConflict}, Do: CallPPB("projectID", "requestID", s.svc.Migrate().ApproveCutover)},
		{Method: post, Path: "/v1/projects/{projectID}/cutover-requests/{requestID}/reject", Tag: "previews", Scope: api.ScopeProjectsWrite, Status: ok, Summary: "Reject an open cutover request (admin role) with a reason",
			Errors: []int{http.StatusConflict}, Do: CallPPB("projectID", "requestID", s.svc.Migrate().RejectCutover)},

		// Ephemeral databases (no account: the claim token is their credential until they are claimed)
		{Method: post, Path: "/v1/ephemeral-databases", Tag: "ephemeral", Auth: Public, Status: created, Summary: "Create a throwaway database without an account (destroyed after 72 hours unless claimed; the claim token is returned once)",
			Errors: []int{http.StatusServiceUnavailable}, Do: With(s.createEphemeral)},
		{Method: get, Path: "/v1/ephemeral-databases/{projectID}", Tag: "ephemeral", Auth: Public, Status: ok, Summary: "An ephemeral database and its connection URLs (the claim token in X-Service-Claim-Token; 404 for an unknown database and a wrong token alike)",
			Header: []Param{claimTokenParam}, Errors: []int{http.StatusUnauthorized}, Do: Without(s.getEphemeral)},
		{Method: del, Path: "/v1/ephemeral-databases/{projectID}", Tag: "ephemeral", Auth: Public, Status: accepted, Summary: "Destroy an ephemeral database now (the claim token in X-Service-Claim-Token)",
			Header: []Param{claimTokenParam}, Errors: []int{http.StatusUnauthorized, http.StatusConflict}, Do: Without(s.deleteEphemeral)},
		{Method: post, Path: "/v1/ephemeral-databases/{projectID}/claim", Tag: "ephemeral", Scope: api.ScopeProjectsWrite, Status: ok, Summary: "Claim an ephemeral database into the caller's organization as a normal project (its data and connection details stay; sessions need the admin role)",
			Errors: []int{http.StatusConflict}, Do: CallPB("projectID", s.svc.Previews().ClaimEphemeral)},

		// Billing: the billing provider's inbound webhook (public: the signature is the credential)
		{Method: post, Path: "/v1/billing/stripe/webhook", Tag: "billing", Auth: Public, Status: ok, Summary: "Receive a Stripe webhook event (customer.subscription.*, invoice.paid, invoice.payment_failed update the customer's organization's billing_* fields; they and charge.refunded move its referral; other types are acknowledged and ignored; a redelivered event id applies nothing again). 400 when the Stripe-Signature does not verify, 404 without up --billing-provider stripe",
			Header:  []Param{{Name: "Stripe-Signature", Required: true, Doc: "Stripe's signature of the body (t=...,v1=...) under the endpoint's signing secret"}},
			RawBody: "application/json", Errors: []int{http.StatusNotFound}, Do: Without(s.stripeWebhook)},

		// Integrations (docs/api-decisions.md "Integrations"): a project's platforms and identity providers;
		// connecting sends the project's credential to the provider, so credentials:read is needed too. The
		// inbound webhooks and the OAuth callback are public: the provider's signature and the signed state
		// are their credentials.
		{Method: get, Path: "/v1/projects/{projectID}/integrations", Tag: "integrations", Scope: api.ScopeProjectsRead, Status: ok, Summary: "List the project's integrations (credentials are never returned: has_credentials only)", Do: CallP("projectID", s.svc.Integrations().List)},
		{Method: put, Path: "/v1/projects/{projectID}/integrations/{provider}", Tag: "integrations", Scope: api.ScopeProjectsWrite, Also: []api.Scope{api.ScopeCredentialsRead}, Status: ok, Summary: "Set an integration's config (validated by the provider; defaults filled in) and, with credentials, store them sealed and start a sync job (how auth_b and auth_c connect); 409 for a provider this appliance lacks or an integration being disconnected", Do: CallPPB("projectID", "provider", s.svc.Integrations().Put)},
		{Method: del, Path: "/v1/projects/{projectID}/integrations/{provider}", Tag: "integrations", Scope: api.ScopeProjectsWrite, Status: ok, Summary: "Disconnect: a job removes what the integration pushed at the provider (best effort, reported in its result), then the integration and its credentials are gone", Do: CallPP("projectID", "provider", s.svc.Integrations().Delete)},
		{Method: post, Path: "/v1/projects/{projectID}/integrations/deploy_a/connect", Tag: "integrations", Scope: api.ScopeProjectsWrite, Also: []api.Scope{api.ScopeCredentialsRead}, Status: accepted, Summary: "Connect the project to deploy_a (a Vercel-style platform): the token stored sealed; the job checks it and sets DATABASE_URL (pooled) and DIRECT_URL (direct, sslmode=verify-full) with the CA for the configured targets", Do: CallPB("projectID", s.svc.Integrations().ConnectDeployA)},
		{Method: post, Path: "/v1/projects/{projectID}/integrations/deploy_b/connect", Tag: "integrations", Scope: api.ScopeProjectsWrite, Also: []api.Scope{api.ScopeCredentialsRead}, Status: accepted, Summary: "Connect the project to deploy_b (a Netlify-style platform): the token stored sealed; the job checks it and sets the connection variables", Do: CallPB("projectID", s.svc.Integrations().ConnectDeployB)},
		{Method: post, Path: "/v1/projects/{projectID}/integrations/edge_c/connect", Tag: "integrations", Scope: api.ScopeProjectsWrite, Also: []api.Scope{api.ScopeCredentialsRead}, Status: accepted, Summary: "Connect the project to edge_c (a Cloudflare-style edge platform): the API token stored sealed; the job checks it and sets the connection", Do: CallPB("projectID", s.svc.Integrations().ConnectEdgeC)},
		{Method: post, Path: "/v1/projects/{projectID}/integrations/auth_a/connect", Tag: "integrations", Scope: api.ScopeProjectsWrite, Also: []api.Scope{api.ScopeCredentialsRead}, Status: accepted, Summary: "Connect the project to auth_a (a Clerk-style identity provider): the secret key stored sealed; the job backfills its users into the project's table", Do: CallPB("projectID", s.svc.Integrations().ConnectAuthA)},
		{Method: get, Path: "/v1/integrations/{provider}/oauth/start", Tag: "integrations", Scope: api.ScopeProjectsWrite, Also: []api.Scope{api.ScopeCredentialsRead}, Status: ok, Summary: "Start the provider's OAuth flow for a project: the authorize URL, with a state that is signed, single-use, valid 10 minutes and bound to the provider, the project and the caller (409 when the operator configured no OAuth client for it)",
			Query: []Param{{Name: "project_id", Type: "string", Required: true, Doc: "the project the OAuth state binds to"}}, Errors: []int{http.StatusConflict}, Do: Without(s.integrationOAuthStart)},
		{Method: get, Path: "/v1/integrations/{provider}/oauth/callback", Tag: "integrations", Auth: Public, Status: http.StatusFound, Summary: "The provider's OAuth redirect (no authentication: the signed state is the credential): the code exchanged, the tokens stored sealed, then a redirect to the dashboard's integrations page of the project; 400 for a forged, expired or reused state (nothing stored)",
			Query: []Param{{Name: "code", Type: "string", Required: true, Doc: "the authorization code"}, {Name: "state", Type: "string", Required: true, Doc: "the signed state the start endpoint issued"}}, Do: Raw(s.integrationOAuthCallback)},
		{Method: post, Path: "/v1/integrations/deploy_a/webhook/{projectID}", Tag: "integrations", Auth: Public, Status: ok, Summary: "Receive a deploy_a webhook event for the project (no authentication: the provider's signature under the secret stored at connect is the credential; 401 when it does not verify or the project has no such integration; a redelivered event id does nothing again; the work is a job)",
			RawBody: "application/json", Errors: []int{http.StatusUnauthorized}, Do: Without(s.integrationWebhook("deploy_a"))},
		{Method: post, Path: "/v1/integrations/deploy_b/webhook/{projectID}", Tag: "integrations", Auth: Public, Status: ok, Summary: "Receive a deploy_b webhook event for the project (no authentication: the provider's signature under the secret stored at connect is the credential; 401 when it does not verify or the project has no such integration; a redelivered event id does nothing again; the work is a job)",
			RawBody: "application/json", Errors: []int{http.StatusUnauthorized}, Do: Without(s.integrationWebhook("deploy_b"))},
		{Method: post, Path: "/v1/integrations/auth_a/webhook/{projectID}", Tag: "integrations", Auth: Public, Status: ok, Summary: "Receive a auth_a webhook event for the project (no authentication: the provider's signature under the secret stored at connect is the credential; 401 when it does not verify or the project has no such integration; a redelivered event id does nothing again; the work is a job)",
			RawBody: "application/json", Errors: []int{http.StatusUnauthorized}, Do: Without(s.integrationWebhook("auth_a"))},
		{Method: post, Path: "/v1/integrations/auth_b/webhook/{projectID}", Tag: "integrations", Auth: Public, Status: ok, Summary: "Receive a auth_b webhook event for the project (no authentication: the provider's signature under the secret stored at connect is the credential; 401 when it does not verify or the project has no such integration; a redelivered event id does nothing again; the work is a job)",
			RawBody: "application/json", Errors: []int{http.StatusUnauthorized}, Do: Without(s.integrationWebhook("auth_b"))},
		{Method: post, Path: "/v1/integrations/auth_c/webhook/{projectID}", Tag: "integrations", Auth: Public, Status: ok, Summary: "Receive a auth_c webhook event for the project (no authentication: the provider's signature under the secret stored at connect is the credential; 401 when it does not verify or the project has no such integration; a redelivered event id does nothing again; the work is a job)",
			RawBody: "application/json", Errors: []int{http.StatusUnauthorized}, Do: Without(s.integrationWebhook("auth_c"))},

		// Programs: applications from the public website (a service token only), the operators' review,
		// and the service tokens operators mint for the website
		{Method: post, Path: "/v1/program-applications", Tag: "programs", Auth: ServiceToken, Scope: api.ScopeProgramApplicationsCreate, Status: created, Summary: "Submit a program application (status received; program_application.received is delivered to the platform organization's webhook endpoints). Service tokens only, rate-limited per token (429); 409 naming the first application when the same e-mail applied within 24 hours",
			Errors: []int{http.StatusConflict}, Do: CallB(s.svc.ProgramApps().Submit)},
		{Method: get, Path: "/v1/program-applications", Tag: "programs", Auth: SessionOnly, Operator: true, Status: ok, Summary: "List program applications, newest first (platform operators)",
			Query: []Param{{Name: "status", Type: "string", Pattern: "^(received|approved|rejected)$", Doc: "only applications of this status"}, {Name: "limit", Type: "integer", Min: 1, Max: 1000, Default: int64(100), Doc: "number of applications, newest first"}},
			Do:    Without(s.listProgramApplications)},
		{Method: get, Path: "/v1/program-applications/{applicationID}", Tag: "programs", Auth: SessionOnly, Operator: true, Status: ok, Summary: "Get a program application (platform operators)", Do: CallP("applicationID", s.svc.ProgramApps().Get)},
		{Method: post, Path: "/v1/program-applications/{applicationID}/approve", Tag: "programs", Auth: SessionOnly, Operator: true, Status: ok, Summary: "Approve a program application: a discount (a coupon and its promotion code, redeemable once) is made at the billing provider and recorded as discount_id and discount_code (platform operators; 409 when decided already or billing is off)",
			Errors: []int{http.StatusConflict}, Do: CallPB("applicationID", s.svc.ProgramApps().Approve)},
		{Method: post, Path: "/v1/program-applications/{applicationID}/reject", Tag: "programs", Auth: SessionOnly, Operator: true, Status: ok, Summary: "Reject a program application with an operator_note (platform operators; 409 when decided already)",
			Errors: []int{http.StatusConflict}, Do: CallPB("applicationID", s.svc.ProgramApps().Reject)},
		{Method: get, Path: "/v1/service-tokens", Tag: "programs", Auth: SessionOnly, Operator: true, Status: ok, Summary: "List the service tokens, newest first, revoked ones too (platform operators)", Do: Call(s.svc.ProgramApps().ListServiceTokens)},
		{Method: post, Path: "/v1/service-tokens", Tag: "programs", Auth: SessionOnly, Operator: true, Status: created, Summary: "Mint a service token for the public website: scope program_applications:create only; its plaintext is returned once (platform operators)", Do: CallB(s.svc.ProgramApps().CreateServiceToken)},
		{Method: del, Path: "/v1/service-tokens/{tokenID}", Tag: "programs", Auth: SessionOnly, Operator: true, Status: ok, Summary: "Revoke a service token: it authenticates no more (platform operators; 409 when revoked already)",
			Errors: []int{http.StatusConflict}, Do: CallP("tokenID", s.svc.ProgramApps().RevokeServiceToken)},
		// Sign-up (up --signup) and the operators' sign-up invites; referral codes and referrals
		{Method: get, Path: "/v1/signup", Tag: "signup", Auth: Public, Status: ok, Summary: "Who may sign up on this appliance (closed, invite or open): the sign-in page offers sign-up unless closed", Do: Without(s.signupSettings)},
		{Method: post, Path: "/v1/signup", Tag: "signup", Auth: Public, Bucket: BucketStrict, Status: created, Summary: "Sign up: a new user, a new organization they own, and their session (403 when sign-up is closed or the invite is missing, used, revoked or expired; 409 when the email has a user; an unknown referral code does not stop it: referral_code_status says invalid)",
			Errors: []int{http.StatusForbidden, http.StatusConflict}, Do: With(s.signup)},
		{Method: get, Path: "/v1/signup-invites", Tag: "operators", Auth: SessionOnly, Operator: true, Status: ok, Summary: "List the sign-up invites, newest first (platform operators)", Do: Call(s.svc.Tenancy().ListSignupInvites)},
		{Method: post, Path: "/v1/signup-invites", Tag: "operators", Auth: SessionOnly, Operator: true, Status: created, Summary: "Mint a sign-up invite: a link to the dashboard's sign-up page with a secret token, single use, expiring (platform operators; the token is returned once)", Do: CallB(s.svc.Tenancy().CreateSignupInvite)},
		{Method: del, Path: "/v1/signup-invites/{inviteID}", Tag: "operators", Auth: SessionOnly, Operator: true, Status: ok, Summary: "Revoke a sign-up invite (platform operators; 409 when used or revoked already)", Errors: []int{http.StatusConflict}, Do: CallP("inviteID", s.svc.Tenancy().RevokeSignupInvite)},
		{Method: get, Path: "/v1/organizations/{orgID}/signup-invites", Tag: "signup", Scope: api.ScopeOrganizationsRead, OrgLevel: true, Status: ok, Summary: "List the sign-up invites the organization's owners minted, newest first (owner role)", Do: CallP("orgID", s.svc.Tenancy().ListOrgSignupInvites)},
		{Method: post, Path: "/v1/organizations/{orgID}/signup-invites", Tag: "signup", Scope: api.ScopeOrganizationsWrite, OrgLevel: true, Status: created, Summary: "Mint a sign-up invite on the organization's behalf: one person may sign up with it and gets a new organization of their own (owner role; the token is returned once)", Do: CallPB("orgID", s.svc.Tenancy().CreateOrgSignupInvite)},
		{Method: del, Path: "/v1/organizations/{orgID}/signup-invites/{inviteID}", Tag: "signup", Scope: api.ScopeOrganizationsWrite, OrgLevel: true, Status: ok, Summary: "Revoke one of the organization's sign-up invites (owner role; 409 when used or revoked already)", Errors: []int{http.StatusConflict}, Do: CallPP("orgID", "inviteID", s.svc.Tenancy().RevokeOrgSignupInvite)},
		{Method: get, Path: "/v1/referrals", Tag: "operators", Auth: SessionOnly, Operator: true, Status: ok, Summary: "List every referral, newest first (platform operators)",
			Query: []Param{{Name: "status", Type: "string", Pattern: "^(pending|rewarded|void)$", Doc: "only referrals of this status"}}, Do: Without(s.listAllReferrals)},
		{Method: get, Path: "/v1/organizations/{orgID}/referral-code", Tag: "programs", Scope: api.ScopeOrganizationsRead, OrgLevel: true, Status: ok, Summary: "The organization's referral code (null until POST makes it)", Do: CallP("orgID", s.svc.Referrals().GetCode)},
		{Method: post, Path: "/v1/organizations/{orgID}/referral-code", Tag: "programs", Scope: api.ScopeOrganizationsWrite, OrgLevel: true, Status: ok, Summary: "Make the organization's referral code, or return the one it has (one per organization: 200 both times; admin role)", Do: CallPB("orgID", s.svc.Referrals().CreateCode)},
		{Method: patch, Path: "/v1/organizations/{orgID}/referral-code", Tag: "programs", Scope: api.ScopeOrganizationsWrite, OrgLevel: true, Status: ok, Summary: "Set the referral code's discount_id, checked at the billing provider (400 when it does not exist there, 409 without billing; admin role)", Errors: []int{http.StatusConflict}, Do: CallPB("orgID", s.svc.Referrals().PatchCode)},
		{Method: get, Path: "/v1/organizations/{orgID}/referrals", Tag: "programs", Scope: api.ScopeOrganizationsRead, OrgLevel: true, Status: ok, Summary: "The organizations that signed up with this organization's referral code, newest first", Do: CallP("orgID", s.svc.Referrals().List)},

		// Key-value stores (a Redis server per project behind the RESP and REST fronts)
		{Method: get, Path: "/v1/kv", Tag: "kv", Scope: api.ScopeProjectsRead, Status: ok, Summary: "List the organization's key-value stores",
			Query: []Param{{Name: "organization_id", Type: "string", Doc: "the organization to list; required for platform administrators, optional (and must be their own) for others"}}, Do: Without(s.listKV)},
		{Method: get, Path: "/v1/projects/{projectID}/kv", Tag: "kv", Scope: api.ScopeProjectsRead, Status: ok, Summary: "Get the project's key-value store (404 when it has none)", Do: CallP("projectID", s.svc.KV().Get)},
		{Method: post, Path: "/v1/projects/{projectID}/kv", Tag: "kv", Scope: api.ScopeProjectsWrite, Also: []api.Scope{api.ScopeCredentialsRead}, Status: accepted, Summary: "Create the project's key-value store (no body; the token is in this response only, so credentials:read is needed too; 409 while one exists or its delete runs)", Errors: []int{http.StatusConflict}, Do: CallP("projectID", s.svc.KV().Create)},
		{Method: del, Path: "/v1/projects/{projectID}/kv", Tag: "kv", Scope: api.ScopeProjectsWrite, Status: accepted, Summary: "Delete the key-value store: its server and data (the project is untouched)", Do: CallP("projectID", s.svc.KV().Delete)},
		{Method: get, Path: "/v1/projects/{projectID}/kv/credentials", Tag: "kv", Scope: api.ScopeCredentialsRead, Status: ok, Summary: "How to connect: host, port, redis_url, rest_url (the token is shown only at create and rotate-token)", Do: CallP("projectID", s.svc.KV().Credentials)},
		{Method: post, Path: "/v1/projects/{projectID}/kv/rotate-token", Tag: "kv", Scope: api.ScopeProjectsWrite, Also: []api.Scope{api.ScopeCredentialsRead}, Status: ok, Summary: "Mint a new token, returned once (needs credentials:read too); the old one and its connections are cut at once", Do: CallP("projectID", s.svc.KV().RotateToken)},
		{Method: post, Path: "/v1/projects/{projectID}/kv/flush", Tag: "kv", Scope: api.ScopeProjectsWrite, Status: accepted, Summary: "Delete every key (no undo); the endpoint and token stay", Do: CallP("projectID", s.svc.KV().Flush)},

		// Studio (SQL console and table editor, as the project's own role; docs/api-decisions.md "Studio")
		{Method: post, Path: "/v1/projects/{projectID}/sql", Tag: "studio", Scope: api.ScopeProjectsWrite, Status: ok, Summary: "Run SQL as the project's role: every statement of the text in one implicit transaction, the last one's result (capped at 10,000 rows or about 8 MB; a SQL error is a 400 with sqlstate and position)",
			Do: CallPB("projectID", s.svc.Studio().RunSQL)},
		{Method: get, Path: "/v1/projects/{projectID}/sql/history", Tag: "studio", Scope: api.ScopeProjectsRead, Status: ok, Summary: "The console's runs, newest first (who, how long, rows, success, error; the text capped at 4,000 characters)",
			Query: []Param{limitParam(50)}, Do: Without(s.sqlHistory)},
		{Method: post, Path: "/v1/projects/{projectID}/sql/runs/{runID}/cancel", Tag: "studio", Scope: api.ScopeProjectsWrite, Status: ok, Summary: "Cancel a running console run the client named with run_id (PostgreSQL's cancel request to that run's backend only; the run answers 400 with sqlstate 57014); cancelled is false when none of that ID runs",
			Do: CallPP("projectID", "runID", s.svc.Studio().CancelSQL)},
		{Method: get, Path: "/v1/projects/{projectID}/saved-queries", Tag: "studio", Scope: api.ScopeProjectsRead, Status: ok, Summary: "The project's saved queries, by name (shared with whoever may see the project)", Do: CallP("projectID", s.svc.Studio().ListSavedQueries)},
		{Method: post, Path: "/v1/projects/{projectID}/saved-queries", Tag: "studio", Scope: api.ScopeProjectsWrite, Status: created, Summary: "Save a query in the project (name unique in the project, 1 to 100 characters; sql at most 256 KiB; at most 500 per project)", Do: CallPB("projectID", s.svc.Studio().CreateSavedQuery)},
		{Method: get, Path: "/v1/projects/{projectID}/saved-queries/{queryID}", Tag: "studio", Scope: api.ScopeProjectsRead, Status: ok, Summary: "One saved query", Do: CallPP("projectID", "queryID", s.svc.Studio().GetSavedQuery)},
		{Method: patch, Path: "/v1/projects/{projectID}/saved-queries/{queryID}", Tag: "studio", Scope: api.ScopeProjectsWrite, Status: ok, Summary: "Rename a saved query or change its text", Do: CallPPB("projectID", "queryID", s.svc.Studio().UpdateSavedQuery)},
		{Method: del, Path: "/v1/projects/{projectID}/saved-queries/{queryID}", Tag: "studio", Scope: api.ScopeProjectsWrite, Status: ok, Summary: "Delete a saved query (returns it)", Do: CallPP("projectID", "queryID", s.svc.Studio().DeleteSavedQuery)},
		{Method: get, Path: "/v1/projects/{projectID}/tables", Tag: "studio", Scope: api.ScopeProjectsRead, Status: ok, Summary: "The tables, views, materialized views, foreign tables and partitioned tables the project's role sees (not the system schemas')", Do: CallP("projectID", s.svc.Studio().ListTables)},
		{Method: get, Path: "/v1/projects/{projectID}/tables/{schema}/{table}/columns", Tag: "studio", Scope: api.ScopeProjectsRead, Status: ok, Summary: "A table's columns in order", Do: CallPPP("projectID", "schema", "table", s.svc.Studio().TableColumns)},
		{Method: get, Path: "/v1/projects/{projectID}/tables/{schema}/{table}/rows", Tag: "studio", Scope: api.ScopeProjectsRead, Status: ok, Summary: "A page of a table's rows the filters match, in the sort then by primary key (else by physical position), with the count of the rows matching (exact up to 100,000, else the planner's estimate)",
			Query: append([]Param{{Name: "limit", Type: "integer", Min: 1, Max: api.RowsMax, Default: int64(api.RowsDefault), Doc: "rows to return"},
				{Name: "offset", Type: "integer", Min: 0, Max: 1_000_000_000, Default: int64(0), Doc: "rows to skip"}}, rowsSelection...), Do: Without(s.readRows)},
		{Method: post, Path: "/v1/projects/{projectID}/tables/{schema}/{table}/rows", Tag: "studio", Scope: api.ScopeProjectsWrite, Status: ok, Summary: "Insert rows ({rows: [{column: value}]}), returning them", Do: CallPPPB("projectID", "schema", "table", s.svc.Studio().InsertRows)},
		{Method: patch, Path: "/v1/projects/{projectID}/tables/{schema}/{table}/rows", Tag: "studio", Scope: api.ScopeProjectsWrite, Status: ok, Summary: "Update the rows a match selects ({match, set}; an empty match needs all_rows: true), returning them", Do: CallPPPB("projectID", "schema", "table", s.svc.Studio().UpdateRows)},
		{Method: del, Path: "/v1/projects/{projectID}/tables/{schema}/{table}/rows", Tag: "studio", Scope: api.ScopeProjectsWrite, Status: ok, Summary: "Delete the rows a match selects ({match}; an empty match needs all_rows: true), returning them", Do: CallPPPB("projectID", "schema", "table", s.svc.Studio().DeleteRows)},
		{Method: get, Path: "/v1/projects/{projectID}/tables/{schema}/{table}/csv", Tag: "studio", Scope: api.ScopeProjectsRead, Status: ok, Stream: true, ContentType: "text/csv",
			Summary: "Download the rows the filters match, in the sort, as CSV with a header row (NULL an empty unquoted field, other values quoted)", Query: rowsSelection, Do: Raw(s.exportCSV)},
		{Method: post, Path: "/v1/projects/{projectID}/tables/{schema}/{table}/csv", Tag: "studio", Scope: api.ScopeProjectsWrite, Status: ok, Stream: true, RawBody: "text/csv",
			Summary: "Import a CSV file (a header row of column names, at most 16 MiB) into a table in one COPY: all rows or none; a bad value is a 400 naming its row", Do: Without(s.importCSV)},
		{Method: post, Path: "/v1/projects/{projectID}/tables", Tag: "studio", Scope: api.ScopeProjectsWrite, Status: ok, Query: []Param{dryRun},
			Summary: "Create a table from its columns (types, nullability, defaults, primary key, references): the DDL generated, run as the project's role unless dry_run", Do: With(s.createTable)},
		{Method: post, Path: "/v1/projects/{projectID}/tables/{schema}/{table}/columns", Tag: "studio", Scope: api.ScopeProjectsWrite, Status: ok, Query: []Param{dryRun},
			Summary: "Add a column: the DDL generated, run unless dry_run", Do: With(s.addColumn)},
		{Method: patch, Path: "/v1/projects/{projectID}/tables/{schema}/{table}/columns/{column}", Tag: "studio", Scope: api.ScopeProjectsWrite, Status: ok, Query: []Param{dryRun},
			Summary: "Rename a column, change its type (values cast), nullability or default: the DDL generated, run in one transaction unless dry_run", Do: With(s.alterColumn)},
		{Method: del, Path: "/v1/projects/{projectID}/tables/{schema}/{table}/columns/{column}", Tag: "studio", Scope: api.ScopeProjectsWrite, Status: ok, Query: []Param{dryRun},
			Summary: "Drop a column (refused when something depends on it): the DDL generated, run unless dry_run", Do: Without(s.dropColumn)},
		{Method: get, Path: "/v1/projects/{projectID}/ai-usage", Tag: "studio", Scope: api.ScopeProjectsRead, Status: ok, Summary: "The project's AI assistant uses this calendar month (UTC) against its plan's limit", Do: CallP("projectID", s.svc.Studio().GetAIUsage)},
		{Method: post, Path: "/v1/projects/{projectID}/ai-usage", Tag: "studio", Scope: api.ScopeProjectsWrite, Status: ok, Summary: "Count one AI assistant use (429 once the month's limit is used)", Do: CallP("projectID", s.svc.Studio().RecordAIUse)},

		// Observability (docs/api-decisions.md "Observability")
		{Method: get, Path: "/v1/projects/{projectID}/observability", Tag: "observability", Scope: api.ScopeProjectsRead, Status: ok, Summary: "A live snapshot of the project's server: active queries, connections and storage against their limits, the slowest statements, the alerts in force",
			Errors: []int{http.StatusConflict, http.StatusServiceUnavailable}, Do: CallP("projectID", s.svc.Observe().Snapshot)},
		{Method: get, Path: "/v1/projects/{projectID}/observability/history", Tag: "observability", Scope: api.ScopeProjectsRead, Status: ok, Summary: "The minutely samples of the trailing window, oldest first (downsampled evenly to at most 720 points)",
			Query: []Param{hoursParam(api.HistoryHoursMax, api.HistoryHoursDefault)}, Do: Without(s.observabilityHistory)},
		{Method: get, Path: "/v1/projects/{projectID}/observability/queries", Tag: "observability", Scope: api.ScopeProjectsRead, Status: ok, Summary: "The statements with the most total execution time in the trailing window (from pg_stat_statements snapshots every 5 minutes; at most 50)",
			Query: []Param{hoursParam(api.QueriesHoursMax, api.QueriesHoursDefault)}, Do: Without(s.topQueries)},
		{Method: get, Path: "/v1/projects/{projectID}/observability/queries/{queryHash}", Tag: "observability", Scope: api.ScopeProjectsRead, Status: ok, Summary: "One statement's totals in the trailing window and a point per snapshot (queryHash: 32 lowercase hex characters)",
			Query: []Param{hoursParam(api.QueriesHoursMax, api.QueriesHoursDefault)}, Do: Without(s.queryDetail)},
		{Method: get, Path: "/v1/projects/{projectID}/summary", Tag: "observability", Scope: api.ScopeProjectsRead, Status: ok, Summary: "The project's home at a glance from the appliance's records (its server is not asked): storage and connections as last sampled, CPU and memory over the last 24 hours, the newest backup (with backups:read), the alerts in force", Do: CallP("projectID", s.svc.Observe().Summary)},
		{Method: get, Path: "/v1/projects/{projectID}/observability/statements/{queryID}", Tag: "observability", Scope: api.ScopeProjectsRead, Status: ok, Summary: "A pg_stat_statements queryid (a log line's query_id, decimal) as its query_hash and text, read live from the server: what opens a logged statement's detail",
			Errors: []int{http.StatusConflict, http.StatusServiceUnavailable}, Do: CallPP("projectID", "queryID", s.svc.Observe().StatementByID)},
		{Method: get, Path: "/v1/projects/{projectID}/alerts", Tag: "observability", Scope: api.ScopeProjectsRead, Status: ok, Summary: "The project's alerts in force and those resolved in the last 7 days, newest first", Do: CallP("projectID", s.svc.Observe().ListAlerts)},
		{Method: post, Path: "/v1/projects/{projectID}/alerts/{alertID}/acknowledge", Tag: "observability", Scope: api.ScopeProjectsWrite, Status: ok, Summary: "Acknowledge an alert (it stays until its condition clears)", Do: CallPP("projectID", "alertID", s.svc.Observe().AcknowledgeAlert)},
		{Method: get, Path: "/v1/projects/{projectID}/logs", Tag: "observability", Scope: api.ScopeProjectsRead, Status: ok, Summary: "The server's log entries: the newest of the window, or those after a cursor (passwords masked; the appliance's own sessions left out)",
			Query: append(logsParams(api.LogsHoursArchiveMax, "1 to 168, or to 720 with the log archive (up --log-archive-days); ignored when cursor is set"), logsRangeParams...), Errors: []int{http.StatusConflict}, Do: Without(s.readLogs)},
		{Method: get, Path: "/v1/projects/{projectID}/logs/download", Tag: "observability", Scope: api.ScopeProjectsRead, Status: ok, Stream: true, ContentType: "application/x-ndjson",
			Summary: "Download the entries of a range as newline-delimited JSON (one entry a line, oldest first, at most 100000; the logs' filters; limit and cursor ignored)",
			Query: append(slices.DeleteFunc(logsParams(api.LogsHoursArchiveMax, "1 to 168, or to 720 with the log archive (up --log-archive-days)"),
				func(p Param) bool { return p.Name == "limit" || p.Name == "cursor" }), logsRangeParams...), Errors: []int{http.StatusConflict}, Do: Raw(s.downloadLogs)},
		{Method: get, Path: "/v1/projects/{projectID}/logs/stream", Tag: "observability", Scope: api.ScopeProjectsRead, Status: ok, Stream: true,
			ContentType: "text/event-stream", Summary: "The server's log as a live tail (text/event-stream): the newest entries of the window, or those after the cursor (Last-Event-ID wins), then new ones; id is the entry's cursor, event is log",
			Query:  append(logsParams(api.LogsHoursMax, "1 to 168"), Param{Name: "follow", Type: "boolean", Default: true, Doc: "false: send the entries the query selects and end (no live ones)"}),
			Errors: []int{http.StatusConflict}, Do: Raw(s.streamLogs)},
		{Method: get, Path: "/v1/projects/{projectID}/advisor/indexes", Tag: "observability", Scope: api.ScopeProjectsRead, Status: ok, Summary: "Index suggestions for the predicates pg_qualstats saw, with hypopg's cost and size estimates (needs the pg_qualstats and hypopg extensions: available false names what is missing)",
			Query: []Param{{Name: "min_filter", Type: "integer", Min: 1, Max: api.AdvisorMinFilterMax, Default: int64(api.AdvisorMinFilterDefault), Doc: "minimum average number of rows a predicate must filter"},
				{Name: "min_selectivity", Type: "integer", Min: 1, Max: api.AdvisorMinSelectivityMax, Default: int64(api.AdvisorMinSelectivityDefault), Doc: "minimum average selectivity percentage"},
				{Name: "refresh", Type: "boolean", Default: false, Doc: "compute the advice again instead of serving the one computed in the last 5 minutes"}},
			Errors: []int{http.StatusConflict, http.StatusServiceUnavailable}, Do: Without(s.indexAdvice)},
		{Method: get, Path: "/v1/projects/{projectID}/advisor/index-hygiene", Tag: "observability", Scope: api.ScopeProjectsRead, Status: ok, Summary: "Unused indexes (no scans since the statistics reset, not backing a constraint) and redundant ones (a prefix of another), with sizes and DROP statements",
			Errors: []int{http.StatusConflict, http.StatusServiceUnavailable}, Do: CallP("projectID", s.svc.Observe().IndexHygiene)},
		{Method: get, Path: "/metrics", Tag: "observability", Auth: Public, Status: ok, ContentType: "text/plain; version=0.0.4; charset=utf-8", Summary: "Prometheus metrics of the appliance and each project's core gauges (the text format). With up --metrics-token set, to a request bearing that token; otherwise, with up --metrics-listen set, only on that operator listener (not here); otherwise to loopback clients", Errors: []int{http.StatusUnauthorized, http.StatusForbidden}, Do: Raw(s.metrics)},

		// Jobs
		{Method: get, Path: "/v1/jobs/{jobID}", Tag: "jobs", Scope: api.ScopeJobsRead, Status: ok, Summary: "Get a job", Do: CallP("jobID", s.svc.GetJob)},
		{Method: get, Path: "/v1/projects/{projectID}/events", Tag: "events", Scope: api.ScopeProjectsRead, Status: ok, Stream: true,
			ContentType: "text/event-stream", Summary: "The project's events as a stream (text/event-stream): those after Last-Event-ID, then live ones; a heartbeat comment every 15 s",
			Query: []Param{lastEventID,
				{Name: "follow", Type: "boolean", Default: true, Doc: "false: send the events the log holds and end (no live ones)"},
				skipBacklog}, Do: Raw(s.projectEvents)},
		{Method: get, Path: "/v1/organizations/{orgID}/events", Tag: "events", Scope: api.ScopeProjectsRead, OrgLevel: true, Status: ok, Stream: true,
			ContentType: "text/event-stream", Summary: "The events of every project of the organization as a stream (an addition; the organization's own events, such as webhook_endpoint.disabled, need organizations:read)",
			Query: []Param{lastEventID,
				{Name: "follow", Type: "boolean", Default: true, Doc: "false: send the events the log holds and end (no live ones)"},
				skipBacklog}, Do: Raw(s.organizationEvents)},
		{Method: get, Path: "/v1/projects/{projectID}/jobs", Tag: "jobs", Scope: api.ScopeJobsRead, Status: ok, Summary: "List a project's jobs",
			Query: []Param{limitParam(25)}, Do: Without(s.projectJobs)},
	}))
}

// claimTokenParam documents the header of an ephemeral database's routes.
var claimTokenParam = Param{Name: claimTokenHeader, Required: true, Doc: "the eph_ claim token returned when the database was created (401 when absent)"}

// storeReads are the project routes that only read the appliance's records: they answer whatever the
// project's state, and never reach its server.
var storeReads = []string{"/v1/projects/{projectID}", "/v1/projects/{projectID}/jobs", "/v1/projects/{projectID}/audit-events",
	"/v1/projects/{projectID}/backups", "/v1/projects/{projectID}/exports", "/v1/projects/{projectID}/restore-points",
	"/v1/projects/{projectID}/scheduled-backups", "/v1/projects/{projectID}/kv", "/v1/projects/{projectID}/kv/credentials", "/v1/projects/{projectID}/preview-databases",
	"/v1/projects/{projectID}/sql/history", "/v1/projects/{projectID}/ai-usage", "/v1/projects/{projectID}/saved-queries",
	"/v1/projects/{projectID}/saved-queries/{queryID}", "/v1/projects/{projectID}/summary"}

// storeWrites are the project routes that only write (or read) the appliance's records (and enqueue nothing
// that must run at once where the instances live): any node of a cluster answers them, like storeReads.
var storeWrites = []string{
	"POST /v1/projects/{projectID}/saved-queries", "PATCH /v1/projects/{projectID}/saved-queries/{queryID}",
	"DELETE /v1/projects/{projectID}/saved-queries/{queryID}", "POST /v1/projects/{projectID}/alerts/{alertID}/acknowledge",
	"POST /v1/projects/{projectID}/ai-usage",
	// The alerts are records the leader writes (a lost node's projects' node_unavailable among them), and a
	// restore elsewhere runs on the node asked, because the project's own node is lost: neither may wait
	// for that node.
	"GET /v1/projects/{projectID}/alerts", "POST /v1/projects/{projectID}/restore-elsewhere",
	// A move checks and enqueues only (its job is pinned to the project's node): any node answers, and one
	// whose node is lost answers why it cannot move.
	"POST /v1/projects/{projectID}/move",
}

// onNode marks the routes that run where the project's instances live (docs/api-decisions.md
// "Forwarding"): every route of a path bound to a project ({projectID}), but the reads of the records
// (storeReads), the writes of records only (storeWrites) and the project's event stream (the store's event
// log, which every node reads). Forwarding one route too many costs a hop; one too few would answer from a
// node without the project's server, so the rule is by default.
func onNode(routes []Route) []Route {
	for i := range routes {
		rt := &routes[i]
		// A signed URL's upload and download: the dump's file is on its project's node (with a bucket
		// too, which holds it, the node caches it), whichever node the URL's holder reaches.
		switch rt.Method + " " + rt.Path {
		case "PUT /v1/uploads/imports/{uploadID}":
			rt.OnNode, rt.NodeOf = true, "uploadID"
		case "GET /v1/downloads/exports/{exportID}":
			rt.OnNode, rt.NodeOf = true, "exportID"
		}
		if !strings.HasPrefix(rt.Path, "/v1/projects/{projectID}") {
			continue
		}
		anywhere := (rt.Method == http.MethodGet && (slices.Contains(storeReads, rt.Path) || rt.Path == "/v1/projects/{projectID}/events")) ||
			slices.Contains(storeWrites, rt.Method+" "+rt.Path)
		rt.OnNode = !anywhere
	}
	return routes
}

// withErrors adds the error statuses routes answer by what they act on: a project route that is more than
// a read of the records answers 409 when the project is not in the state it needs and 503 when its server
// does not answer (or the program it needs is missing); the others are listed on the routes themselves.
func withErrors(routes []Route) []Route {
	for i := range routes {
		rt := &routes[i]
		if strings.HasPrefix(rt.Path, "/v1/projects/{projectID}") && !(rt.Method == http.MethodGet && slices.Contains(storeReads, rt.Path)) {
			for _, code := range []int{http.StatusConflict, http.StatusServiceUnavailable} {
				if !slices.Contains(rt.Errors, code) {
					rt.Errors = append(rt.Errors, code)
				}
			}
		}
	}
	return routes
}
