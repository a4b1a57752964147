// Package authbtest is a local stand-in for the part of Auth0 auth_b uses: the token endpoint's client
// credentials grant (POST /oauth/token: client id, secret and the tenant's Management API audience
// checked) and the Management API's users (GET /api/v2/users with sort=created_at:1, page, per_page ≤ 100,
// include_totals, Auth0's limit of 1000 results per query, and the q=created_at:["…" TO *] range; GET
// /api/v2/users/{id}), a token from the grant checked on each call; users the test adds, changes and
// deletes; the calls recorded. Log stream deliveries are built by LogBatch and its log constructors, with
// the Authorization header a stream configured with the token sends.
package authbtest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/integrations/fakeapi"
)

// User is a user of the fake tenant.
type User struct {
	ID                   string // user_id, e.g. auth0|abc
	Email                string
	GivenName            string
	FamilyName           string
	CreatedAt, UpdatedAt time.Time
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// JSON is the user as the Management API shows it.
func (u User) JSON() map[string]any {
	return map[string]any{
		"user_id":        u.ID,
		"email":          u.Email,
		"email_verified": true,
		"given_name":     u.GivenName,
		"family_name":    u.FamilyName,
		"name":           strings.TrimSpace(u.GivenName + " " + u.FamilyName),
		"identities":     []map[string]any{{"provider": "auth0", "user_id": strings.TrimPrefix(u.ID, "auth0|"), "connection": "Username-Password-Authentication", "isSocial": false}},
		"created_at":     stamp(u.CreatedAt),
		"updated_at":     stamp(u.UpdatedAt),
	}
}

// Call is one request the fake received (the token request's parameters are its Body).
type Call = fakeapi.Call

// Server is the fake tenant.
type Server struct {
	// URL is the tenant's base URL (what env.BaseURL takes); Domain the tenant's domain (external_id),
	// which the audience names.
	URL, Domain string
	// ClientID and ClientSecret are the machine-to-machine application the grant accepts.
	ClientID, ClientSecret string

	*fakeapi.Server // Calls, ResetCalls, Fail, Client

	mu     sync.Mutex
	users  map[string]User
	tokens map[string]bool
}

// New starts the fake tenant; stopped at cleanup.
func New(t testing.TB, domain, clientID, clientSecret string) *Server {
	s := &Server{Domain: domain, ClientID: clientID, ClientSecret: clientSecret, users: map[string]User{}, tokens: map[string]bool{}}
	s.Server = fakeapi.Start(t, fakeapi.Answer(s.serve), fakeapi.Options{}) // the token endpoint takes no bearer; the API checks its tokens
	s.URL = s.Root()
	return s
}

// Put adds or replaces a user.
func (s *Server) Put(u User) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users[u.ID] = u
}

// Delete removes a user.
func (s *Server) Delete(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.users, id)
}

// RevokeTokens invalidates every token issued so far.
func (s *Server) RevokeTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens = map[string]bool{}
}

func (s *Server) serve(r *http.Request) (int, any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.URL.Path == "/oauth/token" {
		return s.token(r)
	}
	return s.api(r)
}

func (s *Server) token(r *http.Request) (int, any) {
	if r.Method != http.MethodPost {
		return http.StatusNotFound, map[string]any{"error": "not_found"}
	}
	form := url.Values{}
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch mt {
	case "application/x-www-form-urlencoded":
		if err := r.ParseForm(); err != nil {
			return http.StatusBadRequest, map[string]any{"error": "invalid_request"}
		}
		form = r.PostForm
	case "application/json":
		var m map[string]string
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
			return http.StatusBadRequest, map[string]any{"error": "invalid_request"}
		}
		for k, v := range m {
			form.Set(k, v)
		}
	default:
		return http.StatusBadRequest, map[string]any{"error": "invalid_request"}
	}
	if id, secret, ok := r.BasicAuth(); ok {
		form.Set("client_id", id)
		form.Set("client_secret", secret)
	}
	if form.Get("grant_type") != "client_credentials" {
		return http.StatusForbidden, map[string]any{"error": "unauthorized_client", "error_description": "Grant type not allowed for the client."}
	}
	if form.Get("client_id") != s.ClientID || form.Get("client_secret") != s.ClientSecret {
		return http.StatusUnauthorized, map[string]any{"error": "access_denied", "error_description": "Unauthorized"}
	}
	if form.Get("audience") != "https://"+s.Domain+"/api/v2/" {
		return http.StatusForbidden, map[string]any{"error": "access_denied", "error_description": "Service not enabled within domain: " + form.Get("audience")}
	}
	b := make([]byte, 16)
	rand.Read(b)
	tok := "eyJfake." + hex.EncodeToString(b)
	s.tokens[tok] = true
	return http.StatusOK, map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": 86400, "scope": "read:users"}
}

func apiError(status int, code, msg string) (int, any) {
	return status, map[string]any{"statusCode": status, "error": http.StatusText(status), "message": msg, "errorCode": code}
}

var createdFrom = regexp.MustCompile(`^created_at:\["([^"]+)" TO \*\]$`)

func (s *Server) api(r *http.Request) (int, any) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || !s.tokens[tok] {
		return apiError(http.StatusUnauthorized, "invalid_token", "Invalid token")
	}
	if r.Method != http.MethodGet {
		return apiError(http.StatusNotFound, "not_found", "Not Found")
	}
	if id, ok := strings.CutPrefix(r.URL.Path, "/api/v2/users/"); ok {
		u, found := s.users[id]
		if !found {
			return apiError(http.StatusNotFound, "inexistent_user", "The user does not exist.")
		}
		return http.StatusOK, u.JSON()
	}
	if r.URL.Path != "/api/v2/users" {
		return apiError(http.StatusNotFound, "not_found", "Not Found")
	}
	q := r.URL.Query()
	page, perPage := 0, 50
	if v := q.Get("page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return apiError(http.StatusBadRequest, "invalid_query_string", "Query validation error: page")
		}
		page = n
	}
	if v := q.Get("per_page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 100 {
			return apiError(http.StatusBadRequest, "invalid_query_string", "Query validation error: per_page must be at most 100")
		}
		perPage = n
	}
	if (page+1)*perPage > 1000 {
		return apiError(http.StatusBadRequest, "invalid_paging", "You can only page through the first 1000 records. See https://auth0.com/docs/users/search/v3/view-search-results-by-page#limitation")
	}
	var from time.Time
	if v := q.Get("q"); v != "" {
		m := createdFrom.FindStringSubmatch(v)
		if m == nil {
			return apiError(http.StatusBadRequest, "invalid_query_string", "the fake knows only created_at:[\"…\" TO *]")
		}
		t, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			return apiError(http.StatusBadRequest, "invalid_query_string", "bad date")
		}
		from = t
	}
	var all []User
	for _, u := range s.users {
		if !u.CreatedAt.Before(from) {
			all = append(all, u)
		}
	}
	switch q.Get("sort") {
	case "", "created_at:1":
		slices.SortFunc(all, func(a, b User) int {
			if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
				return c
			}
			return strings.Compare(a.ID, b.ID)
		})
	default:
		return apiError(http.StatusBadRequest, "invalid_query_string", "the fake sorts by created_at:1 only")
	}
	start := min(page*perPage, len(all))
	end := min(start+perPage, len(all))
	users := []map[string]any{}
	for _, u := range all[start:end] {
		users = append(users, u.JSON())
	}
	if q.Get("include_totals") != "true" {
		return http.StatusOK, users
	}
	return http.StatusOK, map[string]any{"start": start, "limit": perPage, "length": len(users), "total": min(len(all), 1000), "users": users}
}

// Log is one tenant log event of a log stream delivery.
type Log struct {
	ID   string
	Data map[string]any
}

// SignupLog is an ss (successful signup) log for u.
func SignupLog(id string, u User, at time.Time) Log {
	return Log{ID: id, Data: map[string]any{"type": "ss", "date": stamp(at), "user_id": u.ID, "user_name": u.Email,
		"connection": "Username-Password-Authentication", "strategy": "auth0", "strategy_type": "database", "log_id": id}}
}

// DeletionLog is an sdu (successful user deletion) log for the user id.
func DeletionLog(id, userID string, at time.Time) Log {
	return Log{ID: id, Data: map[string]any{"type": "sdu", "date": stamp(at), "user_id": userID, "description": "user deleted",
		"details": map[string]any{"body": map[string]any{"tenant": "fake"}}, "log_id": id}}
}

// APILog is an sapi (Management API operation) log: method on /api/v2/users[/<id>], answered with u
// (PATCH and POST) or nothing (DELETE).
func APILog(id, method string, u User, at time.Time) Log {
	path := "/api/v2/users"
	if method != http.MethodPost {
		path += "/" + url.PathEscape(u.ID)
	}
	resp := map[string]any{"statusCode": 204}
	if method != http.MethodDelete {
		resp = map[string]any{"statusCode": 200, "body": u.JSON()}
	}
	return Log{ID: id, Data: map[string]any{"type": "sapi", "date": stamp(at), "description": "Update a user", "client_name": "",
		"details": map[string]any{"request": map[string]any{"method": strings.ToLower(method), "path": path, "body": map[string]any{}}, "response": resp},
		"log_id":  id}}
}

// OtherLog is a log of another type (a login, s) for u.
func OtherLog(id, typ string, u User, at time.Time) Log {
	return Log{ID: id, Data: map[string]any{"type": typ, "date": stamp(at), "user_id": u.ID, "user_name": u.Email, "log_id": id}}
}

// LogBatch is a delivery in the stream's JSON array format: [{log_id, data}…].
func LogBatch(logs ...Log) []byte {
	var items []map[string]any
	for _, l := range logs {
		items = append(items, map[string]any{"log_id": l.ID, "data": l.Data})
	}
	b, err := json.Marshal(items)
	if err != nil {
		panic(err)
	}
	return b
}

// LogLines is the same delivery in the JSON lines format.
func LogLines(logs ...Log) []byte {
	var sb strings.Builder
	for _, l := range logs {
		b, err := json.Marshal(map[string]any{"log_id": l.ID, "data": l.Data})
		if err != nil {
			panic(err)
		}
		sb.Write(b)
		sb.WriteByte('\n')
	}
	return []byte(sb.String())
}

// Headers are what a stream whose Authorization Token is "Bearer <token>" sends.
func Headers(token string) http.Header {
	h := http.Header{}
	h.Set("Authorization", fmt.Sprintf("Bearer %s", token))
	h.Set("Content-Type", "application/json")
	return h
}
