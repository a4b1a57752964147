package usersync_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/integrations/provider"
	"github.com/theappliance/appliance/appliance/integrations/usersync"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/appliance/postgres/pgtest"
	"github.com/theappliance/appliance/appliance/testtools"
)

func TestMain(m *testing.M) { testtools.Main(m) }

type bundle struct {
	srv   *pgtest.Server
	db    string
	role  string
	admin *pgx.Conn
}

// setup starts a server, a project's role and its database, and an admin session in it.
func setup(t *testing.T) bundle {
	t.Helper()
	srv := pgtest.Start(t, postgres.Settings{})
	db, role, _ := srv.Tenant(t)
	return bundle{srv: srv, db: db, role: role, admin: srv.Admin(t, db)}
}

// history is a provider's events for many users, in the order they happened, and the final state.
type history struct {
	events []provider.UserEvent
	final  map[string]provider.User // live users at the end
}

var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// makeHistory: users created, updated several times, some deleted, a few re-created after deletion;
// every change at its own millisecond.
func makeHistory(r *rand.Rand, users int) history {
	h := history{final: map[string]provider.User{}}
	clock := t0
	tick := func() time.Time {
		clock = clock.Add(time.Duration(1+r.Intn(5)) * time.Millisecond)
		return clock
	}
	type state struct {
		created time.Time
		live    bool
		version int
	}
	states := map[string]*state{}
	var ids []string
	for i := 0; i < users; i++ {
		ids = append(ids, fmt.Sprintf("user_%03d", i))
	}
	steps := users * 6
	for n := 0; n < steps; n++ {
		id := ids[r.Intn(len(ids))]
		st := states[id]
		at := tick()
		switch {
		case st == nil || (!st.live && r.Intn(3) == 0):
			if st == nil {
				st = &state{}
				states[id] = st
			}
			st.live, st.created = true, at
			st.version++
			h.events = append(h.events, provider.UserEvent{ID: fmt.Sprintf("ev%d", n), User: user(id, st.version, st.created, at), At: at})
		case !st.live:
			continue
		case r.Intn(5) == 0:
			st.live = false
			h.events = append(h.events, provider.UserEvent{ID: fmt.Sprintf("ev%d", n), Deleted: true, User: provider.User{ID: id}, At: at})
		default:
			st.version++
			h.events = append(h.events, provider.UserEvent{ID: fmt.Sprintf("ev%d", n), User: user(id, st.version, st.created, at), At: at})
		}
	}
	for _, ev := range h.events {
		if ev.Deleted {
			delete(h.final, ev.User.ID)
		} else {
			h.final[ev.User.ID] = ev.User
		}
	}
	return h
}

func user(id string, version int, created, updated time.Time) provider.User {
	raw, _ := json.Marshal(map[string]any{"id": id, "version": version})
	return provider.User{
		ID: id, Email: fmt.Sprintf("%s.v%d@example.com", id, version),
		FirstName: fmt.Sprintf("First%d", version), LastName: "Last " + id,
		CreatedAt: created, UpdatedAt: updated, Raw: raw,
	}
}

type row struct {
	Email, First, Last string
	Created, Updated   time.Time
	Raw                string
	SourceAt           time.Time
}

// read returns the users table and the tombstones.
func read(t *testing.T, conn *pgx.Conn, tb usersync.Table) (map[string]row, map[string]time.Time) {
	t.Helper()
	ctx := context.Background()
	rows, err := conn.Query(ctx, `SELECT id, coalesce(email, ''), coalesce(first_name, ''), coalesce(last_name, ''),
	coalesce(created_at, 'epoch'), coalesce(updated_at, 'epoch'), coalesce(raw::text, 'null'), source_at FROM `+
		pgx.Identifier{tb.Schema, tb.Name}.Sanitize())
	if err != nil {
		t.Fatal(err)
	}
	users := map[string]row{}
	var id string
	var r row
	if _, err := pgx.ForEachRow(rows, []any{&id, &r.Email, &r.First, &r.Last, &r.Created, &r.Updated, &r.Raw, &r.SourceAt}, func() error {
		users[id] = r
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	rows, err = conn.Query(ctx, "SELECT id, source_at FROM "+pgx.Identifier{tb.Schema, tb.Name + usersync.TombstoneSuffix}.Sanitize())
	if err != nil {
		t.Fatal(err)
	}
	tombs := map[string]time.Time{}
	var at time.Time
	if _, err := pgx.ForEachRow(rows, []any{&id, &at}, func() error {
		tombs[id] = at
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return users, tombs
}

// wantRows is what the table must hold for h's final state.
func wantRows(t *testing.T, h history) map[string]row {
	t.Helper()
	want := map[string]row{}
	for id, u := range h.final {
		var raw any
		json.Unmarshal(u.Raw, &raw)
		b, _ := json.Marshal(raw)
		want[id] = row{Email: u.Email, First: u.FirstName, Last: u.LastName, Created: u.CreatedAt, Updated: u.UpdatedAt, Raw: string(b), SourceAt: u.UpdatedAt}
	}
	return want
}

// normalize makes jsonb's text and timestamps comparable.
func normalize(rows map[string]row) map[string]row {
	out := map[string]row{}
	for id, r := range rows {
		var v any
		json.Unmarshal([]byte(r.Raw), &v)
		b, _ := json.Marshal(v)
		r.Raw = string(b)
		r.Created, r.Updated, r.SourceAt = r.Created.UTC(), r.Updated.UTC(), r.SourceAt.UTC()
		out[id] = r
	}
	return out
}

func diff(t *testing.T, what string, got, want map[string]row) {
	t.Helper()
	got, want = normalize(got), normalize(want)
	if reflect.DeepEqual(got, want) {
		return
	}
	n := 0
	for id, w := range want {
		if g, ok := got[id]; !ok || g != w {
			t.Errorf("%s: user %s: got %+v (present %v), want %+v", what, id, g, ok, w)
			if n++; n > 5 {
				break
			}
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			t.Errorf("%s: user %s present, want absent (deleted)", what, id)
		}
	}
	t.FailNow()
}

// TestShuffledDeliveryConverges: the same events delivered in order, and shuffled in batches of random
// sizes, leave the same table: the provider's final state, tombstones included.
func TestShuffledDeliveryConverges(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	for _, seed := range []int64{1, 2, 3, 20261127} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewSource(seed))
			h := makeHistory(r, 30)
			inOrder := usersync.Table{Schema: usersync.DefaultSchema, Name: fmt.Sprintf("ordered_%d", seed)}
			shuffled := usersync.Table{Schema: "sync_shuffled", Name: fmt.Sprintf("users_%d", seed)}
			for _, tb := range []usersync.Table{inOrder, shuffled} {
				if err := tb.Ensure(ctx, b.admin, b.role); err != nil {
					t.Fatal(err)
				}
			}
			for _, ev := range h.events {
				if err := inOrder.Apply(ctx, b.admin, ev); err != nil {
					t.Fatal(err)
				}
			}
			evs := append([]provider.UserEvent(nil), h.events...)
			r.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
			deletes := 0
			for len(evs) > 0 {
				n := min(1+r.Intn(4), len(evs))
				for _, ev := range evs[:n] {
					if ev.Deleted {
						deletes++
					}
				}
				if err := shuffled.Apply(ctx, b.admin, evs[:n]...); err != nil {
					t.Fatal(err)
				}
				evs = evs[n:]
			}
			if deletes == 0 || len(h.final) == 0 {
				t.Fatalf("the history has %d deletions and %d live users: not a test", deletes, len(h.final))
			}
			gotOrdered, tombOrdered := read(t, b.admin, inOrder)
			gotShuffled, tombShuffled := read(t, b.admin, shuffled)
			diff(t, "in order", gotOrdered, wantRows(t, h))
			diff(t, "shuffled", gotShuffled, wantRows(t, h))
			if !reflect.DeepEqual(tombOrdered, tombShuffled) {
				t.Fatalf("tombstones differ: in order %v, shuffled %v", tombOrdered, tombShuffled)
			}
			for id := range tombOrdered {
				if _, live := h.final[id]; live {
					t.Fatalf("user %s is live and has a tombstone", id)
				}
			}
		})
	}
}

// TestBackfillRacesEvents: a list read in the middle of the history, backfilled page by page while
// every event is delivered (shuffled) on another session, ends in the provider's final state.
func TestBackfillRacesEvents(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	for _, seed := range []int64{7, 8, 9} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewSource(seed))
			h := makeHistory(r, 40)
			tb := usersync.Table{Schema: usersync.DefaultSchema, Name: fmt.Sprintf("race_%d", seed)}
			if err := tb.Ensure(ctx, b.admin, b.role); err != nil {
				t.Fatal(err)
			}
			// The list as the provider answered it halfway through the history.
			listed := map[string]provider.User{}
			var ids []string
			for _, ev := range h.events[:len(h.events)/2] {
				if ev.Deleted {
					delete(listed, ev.User.ID)
				} else {
					listed[ev.User.ID] = ev.User
				}
			}
			for id := range listed {
				ids = append(ids, id)
			}
			r.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
			listedAt := h.events[len(h.events)/2-1].At
			evs := append([]provider.UserEvent(nil), h.events...)
			r.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })

			other := b.srv.Admin(t, b.db)
			var wg sync.WaitGroup
			errs := make(chan error, 2)
			wg.Add(2)
			go func() {
				defer wg.Done()
				for len(ids) > 0 {
					n := min(7, len(ids))
					page := make([]provider.User, n)
					for i, id := range ids[:n] {
						page[i] = listed[id]
					}
					if err := tb.Backfill(ctx, other, page, listedAt); err != nil {
						errs <- err
						return
					}
					ids = ids[n:]
				}
			}()
			go func() {
				defer wg.Done()
				for _, ev := range evs {
					if err := tb.Apply(ctx, b.admin, ev); err != nil {
						errs <- err
						return
					}
				}
			}()
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			got, _ := read(t, b.admin, tb)
			diff(t, "backfill racing events", got, wantRows(t, h))
		})
	}
}

// TestBackfillAfterEvents: a list read before a deletion and an update does not undo them; a user
// without an update time is ordered by the list's time.
func TestBackfillAfterEvents(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	tb := usersync.Table{Schema: usersync.DefaultSchema, Name: usersync.DefaultName}
	if err := tb.Ensure(ctx, b.admin, b.role); err != nil {
		t.Fatal(err)
	}
	old1, old2 := user("a", 1, t0, t0.Add(time.Second)), user("b", 1, t0, t0.Add(time.Second))
	if err := tb.Apply(ctx, b.admin,
		provider.UserEvent{Deleted: true, User: provider.User{ID: "a"}, At: t0.Add(2 * time.Second)},
		provider.UserEvent{User: user("b", 2, t0, t0.Add(3*time.Second)), At: t0.Add(3 * time.Second)},
	); err != nil {
		t.Fatal(err)
	}
	noTime := provider.User{ID: "c", Email: "c@example.com"}
	if err := tb.Backfill(ctx, b.admin, []provider.User{old1, old2, noTime}, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	got, tombs := read(t, b.admin, tb)
	if _, ok := got["a"]; ok {
		t.Fatal("a deleted user came back with an older list")
	}
	if got["b"].Email != "b.v2@example.com" {
		t.Fatalf("an older list overwrote a newer update: %+v", got["b"])
	}
	if c := got["c"]; c.Email != "c@example.com" || !c.SourceAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("user without update time: %+v", c)
	}
	if _, ok := tombs["a"]; !ok || len(tombs) != 1 {
		t.Fatalf("tombstones %v, want a's only", tombs)
	}
	// A deletion older than the row changes nothing; one at the row's time wins.
	if err := tb.Apply(ctx, b.admin, provider.UserEvent{Deleted: true, User: provider.User{ID: "b"}, At: t0.Add(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if got, _ = read(t, b.admin, tb); got["b"].Email != "b.v2@example.com" {
		t.Fatal("an older deletion removed a newer user")
	}
	if err := tb.Apply(ctx, b.admin, provider.UserEvent{Deleted: true, User: provider.User{ID: "b"}, At: t0.Add(3 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if got, _ = read(t, b.admin, tb); len(got) != 1 {
		t.Fatalf("after deleting b at its update's time: %v", got)
	}
	// One bad event fails the call and writes none of it.
	err := tb.Apply(ctx, b.admin, provider.UserEvent{User: user("d", 1, t0, t0), At: t0},
		provider.UserEvent{User: provider.User{ID: "e", Raw: json.RawMessage("{not json")}, At: t0})
	if err == nil {
		t.Fatal("an event with invalid raw JSON was accepted")
	}
	if got, _ = read(t, b.admin, tb); len(got) != 1 {
		t.Fatalf("a failed call wrote: %v", got)
	}
}

// TestEnsure: the schema and both tables owned by the project's role, usable by it, idempotent, data
// kept; a table of another shape refused; bad identifiers refused before any SQL.
func TestEnsure(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	tb := usersync.Table{Schema: usersync.DefaultSchema, Name: usersync.DefaultName}
	for i := 0; i < 2; i++ {
		if err := tb.Ensure(ctx, b.admin, b.role); err != nil {
			t.Fatalf("ensure %d: %v", i, err)
		}
		if i == 0 {
			if err := tb.Apply(ctx, b.admin, provider.UserEvent{User: user("kept", 1, t0, t0), At: t0}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var schemaOwner, usersOwner, tombOwner string
	if err := b.admin.QueryRow(ctx, `SELECT (SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'auth_sync'),
	(SELECT relowner::regrole::text FROM pg_class WHERE oid = 'auth_sync.users'::regclass),
	(SELECT relowner::regrole::text FROM pg_class WHERE oid = 'auth_sync.users_tombstones'::regclass)`).Scan(&schemaOwner, &usersOwner, &tombOwner); err != nil {
		t.Fatal(err)
	}
	if schemaOwner != b.role || usersOwner != b.role || tombOwner != b.role {
		t.Fatalf("owners: schema %s, users %s, tombstones %s; want %s", schemaOwner, usersOwner, tombOwner, b.role)
	}
	tenant := b.srv.Connect(t, b.srv.TenantConfig(t, b.db, b.role))
	var email string
	if err := tenant.QueryRow(ctx, "SELECT email FROM auth_sync.users WHERE id = 'kept'").Scan(&email); err != nil || email != "kept.v1@example.com" {
		t.Fatalf("the project's role reads its synced users: %q, %v", email, err)
	}

	// A schema that exists keeps its owner; the tables are the role's.
	if _, err := b.admin.Exec(ctx, "CREATE SCHEMA theirs"); err != nil {
		t.Fatal(err)
	}
	if err := (usersync.Table{Schema: "theirs", Name: "members"}).Ensure(ctx, b.admin, b.role); err != nil {
		t.Fatal(err)
	}
	if err := b.admin.QueryRow(ctx, `SELECT (SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'theirs'),
	(SELECT relowner::regrole::text FROM pg_class WHERE oid = 'theirs.members'::regclass)`).Scan(&schemaOwner, &usersOwner); err != nil {
		t.Fatal(err)
	}
	if schemaOwner == b.role || usersOwner != b.role {
		t.Fatalf("in an existing schema: schema owner %s, table owner %s", schemaOwner, usersOwner)
	}

	if _, err := b.admin.Exec(ctx, "CREATE TABLE auth_sync.mine (id int PRIMARY KEY, note text)"); err != nil {
		t.Fatal(err)
	}
	err := usersync.Table{Schema: usersync.DefaultSchema, Name: "mine"}.Ensure(ctx, b.admin, b.role)
	if err == nil || !strings.Contains(err.Error(), "exists without the sync's column") {
		t.Fatalf("a table of another shape: %v", err)
	}
	if err := (usersync.Table{Schema: "s", Name: "u"}).Ensure(ctx, b.admin, ""); err == nil {
		t.Fatal("an empty owner was accepted")
	}

	bad := []usersync.Table{
		{Schema: "", Name: "users"},
		{Schema: "auth_sync", Name: ""},
		{Schema: "Auth", Name: "users"},
		{Schema: "auth_sync", Name: `users"; DROP TABLE x; --`},
		{Schema: "auth sync", Name: "users"},
		{Schema: "1auth", Name: "users"},
		{Schema: "pg_catalog", Name: "users"},
		{Schema: "information_schema", Name: "users"},
		{Schema: "auth_sync", Name: strings.Repeat("u", 53)},
		{Schema: strings.Repeat("s", 64), Name: "users"},
		{Schema: "auth_sync", Name: "usérs"},
	}
	for _, tb := range bad {
		if err := tb.Validate(); err == nil {
			t.Errorf("%q.%q validated", tb.Schema, tb.Name)
		}
		if err := tb.Ensure(ctx, b.admin, b.role); err == nil {
			t.Errorf("%q.%q ensured", tb.Schema, tb.Name)
		}
		if err := tb.Apply(ctx, b.admin, provider.UserEvent{User: user("x", 1, t0, t0), At: t0}); err == nil {
			t.Errorf("%q.%q applied", tb.Schema, tb.Name)
		}
	}
	var n int
	if err := b.admin.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname NOT LIKE 'pg_%' AND nspname NOT IN ('public', 'information_schema', 'auth_sync', 'theirs')").Scan(&n); err != nil || n != 0 {
		t.Fatalf("bad identifiers created %d schemas (%v)", n, err)
	}
	if err := (usersync.Table{Schema: "auth_sync", Name: strings.Repeat("u", 52)}).Validate(); err != nil {
		t.Fatalf("a 52-character table name: %v", err)
	}
}

func TestValidateConfig(t *testing.T) {
	for _, c := range []struct{ in, want, err string }{
		{in: "", want: `{"schema":"auth_sync","table":"users"}`},
		{in: "null", want: `{"schema":"auth_sync","table":"users"}`},
		{in: "{}", want: `{"schema":"auth_sync","table":"users"}`},
		{in: `{"schema":"app"}`, want: `{"schema":"app","table":"users"}`},
		{in: `{"schema":"app","table":"members"}`, want: `{"schema":"app","table":"members"}`},
		{in: `{"schema":"App"}`, err: "schema"},
		{in: `{"table":"a-b"}`, err: "table"},
		{in: `{"tabel":"x"}`, err: "tabel"},
		{in: `{"schema":1}`, err: "schema"},
		{in: `[]`, err: "config"},
		{in: `{} {}`, err: "config"},
	} {
		got, err := usersync.ValidateConfig(json.RawMessage(c.in))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want one naming %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || string(got) != c.want {
			t.Errorf("%s: %s, %v; want %s", c.in, got, err, c.want)
		}
		tb, err := usersync.TableOf(got)
		if err != nil || fmt.Sprintf(`{"schema":%q,"table":%q}`, tb.Schema, tb.Name) != c.want {
			t.Errorf("TableOf(%s) = %+v, %v", got, tb, err)
		}
	}
}
