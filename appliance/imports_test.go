package appliance_test

import (
	"bytes"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/migrate"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

func TestImportUploadAndRestore(t *testing.T) {
	t.Parallel()
	var uploadLimit atomic.Int64 // the import upload size limit when positive
	e, p := keyEnv(t, appliancetest.Options{Instances: true, ImportUploadLimit: uploadLimit.Load})
	src := provision(t, e, p, "importsrc", "development")
	dst := provision(t, e, p, "importdst", "development")
	if err := e.AdminExec(t, src.ID, "CREATE TABLE imported_items AS SELECT g AS id FROM generate_series(1, 500) g"); err != nil {
		t.Fatal(err)
	}
	res, err := e.Svc.Exports().Create(t.Context(), p, src.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, res.Job.ID); j.State != scheduler.StateCompleted {
		t.Fatalf("export job %s: %s\nstderr: %s", j.State, j.Error, j.LastStderr)
	}
	dump, err := os.ReadFile(filepath.Join(e.Dir, "backups", src.ID, "exports", res.ExportID+".dump"))
	if err != nil {
		t.Fatal(err)
	}

	// Without confirm: 400 and no job; without an upload: 409.
	if _, err := e.Svc.Migrate().CreateImport(t.Context(), p, dst.ID, &appliance.ImportRequest{}); appliance.KindOf(err) != appliance.KindInvalid ||
		!strings.Contains(err.Error(), "send confirm: true") {
		t.Fatalf("import without confirm: %v", err)
	}
	if _, err := e.Svc.Migrate().CreateImport(t.Context(), p, dst.ID, &appliance.ImportRequest{Confirm: true}); appliance.KindOf(err) != appliance.KindConflict {
		t.Fatalf("import without an upload: %v", err)
	}

	// A session without the admin role may neither get an upload URL nor import.
	member := &appliance.Principal{AuthSource: appliance.SourceSession, OrganizationID: dst.OrganizationID, IDPOrganizationRole: appliance.RoleMember}
	if _, err := e.Svc.Migrate().CreateUpload(t.Context(), member, dst.ID); appliance.KindOf(err) != appliance.KindForbidden {
		t.Fatalf("member upload: %v", err)
	}
	if _, err := e.Svc.Migrate().CreateImport(t.Context(), member, dst.ID, &appliance.ImportRequest{Confirm: true}); appliance.KindOf(err) != appliance.KindForbidden {
		t.Fatalf("member import: %v", err)
	}

	up, err := e.Svc.Migrate().CreateUpload(t.Context(), p, dst.ID)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(up.Upload.UploadURL)
	if err != nil {
		t.Fatal(err)
	}
	if up.Upload.ObjectKey != "imports/"+up.Upload.ID+".dump" || !strings.HasSuffix(u.Path, "/v1/uploads/imports/"+up.Upload.ID) ||
		up.Upload.State != migrate.UploadPending {
		t.Fatalf("upload %+v", up.Upload)
	}
	expires, sig := u.Query().Get("expires"), u.Query().Get("sig")
	tampered := []byte(sig)
	if tampered[0] == '0' {
		tampered[0] = '1'
	} else {
		tampered[0] = '0'
	}
	if _, err := e.Svc.Migrate().ReceiveUpload(t.Context(), up.Upload.ID, expires, string(tampered), -1, bytes.NewReader(dump)); appliance.KindOf(err) != appliance.KindForbidden {
		t.Fatalf("tampered upload: %v", err)
	}
	if _, err := e.Svc.Migrate().ReceiveUpload(t.Context(), up.Upload.ID, "9999999999", sig, -1, bytes.NewReader(dump)); appliance.KindOf(err) != appliance.KindForbidden {
		t.Fatalf("later expires: %v", err)
	}
	dir := filepath.Join(e.Dir, "backups", dst.ID, "imports")
	uploadLimit.Store(int64(len(dump) - 1))
	_, err = e.Svc.Migrate().ReceiveUpload(t.Context(), up.Upload.ID, expires, sig, -1, bytes.NewReader(dump))
	uploadLimit.Store(0)
	if appliance.KindOf(err) != appliance.KindTooLarge {
		t.Fatalf("oversize upload: %v", err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("an oversize upload left %d files", len(left))
	}
	got, err := e.Svc.Migrate().ReceiveUpload(t.Context(), up.Upload.ID, expires, sig, -1, bytes.NewReader(dump))
	if err != nil {
		t.Fatal(err)
	}
	if got.Upload.State != migrate.UploadUploaded || got.Upload.SizeBytes != int64(len(dump)) {
		t.Fatalf("uploaded %+v", got.Upload)
	}
	if _, err := e.Svc.Migrate().ReceiveUpload(t.Context(), up.Upload.ID, expires, sig, -1, bytes.NewReader(dump)); appliance.KindOf(err) != appliance.KindConflict {
		t.Fatalf("second upload: %v", err)
	}

	imp, err := e.Svc.Migrate().CreateImport(t.Context(), p, dst.ID, &appliance.ImportRequest{Confirm: true})
	if j := runJob(t, e, imp, err); j.Type != migrate.JobImportRestore {
		t.Fatalf("job type %s", j.Type)
	}
	c, err := e.Svc.ProjectConnections(t.Context(), p, dst.ID)
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t, c.Connections.DirectURL)
	if n := scalar[int64](t, conn, "SELECT count(*) FROM imported_items"); n != 500 {
		t.Fatalf("%d rows imported", n)
	}
	if owner := scalar[string](t, conn, "SELECT tableowner::text FROM pg_tables WHERE tablename = 'imported_items'"); owner != dst.RoleName {
		t.Fatalf("imported table owned by %s, want %s", owner, dst.RoleName)
	}
	// The upload is consumed: another import finds none. Its dump is deleted; the record keeps its size.
	if _, err := e.Svc.Migrate().CreateImport(t.Context(), p, dst.ID, &appliance.ImportRequest{Confirm: true}); appliance.KindOf(err) != appliance.KindConflict {
		t.Fatalf("import of a consumed upload: %v", err)
	}
	if rec := uploadRecord(t, e, up.Upload.ID); rec.State != migrate.UploadConsumed || rec.SizeBytes != int64(len(dump)) || rec.ConsumedAt == nil {
		t.Fatalf("consumed upload %+v", rec)
	}
	if left, err := os.ReadDir(dir); err != nil || len(left) != 0 {
		t.Fatalf("files left after the import: %v %v", left, err)
	}

	// A dump pg_restore rejects fails the job with its stderr.
	bad, err := e.Svc.Migrate().CreateUpload(t.Context(), p, dst.ID)
	if err != nil {
		t.Fatal(err)
	}
	bu, _ := url.Parse(bad.Upload.UploadURL)
	if _, err := e.Svc.Migrate().ReceiveUpload(t.Context(), bad.Upload.ID, bu.Query().Get("expires"), bu.Query().Get("sig"), -1,
		strings.NewReader("this is not a dump")); err != nil {
		t.Fatal(err)
	}
	res2, err := e.Svc.Migrate().CreateImport(t.Context(), p, dst.ID, &appliance.ImportRequest{Confirm: true, UploadID: bad.Upload.ID})
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, res2.Job.ID); j.State != scheduler.StateFailed || !strings.Contains(j.LastStderr, "pg_restore") {
		t.Fatalf("garbage dump: job %s: %s\nstderr: %s", j.State, j.Error, j.LastStderr)
	}
	if n := scalar[int64](t, conn, "SELECT count(*) FROM imported_items"); n != 500 {
		t.Fatalf("after the failed import: %d rows", n)
	}
	// A failed import consumes nothing: the dump stays for another try (until the sweep's retention).
	if rec := uploadRecord(t, e, bad.Upload.ID); rec.State != migrate.UploadUploaded {
		t.Fatalf("upload of the failed import %+v", rec)
	}
	if _, err := os.Stat(filepath.Join(dir, bad.Upload.ID+".dump")); err != nil {
		t.Fatalf("the failed import's dump: %v", err)
	}
}

// uploadRecord reads an upload's record.
func uploadRecord(t *testing.T, e *appliancetest.Env, id string) *store.Upload {
	t.Helper()
	var u *store.Upload
	if err := e.DB.View(func(tx *store.Tx) (err error) { u, err = store.Uploads.Get(tx, id); return err }); err != nil {
		t.Fatal(err)
	}
	return u
}

// TestImportCannotBecomeSuperuser: a dump whose CHECK constraint calls a function that does RESET ROLE and
// then something only a superuser may do. The restore runs as the project's own login, so RESET ROLE gets
// back to that login, never to a superuser.
func TestImportCannotBecomeSuperuser(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	src := provision(t, e, p, "evilsrc", "development")
	dst := provision(t, e, p, "evildst", "development")
	c, err := e.Svc.ProjectConnections(t.Context(), p, src.ID)
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t, c.Connections.DirectURL)
	for _, q := range []string{
		`CREATE FUNCTION escalate(a int) RETURNS boolean LANGUAGE plpgsql AS $$
		 BEGIN
		   RESET ROLE;
		   EXECUTE 'CREATE ROLE pwned SUPERUSER';
		   RETURN true;
		 EXCEPTION WHEN insufficient_privilege THEN RETURN true;
		 END $$`,
		"CREATE TABLE trap (a int CHECK (escalate(a)))",
		"INSERT INTO trap VALUES (1)",
	} {
		if _, err := conn.Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	res, err := e.Svc.Exports().Create(t.Context(), p, src.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, res.Job.ID); j.State != scheduler.StateCompleted {
		t.Fatalf("export job %s: %s", j.State, j.Error)
	}
	dump, err := os.ReadFile(filepath.Join(e.Dir, "backups", src.ID, "exports", res.ExportID+".dump"))
	if err != nil {
		t.Fatal(err)
	}
	up, err := e.Svc.Migrate().CreateUpload(t.Context(), p, dst.ID)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(up.Upload.UploadURL)
	if _, err := e.Svc.Migrate().ReceiveUpload(t.Context(), up.Upload.ID, u.Query().Get("expires"), u.Query().Get("sig"), -1, bytes.NewReader(dump)); err != nil {
		t.Fatal(err)
	}
	jr, err := e.Svc.Migrate().CreateImport(t.Context(), p, dst.ID, &appliance.ImportRequest{Confirm: true})
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, jr.Job.ID); j.State != scheduler.StateCompleted {
		t.Fatalf("import job %s: %s\n%s", j.State, j.Error, j.LastStderr)
	}
	if n := targetInt(t, e, dst, "SELECT count(*) FROM public.trap"); n != 1 {
		t.Fatalf("trap rows after the import: %d", n)
	}
	if n := targetInt(t, e, dst, "SELECT count(*) FROM pg_roles WHERE rolname = 'pwned' OR (rolsuper AND rolname <> 'appliance_admin')"); n != 0 {
		t.Fatalf("the import made %d superusers", n)
	}
}
