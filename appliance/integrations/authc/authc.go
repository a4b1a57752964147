// Package authc is the auth_c provider: a WorkOS-style identity provider whose Directory Sync users are
// synced into the project's database (docs/api-decisions.md, "Integrations: identity providers and user
// sync").
//
// It speaks WorkOS's API (https://workos.com/docs/reference/directory-sync): GET
// /directory_users?directory=&limit=&after= with the API key as a bearer token (Credentials.Token) lists
// one directory's users (Credentials.ExternalID, directory_…); the cursor is list_metadata.after. Webhooks
// carry the header WorkOS-Signature "t=<milliseconds>, v1=<hex HMAC-SHA256 of "<t>.<body>" keyed with the
// endpoint's secret>" (Credentials.WebhookSecret), with a 5-minute tolerance; events
// dsync.user.created, dsync.user.updated and dsync.user.deleted, each {id, event, data: the directory
// user, created_at}.
package authc

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/theappliance/appliance/appliance/integrations/dirhttp"
	"github.com/theappliance/appliance/appliance/integrations/provider"
	"github.com/theappliance/appliance/appliance/integrations/usersync"
)

// DefaultBaseURL is WorkOS's API.
const DefaultBaseURL = "https://api.workos.com"

// PageSize is the users asked for per page (WorkOS's maximum).
const PageSize = 100

// SignatureHeader carries a webhook's signature.
const SignatureHeader = "WorkOS-Signature"

type directory struct{}

var _ provider.Directory = directory{}

// New returns the auth_c provider.
func New() provider.Directory { return directory{} }

func (directory) Name() string           { return provider.AuthC }
func (directory) DefaultBaseURL() string { return DefaultBaseURL }

// ValidateConfig: {"schema", "table"} of the sync table (usersync.ValidateConfig).
func (directory) ValidateConfig(raw json.RawMessage) (json.RawMessage, error) {
	return usersync.ValidateConfig(raw)
}

// Check lists one user of the directory with the API key.
func (d directory) Check(ctx context.Context, env provider.Env) error {
	_, err := d.list(ctx, env, "", 1)
	return err
}

// ListUsers reads one page of PageSize users after the cursor; the next cursor is list_metadata.after.
func (d directory) ListUsers(ctx context.Context, env provider.Env, cursor string) ([]provider.User, string, error) {
	page, err := d.list(ctx, env, cursor, PageSize)
	if err != nil {
		return nil, "", err
	}
	users := make([]provider.User, 0, len(page.Data))
	for _, raw := range page.Data {
		u, err := parseUser(raw)
		if err != nil {
			return nil, "", err
		}
		users = append(users, u)
	}
	next := ""
	if page.ListMetadata.After != nil {
		next = *page.ListMetadata.After
	}
	return users, next, nil
}

type listAnswer struct {
	Data         []json.RawMessage `json:"data"`
	ListMetadata struct {
		After *string `json:"after"`
	} `json:"list_metadata"`
}

func (directory) list(ctx context.Context, env provider.Env, after string, limit int) (listAnswer, error) {
	var page listAnswer
	if env.Credentials.Token == "" {
		return page, fmt.Errorf("%w: auth_c needs the API key", provider.ErrCredentials)
	}
	if env.Credentials.ExternalID == "" {
		return page, errors.New("auth_c needs the directory's id (external_id)")
	}
	base, err := provider.BaseURL(env, DefaultBaseURL)
	if err != nil {
		return page, fmt.Errorf("auth_c: %w", err)
	}
	q := url.Values{"directory": {env.Credentials.ExternalID}, "limit": {strconv.Itoa(limit)}}
	if after != "" {
		q.Set("after", after)
	}
	if err := dirhttp.GetJSON(ctx, env.HTTP, base+"/directory_users?"+q.Encode(), "Bearer "+env.Credentials.Token, &page); err != nil {
		return page, fmt.Errorf("auth_c list directory users: %w", err)
	}
	return page, nil
}

// directoryUser is the part of WorkOS's Directory User the sync reads.
type directoryUser struct {
	ID        string `json:"id"`
	Email     string `json:"email"`
	FirstName string `json:"first_name"`
	LastName  string `json:"last_name"`
	Emails    []struct {
		Primary bool   `json:"primary"`
		Value   string `json:"value"`
	} `json:"emails"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

func parseUser(raw json.RawMessage) (provider.User, error) {
	var d directoryUser
	if err := json.Unmarshal(raw, &d); err != nil {
		return provider.User{}, fmt.Errorf("auth_c directory user: %w", err)
	}
	if d.ID == "" {
		return provider.User{}, errors.New("auth_c directory user without an id")
	}
	u := provider.User{ID: d.ID, Email: d.Email, FirstName: d.FirstName, LastName: d.LastName,
		CreatedAt: d.CreatedAt.UTC(), UpdatedAt: d.UpdatedAt.UTC(), Raw: raw}
	if u.Email == "" { // older payloads: the primary of emails
		for _, e := range d.Emails {
			if e.Primary {
				u.Email = e.Value
				break
			}
		}
	}
	return u, nil
}

// VerifyWebhook checks WorkOS-Signature: t within 5 minutes of now, v1 the HMAC-SHA256 of "<t>.<body>"
// (compared in constant time). The event id is the body's id.
func (directory) VerifyWebhook(env provider.Env, h http.Header, body []byte, now time.Time) (string, error) {
	header := h.Get(SignatureHeader)
	if header == "" {
		return "", fmt.Errorf("%w: no %s header", provider.ErrBadSignature, SignatureHeader)
	}
	var ts string
	var sigs [][]byte
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			if b, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	ms, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return "", fmt.Errorf("%w: %s must be t=<ms>, v1=<hex>", provider.ErrBadSignature, SignatureHeader)
	}
	if err := dirhttp.CheckTimestamp(time.UnixMilli(ms), now); err != nil {
		return "", err
	}
	if env.Credentials.WebhookSecret == "" {
		return "", fmt.Errorf("%w: no webhook secret stored", provider.ErrBadSignature)
	}
	want := Signature(env.Credentials.WebhookSecret, ts, body)
	ok := false
	for _, s := range sigs {
		if hmac.Equal(s, want) {
			ok = true
		}
	}
	if !ok {
		return "", fmt.Errorf("%w: no signature matches", provider.ErrBadSignature)
	}
	var e struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.ID == "" {
		return "", fmt.Errorf("%w: the signed body has no event id", provider.ErrBadSignature)
	}
	return e.ID, nil
}

// Signature is WorkOS's v1 signature: HMAC-SHA256 keyed with the secret's bytes of "<t>.<body>".
func Signature(secret, t string, body []byte) []byte {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(t))
	mac.Write([]byte("."))
	mac.Write(body)
	return mac.Sum(nil)
}

// UserEvent parses dsync.user.created and dsync.user.updated (At: data.updated_at) and
// dsync.user.deleted (At: the later of data.updated_at and the event's created_at, so that a deletion is
// never older than the user's last update). ID is the event's id.
func (directory) UserEvent(body []byte) (provider.UserEvent, error) {
	var e struct {
		ID        string          `json:"id"`
		Event     string          `json:"event"`
		Data      json.RawMessage `json:"data"`
		CreatedAt time.Time       `json:"created_at"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		return provider.UserEvent{}, fmt.Errorf("auth_c event: %w", err)
	}
	switch e.Event {
	case "dsync.user.created", "dsync.user.updated", "dsync.user.deleted":
	default:
		return provider.UserEvent{}, provider.ErrIgnored
	}
	u, err := parseUser(e.Data)
	if err != nil {
		return provider.UserEvent{}, err
	}
	ev := provider.UserEvent{ID: e.ID, User: u, At: u.UpdatedAt, Deleted: e.Event == "dsync.user.deleted"}
	if ev.Deleted && e.CreatedAt.After(ev.At) {
		ev.At = e.CreatedAt.UTC()
	}
	if ev.At.IsZero() {
		return provider.UserEvent{}, errors.New("auth_c event: the user has no updated_at")
	}
	return ev, nil
}
