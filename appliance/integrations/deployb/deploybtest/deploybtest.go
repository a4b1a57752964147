// Package deploybtest is a local fake of the part of Netlify's API deploy_b uses, for tests: an HTTP
// server on a loopback port answering the documented paths and shapes (netlify/open-api's swagger.yml)
// — GET /sites/{site_id}, and the environment variable API under /accounts/{account_id}/env (list,
// create, read, update, set a value, delete, delete a value) —, checking the bearer token, keeping its
// state in memory and recording every call. Notification signs a deploy notification as Netlify does (a
// JWS built here with crypto/hmac, independently of the provider's verification).
package deploybtest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"sync"
	"testing"

	"github.com/theappliance/appliance/appliance/integrations/fakeapi"
)

// Call is one request the fake answered (its Path is the URL path, under /api/v1).
type Call = fakeapi.Call

// Value is one value of a variable (Netlify's envVarValue).
type Value struct {
	ID               string `json:"id"`
	Value            string `json:"value"`
	Context          string `json:"context"`
	ContextParameter string `json:"context_parameter,omitempty"`
}

// Var is one environment variable (Netlify's envVar).
type Var struct {
	Key      string   `json:"key"`
	Scopes   []string `json:"scopes"`
	Values   []Value  `json:"values"`
	IsSecret bool     `json:"is_secret"`
}

// Server is a running fake.
type Server struct {
	// Token is the bearer token the fake takes; SiteID the one site it holds, of the account AccountID
	// (slug AccountSlug). Change them before the calls.
	Token       string
	SiteID      string
	AccountID   string
	AccountSlug string

	*fakeapi.Server // Calls, ResetCalls, Fail (Netlify down), Client

	mu     sync.Mutex
	vars   map[string]map[string]*Var // site id ("" for the account's own) → key → variable
	nextID int
}

// Start starts a fake and closes it at the test's end.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s := &Server{Token: "nfp_test_token", SiteID: "5ebc34bf-site-0001", AccountID: "5ace049efdd72a6b9aa9539c", AccountSlug: "acme", vars: map[string]map[string]*Var{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/sites/{site_id}", s.getSite)
	mux.HandleFunc("GET /api/v1/accounts/{account_id}/env", s.listVars)
	mux.HandleFunc("POST /api/v1/accounts/{account_id}/env", s.createVars)
	mux.HandleFunc("GET /api/v1/accounts/{account_id}/env/{key}", s.getVar)
	mux.HandleFunc("PUT /api/v1/accounts/{account_id}/env/{key}", s.updateVar)
	mux.HandleFunc("PATCH /api/v1/accounts/{account_id}/env/{key}", s.setValue)
	mux.HandleFunc("DELETE /api/v1/accounts/{account_id}/env/{key}", s.deleteVar)
	mux.HandleFunc("DELETE /api/v1/accounts/{account_id}/env/{key}/value/{id}", s.deleteValue)
	s.Server = fakeapi.Start(tb, mux, fakeapi.Options{
		Token: func() string { s.mu.Lock(); defer s.mu.Unlock(); return s.Token },
		Refuse: func(w http.ResponseWriter) {
			writeError(w, http.StatusUnauthorized, "Access Denied: your token is invalid")
		},
		Down: func(w http.ResponseWriter, status int) { writeError(w, status, "the fake is failing") },
	})
	return s
}

// URL is the API's base URL (…/api/v1), the provider's Env.BaseURL.
func (s *Server) URL() string { return s.Root() + "/api/v1" }

// Var returns a copy of the site's variable key.
func (s *Server) Var(key string) (Var, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.vars[s.SiteID][key]
	if !ok {
		return Var{}, false
	}
	c := *v
	c.Values = slices.Clone(v.Values)
	return c, true
}

// Vars returns the site's variable names, sorted.
func (s *Server) Vars() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k := range s.vars[s.SiteID] {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Value returns the site's value of key for a context (and, for "branch", the branch).
func (s *Server) Value(key, context, branch string) (string, bool) {
	v, ok := s.Var(key)
	if !ok {
		return "", false
	}
	for _, x := range v.Values {
		if x.Context == context && x.ContextParameter == branch {
			return x.Value, true
		}
	}
	return "", false
}

// SetValue sets a value of the site's variable directly (a person's edit in Netlify's UI).
func (s *Server) SetValue(key, context, branch, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.siteVars(s.SiteID)
	v, ok := m[key]
	if !ok {
		v = &Var{Key: key, Scopes: allScopes}
		m[key] = v
	}
	s.put(v, Value{Context: context, ContextParameter: branch, Value: value})
}

// Deploy is the part of Netlify's deploy object a notification carries that tests set.
type Deploy struct {
	ID       string `json:"id"`
	SiteID   string `json:"site_id"`
	BuildID  string `json:"build_id"`
	State    string `json:"state"`
	Name     string `json:"name"`
	Branch   string `json:"branch"`
	Context  string `json:"context"`
	ReviewID *int64 `json:"review_id"`
}

// Notification makes a deploy notification of d as Netlify sends it: its JSON body and the headers, the
// X-Webhook-Signature JWS signed with secret.
func Notification(secret string, d Deploy) (http.Header, []byte) {
	body, err := json.Marshal(d)
	if err != nil {
		panic(err)
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "Netlify")
	h.Set("X-Webhook-Signature", Sign(secret, body))
	return h, body
}

// Sign is the compact JWS Netlify puts in X-Webhook-Signature: HS256 over {"iss":"netlify","sha256":
// hex SHA-256 of body}, built by hand.
func Sign(secret string, body []byte) string {
	sum := sha256.Sum256(body)
	claims, _ := json.Marshal(map[string]string{"iss": "netlify", "sha256": hex.EncodeToString(sum[:])})
	return SignRaw(secret, `{"alg":"HS256","typ":"JWT"}`, claims)
}

// SignRaw makes a compact JWS with the given header and claims, HMAC-SHA256-signed with secret
// whatever the header says (for tests of refused algorithms).
func SignRaw(secret, header string, claims []byte) string {
	enc := base64.RawURLEncoding
	in := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString(claims)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(in))
	return in + "." + enc.EncodeToString(m.Sum(nil))
}

var allScopes = []string{"builds", "functions", "runtime", "post-processing"}

var contexts = []string{"all", "dev", "dev-server", "branch-deploy", "deploy-preview", "production", "branch"}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"code": status, "message": msg})
}

var writeJSON = fakeapi.JSON

func (s *Server) getSite(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.PathValue("site_id") != s.SiteID {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": s.SiteID, "name": "fake-site", "state": "current", "account_id": s.AccountID, "account_slug": s.AccountSlug, "account_name": "Acme"})
}

// scope checks the path's account and the site_id query; the caller holds mu.
func (s *Server) scope(w http.ResponseWriter, r *http.Request) (string, bool) {
	if a := r.PathValue("account_id"); a != s.AccountID && a != s.AccountSlug {
		writeError(w, http.StatusNotFound, "Not Found")
		return "", false
	}
	site := r.URL.Query().Get("site_id")
	if site != "" && site != s.SiteID {
		writeError(w, http.StatusNotFound, "Not Found")
		return "", false
	}
	return site, true
}

func (s *Server) siteVars(site string) map[string]*Var {
	m, ok := s.vars[site]
	if !ok {
		m = map[string]*Var{}
		s.vars[site] = m
	}
	return m
}

func (s *Server) newID() string {
	s.nextID++
	return fmt.Sprintf("value-%04d", s.nextID)
}

// put sets a value in its context's slot, replacing the slot's value; the caller holds mu.
func (s *Server) put(v *Var, x Value) {
	for i := range v.Values {
		if v.Values[i].Context == x.Context && v.Values[i].ContextParameter == x.ContextParameter {
			v.Values[i].Value = x.Value
			return
		}
	}
	x.ID = s.newID()
	v.Values = append(v.Values, x)
}

func validValue(x Value) string {
	if !slices.Contains(contexts, x.Context) {
		return "invalid context"
	}
	if (x.Context == "branch") != (x.ContextParameter != "") {
		return "context_parameter is required with, and only with, context branch"
	}
	return ""
}

func (s *Server) listVars(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	site, ok := s.scope(w, r)
	if !ok {
		return
	}
	out := []*Var{}
	for _, v := range s.vars[site] {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) createVars(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	site, ok := s.scope(w, r)
	if !ok {
		return
	}
	var in []Var
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, "invalid body")
		return
	}
	m := s.siteVars(site)
	for _, v := range in {
		if v.Key == "" {
			writeError(w, http.StatusBadRequest, "key is required")
			return
		}
		if _, exists := m[v.Key]; exists {
			writeError(w, http.StatusBadRequest, "environment variable already exists")
			return
		}
		for _, x := range v.Values {
			if msg := validValue(x); msg != "" {
				writeError(w, http.StatusUnprocessableEntity, msg)
				return
			}
		}
	}
	out := []*Var{}
	for _, v := range in {
		nv := &Var{Key: v.Key, Scopes: v.Scopes, IsSecret: v.IsSecret}
		if len(nv.Scopes) == 0 {
			nv.Scopes = allScopes
		}
		for _, x := range v.Values {
			s.put(nv, x)
		}
		m[v.Key] = nv
		out = append(out, nv)
	}
	writeJSON(w, http.StatusCreated, out)
}

func (s *Server) lookup(w http.ResponseWriter, r *http.Request) (map[string]*Var, *Var, bool) {
	site, ok := s.scope(w, r)
	if !ok {
		return nil, nil, false
	}
	m := s.siteVars(site)
	v, ok := m[r.PathValue("key")]
	if !ok {
		writeError(w, http.StatusNotFound, "Environment variable not found")
		return nil, nil, false
	}
	return m, v, true
}

func (s *Server) getVar(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, v, ok := s.lookup(w, r); ok {
		writeJSON(w, http.StatusOK, v)
	}
}

func (s *Server) updateVar(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, v, ok := s.lookup(w, r)
	if !ok {
		return
	}
	var in Var
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, "invalid body")
		return
	}
	for _, x := range in.Values {
		if msg := validValue(x); msg != "" {
			writeError(w, http.StatusUnprocessableEntity, msg)
			return
		}
	}
	v.Values = nil
	for _, x := range in.Values {
		s.put(v, x)
	}
	if len(in.Scopes) > 0 {
		v.Scopes = in.Scopes
	}
	v.IsSecret = in.IsSecret
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) setValue(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, v, ok := s.lookup(w, r)
	if !ok {
		return
	}
	var x Value
	if err := json.NewDecoder(r.Body).Decode(&x); err != nil {
		writeError(w, http.StatusBadRequest, "invalid body")
		return
	}
	if msg := validValue(x); msg != "" {
		writeError(w, http.StatusUnprocessableEntity, msg)
		return
	}
	s.put(v, x)
	writeJSON(w, http.StatusCreated, v)
}

func (s *Server) deleteVar(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, v, ok := s.lookup(w, r)
	if !ok {
		return
	}
	delete(m, v.Key)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) deleteValue(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, v, ok := s.lookup(w, r)
	if !ok {
		return
	}
	i := slices.IndexFunc(v.Values, func(x Value) bool { return x.ID == r.PathValue("id") })
	if i < 0 {
		writeError(w, http.StatusNotFound, "Environment variable value not found")
		return
	}
	v.Values = slices.Delete(v.Values, i, i+1)
	w.WriteHeader(http.StatusNoContent)
}
