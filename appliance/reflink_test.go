package appliance_test

import (
	"crypto/sha256"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/previews"
	"github.com/theappliance/appliance/appliance/testtools"
)

// TestReflinkCopies: an appliance whose data directory is on XFS made with reflinks (the test's) says so
// in /status, and copies by reflink: a clone preview (its job times the sync of the copy) holds the
// project's data; a base backup is an online copy by reflink with its own manifest, which pg_verifybackup
// verifies; a restore to it copies it by reflink and holds its data, the project's previous data directory
// removed; the project then rewrites its table, and a second restore to the same backup finds it whole
// (the restored server shared the backup's extents, not its data).
func TestReflinkCopies(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(testtools.XFSMount(t, 3<<30), "appliance")
	if err := os.Mkdir(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	e, p := keyEnv(t, appliancetest.Options{Instances: true, Dir: dir})
	if st := e.Svc.Status(t.Context()); st.DataDirReflinks == nil || !*st.DataDirReflinks {
		t.Fatalf("/status says data_dir_reflinks %v on XFS with reflinks", st.DataDirReflinks)
	}
	if st := e.Svc.Status(t.Context()).Public(); st.DataDirReflinks != nil {
		t.Fatal("the public status tells data_dir_reflinks")
	}
	prj := provision(t, e, p, "reflinked", "development")
	c, err := e.Svc.ProjectConnections(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t, c.Connections.DirectURL)
	count := func(conn *pgx.Conn) int64 {
		t.Helper()
		return scalar[int64](t, conn, "SELECT count(*) FROM items WHERE v = md5(id::text)")
	}
	if _, err := conn.Exec(t.Context(), "CREATE TABLE items AS SELECT g AS id, md5(g::text) AS v FROM generate_series(1, 50000) g"); err != nil {
		t.Fatal(err)
	}

	// A clone preview.
	pres, err := e.Svc.Previews().Create(t.Context(), p, prj.ID, &appliance.CreatePreviewRequest{Mode: previews.ModeClone})
	if err != nil {
		t.Fatal(err)
	}
	j := runJob(t, e, &appliance.JobResponse{Job: pres.Job}, nil)
	var timings struct {
		MS map[string]int64 `json:"timings_ms"`
	}
	if err := json.Unmarshal(j.Result, &timings); err != nil {
		t.Fatal(err)
	}
	if _, ok := timings.MS["init.sync"]; !ok {
		t.Fatalf("the clone's job timed no sync of a reflinked copy: %s", j.Result)
	}
	pc, err := e.Svc.Previews().Connections(t.Context(), p, pres.Preview.ID)
	if err != nil {
		t.Fatal(err)
	}
	if n := count(connect(t, pc.Connections.DirectURL)); n != 50000 {
		t.Fatalf("the clone holds %d rows, want 50000", n)
	}

	// A base backup by reflink, verified.
	res, err := e.Svc.Backups().Create(t.Context(), p, prj.ID, &appliance.CreateBackupRequest{Label: "reflinked"})
	j = runJob(t, e, res, err)
	if err := json.Unmarshal(j.Result, &timings); err != nil {
		t.Fatal(err)
	}
	if _, ok := timings.MS["sync"]; !ok {
		t.Fatalf("the backup job was not a copy by reflink: %s", j.Result)
	}
	list, err := e.Svc.Backups().List(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	b := list.Backups[0]
	if b.State != appliance.BackupCompleted || b.VerificationState != appliance.VerificationVerified {
		t.Fatalf("backup %+v", b)
	}
	stored := filepath.Join(dir, "backups", prj.ID, "base", b.BackupKey)
	sums := func() map[string][32]byte {
		t.Helper()
		out := map[string][32]byte{}
		err := filepath.WalkDir(stored, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return err
			}
			data, err := os.ReadFile(p)
			out[p] = sha256.Sum256(data)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	before := sums()

	// Restores to it: the first replaces (and removes) the data directory the backup was copied from.
	if _, err := conn.Exec(t.Context(), "DELETE FROM items WHERE id > 100"); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		res, err := e.Svc.Backups().Restore(t.Context(), p, prj.ID, &appliance.RestoreRequest{BackupKey: b.BackupKey})
		runJob(t, e, res, err)
		restored := connect(t, c.Connections.DirectURL)
		if n := count(restored); n != 50000 {
			t.Fatalf("restore %d: %d rows, want the backup's 50000", round+1, n)
		}
		if _, err := restored.Exec(t.Context(), "UPDATE items SET v = 'rewritten'"); err != nil {
			t.Fatal(err)
		}
		if err := e.AdminExec(t, prj.ID, "CHECKPOINT"); err != nil {
			t.Fatal(err)
		}
	}
	after := sums()
	if len(after) != len(before) {
		t.Fatalf("the stored backup had %d files, has %d", len(before), len(after))
	}
	for p, sum := range before {
		if after[p] != sum {
			t.Errorf("the stored backup's %s changed", p)
		}
	}
}
