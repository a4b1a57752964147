// Package edgectest is a local fake of the part of Cloudflare's API v4 edge_c uses, for tests: an HTTP
// server on a loopback port answering the documented paths in Cloudflare's envelope ({success, errors,
// messages, result}) — token verification (/user/tokens/verify, /accounts/{account_id}/tokens/verify),
// Hyperdrive configurations (/accounts/{account_id}/hyperdrive/configs[/{hyperdrive_id}]: list,
// create, get, update, delete; with mtls), the account's mTLS certificates
// (/accounts/{account_id}/mtls_certificates[/{mtls_certificate_id}]: list, upload, get, delete, refused
// while a configuration names it) and a Worker script's secrets
// (/accounts/{account_id}/workers/scripts/{script_name}/secrets[/{secret_name}]: list, put, get,
// delete) —, checking the bearer token, keeping its state in memory and recording every call.
package edgectest

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/integrations/fakeapi"
)

// Call is one request the fake answered (its Path is the URL path, under /client/v4).
type Call = fakeapi.Call

// Origin is a Hyperdrive configuration's origin as stored (the password too, which the API never
// returns).
type Origin struct {
	Host     string `json:"host"`
	Port     int    `json:"port"`
	Database string `json:"database"`
	User     string `json:"user"`
	Password string `json:"password,omitempty"`
	Scheme   string `json:"scheme"`
}

// MTLS is a Hyperdrive configuration's TLS to its origin.
type MTLS struct {
	CACertificateID   string `json:"ca_certificate_id,omitempty"`
	MTLSCertificateID string `json:"mtls_certificate_id,omitempty"`
	SSLMode           string `json:"sslmode,omitempty"`
}

// Hyperdrive is a stored Hyperdrive configuration.
type Hyperdrive struct {
	ID         string    `json:"id"`
	Name       string    `json:"name"`
	Origin     Origin    `json:"origin"`
	MTLS       *MTLS     `json:"mtls,omitempty"`
	CreatedOn  time.Time `json:"created_on"`
	ModifiedOn time.Time `json:"modified_on"`
}

// Certificate is an uploaded mTLS certificate (the PEM too, which the API's list does not return).
type Certificate struct {
	ID           string    `json:"id"`
	Name         string    `json:"name"`
	CA           bool      `json:"ca"`
	Certificates string    `json:"certificates,omitempty"`
	Issuer       string    `json:"issuer"`
	SerialNumber string    `json:"serial_number"`
	ExpiresOn    time.Time `json:"expires_on"`
	UploadedOn   time.Time `json:"uploaded_on"`
}

// Server is a running fake.
type Server struct {
	// Token is the bearer token the fake takes, for AccountID. Change them before the calls.
	Token     string
	AccountID string

	*fakeapi.Server // Calls, ResetCalls, Fail (Cloudflare down), Client

	mu      sync.Mutex
	configs map[string]*Hyperdrive       // id → config
	certs   map[string]*Certificate      // id → mTLS certificate
	scripts map[string]map[string]string // script → secret name → text
	nextID  int

	accountOwned bool
	tokenStatus  string
}

// Start starts a fake with one Worker script, "my-worker", and closes it at the test's end.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s := &Server{Token: "cf-test-token", AccountID: "023e105f4ecef8ad9ca31a8372d0c353", tokenStatus: "active",
		configs: map[string]*Hyperdrive{}, certs: map[string]*Certificate{}, scripts: map[string]map[string]string{"my-worker": {}}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /client/v4/user/tokens/verify", s.verifyUser)
	mux.HandleFunc("GET /client/v4/accounts/{account_id}/tokens/verify", s.verifyAccount)
	mux.HandleFunc("GET /client/v4/accounts/{account_id}/hyperdrive/configs", s.listConfigs)
	mux.HandleFunc("POST /client/v4/accounts/{account_id}/hyperdrive/configs", s.createConfig)
	mux.HandleFunc("GET /client/v4/accounts/{account_id}/hyperdrive/configs/{id}", get(s, s.config, public))
	mux.HandleFunc("PUT /client/v4/accounts/{account_id}/hyperdrive/configs/{id}", s.updateConfig)
	mux.HandleFunc("DELETE /client/v4/accounts/{account_id}/hyperdrive/configs/{id}", s.deleteConfig)
	mux.HandleFunc("GET /client/v4/accounts/{account_id}/mtls_certificates", s.listCerts)
	mux.HandleFunc("POST /client/v4/accounts/{account_id}/mtls_certificates", s.uploadCert)
	mux.HandleFunc("GET /client/v4/accounts/{account_id}/mtls_certificates/{id}", get(s, s.cert, listed))
	mux.HandleFunc("DELETE /client/v4/accounts/{account_id}/mtls_certificates/{id}", s.deleteCert)
	mux.HandleFunc("GET /client/v4/accounts/{account_id}/workers/scripts/{script}/secrets", s.listSecrets)
	mux.HandleFunc("PUT /client/v4/accounts/{account_id}/workers/scripts/{script}/secrets", s.putSecret)
	mux.HandleFunc("GET /client/v4/accounts/{account_id}/workers/scripts/{script}/secrets/{name}", s.getSecret)
	mux.HandleFunc("DELETE /client/v4/accounts/{account_id}/workers/scripts/{script}/secrets/{name}", s.deleteSecret)
	s.Server = fakeapi.Start(tb, mux, fakeapi.Options{
		Token: func() string { s.mu.Lock(); defer s.mu.Unlock(); return s.Token },
		// Cloudflare's answer to a bad token.
		Refuse: func(w http.ResponseWriter) { writeError(w, http.StatusBadRequest, 10000, "Authentication error") },
		Down:   func(w http.ResponseWriter, status int) { writeError(w, status, 10001, "the fake is failing") },
	})
	return s
}

// URL is the API's base URL (…/client/v4), the provider's Env.BaseURL.
func (s *Server) URL() string { return s.Root() + "/client/v4" }

// SetToken says what token verification answers: the token's status (active, disabled, expired) and
// whether it is account-owned (then /user/tokens/verify refuses it, as Cloudflare does, and
// /accounts/{account_id}/tokens/verify takes it).
func (s *Server) SetToken(status string, accountOwned bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokenStatus, s.accountOwned = status, accountOwned
}

// AddScript adds a Worker script with no secrets.
func (s *Server) AddScript(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.scripts[name]; !ok {
		s.scripts[name] = map[string]string{}
	}
}

// Configs returns the Hyperdrive configurations, sorted by name.
func (s *Server) Configs() []Hyperdrive {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []Hyperdrive{}
	for _, c := range s.configs {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Config returns the Hyperdrive configuration named name.
func (s *Server) Config(name string) (Hyperdrive, bool) {
	for _, c := range s.Configs() {
		if c.Name == name {
			return c, true
		}
	}
	return Hyperdrive{}, false
}

// AddCertificate adds an mTLS certificate to the account (someone's own) and returns its id.
func (s *Server) AddCertificate(name, pem string, ca bool) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	id := fmt.Sprintf("%032x", s.nextID)
	s.certs[id] = &Certificate{ID: id, Name: name, CA: ca, Certificates: pem, UploadedOn: time.Now().UTC()}
	return id
}

// Certificates returns the uploaded mTLS certificates, sorted by name.
func (s *Server) Certificates() []Certificate {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []Certificate{}
	for _, c := range s.certs {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Certificate returns the mTLS certificate whose id is id.
func (s *Server) Certificate(id string) (Certificate, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.certs[id]
	if !ok {
		return Certificate{}, false
	}
	return *c, true
}

// Secrets returns a script's secrets (name → text).
func (s *Server) Secrets(script string) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for k, v := range s.scripts[script] {
		out[k] = v
	}
	return out
}

type cfError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeResult(w http.ResponseWriter, status int, result any) {
	writeJSON(w, status, map[string]any{"success": true, "errors": []cfError{}, "messages": []cfError{}, "result": result})
}

func writeError(w http.ResponseWriter, status, code int, msg string) {
	writeJSON(w, status, map[string]any{"success": false, "errors": []cfError{{code, msg}}, "messages": []cfError{}, "result": nil})
}

var writeJSON = fakeapi.JSON

// account checks the path's account; the caller holds mu.
func (s *Server) account(w http.ResponseWriter, r *http.Request) bool {
	if r.PathValue("account_id") != s.AccountID {
		writeError(w, http.StatusForbidden, 9109, "Unauthorized to access requested resource")
		return false
	}
	return true
}

func (s *Server) tokenResult() map[string]any {
	return map[string]any{"id": "ed17574386854bf78a67040be0a770b0", "status": s.tokenStatus}
}

func (s *Server) verifyUser(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.accountOwned {
		writeError(w, http.StatusUnauthorized, 1000, "Invalid API Token")
		return
	}
	writeResult(w, http.StatusOK, s.tokenResult())
}

func (s *Server) verifyAccount(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.account(w, r) {
		return
	}
	if !s.accountOwned {
		writeError(w, http.StatusUnauthorized, 1000, "Invalid API Token")
		return
	}
	writeResult(w, http.StatusOK, s.tokenResult())
}

// public is a config as the API returns it: without the password.
func public(c *Hyperdrive) Hyperdrive {
	p := *c
	p.Origin.Password = ""
	return p
}

func (s *Server) listConfigs(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.account(w, r) {
		return
	}
	out := []Hyperdrive{}
	for _, c := range s.configs {
		out = append(out, public(c))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	writeResult(w, http.StatusOK, out)
}

// readConfig reads and checks a create's or update's body; the caller holds mu.
func (s *Server) readConfig(w http.ResponseWriter, r *http.Request, self string) (Hyperdrive, bool) {
	var in Hyperdrive
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, 2001, "invalid request body")
		return Hyperdrive{}, false
	}
	o := in.Origin
	if in.Name == "" || o.Host == "" || o.Database == "" || o.User == "" || o.Password == "" || (o.Scheme != "postgres" && o.Scheme != "postgresql") {
		writeError(w, http.StatusBadRequest, 2001, "name and origin host, database, user, password and scheme are required")
		return Hyperdrive{}, false
	}
	if o.Port == 0 {
		in.Origin.Port = 5432
	}
	if m := in.MTLS; m != nil {
		switch m.SSLMode {
		case "", "require":
		case "verify-ca", "verify-full":
			if m.CACertificateID == "" {
				writeError(w, http.StatusBadRequest, 2001, "sslmode "+m.SSLMode+" requires a ca_certificate_id")
				return Hyperdrive{}, false
			}
		default:
			writeError(w, http.StatusBadRequest, 2001, "sslmode must be require, verify-ca or verify-full")
			return Hyperdrive{}, false
		}
		if id := m.CACertificateID; id != "" {
			if c, ok := s.certs[id]; !ok || !c.CA {
				writeError(w, http.StatusBadRequest, 2001, "ca_certificate_id is not a CA certificate of the account")
				return Hyperdrive{}, false
			}
		}
	}
	for id, c := range s.configs {
		if c.Name == in.Name && id != self {
			writeError(w, http.StatusConflict, 2017, "a config with this name already exists")
			return Hyperdrive{}, false
		}
	}
	return in, true
}

func (s *Server) createConfig(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.account(w, r) {
		return
	}
	in, ok := s.readConfig(w, r, "")
	if !ok {
		return
	}
	s.nextID++
	now := time.Now().UTC()
	c := &Hyperdrive{ID: fmt.Sprintf("%032x", s.nextID), Name: in.Name, Origin: in.Origin, MTLS: in.MTLS, CreatedOn: now, ModifiedOn: now}
	s.configs[c.ID] = c
	writeResult(w, http.StatusOK, public(c))
}

// byID is the account's item of m the path's {id} names, or the 404 Cloudflare answers (code, msg);
// the caller holds mu.
func byID[T any](s *Server, w http.ResponseWriter, r *http.Request, m map[string]*T, code int, msg string) (*T, bool) {
	if !s.account(w, r) {
		return nil, false
	}
	v, ok := m[r.PathValue("id")]
	if !ok {
		writeError(w, http.StatusNotFound, code, msg)
		return nil, false
	}
	return v, true
}

func (s *Server) config(w http.ResponseWriter, r *http.Request) (*Hyperdrive, bool) {
	return byID(s, w, r, s.configs, 2005, "hyperdrive config not found")
}

// get answers GET …/{id}: the item find finds, as show shows it.
func get[T any](s *Server, find func(http.ResponseWriter, *http.Request) (*T, bool), show func(*T) T) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if v, ok := find(w, r); ok {
			writeResult(w, http.StatusOK, show(v))
		}
	}
}

func (s *Server) updateConfig(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.config(w, r)
	if !ok {
		return
	}
	in, ok := s.readConfig(w, r, c.ID)
	if !ok {
		return
	}
	c.Name, c.Origin, c.MTLS, c.ModifiedOn = in.Name, in.Origin, in.MTLS, time.Now().UTC()
	writeResult(w, http.StatusOK, public(c))
}

func (s *Server) deleteConfig(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.config(w, r)
	if !ok {
		return
	}
	delete(s.configs, c.ID)
	writeResult(w, http.StatusOK, nil)
}

// listed is a certificate as the API lists it: without the PEM.
func listed(c *Certificate) Certificate {
	p := *c
	p.Certificates = ""
	return p
}

func (s *Server) listCerts(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.account(w, r) {
		return
	}
	out := []Certificate{}
	for _, c := range s.certs {
		out = append(out, listed(c))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	writeResult(w, http.StatusOK, out)
}

// uploadCert takes {ca, certificates, name, private_key}: a CA's PEM chain, or a leaf with its key.
func (s *Server) uploadCert(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.account(w, r) {
		return
	}
	var in struct {
		CA           *bool  `json:"ca"`
		Certificates string `json:"certificates"`
		Name         string `json:"name"`
		PrivateKey   string `json:"private_key"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.CA == nil || in.Certificates == "" {
		writeError(w, http.StatusBadRequest, 1400, "ca and certificates are required")
		return
	}
	if !*in.CA && in.PrivateKey == "" {
		writeError(w, http.StatusBadRequest, 1400, "a leaf certificate needs its private_key")
		return
	}
	b, _ := pem.Decode([]byte(in.Certificates))
	if b == nil || b.Type != "CERTIFICATE" {
		writeError(w, http.StatusBadRequest, 1400, "certificates is not a PEM certificate")
		return
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil || (*in.CA && !cert.IsCA) {
		writeError(w, http.StatusBadRequest, 1400, "certificates is not a CA certificate")
		return
	}
	for _, c := range s.certs {
		if in.Name != "" && c.Name == in.Name {
			writeError(w, http.StatusConflict, 1409, "a certificate with this name already exists")
			return
		}
	}
	s.nextID++
	c := &Certificate{ID: fmt.Sprintf("%032x", s.nextID), Name: in.Name, CA: *in.CA, Certificates: in.Certificates,
		Issuer: cert.Issuer.String(), SerialNumber: cert.SerialNumber.String(), ExpiresOn: cert.NotAfter.UTC(), UploadedOn: time.Now().UTC()}
	s.certs[c.ID] = c
	writeResult(w, http.StatusOK, listed(c))
}

func (s *Server) cert(w http.ResponseWriter, r *http.Request) (*Certificate, bool) {
	return byID(s, w, r, s.certs, 1404, "certificate not found")
}

// deleteCert deletes a certificate unless a Hyperdrive configuration names it, as Cloudflare does.
func (s *Server) deleteCert(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.cert(w, r)
	if !ok {
		return
	}
	for _, h := range s.configs {
		if m := h.MTLS; m != nil && (m.CACertificateID == c.ID || m.MTLSCertificateID == c.ID) {
			writeError(w, http.StatusBadRequest, 1413, "the certificate is in use by a hyperdrive config")
			return
		}
	}
	delete(s.certs, c.ID)
	writeResult(w, http.StatusOK, map[string]string{"id": c.ID})
}

func (s *Server) script(w http.ResponseWriter, r *http.Request) (map[string]string, bool) {
	if !s.account(w, r) {
		return nil, false
	}
	sc, ok := s.scripts[r.PathValue("script")]
	if !ok {
		writeError(w, http.StatusNotFound, 10007, "workers.api.error.script_not_found")
		return nil, false
	}
	return sc, true
}

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, ok := s.script(w, r)
	if !ok {
		return
	}
	out := []map[string]string{}
	for k := range sc {
		out = append(out, map[string]string{"name": k, "type": "secret_text"})
	}
	sort.Slice(out, func(i, j int) bool { return out[i]["name"] < out[j]["name"] })
	writeResult(w, http.StatusOK, out)
}

func (s *Server) putSecret(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, ok := s.script(w, r)
	if !ok {
		return
	}
	var in struct{ Name, Text, Type string }
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Name == "" || in.Type != "secret_text" {
		writeError(w, http.StatusBadRequest, 10021, "name, text and type secret_text are required")
		return
	}
	sc[in.Name] = in.Text
	writeResult(w, http.StatusOK, map[string]string{"name": in.Name, "type": "secret_text"})
}

func (s *Server) getSecret(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, ok := s.script(w, r)
	if !ok {
		return
	}
	if _, ok := sc[r.PathValue("name")]; !ok {
		writeError(w, http.StatusNotFound, 10056, "secret not found")
		return
	}
	writeResult(w, http.StatusOK, map[string]string{"name": r.PathValue("name"), "type": "secret_text"})
}

func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, ok := s.script(w, r)
	if !ok {
		return
	}
	if _, ok := sc[r.PathValue("name")]; !ok {
		writeError(w, http.StatusNotFound, 10056, "secret not found")
		return
	}
	delete(sc, r.PathValue("name"))
	writeResult(w, http.StatusOK, nil)
}
