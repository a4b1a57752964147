// Package authb is the auth_b provider: an Auth0-style identity provider whose users are synced into the
// project's database (docs/api-decisions.md, "Integrations: identity providers and user sync").
//
// It speaks Auth0's Management API v2 (https://auth0.com/docs/api/management/v2) at the tenant's domain
// (Credentials.ExternalID, e.g. acme.eu.auth0.com; a bare tenant name is <name>.auth0.com; the operator's
// base URL, when set, replaces scheme and host). A management API token comes from the client
// credentials grant (POST /oauth/token, audience https://<domain>/api/v2/, Credentials.ClientID and
// ClientSecret, golang.org/x/oauth2/clientcredentials over Env.HTTP), or is Credentials.Token itself when
// no client is set. Users are listed with GET /api/v2/users?sort=created_at:1&page=&per_page=100&
// include_totals=true; Auth0 pages through at most the first 1000 results of a query, so after ten pages
// the list continues with a new query from the last created_at seen (q=created_at:["…" TO *]).
//
// Inbound events come from a log stream of type Custom Webhook (Dashboard > Monitoring > Streams) whose
// Authorization Token is "Bearer <Credentials.WebhookSecret>": each POST carries a batch of tenant log
// events (JSON array, JSON lines or a JSON object), each {log_id, data: {type, date, user_id, …}}. There is
// no signature or timestamp in this scheme: the header is compared in constant time, replays are
// deduplicated by the log ids. User events are the log types ss (signup), sapi (a Management API
// operation on /api/v2/users…), sdu and du (user deleted), and sce, scu, scpn, sv (email, username,
// phone changed, email verified). One delivery carries many events, and most name a user without
// carrying it: the directory implements MultiEvent, which returns every user event of a delivery with
// each changed user read afresh from the API.
package authb

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/theappliance/appliance/appliance/integrations/dirhttp"
	"github.com/theappliance/appliance/appliance/integrations/provider"
	"github.com/theappliance/appliance/appliance/integrations/usersync"
)

// DefaultBaseURL stands for the tenant's own domain (https://<Credentials.ExternalID>): with it (or no
// base URL) the API is called there; any other base URL replaces it (tests, private deployments).
const DefaultBaseURL = "https://auth0.com"

// PageSize is the users asked for per page (Auth0's maximum); Window the results one query may page
// through.
const (
	PageSize = 100
	Window   = 1000
)

// MultiEvent is what the auth_b directory has beyond provider.Directory (the area finds it with a type
// assertion): UserEvents returns every user event of one log stream delivery, in the delivery's order,
// each created or changed user read afresh from the Management API (At: its updated_at) and each
// deletion as it came (At: the log's date). A user gone by the time it is read yields no event (its
// deletion's own log follows). provider.ErrIgnored when the delivery has no user event.
type MultiEvent interface {
	UserEvents(ctx context.Context, env provider.Env, body []byte) ([]provider.UserEvent, error)
}

type directory struct{}

var (
	_ provider.Directory = directory{}
	_ MultiEvent         = directory{}
)

// New returns the auth_b provider.
func New() provider.Directory { return directory{} }

func (directory) Name() string           { return provider.AuthB }
func (directory) DefaultBaseURL() string { return DefaultBaseURL }

// ValidateConfig: {"schema", "table"} of the sync table (usersync.ValidateConfig).
func (directory) ValidateConfig(raw json.RawMessage) (json.RawMessage, error) {
	return usersync.ValidateConfig(raw)
}

var hostname = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$`)

// domain is the tenant's domain from Credentials.ExternalID.
func domain(env provider.Env) (string, error) {
	d := strings.ToLower(strings.TrimSpace(env.Credentials.ExternalID))
	if d == "" {
		return "", errors.New("auth_b needs the tenant's domain (external_id, e.g. acme.eu.auth0.com)")
	}
	if !hostname.MatchString(d) || len(d) > 253 {
		return "", errors.New("auth_b external_id must be the tenant's domain, e.g. acme.eu.auth0.com")
	}
	if !strings.Contains(d, ".") {
		d += ".auth0.com"
	}
	return d, nil
}

// endpoints are one call's base URL and the API's audience.
func endpoints(env provider.Env) (base, audience string, err error) {
	d, err := domain(env)
	if err != nil {
		return "", "", err
	}
	base = strings.TrimSuffix(env.BaseURL, "/")
	if base == "" || base == DefaultBaseURL {
		base = "https://" + d
	}
	return base, "https://" + d + "/api/v2/", nil
}

// tokens caches management API tokens by endpoint and client (a hash: no secret kept as a key), so that
// a sync's pages and a delivery's reads share one token instead of spending the tenant's machine-to-machine
// token quota; a token is used until shortly before it expires (oauth2.Token.Valid).
var tokens = struct {
	sync.Mutex
	m map[[32]byte]*oauth2.Token
}{m: map[[32]byte]*oauth2.Token{}}

func tokenKey(env provider.Env, base, audience string) [32]byte {
	c := env.Credentials
	return sha256.Sum256([]byte(base + "/oauth/token\x00" + audience + "\x00" + c.ClientID + "\x00" + c.ClientSecret))
}

// forget drops the cached token of env's client: the API refused it (revoked, or its scopes changed).
func forget(env provider.Env, base, audience string) {
	key := tokenKey(env, base, audience)
	tokens.Lock()
	delete(tokens.m, key)
	tokens.Unlock()
}

// authorization returns the Authorization header's value for the Management API.
func authorization(ctx context.Context, env provider.Env, base, audience string) (string, error) {
	c := env.Credentials
	if c.ClientID == "" && c.ClientSecret == "" {
		if c.Token == "" {
			return "", fmt.Errorf("%w: auth_b needs a client id and secret (or a management API token)", provider.ErrCredentials)
		}
		return "Bearer " + c.Token, nil
	}
	if c.ClientID == "" || c.ClientSecret == "" {
		return "", fmt.Errorf("%w: auth_b needs both the client id and the client secret", provider.ErrCredentials)
	}
	if env.HTTP == nil {
		return "", errors.New("no HTTP client for the provider's API")
	}
	tokenURL := base + "/oauth/token"
	key := tokenKey(env, base, audience)
	tokens.Lock()
	tok := tokens.m[key]
	tokens.Unlock()
	if tok.Valid() {
		return "Bearer " + tok.AccessToken, nil
	}
	cfg := clientcredentials.Config{
		ClientID: c.ClientID, ClientSecret: c.ClientSecret, TokenURL: tokenURL,
		EndpointParams: url.Values{"audience": {audience}},
		AuthStyle:      oauth2.AuthStyleInParams,
	}
	tok, err := cfg.Token(context.WithValue(ctx, oauth2.HTTPClient, env.HTTP))
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && re.Response != nil {
			if err := dirhttp.CheckStatus(re.Response.StatusCode); err != nil {
				return "", fmt.Errorf("auth_b client credentials grant: %w", err)
			}
		}
		if ctx.Err() != nil {
			return "", fmt.Errorf("auth_b client credentials grant: %w", ctx.Err())
		}
		// The oauth2 package's errors may quote the answer's body: not passed on.
		return "", errors.New("auth_b client credentials grant failed: the token endpoint could not be reached or answered something else than a token")
	}
	tokens.Lock()
	now := time.Now()
	for k, t := range tokens.m {
		if !t.Expiry.IsZero() && t.Expiry.Before(now) {
			delete(tokens.m, k)
		}
	}
	tokens.m[key] = tok
	tokens.Unlock()
	return "Bearer " + tok.AccessToken, nil
}

// Check gets a token and lists one user (the token's read:users scope).
func (directory) Check(ctx context.Context, env provider.Env) error {
	base, audience, err := endpoints(env)
	if err != nil {
		return err
	}
	auth, err := authorization(ctx, env, base, audience)
	if err != nil {
		return err
	}
	var page usersPage
	q := url.Values{"page": {"0"}, "per_page": {"1"}, "include_totals": {"true"}}
	if err := dirhttp.GetJSON(ctx, env.HTTP, base+"/api/v2/users?"+q.Encode(), auth, &page); err != nil {
		if errors.Is(err, provider.ErrCredentials) {
			forget(env, base, audience)
		}
		return fmt.Errorf("auth_b list users: %w", err)
	}
	return nil
}

type usersPage struct {
	Start  int               `json:"start"`
	Limit  int               `json:"limit"`
	Length int               `json:"length"`
	Total  int               `json:"total"`
	Users  []json.RawMessage `json:"users"`
}

// ListUsers reads one page. The cursor is "page=<n>" within the current query, with "from=<created_at>"
// once the list continues past a query's 1000 results.
func (directory) ListUsers(ctx context.Context, env provider.Env, cursor string) ([]provider.User, string, error) {
	base, audience, err := endpoints(env)
	if err != nil {
		return nil, "", err
	}
	c, err := url.ParseQuery(cursor)
	if err != nil {
		return nil, "", errors.New("auth_b cursor is invalid")
	}
	pageNo := 0
	if v := c.Get("page"); v != "" {
		if pageNo, err = strconv.Atoi(v); err != nil || pageNo < 0 || (pageNo+1)*PageSize > Window {
			return nil, "", errors.New("auth_b cursor is invalid")
		}
	}
	from := c.Get("from")
	auth, err := authorization(ctx, env, base, audience)
	if err != nil {
		return nil, "", err
	}
	q := url.Values{"sort": {"created_at:1"}, "page": {strconv.Itoa(pageNo)}, "per_page": {strconv.Itoa(PageSize)}, "include_totals": {"true"}}
	if from != "" {
		q.Set("q", fmt.Sprintf(`created_at:[%q TO *]`, from))
		q.Set("search_engine", "v3")
	}
	var page usersPage
	if err := dirhttp.GetJSON(ctx, env.HTTP, base+"/api/v2/users?"+q.Encode(), auth, &page); err != nil {
		if errors.Is(err, provider.ErrCredentials) {
			forget(env, base, audience)
		}
		return nil, "", fmt.Errorf("auth_b list users: %w", err)
	}
	users := make([]provider.User, 0, len(page.Users))
	var last string
	for _, raw := range page.Users {
		u, created, err := parseUser(raw)
		if err != nil {
			return nil, "", err
		}
		users = append(users, u)
		last = created
	}
	if len(page.Users) < PageSize {
		return users, "", nil
	}
	if (pageNo+2)*PageSize <= Window {
		next := url.Values{"page": {strconv.Itoa(pageNo + 1)}}
		if from != "" {
			next.Set("from", from)
		}
		return users, next.Encode(), nil
	}
	// The query's 1000 results are read: the next query starts at the last creation time seen (the users
	// created at that instant are read again, which the sync table takes as no change).
	if last == "" || last == from {
		return nil, "", fmt.Errorf("auth_b cannot list past the users created at %s: more than %d share that time", last, Window)
	}
	return users, url.Values{"page": {"0"}, "from": {last}}.Encode(), nil
}

// auth0User is the part of Auth0's user the sync reads.
type auth0User struct {
	UserID     string `json:"user_id"`
	Email      string `json:"email"`
	GivenName  string `json:"given_name"`
	FamilyName string `json:"family_name"`
	CreatedAt  string `json:"created_at"`
	UpdatedAt  string `json:"updated_at"`
}

// parseUser returns the user and its created_at as Auth0 wrote it.
func parseUser(raw json.RawMessage) (provider.User, string, error) {
	var a auth0User
	if err := json.Unmarshal(raw, &a); err != nil {
		return provider.User{}, "", fmt.Errorf("auth_b user: %w", err)
	}
	if a.UserID == "" {
		return provider.User{}, "", errors.New("auth_b user without a user_id")
	}
	u := provider.User{ID: a.UserID, Email: a.Email, FirstName: a.GivenName, LastName: a.FamilyName, Raw: raw}
	var err error
	if u.CreatedAt, err = parseTime(a.CreatedAt); err != nil {
		return provider.User{}, "", fmt.Errorf("auth_b user %s created_at: %w", a.UserID, err)
	}
	if u.UpdatedAt, err = parseTime(a.UpdatedAt); err != nil {
		return provider.User{}, "", fmt.Errorf("auth_b user %s updated_at: %w", a.UserID, err)
	}
	return u, a.CreatedAt, nil
}

func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	return t.UTC(), err
}

// VerifyWebhook compares the Authorization header with "Bearer <WebhookSecret>" in constant time; the
// event id is the delivery's log id, or "<first>..<last>" of a batch's (Auth0's log ids grow).
func (directory) VerifyWebhook(env provider.Env, h http.Header, body []byte, _ time.Time) (string, error) {
	secret := env.Credentials.WebhookSecret
	got := h.Get("Authorization")
	if secret == "" || got == "" {
		return "", fmt.Errorf("%w: no Authorization header or no stored token", provider.ErrBadSignature)
	}
	want := sha256.Sum256([]byte("Bearer " + secret))
	have := sha256.Sum256([]byte(got))
	if subtle.ConstantTimeCompare(want[:], have[:]) != 1 {
		return "", fmt.Errorf("%w: the Authorization header does not match", provider.ErrBadSignature)
	}
	// A body that is not a delivery is refused like a bad signature: nothing happens.
	logs, err := parseLogs(body)
	if err != nil {
		return "", fmt.Errorf("%w: %w", provider.ErrBadSignature, err)
	}
	if len(logs) == 0 {
		return "", fmt.Errorf("%w: the delivery has no log events", provider.ErrBadSignature)
	}
	first, last := logs[0].ID, logs[len(logs)-1].ID
	if first == "" || last == "" {
		return "", fmt.Errorf("%w: a log event without a log_id", provider.ErrBadSignature)
	}
	if len(logs) == 1 {
		return first, nil
	}
	return first + ".." + last, nil
}

// logEvent is one tenant log event of a delivery.
type logEvent struct {
	ID   string
	Data logData
	Raw  json.RawMessage
}

type logData struct {
	LogID    string `json:"log_id"`
	Type     string `json:"type"`
	Date     string `json:"date"`
	UserID   string `json:"user_id"`
	UserName string `json:"user_name"`
	Details  struct {
		Request struct {
			Method string `json:"method"`
			Path   string `json:"path"`
		} `json:"request"`
		Response struct {
			StatusCode int             `json:"statusCode"`
			Body       json.RawMessage `json:"body"`
		} `json:"response"`
	} `json:"details"`
}

// parseLogs reads a delivery in any of the stream's content formats: a JSON array, JSON lines, or an
// object (one event, or events by index).
func parseLogs(body []byte) ([]logEvent, error) {
	var items []json.RawMessage
	d := json.NewDecoder(strings.NewReader(string(body)))
	for d.More() {
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			return nil, fmt.Errorf("auth_b log stream delivery is not JSON: %w", err)
		}
		switch strings.TrimSpace(string(v))[0] {
		case '[':
			var arr []json.RawMessage
			if err := json.Unmarshal(v, &arr); err != nil {
				return nil, fmt.Errorf("auth_b log stream delivery: %w", err)
			}
			items = append(items, arr...)
		case '{':
			var probe map[string]json.RawMessage
			if err := json.Unmarshal(v, &probe); err != nil {
				return nil, fmt.Errorf("auth_b log stream delivery: %w", err)
			}
			_, hasID := probe["log_id"]
			_, hasData := probe["data"]
			_, hasType := probe["type"]
			if hasID || hasData || hasType {
				items = append(items, v)
				continue
			}
			keys := make([]string, 0, len(probe))
			for k := range probe {
				keys = append(keys, k)
			}
			slices.SortFunc(keys, func(a, b string) int {
				x, _ := strconv.Atoi(a)
				y, _ := strconv.Atoi(b)
				if x != y {
					return x - y
				}
				return strings.Compare(a, b)
			})
			for _, k := range keys {
				items = append(items, probe[k])
			}
		default:
			return nil, errors.New("auth_b log stream delivery holds something other than log events")
		}
	}
	logs := make([]logEvent, 0, len(items))
	for _, it := range items {
		var wrap struct {
			LogID string          `json:"log_id"`
			Data  json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(it, &wrap); err != nil {
			return nil, fmt.Errorf("auth_b log event: %w", err)
		}
		raw := wrap.Data
		if len(raw) == 0 {
			raw = it // the event itself, unwrapped
		}
		var data logData
		if err := json.Unmarshal(raw, &data); err != nil {
			return nil, fmt.Errorf("auth_b log event: %w", err)
		}
		id := wrap.LogID
		if id == "" {
			id = data.LogID
		}
		logs = append(logs, logEvent{ID: id, Data: data, Raw: raw})
	}
	return logs, nil
}

// change is what one log event says about a user.
type change struct {
	kind   int // changeNone, changeUser (read it), changeDeleted
	userID string
	at     time.Time
	user   *provider.User // the user when the log carries it (a Management API answer)
}

const (
	changeNone = iota
	changeUser
	changeDeleted
)

var usersPath = regexp.MustCompile(`^/api/v2/users(?:/([^/?]+))?/?(?:\?.*)?$`)

func classify(l logEvent) (change, error) {
	at, err := parseTime(l.Data.Date)
	if err != nil {
		return change{}, fmt.Errorf("auth_b log %s date: %w", l.ID, err)
	}
	c := change{userID: l.Data.UserID, at: at}
	switch l.Data.Type {
	case "ss", "sce", "scu", "scpn", "sv":
		c.kind = changeUser
	case "sdu", "du":
		c.kind = changeDeleted
	case "sapi":
		m := usersPath.FindStringSubmatch(l.Data.Details.Request.Path)
		if m == nil {
			return change{}, nil
		}
		id, err := url.PathUnescape(m[1])
		if err != nil {
			return change{}, nil
		}
		switch strings.ToUpper(l.Data.Details.Request.Method) {
		case http.MethodDelete:
			if id == "" {
				return change{}, nil
			}
			c.kind, c.userID = changeDeleted, id
		case http.MethodPost, http.MethodPatch, http.MethodPut:
			c.kind, c.userID = changeUser, id
			if body := l.Data.Details.Response.Body; len(body) > 0 && body[0] == '{' {
				if u, _, err := parseUser(body); err == nil && (id == "" || u.ID == id) {
					c.user, c.userID = &u, u.ID
				}
			}
		default:
			return change{}, nil
		}
	default:
		return change{}, nil
	}
	if c.userID == "" {
		return change{}, nil
	}
	return c, nil
}

// UserEvent parses the first user event of a delivery from the log alone (MultiEvent reads the users
// afresh and returns all of them): a deletion (At: the log's date); a Management API answer that
// carries the user (At: its updated_at); a signup with the id and the email (user_name) only (At: the
// log's date; the names arrive with the user's next change). Other changes need the user read:
// provider.ErrIgnored here.
func (directory) UserEvent(body []byte) (provider.UserEvent, error) {
	logs, err := parseLogs(body)
	if err != nil {
		return provider.UserEvent{}, err
	}
	for _, l := range logs {
		c, err := classify(l)
		if err != nil {
			return provider.UserEvent{}, err
		}
		switch {
		case c.kind == changeDeleted:
			return provider.UserEvent{ID: l.ID, Deleted: true, User: provider.User{ID: c.userID}, At: c.at}, nil
		case c.kind == changeUser && c.user != nil:
			at := c.user.UpdatedAt
			if at.IsZero() {
				at = c.at
			}
			return provider.UserEvent{ID: l.ID, User: *c.user, At: at}, nil
		case c.kind == changeUser && l.Data.Type == "ss":
			u := provider.User{ID: c.userID, CreatedAt: c.at, UpdatedAt: c.at}
			if strings.Contains(l.Data.UserName, "@") {
				u.Email = l.Data.UserName
			}
			return provider.UserEvent{ID: l.ID, User: u, At: c.at}, nil
		}
	}
	return provider.UserEvent{}, provider.ErrIgnored
}

// UserEvents implements MultiEvent.
func (directory) UserEvents(ctx context.Context, env provider.Env, body []byte) ([]provider.UserEvent, error) {
	logs, err := parseLogs(body)
	if err != nil {
		return nil, err
	}
	var changes []change
	var ids []string
	for _, l := range logs {
		c, err := classify(l)
		if err != nil {
			return nil, err
		}
		if c.kind == changeNone {
			continue
		}
		changes = append(changes, c)
		ids = append(ids, l.ID)
	}
	if len(changes) == 0 {
		return nil, provider.ErrIgnored
	}
	base, audience, err := endpoints(env)
	if err != nil {
		return nil, err
	}
	var auth string
	read := map[string]*provider.User{} // each changed user read once per delivery; nil: gone
	var evs []provider.UserEvent
	for i, c := range changes {
		if c.kind == changeDeleted {
			evs = append(evs, provider.UserEvent{ID: ids[i], Deleted: true, User: provider.User{ID: c.userID}, At: c.at})
			continue
		}
		u, done := read[c.userID]
		if !done {
			if auth == "" {
				if auth, err = authorization(ctx, env, base, audience); err != nil {
					return nil, err
				}
			}
			if u, err = getUser(ctx, env, base, auth, c.userID); err != nil {
				if errors.Is(err, provider.ErrCredentials) {
					forget(env, base, audience)
				}
				return nil, err
			}
			read[c.userID] = u
		}
		if u == nil {
			continue
		}
		at := u.UpdatedAt
		if at.IsZero() {
			at = c.at
		}
		evs = append(evs, provider.UserEvent{ID: ids[i], User: *u, At: at})
	}
	return evs, nil
}

// getUser reads GET /api/v2/users/{id}: nil when the user is gone.
func getUser(ctx context.Context, env provider.Env, base, auth, id string) (*provider.User, error) {
	var raw json.RawMessage
	err := dirhttp.GetJSON(ctx, env.HTTP, base+"/api/v2/users/"+url.PathEscape(id), auth, &raw)
	var se *dirhttp.StatusError
	if errors.As(err, &se) && se.Status == http.StatusNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("auth_b read user: %w", err)
	}
	u, _, err := parseUser(raw)
	if err != nil {
		return nil, err
	}
	return &u, nil
}
