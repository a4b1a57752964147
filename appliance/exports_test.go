package appliance_test

import (
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/exports"
	"github.com/theappliance/appliance/scheduler"
)

func TestExportDownloadAndExpiry(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "exported", "development")
	if err := e.AdminExec(t, prj.ID, "CREATE TABLE exported_items AS SELECT g AS id FROM generate_series(1, 1000) g"); err != nil {
		t.Fatal(err)
	}
	res, err := e.Svc.Exports().Create(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExportID == "" || res.Job == nil {
		t.Fatalf("create export: %+v", res)
	}
	j := e.WaitJob(t, res.Job.ID)
	if j.State != scheduler.StateCompleted || j.Type != exports.JobCreate {
		t.Fatalf("%s job %s: %s\nstderr: %s", j.Type, j.State, j.Error, j.LastStderr)
	}
	list, err := e.Svc.Exports().List(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Exports) != 1 {
		t.Fatalf("%d exports", len(list.Exports))
	}
	x := list.Exports[0]
	if x.ID != res.ExportID || x.State != exports.StateCompleted || x.SizeBytes <= 0 || x.DatabaseName != prj.DatabaseName ||
		x.ExpiresAt == nil || x.ExpiresAt.Sub(x.CreatedAt) < exports.TTL {
		t.Fatalf("export %+v", x)
	}
	file := filepath.Join(e.Dir, "backups", prj.ID, "exports", x.ID+".dump")
	// The dump is the whole database: only its owner may read it (it was 0644 before).
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("export file mode: %v %v", fi.Mode().Perm(), err)
	}
	if fi, err := os.Stat(filepath.Dir(file)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("exports directory mode: %v %v", fi.Mode().Perm(), err)
	}
	bin := e.Bin
	pgRestore, err := bin.Path("pg_restore")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(pgRestore, "--list", file).CombinedOutput()
	if err != nil {
		t.Fatalf("pg_restore --list: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "exported_items") {
		t.Fatalf("the dump does not list the table:\n%s", out)
	}

	// A signed URL opens the file; a tampered or expired one is forbidden.
	dl, err := e.Svc.Exports().Download(t.Context(), p, prj.ID, x.ID)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(dl.Download.DownloadURL)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(u.Path, "/v1/downloads/exports/"+x.ID) || dl.Download.ExpiresAt.Sub(time.Now()) > exports.DownloadTTL {
		t.Fatalf("download %+v", dl.Download)
	}
	expires, sig := u.Query().Get("expires"), u.Query().Get("sig")
	f, err := e.Svc.Exports().OpenDownload(t.Context(), x.ID, expires, sig)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(f)
	f.Close()
	if err != nil || int64(len(body)) != x.SizeBytes {
		t.Fatalf("read %d bytes (%v), want %d", len(body), err, x.SizeBytes)
	}
	tampered := []byte(sig)
	if tampered[0] == '0' {
		tampered[0] = '1'
	} else {
		tampered[0] = '0'
	}
	for name, args := range map[string][3]string{
		"tampered sig":     {x.ID, expires, string(tampered)},
		"later expires":    {x.ID, "9999999999", sig},
		"other export":     {"exp_other", expires, sig},
		"not hex":          {x.ID, expires, "zz"},
		"missing":          {x.ID, "", ""},
		"expires not unix": {x.ID, "soon", sig},
	} {
		if _, err := e.Svc.Exports().OpenDownload(t.Context(), args[0], args[1], args[2]); appliance.KindOf(err) != appliance.KindForbidden {
			t.Errorf("%s: %v", name, err)
		}
	}
	// A file deleted under a valid URL answers 403, not 500.
	if err := os.Rename(file, file+".away"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Svc.Exports().OpenDownload(t.Context(), x.ID, expires, sig); appliance.KindOf(err) != appliance.KindForbidden {
		t.Errorf("download of a deleted file: %v", err)
	}
	if err := os.Rename(file+".away", file); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	e.Clock.Set(func() time.Time { return now.Add(exports.DownloadTTL + time.Minute) })
	if _, err := e.Svc.Exports().OpenDownload(t.Context(), x.ID, expires, sig); appliance.KindOf(err) != appliance.KindForbidden {
		t.Errorf("expired URL: %v", err)
	}

	// Past the export's expiry: no download URL, and the sweep deletes the file.
	e.Clock.Set(func() time.Time { return now.Add(exports.TTL + time.Hour) })
	if _, err := e.Svc.Exports().Download(t.Context(), p, prj.ID, x.ID); appliance.KindOf(err) != appliance.KindConflict {
		t.Fatalf("download of an expired export: %v", err)
	}
	n, err := e.Svc.Exports().Sweep(t.Context())
	if err != nil || n != 1 {
		t.Fatalf("sweep: %d %v", n, err)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatalf("expired export's file: %v", err)
	}
	list, err = e.Svc.Exports().List(t.Context(), p, prj.ID)
	if err != nil || len(list.Exports) != 1 || list.Exports[0].State != exports.StateExpired {
		t.Fatalf("after the sweep: %+v %v", list, err)
	}
	if n, err := e.Svc.Exports().Sweep(t.Context()); err != nil || n != 0 {
		t.Fatalf("second sweep: %d %v", n, err)
	}
	if _, err := e.Svc.Exports().Download(t.Context(), p, prj.ID, "exp_nope"); appliance.KindOf(err) != appliance.KindNotFound {
		t.Fatalf("unknown export: %v", err)
	}
}
