// Package authatest is a local stand-in for the part of Clerk's Backend API auth_a uses (GET /v1/users
// with limit and offset, newest first, the secret key checked), with users the test adds, changes and
// deletes, the calls recorded; and webhook requests signed by the standardwebhooks library (Svix's
// scheme), so that autha's verification is checked against code we did not write.
package authatest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/theappliance/appliance/appliance/integrations/fakeapi"
)

// User is a user of the fake instance.
type User struct {
	ID                   string
	Email                string
	FirstName, LastName  string
	CreatedAt, UpdatedAt time.Time
}

// JSON is the user as Clerk's API and webhooks show it.
func (u User) JSON() map[string]any {
	emailID := "idn_" + u.ID
	name := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	return map[string]any{
		"object":                   "user",
		"id":                       u.ID,
		"first_name":               name(u.FirstName),
		"last_name":                name(u.LastName),
		"primary_email_address_id": emailID,
		"email_addresses": []map[string]any{
			{"id": "idn_other_" + u.ID, "object": "email_address", "email_address": "secondary." + u.Email},
			{"id": emailID, "object": "email_address", "email_address": u.Email},
		},
		"created_at":      u.CreatedAt.UnixMilli(),
		"updated_at":      u.UpdatedAt.UnixMilli(),
		"public_metadata": map[string]any{},
	}
}

// Call is one request the fake received.
type Call = fakeapi.Call

// Server is the fake Backend API.
type Server struct {
	// URL is the API's base URL (…/v1), what env.BaseURL takes.
	URL string
	// SecretKey is the key the API accepts.
	SecretKey string

	*fakeapi.Server // Calls, ResetCalls, Fail, Client

	mu    sync.Mutex
	users map[string]User
}

// New starts the fake with secretKey; stopped at cleanup.
func New(t testing.TB, secretKey string) *Server {
	s := &Server{SecretKey: secretKey, users: map[string]User{}}
	s.Server = fakeapi.Start(t, fakeapi.Answer(s.serve), fakeapi.Options{
		Token: func() string { return s.SecretKey },
		Refuse: func(w http.ResponseWriter) {
			fakeapi.JSON(w, http.StatusUnauthorized, clerkError("authentication_invalid", "Unauthorized request"))
		},
	})
	s.URL = s.Root() + "/v1"
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

func clerkError(code, msg string) map[string]any {
	return map[string]any{"errors": []map[string]any{{"code": code, "message": msg, "long_message": msg}}}
}

func (s *Server) answer(r *http.Request) (int, any) {
	if r.Method != http.MethodGet || r.URL.Path != "/v1/users" {
		return http.StatusNotFound, clerkError("resource_not_found", "not found")
	}
	limit, offset := 10, 0
	q := r.URL.Query()
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 500 {
			return http.StatusUnprocessableEntity, clerkError("form_param_value_invalid", "limit must be between 1 and 500")
		}
		limit = n
	}
	if v := q.Get("offset"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return http.StatusUnprocessableEntity, clerkError("form_param_value_invalid", "offset must be non-negative")
		}
		offset = n
	}
	all := make([]User, 0, len(s.users))
	for _, u := range s.users {
		all = append(all, u)
	}
	// Newest first, as Clerk's default order_by=-created_at.
	slices.SortFunc(all, func(a, b User) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	page := []map[string]any{}
	for i := offset; i < len(all) && i < offset+limit; i++ {
		page = append(page, all[i].JSON())
	}
	return http.StatusOK, page
}

// EventBody is Clerk's webhook body for a user event: user.created and user.updated carry the user,
// user.deleted {id, deleted: true}; timestamp is the event's time in milliseconds.
func EventBody(typ string, u User, at time.Time) []byte {
	data := u.JSON()
	if typ == "user.deleted" {
		data = map[string]any{"object": "user", "id": u.ID, "deleted": true}
	}
	b, err := json.Marshal(map[string]any{"object": "event", "type": typ, "data": data, "timestamp": at.UnixMilli(), "instance_id": "ins_fake"})
	if err != nil {
		panic(err)
	}
	return b
}

// Sign returns the headers Svix sends with body: svix-id, svix-timestamp and the svix-signature the
// standardwebhooks library computes for secret (whsec_…).
func Sign(t testing.TB, secret, msgID string, at time.Time, body []byte) http.Header {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := wh.Sign(msgID, at, body)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("svix-id", msgID)
	h.Set("svix-timestamp", fmt.Sprint(at.Unix()))
	h.Set("svix-signature", sig)
	h.Set("Content-Type", "application/json")
	return h
}
