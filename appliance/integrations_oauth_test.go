package appliance_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oauth2-proxy/mockoidc"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/integrations/deploya/deployatest"
	"github.com/theappliance/appliance/appliance/integrations/provider"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// TestIntegrationOAuth runs deploy_a's OAuth flow against a real OAuth 2 server (mockoidc) the way a
// browser does: the start's authorize URL is followed, the server redirects to our callback with a code
// and the state, the callback exchanges the code (golang.org/x/oauth2) and stores the tokens sealed, then
// sends the browser to the dashboard's integrations page. A replayed, tampered, forged or expired state is
// a 400 and stores nothing.
func TestIntegrationOAuth(t *testing.T) {
	t.Parallel()
	// Access tokens live 30 seconds, inside the minute before expiry in which the appliance refreshes a
	// token before using it: the connect job's first use refreshes it.
	m, err := mockoidc.NewServer(nil)
	if err != nil {
		t.Fatal(err)
	}
	m.AccessTTL = 30 * time.Second
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ln, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown() })
	// Vercel's token answer names the installation (installation_id); mockoidc's has no such field, so its
	// token endpoint is reached through a relay that adds it to an authorization code's answer (and puts
	// expires_in in seconds).
	var (
		grantsMu sync.Mutex
		grants   []string // the grant types the token endpoint was asked for, in order
	)
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, m.TokenEndpoint(), bytes.NewReader(body))
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		var answer map[string]any
		if json.NewDecoder(resp.Body).Decode(&answer) != nil {
			http.Error(w, "not json", http.StatusBadGateway)
			return
		}
		form, _ := url.ParseQuery(string(body))
		grantsMu.Lock()
		grants = append(grants, form.Get("grant_type"))
		grantsMu.Unlock()
		if resp.StatusCode == http.StatusOK && form.Get("grant_type") == "authorization_code" {
			answer["installation_id"] = "icfg_test"
		}
		if resp.StatusCode == http.StatusOK {
			// mockoidc writes expires_in as a Go duration (nanoseconds); OAuth 2 says seconds (RFC 6749 §5.1).
			answer["expires_in"] = int(m.AccessTTL / time.Second)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(resp.StatusCode)
		json.NewEncoder(w).Encode(answer)
	}))
	t.Cleanup(relay.Close)
	fake := deployatest.Start(t, "vercel-token", "prj_web")
	e, p := keyEnv(t, appliancetest.Options{Instances: true, IntegrationBaseURLs: map[string]string{provider.DeployA: fake.URL},
		IntegrationOAuth: map[string]appliance.IntegrationOAuthApp{provider.DeployA: {
			ClientID: m.ClientID, ClientSecret: m.ClientSecret, AuthURL: m.AuthorizationEndpoint(), TokenURL: relay.URL, Scopes: []string{"openid"}}}})
	var clock time.Time
	e.Clock.Set(func() time.Time {
		if clock.IsZero() {
			return time.Now()
		}
		return clock
	})
	res, err := e.Svc.CreateProject(t.Context(), p, &appliance.CreateProjectRequest{Name: "web", Environment: "development"})
	if err != nil {
		t.Fatal(err)
	}
	prjID := res.Project.ID
	svc := e.Svc.Integrations()
	browser := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	// authorize follows a start's authorize URL as a browser does and returns the callback's code and state.
	authorize := func() (code, state string) {
		t.Helper()
		start, err := svc.OAuthStart(t.Context(), p, provider.DeployA, prjID)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := browser.Get(start.AuthorizeURL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusFound {
			t.Fatalf("authorize: %d", resp.StatusCode)
		}
		loc, err := url.Parse(resp.Header.Get("Location"))
		if err != nil || loc.Path != "/v1/integrations/deploy_a/oauth/callback" || loc.Host != "test" {
			t.Fatalf("the server redirects to %v (%v), not our callback", loc, err)
		}
		return loc.Query().Get("code"), loc.Query().Get("state")
	}
	stored := func() (*store.Integration, map[string]any) {
		t.Helper()
		var rec *store.Integration
		e.DB.View(func(tx *store.Tx) error {
			rec, _ = store.Integrations.First(tx, store.IntegrationsByProvider, prjID+"/"+provider.DeployA)
			return nil
		})
		if rec == nil {
			return nil, nil
		}
		b, err := e.Box.Open(rec.Credentials)
		if err != nil {
			t.Fatal(err)
		}
		var c map[string]any
		json.Unmarshal(b, &c)
		return rec, c
	}
	bad := func(what string, err error) {
		t.Helper()
		if apperr.KindOf(err) != apperr.KindInvalid || !strings.Contains(err.Error(), "state") {
			t.Fatalf("%s: %v", what, err)
		}
	}

	// A forged state and a tampered one: 400, nothing stored, and the tampering did not spend the start.
	code, state := authorize()
	_, err = svc.OAuthCallback(t.Context(), provider.DeployA, code, "forged."+strings.Repeat("A", 43))
	bad("forged state", err)
	nonce, sig, _ := strings.Cut(state, ".")
	_, err = svc.OAuthCallback(t.Context(), provider.DeployA, code, nonce+"."+strings.ToUpper(sig[:4])+sig[4:]+"x")
	bad("tampered state", err)
	if rec, _ := stored(); rec != nil {
		t.Fatalf("stored after bad states: %+v", rec)
	}
	// The real callback: tokens stored sealed, the browser sent to the dashboard's integrations page.
	to, err := svc.OAuthCallback(t.Context(), provider.DeployA, code, state)
	if err != nil {
		t.Fatal(err)
	}
	if to != "http://test/projects/"+prjID+"/integrations?connected=deploy_a" {
		t.Fatalf("redirect to %q", to)
	}
	rec, c := stored()
	if rec == nil || c["token"] == "" || c["token"] == nil || c["refresh_token"] == nil || rec.TokenExpiry == nil || rec.State != api.IntegrationPending {
		t.Fatalf("stored %+v %v", rec, c)
	}
	if strings.Contains(string(rec.Credentials), c["token"].(string)) {
		t.Fatal("the token is stored in clear")
	}
	// The token answer's installation is recorded on the organization.
	e.DB.View(func(tx *store.Tx) error {
		org, err := store.Organizations.Get(tx, res.Project.OrganizationID)
		if err != nil || org.DeployAInstallationID != "icfg_test" {
			t.Errorf("the organization's deploy_a installation: %q (%v), want icfg_test", org.DeployAInstallationID, err)
		}
		return nil
	})
	// Replayed: 400 and the stored token is unchanged.
	code2, _ := authorize()
	_, err = svc.OAuthCallback(t.Context(), provider.DeployA, code2, state)
	bad("replayed state", err)
	if _, c2 := stored(); c2["token"] != c["token"] {
		t.Fatal("a replayed state changed the token")
	}
	// Expired: a start older than 10 minutes.
	code3, state3 := authorize()
	clock = time.Now().Add(11 * time.Minute)
	_, err = svc.OAuthCallback(t.Context(), provider.DeployA, code3, state3)
	bad("expired state", err)
	clock = time.Time{}
	// The connect after OAuth names the platform's project and keeps the OAuth token.
	conn, err := svc.ConnectDeployA(t.Context(), p, prjID, &api.ConnectDeployARequest{DeployAProjectID: "prj_web"})
	if err != nil || !conn.Integration.HasCredentials || conn.Integration.ExternalID != "prj_web" {
		t.Fatalf("connect after OAuth: %v %+v", err, conn)
	}
	// The connect job uses the token, which expires within the minute: it is refreshed first (a new access
	// token from the server's refresh grant, stored sealed with its new expiry), then the platform refuses
	// it (the fake takes only its own token), which fails the job with the provider's refusal.
	if j := e.WaitJob(t, conn.Job.ID); j.State != scheduler.StateFailed || !strings.Contains(j.Error, "refused") {
		t.Fatalf("the connect job: %s: %s", j.State, j.Error)
	}
	grantsMu.Lock()
	asked := slices.Clone(grants)
	grantsMu.Unlock()
	if !slices.Contains(asked, "refresh_token") {
		t.Fatalf("the token endpoint was asked for %v: no refresh before the token's use", asked)
	}
	// The refreshed token is stored sealed with its expiry (mockoidc's token for the same session within
	// the same second is the same string, so the expiry, not the string, shows the refresh was kept).
	after, c3 := stored()
	if c3["token"] == nil || c3["external_id"] != "prj_web" || c3["refresh_token"] == nil {
		t.Fatalf("after the refresh: %v", c3)
	}
	if after.TokenExpiry == nil || after.TokenExpiry.Before(*rec.TokenExpiry) {
		t.Fatalf("the refreshed token's expiry %v, before %v", after.TokenExpiry, rec.TokenExpiry)
	}
	// The callback is audited as the caller who started the flow (here an API key).
	kind, id := p.Actor()
	var audited bool
	e.DB.View(func(tx *store.Tx) error {
		evs, _ := store.AuditEvents.All(tx, func(a *store.AuditEvent) bool { return a.Action == "integration.oauth_connect" })
		audited = len(evs) == 1 && evs[0].ActorKind == kind && evs[0].ActorID == id
		return nil
	})
	if !audited {
		t.Fatalf("the callback is not audited as %s %s", kind, id)
	}
	// A provider without an OAuth client: 409.
	if _, err := svc.OAuthStart(t.Context(), p, provider.AuthA, prjID); apperr.KindOf(err) != apperr.KindConflict {
		t.Fatalf("no OAuth client: %v", err)
	}
}
