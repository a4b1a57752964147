package api

import (
	"encoding/json"
	"time"
)

// Integration is a project's connection to a provider (docs/api-decisions.md "Integrations").
type Integration struct {
	ID             string `json:"id"`
	OrganizationID string `json:"organization_id"`
	ProjectID      string `json:"project_id"`
	ExternalID     string `json:"external_id" doc:"the provider-side resource it is bound to: deploy_a's project id, deploy_b's site id, edge_c's account id, auth_b's tenant domain, auth_c's directory id"`
	Provider       string `json:"provider" enum:"IntegrationProvider"`
	State          string `json:"state" enum:"IntegrationState" doc:"pending until its first sync job ends; active; error (last_error says why); disconnecting while DELETE's job removes what it pushed"`
	// HasCredentials: credentials are stored (sealed; never returned).
	HasCredentials bool                 `json:"has_credentials"`
	Config         json.RawMessage      `json:"config" doc:"the provider's config as validated, its defaults filled in (free-form; null when none was given)"`
	LastError      string               `json:"last_error" doc:"why the last job failed (never what answered)"`
	LastSyncAt     *time.Time           `json:"last_sync_at" doc:"when the settings were last pushed or the users last synced"`
	Pushed         []string             `json:"pushed" doc:"what the platform received for production: the variable names"`
	Previews       []IntegrationPreview `json:"previews" doc:"the preview databases made for git branches"`
	CreatedAt      time.Time            `json:"created_at"`
	UpdatedAt      time.Time            `json:"updated_at"`
}

// IntegrationPreview is a git branch's preview database.
type IntegrationPreview struct {
	Branch    string `json:"branch"`
	PreviewID string `json:"preview_id" doc:"empty when the branch's preview could not be made (see error)"`
	Error     string `json:"error" doc:"why the branch's last deployment got no preview database (the plan's previews limit, say); empty otherwise"`
}

// Integration states.
const (
	IntegrationPending       = "pending"
	IntegrationActive        = "active"
	IntegrationError         = "error"
	IntegrationDisconnecting = "disconnecting"
)

// IntegrationStates are the states' values.
var IntegrationStates = []string{IntegrationPending, IntegrationActive, IntegrationError, IntegrationDisconnecting}

// IntegrationProviders are the providers' neutral names (appliance/integrations/provider.Names).
var IntegrationProviders = []string{"deploy_a", "deploy_b", "edge_c", "auth_a", "auth_b", "auth_c"}

// IntegrationList is GET /v1/projects/{projectID}/integrations.
type IntegrationList struct {
	Integrations []*Integration `json:"integrations"`
}

// IntegrationResponse wraps one integration.
type IntegrationResponse struct {
	Integration *Integration `json:"integration"`
}

// IntegrationJobResponse is a connect's answer: the integration and its first sync job.
type IntegrationJobResponse struct {
	Integration *Integration `json:"integration"`
	Job         *Job         `json:"job"`
}

// IntegrationCredentials are the credentials a PUT may store (sealed; never returned). Which fields a
// provider takes: docs/api-decisions.md "Integrations".
type IntegrationCredentials struct {
	Token         string `json:"token" doc:"API token, secret key or management token"`
	ExternalID    string `json:"external_id" doc:"the provider-side resource (see Integration.external_id)"`
	WebhookSecret string `json:"webhook_secret" doc:"the secret that verifies the provider's webhooks"`
	ClientID      string `json:"client_id" doc:"a client-credentials grant's client id (auth_b)"`
	ClientSecret  string `json:"client_secret" doc:"its client secret"`
	TeamID        string `json:"team_id" doc:"deploy_a's team (Vercel's teamId)"`
}

// PutIntegrationRequest is the body of PUT /v1/projects/{projectID}/integrations/{provider}.
type PutIntegrationRequest struct {
	Config json.RawMessage `json:"config,omitempty" doc:"the provider's config (variable names, targets, preview databases, the user table); null or absent: the defaults"`
	// Credentials, when given, replace the stored ones and start a sync job (auth_b and auth_c, which have
	// no connect endpoint, are connected this way).
	Credentials *IntegrationCredentials `json:"credentials,omitempty" doc:"when given, stored sealed (replacing any) and a sync job starts: how auth_b and auth_c connect"`
}

// ConnectDeployARequest is the body of POST …/integrations/deploy_a/connect.
type ConnectDeployARequest struct {
	DeployAProjectID string          `json:"deploy_a_project_id" api:"required" doc:"the platform's project id or name"`
	Token            string          `json:"token" doc:"an API token; may be omitted after the OAuth flow stored one"`
	TeamID           string          `json:"team_id" doc:"the team the project belongs to (teamId), if any"`
	WebhookSecret    string          `json:"webhook_secret" doc:"the webhook's signing secret (x-vercel-signature), for preview databases"`
	Config           json.RawMessage `json:"config,omitempty" doc:"as PUT's config; absent: the stored or default one"`
}

// ConnectDeployBRequest is the body of POST …/integrations/deploy_b/connect.
type ConnectDeployBRequest struct {
	SiteID        string          `json:"site_id" api:"required"`
	Token         string          `json:"token" api:"required"`
	WebhookSecret string          `json:"webhook_secret" doc:"the deploy notifications' JWS secret"`
	Config        json.RawMessage `json:"config,omitempty"`
}

// ConnectEdgeCRequest is the body of POST …/integrations/edge_c/connect.
type ConnectEdgeCRequest struct {
	AccountID string          `json:"account_id" api:"required"`
	APIToken  string          `json:"api_token" api:"required"`
	Config    json.RawMessage `json:"config,omitempty"`
}

// ConnectAuthARequest is the body of POST …/integrations/auth_a/connect.
type ConnectAuthARequest struct {
	SecretKey     string          `json:"secret_key" api:"required"`
	WebhookSecret string          `json:"webhook_secret" doc:"the webhook endpoint's signing secret (whsec_…)"`
	Config        json.RawMessage `json:"config,omitempty"`
}

// IntegrationWebhookResponse answers an inbound webhook.
type IntegrationWebhookResponse struct {
	Received bool `json:"received"`
}

// OAuthStartResponse is GET /v1/integrations/{provider}/oauth/start.
type OAuthStartResponse struct {
	AuthorizeURL string `json:"authorize_url" schema:"format=uri,example=https://vercel.com/integrations/appliance/new?client_id=oac_1&response_type=code&state=s" doc:"the provider's authorize page; open it in the browser"`
}

// IntegrationDeletedResponse is DELETE's answer.
type IntegrationDeletedResponse struct {
	Deleted bool `json:"deleted"`
	// Job removes what the integration pushed (best effort; its result reports what could not be).
	Job *Job `json:"job" doc:"the job removing what the integration pushed at the provider (best effort, reported in its result)"`
}
