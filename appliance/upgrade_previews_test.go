package appliance_test

import (
	"strings"
	"testing"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/store"
)

// TestMajorUpgradePreviewsRunTheProjectsMajor: once a project runs 17 (a logical upgrade to the npm build,
// confirmed), every cluster made for it runs 17: an empty preview (not a spare of the default installation,
// which stays in the pool for a project on 15), and previews made before the upgrade, empty or clone, once
// reset. A new project still claims the spare and runs the default major.
func TestMajorUpgradePreviewsRunTheProjectsMajor(t *testing.T) {
	t.Parallel()
	e, p := keyEnv(t, appliancetest.Options{Instances: true, Spares: 1})
	upgradeTarget(t, e)
	ctx := t.Context()
	prj := provision(t, e, p, "previews on 17", "development")
	c, err := e.Svc.ProjectConnections(ctx, p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t, c.Connections.DirectURL)
	if _, err := conn.Exec(ctx, "CREATE TABLE items (id serial PRIMARY KEY, v text); INSERT INTO items (v) SELECT 'row ' || g FROM generate_series(1, 7) g"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)

	// previewSays is a preview's server's major and its rows of items (-1: no such table).
	previewSays := func(id string) (string, int64) {
		t.Helper()
		cc, err := e.Svc.Previews().Connections(ctx, p, id)
		if err != nil {
			t.Fatal(err)
		}
		pv := connect(t, cc.Connections.DirectURL)
		defer pv.Close(ctx)
		v := scalar[string](t, pv, "SELECT version()")
		n := int64(-1)
		if scalar[bool](t, pv, "SELECT to_regclass('items') IS NOT NULL") {
			n = scalar[int64](t, pv, "SELECT count(*) FROM items")
		}
		return v, n
	}
	spares := func() []string {
		t.Helper()
		if err := e.Svc.EnsureSpares(ctx); err != nil {
			t.Fatal(err)
		}
		var ids []string
		if err := e.DB.View(func(tx *store.Tx) error {
			all, err := store.Instances.All(tx, func(i *store.Instance) bool { return i.State == appliance.InstanceSpare })
			for _, i := range all {
				ids = append(ids, i.ID)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return ids
	}

	// Before the upgrade: an empty preview and a clone run 15.
	emptyBefore, err := e.Svc.Previews().Create(ctx, p, prj.ID, &appliance.CreatePreviewRequest{Name: "empty-before", Mode: "empty"})
	waitPreview(t, e, emptyBefore, err)
	cloneBefore, err := e.Svc.Previews().Create(ctx, p, prj.ID, &appliance.CreatePreviewRequest{Name: "clone-before"})
	waitPreview(t, e, cloneBefore, err)
	for _, id := range []string{emptyBefore.Preview.ID, cloneBefore.Preview.ID} {
		if v, _ := previewSays(id); !strings.Contains(v, "PostgreSQL 15") {
			t.Fatalf("preview %s before the upgrade: %s", id, v)
		}
	}

	res, err := e.Svc.Upgrades().Major(ctx, p, prj.ID, 17)
	runJob(t, e, res, err)
	res, err = e.Svc.Upgrades().Confirm(ctx, p, prj.ID)
	runJob(t, e, res, err)

	// Previews made on 15, reset: made again on the project's major now.
	for _, id := range []string{emptyBefore.Preview.ID, cloneBefore.Preview.ID} {
		res, err := e.Svc.Previews().Reset(ctx, p, id)
		runJob(t, e, res, err)
	}
	if v, n := previewSays(emptyBefore.Preview.ID); !strings.Contains(v, "PostgreSQL 17") || n != -1 {
		t.Fatalf("the empty preview made on 15, reset: %s, items %d", v, n)
	}
	if v, n := previewSays(cloneBefore.Preview.ID); !strings.Contains(v, "PostgreSQL 17") || n != 7 {
		t.Fatalf("the clone made on 15, reset: %s, items %d", v, n)
	}

	// (The plan allows two previews.)
	del, err := e.Svc.Previews().Delete(ctx, p, cloneBefore.Preview.ID)
	runJob(t, e, del, err)

	// An empty preview of the 17 project runs 17, with the project's names and no rows; the spare (15) is
	// not taken.
	pool := spares()
	if len(pool) != 1 {
		t.Fatalf("spares before the empty preview: %v", pool)
	}
	empty, err := e.Svc.Previews().Create(ctx, p, prj.ID, &appliance.CreatePreviewRequest{Name: "empty-on-17", Mode: "empty"})
	waitPreview(t, e, empty, err)
	if v, n := previewSays(empty.Preview.ID); !strings.Contains(v, "PostgreSQL 17") || n != -1 {
		t.Fatalf("an empty preview of the 17 project: %s, items %d", v, n)
	}
	if got := e.Project(t, empty.Preview.ID).PostgresVersion; !strings.HasPrefix(got, "17.") {
		t.Fatalf("the empty preview's postgres_version: %q", got)
	}
	if after := spares(); len(after) != 1 || after[0] != pool[0] {
		t.Fatalf("spares after the empty preview of the 17 project: %v, before %v", after, pool)
	}

	// A new project runs the default major, from the spare.
	other := provision(t, e, p, "still on 15", "development")
	if inst := instanceOf(t, e, other); inst.ID != pool[0] || inst.Major != 15 {
		t.Fatalf("the new project's instance %s (major %d); the spare was %s", inst.ID, inst.Major, pool[0])
	}
	oc, err := e.Svc.ProjectConnections(ctx, p, other.ID)
	if err != nil {
		t.Fatal(err)
	}
	on15 := connect(t, oc.Connections.DirectURL)
	defer on15.Close(ctx)
	if v := scalar[string](t, on15, "SELECT version()"); !strings.Contains(v, "PostgreSQL 15") {
		t.Fatalf("the new project: %s", v)
	}
}
