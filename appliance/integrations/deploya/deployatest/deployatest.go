// Package deployatest is, for tests, a local fake of the Vercel API calls deploy_a makes: a project
// (GET /v9/projects/{id}), its environment variables (POST /v10/projects/{id}/env?upsert=true,
// GET /v9/projects/{id}/env, DELETE /v9/projects/{id}/env/{envId}), a bearer token and an optional
// teamId; every call recorded. It also signs webhook events as Vercel does.
package deployatest

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/theappliance/appliance/appliance/integrations/deploya"
	"github.com/theappliance/appliance/appliance/integrations/fakeapi"
)

// Var is a stored environment variable.
type Var struct {
	ID        string   `json:"id"`
	Key       string   `json:"key"`
	Value     string   `json:"value"`
	Type      string   `json:"type"`
	Target    []string `json:"target"`
	GitBranch string   `json:"gitBranch,omitempty"`
}

// Server is the fake.
type Server struct {
	URL       string
	Token     string // the accepted bearer token
	ProjectID string
	TeamID    string // "" accepts calls without teamId

	*fakeapi.Server // Calls, ResetCalls, Fail, Client

	mu   sync.Mutex
	vars []*Var
	next int
}

// Start serves the fake on a loopback port until the test ends.
func Start(t testing.TB, token, projectID string) *Server {
	s := &Server{Token: token, ProjectID: projectID}
	s.Server = fakeapi.Start(t, http.HandlerFunc(s.serve), fakeapi.Options{
		Token: func() string { s.mu.Lock(); defer s.mu.Unlock(); return s.Token },
		Refuse: func(w http.ResponseWriter) {
			http.Error(w, `{"error":{"code":"forbidden","message":"Not authorized"}}`, http.StatusForbidden)
		},
		Down: func(w http.ResponseWriter, status int) { http.Error(w, `{"error":{"message":"unavailable"}}`, status) },
	})
	s.URL = s.Root()
	return s
}

// Vars are the stored variables.
func (s *Server) Vars() []Var {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Var, 0, len(s.vars))
	for _, v := range s.vars {
		out = append(out, *v)
	}
	return out
}

// Value is the value of key for the git branch ("" for the branchless variables) and target.
func (s *Server) Value(key, branch, target string) (string, bool) {
	for _, v := range s.Vars() {
		if v.Key == key && v.GitBranch == branch && slices.Contains(v.Target, target) {
			return v.Value, true
		}
	}
	return "", false
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.TeamID != "" && r.URL.Query().Get("teamId") != s.TeamID {
		http.Error(w, `{"error":{"code":"forbidden","message":"Not authorized"}}`, http.StatusForbidden)
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(parts) < 3 || parts[1] != "projects" || parts[2] != s.ProjectID {
		http.Error(w, `{"error":{"code":"not_found"}}`, http.StatusNotFound)
		return
	}
	switch {
	case r.Method == http.MethodGet && parts[0] == "v9" && len(parts) == 3:
		writeJSON(w, map[string]any{"id": s.ProjectID, "name": s.ProjectID})
	case r.Method == http.MethodPost && parts[0] == "v10" && len(parts) == 4 && parts[3] == "env":
		var in []Var
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, `{"error":{"code":"bad_request"}}`, http.StatusBadRequest)
			return
		}
		upsert := r.URL.Query().Get("upsert") == "true"
		for _, v := range in {
			if v.Key == "" || len(v.Target) == 0 {
				http.Error(w, `{"error":{"code":"bad_request"}}`, http.StatusBadRequest)
				return
			}
			i := slices.IndexFunc(s.vars, func(x *Var) bool {
				return x.Key == v.Key && x.GitBranch == v.GitBranch && slices.Equal(x.Target, v.Target)
			})
			if i >= 0 && !upsert {
				http.Error(w, `{"error":{"code":"ENV_ALREADY_EXISTS"}}`, http.StatusBadRequest)
				return
			}
			if i >= 0 {
				s.vars[i].Value, s.vars[i].Type = v.Value, v.Type
				continue
			}
			s.next++
			nv := v
			nv.ID = fmt.Sprintf("env_%d", s.next)
			s.vars = append(s.vars, &nv)
		}
		writeJSON(w, map[string]any{"created": in, "failed": []any{}})
	case r.Method == http.MethodGet && parts[0] == "v9" && len(parts) == 4 && parts[3] == "env":
		branch := r.URL.Query().Get("gitBranch")
		envs := []Var{}
		for _, v := range s.vars {
			if branch == "" || v.GitBranch == branch {
				envs = append(envs, *v)
			}
		}
		writeJSON(w, map[string]any{"envs": envs})
	case r.Method == http.MethodDelete && parts[0] == "v9" && len(parts) == 5 && parts[3] == "env":
		i := slices.IndexFunc(s.vars, func(x *Var) bool { return x.ID == parts[4] })
		if i < 0 {
			http.Error(w, `{"error":{"code":"not_found"}}`, http.StatusNotFound)
			return
		}
		s.vars = slices.Delete(s.vars, i, i+1)
		writeJSON(w, map[string]any{"id": parts[4]})
	default:
		http.Error(w, `{"error":{"code":"not_found"}}`, http.StatusNotFound)
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// SignedEvent is a deployment webhook event as Vercel sends it and its x-vercel-signature under secret.
// target is "production" or "" (a preview deployment: target null).
func SignedEvent(secret, id, typ, branch, target string) (body []byte, signature string) {
	var tgt any
	if target != "" {
		tgt = target
	}
	body, _ = json.Marshal(map[string]any{"id": id, "type": typ, "createdAt": 1700000000000,
		"payload": map[string]any{"target": tgt, "project": map[string]any{"id": "prj_fake"},
			"deployment": map[string]any{"id": "dpl_" + id, "url": "example.vercel.app",
				"meta": map[string]any{"githubCommitRef": branch}}}})
	return body, hex.EncodeToString(deploya.Sign([]byte(secret), body))
}
