package appliance_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/integrations"
	"github.com/theappliance/appliance/appliance/integrations/provider"
	"github.com/theappliance/appliance/scheduler"
)

// testDirectory is a tiny in-test identity provider (the real auth_a/b/c are written beside this area):
// five users listed two per page, user events signed with a hex HMAC-SHA256 in X-Test-Signature.
type testDirectory struct{ users []provider.User }

func (testDirectory) Name() string           { return provider.AuthC }
func (testDirectory) DefaultBaseURL() string { return "https://directory.invalid" }
func (testDirectory) ValidateConfig(raw json.RawMessage) (json.RawMessage, error) {
	var c struct{ Schema, Table string }
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, err
		}
	}
	return json.Marshal(map[string]string{"schema": c.Schema, "table": c.Table})
}
func (testDirectory) Check(_ context.Context, env provider.Env) error {
	if env.Credentials.Token != "dir-token" {
		return provider.ErrCredentials
	}
	return nil
}
func (d testDirectory) ListUsers(_ context.Context, env provider.Env, cursor string) ([]provider.User, string, error) {
	i, _ := strconv.Atoi(cursor)
	end := min(i+2, len(d.users))
	next := ""
	if end < len(d.users) {
		next = strconv.Itoa(end)
	}
	return d.users[i:end], next, nil
}
func (testDirectory) VerifyWebhook(env provider.Env, h http.Header, body []byte, _ time.Time) (string, error) {
	got, _ := hex.DecodeString(h.Get("X-Test-Signature"))
	if !hmac.Equal(got, hmacSHA256(env.Credentials.WebhookSecret, body)) {
		return "", provider.ErrBadSignature
	}
	var ev struct{ ID string }
	json.Unmarshal(body, &ev)
	return ev.ID, nil
}
func (testDirectory) UserEvent(body []byte) (provider.UserEvent, error) {
	var ev struct {
		ID, Type, User string
		At             time.Time
	}
	if err := json.Unmarshal(body, &ev); err != nil {
		return provider.UserEvent{}, err
	}
	return provider.UserEvent{ID: ev.ID, Deleted: ev.Type == "user.deleted", At: ev.At, User: provider.User{ID: ev.User, UpdatedAt: ev.At}}, nil
}

func hmacSHA256(secret string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return m.Sum(nil)
}

// recordingTable records the area's calls of the table writer (the real one, usersync, is tested
// against PostgreSQL by its author), each made with a working superuser session of the project's database.
type recordingTable struct {
	mu      sync.Mutex
	ensured []string
	pages   [][]string
	applied []string
}

func (r *recordingTable) db(ctx context.Context, conn *pgx.Conn) string {
	var db string
	if err := conn.QueryRow(ctx, "SELECT current_database() || ':' || current_setting('is_superuser')").Scan(&db); err != nil {
		return err.Error()
	}
	return db
}

func (r *recordingTable) Ensure(ctx context.Context, conn *pgx.Conn, schema, table, owner string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ensured = append(r.ensured, fmt.Sprintf("%s.%s owner %s in %s", schema, table, owner, r.db(ctx, conn)))
	return nil
}

func (r *recordingTable) Backfill(ctx context.Context, conn *pgx.Conn, schema, table string, users []provider.User) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	for _, u := range users {
		ids = append(ids, u.ID)
	}
	r.pages = append(r.pages, ids)
	return nil
}

func (r *recordingTable) Apply(ctx context.Context, conn *pgx.Conn, schema, table string, evs ...provider.UserEvent) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ev := range evs {
		r.applied = append(r.applied, fmt.Sprintf("%s %s deleted=%v", ev.ID, ev.User.ID, ev.Deleted))
	}
	return nil
}

// TestIntegrationUserSync: connecting a directory (through PUT's credentials, as auth_b and auth_c do)
// backfills every page of its users into the configured table of the project's database, owned by the
// project's role; signed user events are applied one job each, in the order they came, a redelivery once.
func TestIntegrationUserSync(t *testing.T) {
	t.Parallel()
	dir := testDirectory{}
	for i := range 5 {
		dir.users = append(dir.users, provider.User{ID: fmt.Sprintf("user_%d", i), Email: fmt.Sprintf("u%d@example.com", i)})
	}
	table := &recordingTable{}
	e, p := keyEnv(t, appliancetest.Options{Instances: true, IntegrationProviders: []provider.Provider{dir}, IntegrationUsers: table})
	prj := provision(t, e, p, "app", "development")
	svc := e.Svc.Integrations()
	put := func(token string) {
		t.Helper()
		if _, err := svc.Put(t.Context(), p, prj.ID, provider.AuthC, &api.PutIntegrationRequest{Config: json.RawMessage(`{"schema":"idp","table":"people"}`),
			Credentials: &api.IntegrationCredentials{Token: token, ExternalID: "directory_1", WebhookSecret: "dir-secret"}}); err != nil {
			t.Fatal(err)
		}
		jobs := integrationJobs(t, e, prj.ID, integrations.JobSync)
		e.WaitJob(t, jobs[len(jobs)-1].ID)
	}
	put("wrong")
	if i := integrationOfProvider(t, e, p, prj.ID, provider.AuthC); i.State != api.IntegrationError || len(table.pages) != 0 {
		t.Fatalf("a refused credential: %+v, pages %v", i, table.pages)
	}
	put("dir-token")
	i := integrationOfProvider(t, e, p, prj.ID, provider.AuthC)
	if i.State != api.IntegrationActive || i.ExternalID != "directory_1" || !i.HasCredentials {
		t.Fatalf("after backfill: %+v", i)
	}
	want := fmt.Sprintf("idp.people owner %s in %s:on", prj.RoleName, prj.DatabaseName)
	if len(table.ensured) != 1 || table.ensured[0] != want {
		t.Fatalf("ensured %v, want %q", table.ensured, want)
	}
	if fmt.Sprint(table.pages) != "[[user_0 user_1] [user_2 user_3] [user_4]]" {
		t.Fatalf("backfilled pages %v", table.pages)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	send := func(id, typ, user string, at time.Time) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"id": id, "type": typ, "user": user, "at": at})
		h := http.Header{"X-Test-Signature": {hex.EncodeToString(hmacSHA256("dir-secret", body))}}
		if r, err := svc.Receive(t.Context(), provider.AuthC, prj.ID, h, bytes.NewReader(body)); err != nil || !r.Received {
			t.Fatalf("%s: %v", id, err)
		}
	}
	send("ev_1", "user.created", "user_9", t0)
	send("ev_2", "user.updated", "user_9", t0.Add(time.Second))
	send("ev_1", "user.created", "user_9", t0) // a redelivery
	send("ev_3", "user.deleted", "user_0", t0.Add(2*time.Second))
	jobs := integrationJobs(t, e, prj.ID, integrations.JobUserEvent)
	if len(jobs) != 3 {
		t.Fatalf("%d user event jobs", len(jobs))
	}
	for _, j := range jobs {
		if j := e.WaitJob(t, j.ID); j.State != scheduler.StateCompleted {
			t.Fatalf("user event job: %s", j.Error)
		}
	}
	want2 := []string{"ev_1 user_9 deleted=false", "ev_2 user_9 deleted=false", "ev_3 user_0 deleted=true"}
	if !slices.Equal(table.applied, want2) {
		t.Fatalf("applied %v, want %v", table.applied, want2)
	}
}

func integrationOfProvider(t *testing.T, e *appliancetest.Env, p *appliance.Principal, projectID, name string) *api.Integration {
	t.Helper()
	l, err := e.Svc.Integrations().List(t.Context(), p, projectID)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range l.Integrations {
		if i.Provider == name {
			return i
		}
	}
	t.Fatalf("no %s integration", name)
	return nil
}
