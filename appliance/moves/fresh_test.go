package moves

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/store"
)

// TestFreshBackupNeeded: the rule for a fresh base backup before the staging, on its cases that read the
// store only: no backup of the cluster the project runs (none, or only of another WAL archive, or only
// failed ones), a newest one older than FreshBackupAge; a recent one of the cluster (no end LSN recorded:
// the WAL since is not measured) needs none.
func TestFreshBackupNeeded(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	inst := &store.Instance{ID: "ins_a", WALArchive: "c2"}
	for _, c := range []struct {
		name    string
		backups []*store.Backup
		want    string
	}{
		{"none", nil, "no base backup of the cluster"},
		{"of another cluster only", []*store.Backup{{ID: "b1", WALArchive: "", State: api.BackupCompleted, CreatedAt: now.Add(-time.Hour)}}, "no base backup of the cluster"},
		{"failed only", []*store.Backup{{ID: "b1", WALArchive: "c2", State: api.BackupFailed, CreatedAt: now.Add(-time.Hour)}}, "no base backup of the cluster"},
		{"old", []*store.Backup{{ID: "b1", WALArchive: "c2", State: api.BackupCompleted, CreatedAt: now.Add(-25 * time.Hour)}}, "older than 24h0m0s"},
		{"an old one and a recent one", []*store.Backup{
			{ID: "b1", WALArchive: "c2", State: api.BackupCompleted, CreatedAt: now.Add(-48 * time.Hour)},
			{ID: "b2", WALArchive: "c2", State: api.BackupCompleted, CreatedAt: now.Add(-time.Hour)},
		}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			db, err := store.Open(filepath.Join(t.TempDir(), "meta.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			err = db.Update(func(tx *store.Tx) error {
				for _, b := range c.backups {
					b.ProjectID = "prj_a"
					if err := store.Backups.Put(tx, b); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			s := New(Config{NodeID: "n1"}, Deps{DB: db, Log: slog.New(slog.DiscardHandler), Clock: func() time.Time { return now }})
			got := s.freshBackupNeeded(context.Background(), "prj_a", inst)
			if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
				t.Fatalf("freshBackupNeeded = %q, want %q", got, c.want)
			}
		})
	}
}
