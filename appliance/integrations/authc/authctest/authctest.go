// Package authctest is a local stand-in for the part of WorkOS's API auth_c uses (GET /directory_users
// with directory, limit and after, newest first, list_metadata.after, the API key checked), with users
// the test adds, changes and deletes in its directories, the calls recorded; and webhook requests signed
// the way WorkOS documents (https://workos.com/docs/events/data-syncing/webhooks: WorkOS-Signature
// "t=<ms>, v1=<hex HMAC-SHA256 of "<t>.<body>">"), computed here independently of authc's code.
package authctest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/integrations/fakeapi"
)

// User is a directory user of the fake.
type User struct {
	ID, Directory        string
	Email                string
	FirstName, LastName  string
	CreatedAt, UpdatedAt time.Time
}

// JSON is the user as WorkOS's API and events show it.
func (u User) JSON() map[string]any {
	return map[string]any{
		"object":            "directory_user",
		"id":                u.ID,
		"directory_id":      u.Directory,
		"organization_id":   "org_fake",
		"idp_id":            "idp_" + u.ID,
		"email":             u.Email,
		"emails":            []map[string]any{{"primary": true, "type": "work", "value": u.Email}},
		"first_name":        u.FirstName,
		"last_name":         u.LastName,
		"state":             "active",
		"custom_attributes": map[string]any{},
		"raw_attributes":    map[string]any{},
		"created_at":        u.CreatedAt.UTC().Format("2006-01-02T15:04:05.000Z"),
		"updated_at":        u.UpdatedAt.UTC().Format("2006-01-02T15:04:05.000Z"),
	}
}

// Call is one request the fake received.
type Call = fakeapi.Call

// Server is the fake API.
type Server struct {
	// URL is the API's base URL, what env.BaseURL takes.
	URL string
	// APIKey is the key the API accepts.
	APIKey string

	*fakeapi.Server // Calls, ResetCalls, Fail, Client

	mu    sync.Mutex
	users map[string]User
}

// New starts the fake with apiKey; stopped at cleanup.
func New(t testing.TB, apiKey string) *Server {
	s := &Server{APIKey: apiKey, users: map[string]User{}}
	s.Server = fakeapi.Start(t, fakeapi.Answer(s.serve), fakeapi.Options{
		Token: func() string { return s.APIKey },
		Refuse: func(w http.ResponseWriter) {
			fakeapi.JSON(w, http.StatusUnauthorized, map[string]any{"message": "Unauthorized"})
		},
	})
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

func (s *Server) serve(r *http.Request) (int, any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.answer(r)
}

func (s *Server) answer(r *http.Request) (int, any) {
	if r.Method != http.MethodGet || r.URL.Path != "/directory_users" {
		return http.StatusNotFound, map[string]any{"message": "Not Found"}
	}
	q := r.URL.Query()
	dir := q.Get("directory")
	if dir == "" {
		return http.StatusUnprocessableEntity, map[string]any{"message": "directory or group is required"}
	}
	limit := 10
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return http.StatusUnprocessableEntity, map[string]any{"message": "limit must be between 1 and 100"}
		}
		limit = n
	}
	var all []User
	for _, u := range s.users {
		if u.Directory == dir {
			all = append(all, u)
		}
	}
	// Newest first (order=desc, WorkOS's default), by id among equals.
	slices.SortFunc(all, func(a, b User) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	start := 0
	if after := q.Get("after"); after != "" {
		i := slices.IndexFunc(all, func(u User) bool { return u.ID == after })
		if i < 0 {
			return http.StatusUnprocessableEntity, map[string]any{"message": "after cursor is not a user of this directory"}
		}
		start = i + 1
	}
	data := []map[string]any{}
	end := min(start+limit, len(all))
	for _, u := range all[start:end] {
		data = append(data, u.JSON())
	}
	var next any
	if end < len(all) {
		next = all[end-1].ID
	}
	var before any
	if start > 0 && len(data) > 0 {
		before = all[start].ID
	}
	return http.StatusOK, map[string]any{"object": "list", "data": data, "list_metadata": map[string]any{"before": before, "after": next}}
}

// EventBody is WorkOS's event for a directory user: dsync.user.created, .updated or .deleted.
func EventBody(id, event string, u User, at time.Time) []byte {
	b, err := json.Marshal(map[string]any{"object": "event", "id": id, "event": event, "data": u.JSON(),
		"created_at": at.UTC().Format("2006-01-02T15:04:05.000Z")})
	if err != nil {
		panic(err)
	}
	return b
}

// Sign returns the WorkOS-Signature header WorkOS sends with body at time at.
func Sign(secret string, at time.Time, body []byte) http.Header {
	t := fmt.Sprint(at.UnixMilli())
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "%s.%s", t, body)
	h := http.Header{}
	h.Set("WorkOS-Signature", "t="+t+", v1="+hex.EncodeToString(mac.Sum(nil)))
	h.Set("Content-Type", "application/json")
	return h
}
