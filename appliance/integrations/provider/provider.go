// Package provider is the contract between the integrations area (appliance/integrations: the
// endpoints, the records, the sealed credentials, the jobs, OAuth and the inbound webhooks' routing) and
// the providers it drives: hosting and edge platforms that receive a project's connection settings
// (Platform: deploy_a, deploy_b, edge_c) and identity providers whose users are synced into a table of
// the project's database (Directory: auth_a, auth_b, auth_c).
//
// A provider speaks one real platform's documented public API (docs/api-decisions.md, "Integrations")
// at a base URL the operator may change; it never dials itself: every call goes through Env.HTTP, the
// client of the outbound destination policy. It keeps no state: what it needs is in Env.
package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
)

// The neutral names of the spec's providers.
const (
	DeployA = "deploy_a" // a Vercel-style hosting platform
	DeployB = "deploy_b" // a Netlify-style hosting platform
	EdgeC   = "edge_c"   // a Cloudflare-style edge platform
	AuthA   = "auth_a"   // a Clerk-style identity provider
	AuthB   = "auth_b"   // an Auth0-style identity provider
	AuthC   = "auth_c"   // a WorkOS-style identity provider
)

// Names lists every provider, in the spec's order.
var Names = []string{DeployA, DeployB, EdgeC, AuthA, AuthB, AuthC}

// Errors a provider returns; the area maps them to answers and job failures.
var (
	// ErrBadSignature: an inbound webhook is unsigned, badly signed, or outside the timestamp
	// tolerance. The API answers 401 and does nothing.
	ErrBadSignature = errors.New("webhook signature is missing or invalid")
	// ErrIgnored: a verified inbound event the integration has nothing to do for (another event type).
	ErrIgnored = errors.New("event not handled")
	// ErrCredentials: the provider refused the credential (401/403 from its API).
	ErrCredentials = errors.New("the provider refused the credentials")
	// ErrNoWebhooks: the provider sends no inbound events (edge_c).
	ErrNoWebhooks = errors.New("this provider sends no webhooks")
	// ErrUnusable: the platform cannot use the settings as they are (Unusable). The area shows the
	// error's own text on the integration and does not retry.
	ErrUnusable = errors.New("the platform cannot use these settings")
)

// Unusable is an ErrUnusable whose text says why and what to do; it names no secret and nothing the
// platform answered (the area shows it to the tenant).
func Unusable(format string, args ...any) error {
	return unusable(fmt.Sprintf(format, args...))
}

type unusable string

func (u unusable) Error() string        { return string(u) }
func (u unusable) Is(target error) bool { return target == ErrUnusable }

// Credentials are what connect (or the OAuth callback) stored, sealed by the area and opened for the
// call. Which fields are set depends on the provider (docs/api-decisions.md).
type Credentials struct {
	// Token is the API token, secret key or OAuth access token the provider's API takes.
	Token string `json:"token,omitempty"`
	// ExternalID is the provider-side resource the integration is bound to: deploy_a's project id,
	// deploy_b's site id, edge_c's account id, auth_b's tenant domain, auth_c's directory id.
	ExternalID string `json:"external_id,omitempty"`
	// WebhookSecret verifies inbound webhooks (an HMAC key, Svix's whsec_…, auth_b's bearer token).
	WebhookSecret string `json:"webhook_secret,omitempty"`
	// ClientID and ClientSecret: a client-credentials grant (auth_b's management API).
	ClientID     string `json:"client_id,omitempty"`
	ClientSecret string `json:"client_secret,omitempty"`
	// TeamID scopes deploy_a's calls to a team (Vercel's teamId), when set.
	TeamID string `json:"team_id,omitempty"`
}

// Env is one call's surroundings.
type Env struct {
	// HTTP is the outbound destination policy's client. Providers use nothing else.
	HTTP *http.Client
	// BaseURL is the provider's API base URL (the operator's setting; defaults are the real platforms').
	BaseURL string
	// Credentials are the integration's opened credentials.
	Credentials Credentials
	// Config is the integration's stored config, as the provider's ValidateConfig returned it.
	Config json.RawMessage
}

// Provider is what every provider has.
type Provider interface {
	// Name is the neutral name (DeployA…).
	Name() string
	// DefaultBaseURL is the real platform's API base URL.
	DefaultBaseURL() string
	// ValidateConfig checks a PUT's config for this provider and returns it normalized with its defaults
	// filled in (nil or {} in: the defaults). A bad config is an error whose text names the field.
	ValidateConfig(raw json.RawMessage) (json.RawMessage, error)
	// Check verifies the credentials against the provider (connect): nil, ErrCredentials, or another
	// error when the provider could not be asked.
	Check(ctx context.Context, env Env) error
	// VerifyWebhook checks an inbound request's signature with env.Credentials.WebhookSecret (constant
	// time; a 5-minute tolerance where the scheme has a timestamp) and returns the event's id for
	// deduplication with the verified body. ErrBadSignature when it does not verify; ErrNoWebhooks
	// when the provider sends none.
	VerifyWebhook(env Env, h http.Header, body []byte, now time.Time) (eventID string, err error)
}

// Settings are the connection settings a platform receives for one target.
type Settings struct {
	// Vars are the environment variables by name: DATABASE_URL (pooled), DIRECT_URL (direct), and the
	// CA's PEM under the config's CA variable name when the platform needs it. Names follow the config.
	Vars map[string]string
	// Direct is the direct connection string (edge_c's Hyperdrive origin).
	Direct string
	// CACert is the appliance CA's certificate (PEM), which the servers' certificates chain to: a
	// platform that dials the server itself and verifies it (edge_c's Hyperdrive, sslmode verify-full)
	// is given it, whatever the config's CA variable.
	CACert string
}

// Target says where a platform's settings go: production (Branch "") or one git branch's preview.
type Target struct {
	Branch string
}

// Platform is a hosting or edge platform.
type Platform interface {
	Provider
	// Push sets the settings for the target at the platform (create or update, idempotent) and returns
	// what it set, as names a person recognizes (variable names, or the Hyperdrive config's name) to show
	// on the integration.
	Push(ctx context.Context, env Env, target Target, s Settings) (pushed []string, err error)
	// Remove deletes what Push set for the target (best effort by the caller; idempotent: what is already
	// gone is not an error).
	Remove(ctx context.Context, env Env, target Target) error
	// DeployEvent parses a verified webhook body into a deployment event. ErrIgnored for other events.
	DeployEvent(body []byte) (DeployEvent, error)
}

// DeployEvent is a platform's deployment or branch event.
type DeployEvent struct {
	// ID deduplicates the platform's retries.
	ID string
	// Branch is the git branch deployed (or deleted).
	Branch string
	// Production: a deployment of the production branch/target (no preview database for it).
	Production bool
	// Closed: the branch was deleted or merged (its preview goes, per config).
	Closed bool
}

// User is one identity provider user, as synced into the project's table.
type User struct {
	ID        string
	Email     string
	FirstName string
	LastName  string
	CreatedAt time.Time
	UpdatedAt time.Time
	// Raw is the provider's JSON for the user, kept whole.
	Raw json.RawMessage
}

// UserEvent is an identity provider's user event.
type UserEvent struct {
	// ID deduplicates the provider's retries.
	ID string
	// Deleted: the user was deleted (User.ID is set; the rest may be empty).
	Deleted bool
	User    User
	// At orders events: the provider's time of the change (an older update never overwrites a newer one).
	At time.Time
}

// Directory is an identity provider whose users are synced.
type Directory interface {
	Provider
	// ListUsers returns one page of users from the provider's list API and the cursor of the next page
	// ("" after the last).
	ListUsers(ctx context.Context, env Env, cursor string) (users []User, next string, err error)
	// UserEvent parses a verified webhook body into a user event. ErrIgnored for other events.
	UserEvent(body []byte) (UserEvent, error)
}

// BaseURL is one call's API base URL: the operator's (env.BaseURL) or the platform's default def,
// without a trailing slash. Every provider takes it from here, so each refuses the same way a base URL
// that is no http(s) URL with a host.
func BaseURL(env Env, def string) (string, error) {
	base := strings.TrimRight(env.BaseURL, "/")
	if base == "" {
		base = strings.TrimRight(def, "/")
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", errors.New("the base url is not an http(s) url")
	}
	return base, nil
}

// envName is an environment variable's (or a secret's) name on the platforms: letters, digits and _,
// not starting with a digit.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,254}$`)

// EnvName reports whether name is an environment variable's (or a secret's) name: letters, digits and
// _, not starting with a digit, at most 255.
func EnvName(name string) bool { return envName.MatchString(name) }

// Variables are the names of the variables a platform's config pushes: the pooled and the direct
// connection strings and the CA's PEM ("": not pushed). The same object on every platform.
type Variables struct {
	Pooled string `json:"pooled"` // the pooled connection string (default DATABASE_URL)
	Direct string `json:"direct"` // the direct connection string (default DIRECT_URL)
	CA     string `json:"ca"`     // the CA's PEM ("": not pushed)
}

// Names are the variable names pushed: pooled, direct, then the CA's when set.
func (v Variables) Names() []string {
	n := []string{v.Pooled, v.Direct}
	if v.CA != "" {
		n = append(n, v.CA)
	}
	return n
}

// Check fills in the default names (DATABASE_URL, DIRECT_URL) and checks that each name is an
// environment variable's and that no name is given twice; what names the config ("deploy_b config")
// leads its errors.
func (v *Variables) Check(what string) error {
	if v.Pooled == "" {
		v.Pooled = "DATABASE_URL"
	}
	if v.Direct == "" {
		v.Direct = "DIRECT_URL"
	}
	for _, f := range []struct{ field, name string }{{"variables.pooled", v.Pooled}, {"variables.direct", v.Direct}, {"variables.ca", v.CA}} {
		if f.name != "" && !envName.MatchString(f.name) {
			return fmt.Errorf("%s: %s: %q is not an environment variable name (letters, digits and _, not starting with a digit)", what, f.field, f.name)
		}
	}
	names := v.Names()
	for i := range names {
		if slices.Contains(names[:i], names[i]) {
			return fmt.Errorf("%s: variables: %q is named twice", what, names[i])
		}
	}
	return nil
}
