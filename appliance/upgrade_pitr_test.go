package appliance_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/store"
)

// TestMajorUpgradePITRRightAfterTheCutover: the point-in-time window of the new cluster of a logical
// upgrade opens before its cutover (its WAL archived from its creation, a base backup of it taken during
// the catch-up), so a write made on 17 just after the cutover, before any later backup, is restored by a
// restore to its time (on 17), and a time before the upgrade still brings back 15. Upgraded again from
// there, the project is deleted while the upgrade awaits confirm: both servers' directories go.
func TestMajorUpgradePITRRightAfterTheCutover(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	upgradeTarget(t, e)
	ctx := t.Context()
	prj := provision(t, e, p, "pitr window", "development")
	c, err := e.Svc.ProjectConnections(ctx, p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	query := func(q string) string {
		t.Helper()
		conn := connect(t, c.Connections.DirectURL)
		defer conn.Close(ctx)
		return scalar[string](t, conn, q)
	}
	exec := func(q string) {
		t.Helper()
		conn := connect(t, c.Connections.DirectURL)
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	rows := func() string {
		return query("SELECT string_agg(v, ',' ORDER BY v) || ' on ' || current_setting('server_version_num')::int / 10000 FROM items")
	}
	exec("CREATE TABLE items (v text PRIMARY KEY)")
	exec("INSERT INTO items VALUES ('a')")
	res, err := e.Svc.Backups().Create(ctx, p, prj.ID, &appliance.CreateBackupRequest{Label: "on 15"})
	runJob(t, e, res, err)
	exec("INSERT INTO items VALUES ('b')")
	t1 := query("SELECT clock_timestamp()::text")
	exec("INSERT INTO items VALUES ('c')")

	res, err = e.Svc.Upgrades().Major(ctx, p, prj.ID, 17)
	upgrade := runJob(t, e, res, err)
	// Right after the cutover, on 17: the write of t2, then another.
	exec("INSERT INTO items VALUES ('d')")
	t2 := query("SELECT clock_timestamp()::text")
	exec("INSERT INTO items VALUES ('e')")
	if got := rows(); got != "a,b,c,d,e on 17" {
		t.Fatalf("after the upgrade: %s", got)
	}
	res, err = e.Svc.Upgrades().Confirm(ctx, p, prj.ID)
	runJob(t, e, res, err)

	// The only backup of 17 is the upgrade's, complete before t2.
	at2, err := time.Parse("2006-01-02 15:04:05.999999-07", t2)
	if err != nil {
		t.Fatal(err)
	}
	var of17 []*store.Backup
	if err := e.DB.View(func(tx *store.Tx) error {
		all, err := store.Backups.Lookup(tx, store.BackupsByProject, prj.ID, store.Query{})
		for _, b := range all {
			if b.Major == 17 {
				of17 = append(of17, b)
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	inst := instanceOf(t, e, prj)
	if len(of17) != 1 || of17[0].JobID != upgrade.ID || of17[0].State != appliance.BackupCompleted || of17[0].CompletedAt == nil ||
		!of17[0].CompletedAt.Before(at2) || of17[0].WALArchive != inst.WALArchive || !strings.Contains(of17[0].Label, "before the cutover") {
		t.Fatalf("the backups of 17 (t2 %s): %+v", at2, of17)
	}

	for _, step := range []struct{ at, want string }{{t2, "a,b,c,d on 17"}, {t1, "a,b on 15"}} {
		at, err := time.Parse("2006-01-02 15:04:05.999999-07", step.at)
		if err != nil {
			t.Fatal(err)
		}
		res, err := e.Svc.Backups().Restore(ctx, p, prj.ID, &appliance.RestoreRequest{RestoreTime: at.UTC().Format(time.RFC3339Nano)})
		j := runJob(t, e, res, err)
		if got := rows(); got != step.want {
			t.Fatalf("after the restore to %s (%s): %q, want %q", step.at, j.Result, got, step.want)
		}
		if v := query("SELECT version()"); !strings.Contains(v, "PostgreSQL "+step.want[len(step.want)-2:]) {
			t.Fatalf("after the restore to %s: %s", step.at, v)
		}
	}

	// Back on 15 in the directory the upgrade made (a restore keeps the directory): upgraded again, its
	// data is kept and the new cluster takes another directory.
	on15 := instanceOf(t, e, prj)
	if on15.Major != 15 || !strings.HasSuffix(on15.Dir, "-pg17") {
		t.Fatalf("the instance after the restore to 15: %+v", on15)
	}
	res, err = e.Svc.Upgrades().Major(ctx, p, prj.ID, 17)
	again := runJob(t, e, res, err)
	if got := rows(); got != "a,b on 17" {
		t.Fatalf("upgraded again: %s", got)
	}
	pending := instanceOf(t, e, prj)
	if pending.Dir != on15.Dir+"-"+again.ID || pending.PreviousDir != on15.Dir {
		t.Fatalf("the instance upgraded again: %+v", pending)
	}

	// Deleting a project whose upgrade awaits confirm removes both servers.
	del, err := e.Svc.DeleteProject(ctx, p, prj.ID, "")
	runJob(t, e, del, err)
	for _, dir := range []string{pending.Dir, pending.PreviousDir} {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s after the project's deletion: %v", dir, err)
		}
	}
}
