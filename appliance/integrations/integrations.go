// Package integrations is the integrations area: a project's connections to hosting and edge platforms
// (which receive its connection settings) and identity providers (whose users are synced into a table of
// its database), through the providers of appliance/integrations/provider, given at construction. The area
// keeps the records (store.Integration: the config, the credentials sealed with the service's box, the
// state), serves the 14 endpoints (list, put, delete, the four connects, the inbound webhooks, OAuth start
// and callback), and runs the jobs: a sync (check the credentials, push the settings or backfill the
// users), a removal, a deployment event (a git branch's preview database) and a user event. Every call to
// a provider goes through the outbound destination policy's client. The rest of the domain only through
// its Host (declared here, given by the root's areaHost); it never imports `appliance`.
package integrations

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/integrations/provider"
	"github.com/theappliance/appliance/appliance/outbound"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// The area's jobs.
const (
	JobSync      = "integration.sync"       // check the credentials; push the settings or backfill the users
	JobRemove    = "integration.remove"     // remove what was pushed, then forget the integration
	JobDeploy    = "integration.deploy"     // a platform's deployment event: a branch's preview database
	JobUserEvent = "integration.user_event" // an identity provider's user event
)

// JobTypes are the area's job types (the root names them where it lists job types).
var JobTypes = []string{JobSync, JobRemove, JobDeploy, JobUserEvent}

// The area's events (appliance/eventlog's table).
const (
	EventConnected    = "integration.connected"
	EventSynced       = "integration.synced"
	EventFailed       = "integration.failed"
	EventDisconnected = "integration.disconnected"
)

// MaxWebhookBody caps an inbound webhook's body.
const MaxWebhookBody = 1 << 20

// StateTTL is an OAuth state's lifetime.
const StateTTL = 10 * time.Minute

// Host is what the area takes from the rest of the domain (appliance/areas.go gives it).
type Host interface {
	// VisibleProject is a project the caller may see: one visibility rule for every area.
	VisibleProject(tx *store.Tx, p *authz.Principal, projectID string) (*store.Project, error)
	// LoadProject reads a project and its primary instance (nil when it has none yet).
	LoadProject(id string) (*store.Project, *store.Instance, error)
	// Audit writes an audit event of the caller in tx.
	Audit(tx *store.Tx, p *authz.Principal, action, orgID, projectID string, metadata any) error
	// AppendEvent appends an event to the log in tx (the webhooks' deliveries are queued there too).
	AppendEvent(tx *store.Tx, typ, orgID, projectID string, data any) error
	// Notify pokes the job runner once jobs enqueued in a committed transaction are there.
	Notify()
	// Connections are a project's URLs with its current credential (opened with the root's box).
	Connections(prj *store.Project) (*api.Connections, error)
	// CACertPEM is the appliance CA's certificate (PEM), which clients verify the servers against.
	CACertPEM() (string, error)
	// AnswerJob is a job-returning call's answer once its transaction committed (it pokes the runner).
	AnswerJob(job *store.Job, err error) (*api.JobResponse, error)
	// AdminConn is a superuser session in a database of the instance (user sync writes its table).
	AdminConn(ctx context.Context, inst *store.Instance, db string) (*pgx.Conn, error)
}

// Previews is the previews area's create, extend and delete (a git branch's preview database is made,
// kept and deleted through the same path as the endpoints').
type Previews interface {
	Create(ctx context.Context, p *authz.Principal, projectID string, req *api.CreatePreviewRequest) (*api.PreviewJobResponse, error)
	Extend(ctx context.Context, p *authz.Principal, previewID string, req *api.ExtendPreviewRequest) (*api.PreviewResponse, error)
	Delete(ctx context.Context, p *authz.Principal, previewID string) (*api.JobResponse, error)
}

// BranchPreviewTTLHours is a branch's preview database's life after the branch's last deployment: made
// with it, and extended to it by each deployment event of the branch. The platforms send no event when a
// branch is deleted or merged (Vercel's and Netlify's webhooks have none), so a branch nobody deploys any
// more loses its preview this long after its last deployment, by the previews' expiry sweep.
const BranchPreviewTTLHours = 7 * 24

// Box seals and opens secrets and signs (the root's SecretBox).
type Box interface {
	Seal(plaintext []byte) []byte
	Open(sealed []byte) ([]byte, error)
	MAC(purpose string, msg []byte) []byte
}

// OAuthApp is the appliance's OAuth client at a provider (the operator registers it there).
type OAuthApp struct {
	ClientID     string `json:"client_id"`
	ClientSecret string `json:"client_secret"`
	// AuthURL and TokenURL ("" for deploy_a: https://vercel.com/integrations/{Slug}/new and
	// https://api.vercel.com/v2/oauth/access_token).
	AuthURL  string `json:"auth_url"`
	TokenURL string `json:"token_url"`
	// Slug is deploy_a's integration slug (its authorize URL names it).
	Slug   string   `json:"slug"`
	Scopes []string `json:"scopes"`
}

// ReadOAuthApps reads up --integrations-oauth-file: a JSON object of OAuth clients by provider name,
// {"deploy_a": {"client_id": …, "client_secret": …, "slug": …}} ("" path: none).
func ReadOAuthApps(path string) (map[string]OAuthApp, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var apps map[string]OAuthApp
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&apps); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for name, a := range apps {
		if !slices.Contains(provider.Names, name) {
			return nil, fmt.Errorf("%s: %q is not a provider (%s)", path, name, strings.Join(provider.Names, ", "))
		}
		if a.ClientID == "" || a.ClientSecret == "" {
			return nil, fmt.Errorf("%s: %s needs client_id and client_secret", path, name)
		}
		if name != provider.DeployA && (a.AuthURL == "" || a.TokenURL == "") {
			return nil, fmt.Errorf("%s: %s needs auth_url and token_url", path, name)
		}
		if name == provider.DeployA && a.AuthURL == "" && a.Slug == "" {
			return nil, fmt.Errorf("%s: deploy_a needs its integration's slug (or auth_url)", path)
		}
	}
	return apps, nil
}

// Config is the deployment the area needs to know.
type Config struct {
	// APIURL is the API's base URL (the OAuth redirect URL is under it; the dashboard is served there).
	APIURL string
	// BaseURLs override the providers' API base URLs by name (up --integrations-base-url).
	BaseURLs map[string]string
	// OAuth are the OAuth clients by provider name (none: oauth/start answers 409).
	OAuth map[string]OAuthApp
}

// Deps are the area's collaborators.
type Deps struct {
	DB        *store.DB
	Box       Box
	Log       *slog.Logger
	Clock     func() time.Time
	Host      Host
	Previews  Previews
	Policy    *outbound.Policy
	Providers []provider.Provider
}

// Service is the integrations area.
type Service struct {
	cfg       Config
	db        *store.DB
	box       Box
	log       *slog.Logger
	now       func() time.Time
	host      Host
	previews  Previews
	policy    *outbound.Policy
	providers map[string]provider.Provider
	client    *http.Client
	// wait is how often the deploy job looks at its preview while it is made.
	wait time.Duration
}

// New builds the area.
func New(cfg Config, d Deps) *Service {
	s := &Service{cfg: cfg, db: d.DB, box: d.Box, log: d.Log, now: d.Clock, host: d.Host, previews: d.Previews,
		policy: d.Policy, providers: map[string]provider.Provider{}, wait: time.Second}
	if s.now == nil {
		s.now = func() time.Time { return time.Now().UTC() }
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.policy == nil {
		s.policy = &outbound.Policy{}
	}
	for _, p := range d.Providers {
		if !slices.Contains(provider.Names, p.Name()) {
			panic(fmt.Sprintf("integrations: provider %q is not one of %v", p.Name(), provider.Names))
		}
		s.providers[p.Name()] = p
	}
	s.client = &http.Client{
		Transport: &http.Transport{DialContext: s.policy.DialContext, TLSHandshakeTimeout: 10 * time.Second,
			ResponseHeaderTimeout: 30 * time.Second, MaxIdleConnsPerHost: 2, IdleConnTimeout: time.Minute},
		Timeout: time.Minute,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 3 {
				return http.ErrUseLastResponse
			}
			return nil
		},
	}
	return s
}

// HTTPClient is the outbound policy's client every provider call goes through.
func (s *Service) HTTPClient() *http.Client { return s.client }

// RegisterJobs registers the area's job handlers.
func (s *Service) RegisterJobs(r *scheduler.Runner) {
	r.Handle(JobSync, s.syncJob)
	r.Handle(JobRemove, s.removeJob)
	r.Handle(JobDeploy, s.deployJob)
	r.Handle(JobUserEvent, s.userEventJob)
}

// baseURL is the provider's API base URL: the operator's, else the real platform's.
func (s *Service) baseURL(p provider.Provider) string {
	if u := s.cfg.BaseURLs[p.Name()]; u != "" {
		return u
	}
	return p.DefaultBaseURL()
}

// sealed is what an integration's Credentials hold: the provider's credentials and, after OAuth, the
// refresh token and expiry of the access token in Token.
type sealed struct {
	provider.Credentials
	RefreshToken string    `json:"refresh_token,omitempty"`
	Expiry       time.Time `json:"expiry,omitzero"`
}

func (s *Service) seal(c sealed) ([]byte, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	return s.box.Seal(b), nil
}

func (s *Service) open(rec *store.Integration) (sealed, error) {
	var c sealed
	if len(rec.Credentials) == 0 {
		return c, nil
	}
	b, err := s.box.Open(rec.Credentials)
	if err != nil {
		return c, fmt.Errorf("open the integration's credentials: %w", err)
	}
	return c, json.Unmarshal(b, &c)
}

// env is one provider call's surroundings.
func (s *Service) env(p provider.Provider, rec *store.Integration, c sealed) provider.Env {
	return provider.Env{HTTP: s.client, BaseURL: s.baseURL(p), Credentials: c.Credentials, Config: rec.Config}
}

// view is an integration's API resource.
func view(rec *store.Integration) *api.Integration {
	v := &api.Integration{ID: rec.ID, OrganizationID: rec.OrganizationID, ProjectID: rec.ProjectID, ExternalID: rec.ExternalID,
		Provider: rec.Provider, State: rec.State, HasCredentials: len(rec.Credentials) > 0, Config: rec.Config,
		LastError: rec.LastError, LastSyncAt: rec.LastSyncAt, Pushed: rec.Pushed, CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt,
		Previews: []api.IntegrationPreview{}}
	if v.Pushed == nil {
		v.Pushed = []string{}
	}
	if len(v.Config) == 0 {
		v.Config = json.RawMessage("null")
	}
	branches := slices.Collect(maps.Keys(rec.Previews))
	for b := range rec.BranchErrors {
		if _, ok := rec.Previews[b]; !ok {
			branches = append(branches, b)
		}
	}
	slices.Sort(branches)
	for _, b := range branches {
		v.Previews = append(v.Previews, api.IntegrationPreview{Branch: b, PreviewID: rec.Previews[b], Error: rec.BranchErrors[b]})
	}
	return v
}

// ParseBaseURLs reads up --integrations-base-url: comma-separated provider=URL pairs (an absolute http or
// https URL per provider, each provider once).
func ParseBaseURLs(list string) (map[string]string, error) {
	out := map[string]string{}
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		name, raw, ok := strings.Cut(f, "=")
		if !ok || !slices.Contains(provider.Names, name) {
			return nil, fmt.Errorf("%q is not provider=URL with a provider of %s", f, strings.Join(provider.Names, ", "))
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("%s is given twice", name)
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
			return nil, fmt.Errorf("%s: %q is not an http(s) URL", name, raw)
		}
		out[name] = strings.TrimRight(raw, "/")
	}
	return out, nil
}
