// Package autha is the auth_a provider: a Clerk-style identity provider whose users are synced into the
// project's database (docs/api-decisions.md, "Integrations: identity providers and user sync").
//
// It speaks Clerk's Backend API (https://clerk.com/docs/reference/backend-api): GET /users?limit=&offset=
// with the instance's secret key as a bearer token (Credentials.Token) lists the users, newest first;
// the cursor is the offset. Webhooks come through Svix (Standard Webhooks): headers svix-id,
// svix-timestamp and svix-signature ("v1,<base64 HMAC-SHA256 of id.timestamp.body>", several
// space-separated), the endpoint's whsec_… secret (Credentials.WebhookSecret), a 5-minute tolerance; the
// signature is checked by the standardwebhooks library. Events user.created, user.updated (data: the
// user) and user.deleted (data: {id, deleted: true}).
package autha

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/theappliance/appliance/appliance/integrations/dirhttp"
	"github.com/theappliance/appliance/appliance/integrations/provider"
	"github.com/theappliance/appliance/appliance/integrations/usersync"
)

// DefaultBaseURL is Clerk's Backend API.
const DefaultBaseURL = "https://api.clerk.com/v1"

// PageSize is the users asked for per page (Clerk allows 1–500).
const PageSize = 100

type directory struct{}

var _ provider.Directory = directory{}

// New returns the auth_a provider.
func New() provider.Directory { return directory{} }

func (directory) Name() string           { return provider.AuthA }
func (directory) DefaultBaseURL() string { return DefaultBaseURL }

// ValidateConfig: {"schema", "table"} of the sync table (usersync.ValidateConfig).
func (directory) ValidateConfig(raw json.RawMessage) (json.RawMessage, error) {
	return usersync.ValidateConfig(raw)
}

// Check lists one user with the secret key.
func (d directory) Check(ctx context.Context, env provider.Env) error {
	_, err := d.list(ctx, env, 0, 1)
	return err
}

// ListUsers reads one page, PageSize users from the offset cursor ("" is 0); the next cursor is "" after
// a short page.
func (d directory) ListUsers(ctx context.Context, env provider.Env, cursor string) ([]provider.User, string, error) {
	offset := 0
	if cursor != "" {
		n, err := strconv.Atoi(cursor)
		if err != nil || n < 0 {
			return nil, "", errors.New("auth_a cursor must be a non-negative offset")
		}
		offset = n
	}
	raws, err := d.list(ctx, env, offset, PageSize)
	if err != nil {
		return nil, "", err
	}
	users := make([]provider.User, 0, len(raws))
	for _, raw := range raws {
		u, err := parseUser(raw)
		if err != nil {
			return nil, "", err
		}
		users = append(users, u)
	}
	next := ""
	if len(raws) == PageSize {
		next = strconv.Itoa(offset + len(raws))
	}
	return users, next, nil
}

func (directory) list(ctx context.Context, env provider.Env, offset, limit int) ([]json.RawMessage, error) {
	if env.Credentials.Token == "" {
		return nil, fmt.Errorf("%w: auth_a needs the instance's secret key", provider.ErrCredentials)
	}
	base, err := provider.BaseURL(env, DefaultBaseURL)
	if err != nil {
		return nil, fmt.Errorf("auth_a: %w", err)
	}
	q := url.Values{"limit": {strconv.Itoa(limit)}, "offset": {strconv.Itoa(offset)}}
	var raws []json.RawMessage
	if err := dirhttp.GetJSON(ctx, env.HTTP, base+"/users?"+q.Encode(), "Bearer "+env.Credentials.Token, &raws); err != nil {
		return nil, fmt.Errorf("auth_a list users: %w", err)
	}
	return raws, nil
}

// clerkUser is the part of Clerk's User object the sync reads.
type clerkUser struct {
	ID                    string  `json:"id"`
	FirstName             *string `json:"first_name"`
	LastName              *string `json:"last_name"`
	PrimaryEmailAddressID *string `json:"primary_email_address_id"`
	EmailAddresses        []struct {
		ID           string `json:"id"`
		EmailAddress string `json:"email_address"`
	} `json:"email_addresses"`
	CreatedAt int64 `json:"created_at"` // milliseconds since the epoch
	UpdatedAt int64 `json:"updated_at"`
}

func parseUser(raw json.RawMessage) (provider.User, error) {
	var c clerkUser
	if err := json.Unmarshal(raw, &c); err != nil {
		return provider.User{}, fmt.Errorf("auth_a user: %w", err)
	}
	if c.ID == "" {
		return provider.User{}, errors.New("auth_a user without an id")
	}
	u := provider.User{ID: c.ID, Raw: raw, CreatedAt: millis(c.CreatedAt), UpdatedAt: millis(c.UpdatedAt)}
	if c.FirstName != nil {
		u.FirstName = *c.FirstName
	}
	if c.LastName != nil {
		u.LastName = *c.LastName
	}
	for _, e := range c.EmailAddresses {
		if c.PrimaryEmailAddressID != nil && e.ID == *c.PrimaryEmailAddressID {
			u.Email = e.EmailAddress
		}
	}
	return u, nil
}

func millis(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// VerifyWebhook checks Svix's signature (svix-* headers, or their webhook-* Standard Webhooks names) with
// the standardwebhooks library and the timestamp's tolerance against now; the event id is svix-id.
func (directory) VerifyWebhook(env provider.Env, h http.Header, body []byte, now time.Time) (string, error) {
	get := func(name string) string {
		if v := h.Get("svix-" + name); v != "" {
			return v
		}
		return h.Get("webhook-" + name)
	}
	id, ts, sig := get("id"), get("timestamp"), get("signature")
	if id == "" || ts == "" || sig == "" {
		return "", fmt.Errorf("%w: svix-id, svix-timestamp and svix-signature are required", provider.ErrBadSignature)
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return "", fmt.Errorf("%w: svix-timestamp is not a number", provider.ErrBadSignature)
	}
	if err := dirhttp.CheckTimestamp(time.Unix(secs, 0), now); err != nil {
		return "", err
	}
	wh, err := standardwebhooks.NewWebhook(env.Credentials.WebhookSecret)
	if err != nil || env.Credentials.WebhookSecret == "" {
		return "", fmt.Errorf("%w: the stored webhook secret is not a whsec_ secret", provider.ErrBadSignature)
	}
	std := http.Header{}
	std.Set(standardwebhooks.HeaderWebhookID, id)
	std.Set(standardwebhooks.HeaderWebhookTimestamp, ts)
	std.Set(standardwebhooks.HeaderWebhookSignature, sig)
	// The library's own tolerance reads the wall clock; ours (above) is against now.
	if err := wh.VerifyIgnoringTimestamp(body, std); err != nil {
		return "", fmt.Errorf("%w: no signature matches", provider.ErrBadSignature)
	}
	return id, nil
}

// event is Clerk's webhook body.
type event struct {
	Type      string          `json:"type"`
	Object    string          `json:"object"`
	Data      json.RawMessage `json:"data"`
	Timestamp int64           `json:"timestamp"` // milliseconds; Clerk's newer payloads carry it
}

// UserEvent parses user.created and user.updated (At: the user's updated_at) and user.deleted (At: the
// event's timestamp, or now when the payload has none: a deletion arriving after an update is not older
// than it). ID is "<type>:<user id>:<At in ms>": the body carries no event id (svix-id, returned by
// VerifyWebhook, is the one to deduplicate by).
func (directory) UserEvent(body []byte) (provider.UserEvent, error) {
	var e event
	if err := json.Unmarshal(body, &e); err != nil {
		return provider.UserEvent{}, fmt.Errorf("auth_a event: %w", err)
	}
	var ev provider.UserEvent
	switch e.Type {
	case "user.created", "user.updated":
		u, err := parseUser(e.Data)
		if err != nil {
			return provider.UserEvent{}, err
		}
		ev = provider.UserEvent{User: u, At: u.UpdatedAt}
		if ev.At.IsZero() {
			ev.At = u.CreatedAt
		}
		if ev.At.IsZero() {
			return provider.UserEvent{}, errors.New("auth_a event: the user has no updated_at")
		}
	case "user.deleted":
		var d struct {
			ID      string `json:"id"`
			Deleted bool   `json:"deleted"`
		}
		if err := json.Unmarshal(e.Data, &d); err != nil {
			return provider.UserEvent{}, fmt.Errorf("auth_a event: %w", err)
		}
		if d.ID == "" {
			return provider.UserEvent{}, errors.New("auth_a event: user.deleted without the user's id")
		}
		ev = provider.UserEvent{Deleted: true, User: provider.User{ID: d.ID, Raw: e.Data}, At: millis(e.Timestamp)}
		if ev.At.IsZero() {
			ev.At = time.Now().UTC()
		}
	default:
		return provider.UserEvent{}, provider.ErrIgnored
	}
	ev.ID = fmt.Sprintf("%s:%s:%d", e.Type, ev.User.ID, ev.At.UnixMilli())
	return ev, nil
}
