package api

import "time"

// Project is the API resource.
type Project struct {
	ID                     string    `json:"id"`
	Name                   string    `json:"name"`
	Slug                   string    `json:"slug"`
	OrganizationID         string    `json:"organization_id"`
	DatabaseName           string    `json:"database_name"`
	RoleName               string    `json:"role_name"`
	PublicHost             string    `json:"public_host"`
	Region                 string    `json:"region"`
	Plan                   string    `json:"plan" doc:"a plan's name (GET /v1/plans: the operators' configuration)"`
	PostgresVersion        string    `json:"postgres_version" doc:"read from the server (SHOW server_version); empty until provisioned"`
	SSLMode                string    `json:"ssl_mode"`
	IdleTransactionTimeout string    `json:"idle_transaction_timeout"`
	StatementTimeout       string    `json:"statement_timeout"`
	PrimaryInstanceID      string    `json:"primary_instance_id"`
	LatestJobID            string    `json:"latest_job_id"`
	LastError              string    `json:"last_error"`
	DirectPort             int       `json:"direct_port"`
	PooledPort             int       `json:"pooled_port"`
	MaxConnections         int       `json:"max_connections"`
	StorageLimitBytes      int64     `json:"storage_limit_bytes"`
	Environment            string    `json:"environment" enum:"Environment"`
	RuntimeStatus          string    `json:"runtime_status" enum:"RuntimeStatus"`
	State                  string    `json:"state" enum:"ProjectState"`
	CreatedAt              time.Time `json:"created_at"`
	UpdatedAt              time.Time `json:"updated_at"`
	SuspendAfterSeconds    int       `json:"suspend_after_seconds" doc:"idle seconds (no client connection, no running job) after which the project's server and pooler stop until the next connection wakes them; 0: never (default: 300 for development projects, previews and ephemeral databases, 0 otherwise)"`
}

// ProjectResponse wraps one project.
type ProjectResponse struct {
	Project *Project `json:"project"`
}

// ProjectList is the list response.
type ProjectList struct {
	Projects   []*Project     `json:"projects"`
	OpenAlerts map[string]int `json:"open_alerts" doc:"how many alerts are in force per project ID (a project without any is left out): the list's badges"`
}

// ProjectJobResponse is the 202 answer of project creation.
type ProjectJobResponse struct {
	Job     *Job     `json:"job"`
	Project *Project `json:"project"`
}

// CreateProjectRequest is the body of POST /v1/projects.
type CreateProjectRequest struct {
	Name           string `json:"name" api:"required" schema:"minLength=1,maxLength=63,example=shop" doc:"1 to 63 characters"`
	Plan           string `json:"plan" doc:"a plan's name (GET /v1/plans); default: free"`
	Environment    string `json:"environment" enum:"Environment" doc:"default: production"`
	OrganizationID string `json:"organization_id" doc:"required for platform administrators; others create in their own organization"`
}

// PatchProjectRequest holds the project fields a customer may change; absent fields stay.
type PatchProjectRequest struct {
	Name                   *string `json:"name,omitempty" schema:"minLength=1,maxLength=63" doc:"1 to 63 characters (database and role names do not change)"`
	Environment            *string `json:"environment,omitempty" enum:"Environment"`
	StatementTimeout       *string `json:"statement_timeout,omitempty" doc:"PostgreSQL duration such as 30s, 5min or 0 (no limit); applied by reload"`
	IdleTransactionTimeout *string `json:"idle_transaction_timeout,omitempty" doc:"idle_in_transaction_session_timeout as a PostgreSQL duration; applied by reload"`
	Plan                   *string `json:"plan,omitempty" doc:"a plan's name (GET /v1/plans); max_connections changes with a restart"`
	SuspendAfterSeconds    *int    `json:"suspend_after_seconds,omitempty" schema:"minimum=0,maximum=2592000" doc:"0 (never) or 60 to 2592000 (30 days)"`
}

// Project states (state) and runtime statuses (runtime_status); transitions in docs/api-decisions.md.
const (
	ProjectProvisioning = "provisioning"
	ProjectActive       = "active"
	ProjectFailed       = "failed"
	ProjectDeleting     = "deleting"
	ProjectDeleted      = "deleted"

	RuntimeProvisioning = "provisioning"
	RuntimeActive       = "active"
	RuntimeRestarting   = "restarting"
	RuntimeDown         = "down"
	RuntimeStopped      = "stopped"
	// RuntimeSuspended: idle, its server and pooler stopped; the next connection wakes it (scale to zero).
	RuntimeSuspended = "suspended"
	// RuntimeUnavailable: the cluster node that hosts it lost its lease (down, or cut off from the
	// others); it returns to its status when the node is back, or it is restored on another node.
	RuntimeUnavailable = "unavailable"
)

// MoveProjectRequest is POST /v1/projects/{projectID}/move's body: the node to move the project to.
type MoveProjectRequest struct {
	Node string `json:"node"`
}
